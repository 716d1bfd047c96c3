/* The yolov4 family's layers through darknet's own forward and backward
 * (patches 0018-0020):
 * - a network conv(mish, batch-norm) -> [route] groups=3 group_id=1 ->
 *   conv(hard_mish) -> conv(swish) -> [cost]: every weight gradient of the
 *   first convolution against central finite differences of the cost, and
 *   the filters outside the routed slice get exactly 0;
 * - [yolo] scale_x_y with the mse loss: the x delta is the exact gradient of
 *   s BCE(t', sigmoid(x)) (t' = (t + (s - 1)/2)/s), by finite differences;
 * - iou_loss=ciou: the box deltas are iou_normalizer times the CIoU gradient
 *   with respect to the decoded box (w, h times e^t), by finite differences
 *   of box_iou_kind;
 * - iou_thresh: a second anchor above it learns the truth, below it not;
 *   max_delta bounds the box deltas; cls_normalizer leaves the class deltas
 *   as they are (AlexeyAB's darknet uses it only with counters_per_class);
 * - the yolov7 and csp keys (patch 0034), against values computed here:
 *   new_coords' decoding (no logistic, size (2 s)^2 anchor), its mse target
 *   and its GIoU deltas (no e^t factor, by finite differences);
 *   objectness_smooth's ignore rule, its assigned anchor and its truth_thresh
 *   targets, and obj_normalizer on the no-object deltas.
 *   yolov4_layers_test SCRATCH
 */
#include "darknet.h"
#include "box_loss.h"
#include "yolo_layer.h"

#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static unsigned rng = 777;
static float uniform(float lo, float hi)
{
    rng = rng * 1103515245u + 12345u;
    return lo + (hi - lo) * (float)((rng >> 8) & 0xffffff) / 16777216.0f;
}

static double cost_of(network *net)
{
    forward_network(net);
    return *net->cost;
}

static void route_and_mish(const char *scratch)
{
    char path[512];
    snprintf(path, sizeof path, "%s/route_mish.cfg", scratch);
    FILE *f = fopen(path, "w");
    if (!f) {
        CHECK(0, "cannot write %s", path);
        return;
    }
    fputs("[net]\nbatch=2\nwidth=5\nheight=5\nchannels=3\n"
          "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=3\nstride=1\npad=1\n"
          "activation=mish\n"
          "[route]\nlayers=-1\ngroups=3\ngroup_id=1\n"
          "[convolutional]\nfilters=4\nsize=3\nstride=1\npad=1\nactivation=hard_mish\n"
          "[convolutional]\nfilters=2\nsize=1\nstride=1\npad=1\nactivation=swish\n"
          "[cost]\ntype=sse\n",
          f);
    fclose(f);
    char err[1024];
    network *net = parse_network_cfg_checked(path, err, sizeof err);
    CHECK(net != NULL, "the route-groups network parses%s%s", net ? "" : ": ", net ? "" : err);
    if (!net) return;
    CHECK(net->layers[1].out_c == 2 && net->layers[2].c == 2,
          "route groups=3 group_id=1 of 6 channels: %d channels out, the next layer reads %d "
          "(expected 2, 2)",
          net->layers[1].out_c, net->layers[2].c);
    net->train = 1;
    for (int i = 0; i < net->inputs * net->batch; ++i) net->input[i] = uniform(-1, 1);
    for (int i = 0; i < net->truths * net->batch; ++i) net->truth[i] = uniform(-1, 1);
    for (int k = 0; k < 4; ++k) {
        layer *l = &net->layers[k];
        if (l->type != CONVOLUTIONAL) continue;
        for (int i = 0; i < l->nweights; ++i) l->weights[i] = uniform(-.6f, .6f);
        for (int i = 0; i < l->n; ++i) l->biases[i] = uniform(-.3f, .3f);
    }
    layer *c0 = &net->layers[0];
    /* darknet's updates: -1/2 dC/dw (the sse cost's delta is truth - output) */
    memset(c0->weight_updates, 0, sizeof(float) * c0->nweights);
    const double c = cost_of(net);
    backward_network(net);
    float *g = malloc(sizeof(float) * c0->nweights);
    memcpy(g, c0->weight_updates, sizeof(float) * c0->nweights);
    /* finite differences in float: step 1e-2, the cost ~1e1 rounds at ~1e-6,
     * so ~1e-3 error from rounding, plus h^2 f''' (mish, swish are smooth;
     * hard_mish's kinks are crossed rarely): tolerance 2e-2 (1 + |g|) */
    const int per = c0->nweights / c0->n; /* weights per filter */
    double worst = 0;
    int bad = 0, zero_ok = 1, checked = 0;
    for (int i = 0; i < c0->nweights; ++i) {
        const int filter = i / per, routed = filter >= 2 && filter < 4;
        const float w0 = c0->weights[i], h = 1e-2f;
        c0->weights[i] = w0 + h;
        const double cp = cost_of(net);
        c0->weights[i] = w0 - h;
        const double cm = cost_of(net);
        c0->weights[i] = w0;
        const double want = -0.5 * (cp - cm) / (2 * h);
        if (!routed) {
            zero_ok &= g[i] == 0 && cp == cm;
            continue;
        }
        const double e = fabs(g[i] - want) / (1 + fabs(want));
        if (e > worst) worst = e;
        bad += e > 2e-2;
        ++checked;
    }
    CHECK(!bad, "conv(mish, batch-norm) -> route groups -> conv(hard_mish) -> conv(swish) -> "
                "sse cost %.4f: %d weight gradients of the routed filters against finite "
                "differences, largest |difference|/(1 + |gradient|) %.2e (tolerance 2e-2)",
          c, checked, worst);
    CHECK(zero_ok, "the filters outside the routed slice (0-1, 4-5): gradient exactly 0 and "
                   "the cost unchanged by their weights");
    free(g);
    free_network(net);
}

/* a yolo layer, one image of 2x2 cells, anchors as given (mask: all) */
static layer yolo(int n, const float *anchors, int classes)
{
    int *mask = calloc(n, sizeof(int));
    for (int i = 0; i < n; ++i) mask[i] = i;
    layer l = make_yolo_layer(1, 2, 2, n, n, mask, classes);
    for (int i = 0; i < 2 * n; ++i) l.biases[i] = anchors[i];
    l.max_boxes = 90;
    l.ignore_thresh = .7f;
    l.truth_thresh = 1;
    return l;
}

static int entry(const layer *l, int n, int loc, int e)
{
    return n * l->w * l->h * (4 + l->classes + 1) + e * l->w * l->h + loc;
}

static void run_yolo(layer *l, float *in, float *truth)
{
    network net = {0};
    net.input = in;
    net.truth = truth;
    net.train = 1;
    net.w = net.h = 64;
#ifdef GPU
    net.gpu_index = -1;
#endif
    forward_yolo_layer(*l, net);
}

static double sigmoid(double x)
{
    return 1 / (1 + exp(-x));
}

static void yolo_checks(void)
{
    const float anchors[] = {20, 24, 44, 40};
    float truth[90 * 5] = {0};
    /* one box in cell (1, 0): centre x at 0.985 of the cell, near its edge */
    truth[0] = (1 + .985f) / 2, truth[1] = .3f, truth[2] = .3f, truth[3] = .4f, truth[4] = 1;
    const int loc = 0 * 2 + 1;

    /* scale_x_y, mse */
    layer l = yolo(1, anchors, 2);
    l.scale_x_y = 1.2f;
    float *in = calloc(l.outputs, sizeof(float));
    for (int i = 0; i < l.outputs; ++i) in[i] = uniform(-1, 1);
    run_yolo(&l, in, truth);
    const double s = 1.2, t = .985, tp = (t + (s - 1) / 2) / s, x0 = in[entry(&l, 0, loc, 0)];
    const double scale = 2 - .3 * .4, hh = 1e-4;
    /* L(x) = s BCE(t', sigmoid(x)); darknet's delta is -dL/dx times (2 - w h) */
#define BCE(x) (-s * (tp * log(sigmoid(x)) + (1 - tp) * log(1 - sigmoid(x))))
    const double want = -scale * (BCE(x0 + hh) - BCE(x0 - hh)) / (2 * hh);
    const double got = l.delta[entry(&l, 0, loc, 0)];
    CHECK(fabs(got - want) <= 1e-4 * (1 + fabs(want)),
          "scale_x_y 1.2, mse: x delta %.6f, -(2 - wh) d/dx of s BCE(t', sigmoid(x)) by finite "
          "differences %.6f (tolerance 1e-4 relative)",
          got, want);
    const float dec = l.output[entry(&l, 0, loc, 0)];
    CHECK(fabs(dec - (s * sigmoid(x0) - (s - 1) / 2)) < 1e-6,
          "scale_x_y decoding: output %.6f = 1.2 sigmoid(x) - 0.1 = %.6f", dec,
          s * sigmoid(x0) - (s - 1) / 2);

    /* ciou: delta = iou_normalizer * dCIoU/dbox (w, h times e^t) */
    l.iou_loss = IOU_LOSS_CIOU;
    l.iou_normalizer = .07f;
    run_yolo(&l, in, truth);
    box pred = get_yolo_box_coords(l.output, l.biases, 0, entry(&l, 0, loc, 0), 1, 0, 2, 2, 64,
                                   64, l.w * l.h, 0);
    box tb = {truth[0], truth[1], truth[2], truth[3]};
    double worst = 0;
    for (int c = 0; c < 4; ++c) {
        box p = pred, m = pred;
        float *pc = c == 0 ? &p.x : c == 1 ? &p.y : c == 2 ? &p.w : &p.h;
        float *mc = c == 0 ? &m.x : c == 1 ? &m.y : c == 2 ? &m.w : &m.h;
        const float h = 1e-3f;
        *pc += h, *mc -= h;
        double d =
            (box_iou_kind(p, tb, IOU_LOSS_CIOU) - box_iou_kind(m, tb, IOU_LOSS_CIOU)) / (2 * h);
        if (c >= 2) { /* the paper's: alpha (w^2 + h^2) dv in place of alpha dv */
            const double dv = (box_ciou_v(p, tb) - box_ciou_v(m, tb)) / (2 * h);
            const double da = (box_iou_kind(p, tb, IOU_LOSS_DIOU) -
                               box_iou_kind(m, tb, IOU_LOSS_DIOU)) / (2 * h);
            d = da - box_ciou_alpha(pred, tb) * (pred.w * pred.w + pred.h * pred.h) * dv;
            d *= exp(in[entry(&l, 0, loc, c)]);
        }
        const double e = fabs(l.delta[entry(&l, 0, loc, c)] - .07 * d) / (1e-3 + fabs(.07 * d));
        if (e > worst) worst = e;
    }
    CHECK(worst < 2e-2,
          "iou_loss=ciou: the four box deltas against 0.07 x the CIoU gradient by finite "
          "differences (w, h times e^t): largest relative difference %.2e (tolerance 2e-2)",
          worst);

    /* max_delta */
    float unclipped[4];
    for (int c = 0; c < 4; ++c) unclipped[c] = l.delta[entry(&l, 0, loc, c)];
    l.max_delta = .001f;
    run_yolo(&l, in, truth);
    int clipped = 1;
    for (int c = 0; c < 4; ++c) {
        const float u = unclipped[c], want_c = u > .001f ? .001f : u < -.001f ? -.001f : u;
        clipped &= l.delta[entry(&l, 0, loc, c)] == want_c;
    }
    CHECK(clipped, "max_delta=0.001: the box deltas (%.4f %.4f %.4f %.4f unbounded) bounded",
          unclipped[0], unclipped[1], unclipped[2], unclipped[3]);
    free(in);
    free_layer(l);

    /* iou_thresh: two anchors; the truth (0.3 x 0.4 of 64 px: 19 x 26) is best
     * matched by 20x24; 44x40's shape IoU with it is 494/1760 = 0.28 */
    for (int pass = 0; pass < 2; ++pass) {
        layer y = yolo(2, anchors, 2);
        y.iou_thresh = pass ? .2f : 1;
        y.cls_normalizer = pass ? .5f : 1;
        float *in2 = calloc(y.outputs, sizeof(float));
        for (int i = 0; i < y.outputs; ++i) in2[i] = uniform(-1, 1);
        run_yolo(&y, in2, truth);
        const int second = y.delta[entry(&y, 1, loc, 0)] != 0;
        const float cls0 = y.delta[entry(&y, 0, loc, 5)];
        const float want_cls = 0 - y.output[entry(&y, 0, loc, 5)];
        if (pass) {
            CHECK(second, "iou_thresh=0.2: the second anchor (shape IoU 0.28) learns the truth "
                          "too (x delta %.4f)", y.delta[entry(&y, 1, loc, 0)]);
        } else {
            CHECK(!second, "iou_thresh=1 (default): only the best anchor learns the truth");
        }
        CHECK(fabsf(cls0 - want_cls) < 1e-6,
              "cls_normalizer=%g: class 0's delta %.6f = 0 - output = %.6f (AlexeyAB's darknet "
              "weighs only counters_per_class's class weights by it)",
              pass ? .5 : 1.0, cls0, want_cls);
        free(in2);
        free_layer(y);
    }
}


/* IoU of two boxes (centre, size), in double precision */
static double iou_d(double ax, double ay, double aw, double ah, box b)
{
    const double l = fmax(ax - aw / 2, b.x - b.w / 2), r = fmin(ax + aw / 2, b.x + b.w / 2);
    const double t = fmax(ay - ah / 2, b.y - b.h / 2), d = fmin(ay + ah / 2, b.y + b.h / 2);
    const double in = (r > l && d > t) ? (r - l) * (d - t) : 0;
    return in / (aw * ah + (double)b.w * b.h - in);
}

/* the input s of a new_coords size whose decoded size is size (image units) */
static float size_input(double size, double anchor)
{
    return (float)(sqrt(size * 64 / anchor) / 2);
}

static void yolov7_checks(void)
{
    const float anchors[] = {20, 24};
    float truth[90 * 5] = {0};
    /* one box, centre in cell (1, 0) near its left edge; class 1 of 2 */
    truth[0] = .52f, truth[1] = .3f, truth[2] = .3f, truth[3] = .4f, truth[4] = 1;
    const box tb = {truth[0], truth[1], truth[2], truth[3]};
    const int mine = 1, other = 0, far = 3; /* cells (1, 0), (0, 0), (1, 1) */
    layer l = yolo(1, anchors, 2);
    l.new_coords = 1;
    l.scale_x_y = 2;
    float *in = calloc(l.outputs, sizeof(float));
    for (int i = 0; i < l.outputs; ++i) in[i] = uniform(.05f, .95f); /* logistic outputs */
    /* cell (0, 0)'s box: centre x (0 + 2 s - 0.5)/2 = 0.53, y 0.3, size 0.28 x 0.42 */
    in[entry(&l, 0, other, 0)] = (1.06f + .5f) / 2, in[entry(&l, 0, other, 1)] = (.6f + .5f) / 2;
    in[entry(&l, 0, other, 2)] = size_input(.28, 20), in[entry(&l, 0, other, 3)] = size_input(.42, 24);
    in[entry(&l, 0, mine, 2)] = size_input(.1, 20); /* the assigned anchor's box: small */
    const double iou_other = iou_d(.53, .3, .28, .42, tb);

    /* decoding: no logistic; x, y scaled; size (2 s)^2 anchor / network */
    l.iou_loss = IOU_LOSS_MSE;
    run_yolo(&l, in, truth);
    const int xo = entry(&l, 0, mine, 0), wo = entry(&l, 0, mine, 2), oo = entry(&l, 0, mine, 4);
    const box pb = get_yolo_box_coords(l.output, l.biases, 0, xo, 1, 0, 2, 2, 64, 64, l.w * l.h, 1);
    const double sw = in[wo], want_w = 4 * sw * sw * 20 / 64;
    CHECK(fabsf(l.output[xo] - (2 * in[xo] - .5f)) < 1e-6 && l.output[wo] == in[wo] &&
              l.output[oo] == in[oo] && fabs(pb.w - want_w) < 1e-6,
          "new_coords: x output %.6f = 2 s - 0.5 = %.6f, w output %.6f and objectness output "
          "%.6f the inputs %.6f, %.6f (no logistic), box w %.6f = (2 s)^2 20/64 = %.6f",
          l.output[xo], 2 * in[xo] - .5, l.output[wo], l.output[oo], in[wo], in[oo], pb.w,
          want_w);
    /* mse: the w target is the s whose decoded size is the truth's */
    const double scale = 2 - .3 * .4, tw = sqrt(.3 * 64 / (4 * 20));
    CHECK(fabs(l.delta[wo] - scale * (tw - sw)) < 1e-6 && fabs(4 * tw * tw * 20 / 64 - .3) < 1e-12,
          "new_coords, mse: w delta %.6f = (2 - wh)(%.6f - s) = %.6f, the target's size 0.3",
          l.delta[wo], tw, scale * (tw - sw));

    /* giou: the w, h deltas are 0.05 x the gradient with respect to the size */
    l.iou_loss = IOU_LOSS_GIOU;
    l.iou_normalizer = .05f;
    run_yolo(&l, in, truth);
    double worst = 0;
    for (int c = 0; c < 4; ++c) {
        box p = pb, m = pb;
        float *pc = c == 0 ? &p.x : c == 1 ? &p.y : c == 2 ? &p.w : &p.h;
        float *mc = c == 0 ? &m.x : c == 1 ? &m.y : c == 2 ? &m.w : &m.h;
        const float h = 1e-3f;
        *pc += h, *mc -= h;
        const double d = .05 * (box_iou_kind(p, tb, IOU_LOSS_GIOU) -
                                box_iou_kind(m, tb, IOU_LOSS_GIOU)) / (2 * h);
        const double e = fabs(l.delta[entry(&l, 0, mine, c)] - d) / (1e-3 + fabs(d));
        if (e > worst) worst = e;
    }
    CHECK(worst < 2e-2,
          "new_coords, giou: the four box deltas against 0.05 x the GIoU gradient with respect "
          "to the decoded box by finite differences (no e^t factor): largest relative "
          "difference %.2e (tolerance 2e-2)", worst);

    /* objectness_smooth, obj_normalizer 4 (the csp cfgs' first head) */
    for (int smooth = 0; smooth < 2; ++smooth) {
        l.objectness_smooth = smooth;
        l.obj_normalizer = 4;
        run_yolo(&l, in, truth);
        const float po = in[entry(&l, 0, other, 4)], pm = in[oo], pf = in[entry(&l, 0, far, 4)];
        const float got_o = l.delta[entry(&l, 0, other, 4)], got_m = l.delta[oo];
        const double want_o = smooth ? 4 * (iou_other - po) : 0;
        /* the assigned anchor: 1 - p; smoothed, its no-object delta stays (its box's
         * IoU with the truth is below ignore_thresh), as in AlexeyAB's darknet */
        const double want_m = smooth ? 4 * (0 - pm) : 4 * (1 - pm);
        CHECK(iou_other > .7 && fabs(got_o - want_o) < 1e-5 && fabs(got_m - want_m) < 1e-5 &&
                  fabsf(l.delta[entry(&l, 0, far, 4)] - 4 * (0 - pf)) < 1e-6,
              "objectness_smooth=%d, obj_normalizer 4: an anchor overlapping the truth by "
              "%.4f (> ignore_thresh 0.7) %.6f, want %.6f; the assigned anchor %.6f, want %.6f; "
              "a far anchor %.6f = 4 (0 - p) = %.6f",
              smooth, iou_other, got_o, want_o, got_m, want_m, l.delta[entry(&l, 0, far, 4)],
              4 * (0 - pf));
    }
    /* the assigned anchor's box overlapping the truth: smoothed, it learns the IoU */
    float *in2 = malloc(l.outputs * sizeof(float));
    memcpy(in2, in, l.outputs * sizeof(float));
    in2[entry(&l, 0, mine, 0)] = (.04f + .5f) / 2, in2[entry(&l, 0, mine, 1)] = (.6f + .5f) / 2;
    in2[entry(&l, 0, mine, 2)] = size_input(.3, 20), in2[entry(&l, 0, mine, 3)] = size_input(.38, 24);
    const double iou_mine = iou_d(.52, .3, .3, .38, tb);
    run_yolo(&l, in2, truth);
    CHECK(iou_mine > .7 && fabs(l.delta[oo] - 4 * (iou_mine - in2[oo])) < 1e-5,
          "objectness_smooth=1: the assigned anchor, its box's IoU %.4f: delta %.6f = "
          "4 (IoU - p) = %.6f", iou_mine, l.delta[oo], 4 * (iou_mine - in2[oo]));
    /* truth_thresh 0.5: the objectness and the true class learn the IoU squared */
    l.truth_thresh = .5f;
    run_yolo(&l, in, truth);
    const int c1 = entry(&l, 0, other, 5 + 1), c0 = entry(&l, 0, other, 5);
    const double t2 = iou_other * iou_other;
    CHECK(fabs(l.delta[entry(&l, 0, other, 4)] - 4 * (t2 - in[entry(&l, 0, other, 4)])) < 1e-5 &&
              fabs(l.delta[c1] - (t2 - in[c1])) < 1e-5 && fabs(l.delta[c0] - (0 - in[c0])) < 1e-6,
          "objectness_smooth=1, truth_thresh 0.5: objectness delta %.6f = 4 (IoU^2 - p) = %.6f, "
          "true class %.6f = IoU^2 - p = %.6f, other class %.6f = 0 - p",
          l.delta[entry(&l, 0, other, 4)], 4 * (t2 - in[entry(&l, 0, other, 4)]), l.delta[c1],
          t2 - in[c1], l.delta[c0]);
    free(in2);
    free(in);
    free_layer(l);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: yolov4_layers_test SCRATCH\n");
        return 2;
    }
    gpu_index = -1; /* CPU networks, also in a CUDA build */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", argv[1]);
    if (system(cmd) != 0) return 2;
    route_and_mish(argv[1]);
    yolo_checks();
    yolov7_checks();
    return check_report();
}
