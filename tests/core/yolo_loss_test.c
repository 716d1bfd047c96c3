/* amp_yolo_forward (plugin/yolo.c: darknet's yolo loss with the images in
 * parallel) against darknet's forward_yolo_layer, bit for bit:
 *
 *   yolo_loss_test            the comparison
 *   yolo_loss_test bench [B]  a measurement (below), not a test
 *
 * For each case (darknet's MSE box loss; the yolov4 family's ciou with
 * iou_thresh, scale_x_y, max_delta and the normalizers; giou and diou with a
 * class map and truth_thresh below 1, which takes darknet's other branch;
 * an image with 90 truths beside images with none; no truths at all;
 * truths darknet's indexing takes out of their cell or class, where the
 * images go one after another; inference), two copies
 * of one [yolo] layer get the same input and truths: darknet's function on
 * one, amp_yolo_forward on the other, on OpenMP's threads (3, set by
 * CTest). Compared: every
 * output and delta (bits), the cost (bits) and the line each prints. The
 * device's form (activate 0: the logistic already applied, as
 * forward_yolo_layer_gpu hands it over, and the output made in place over
 * it, as the CUDA backend's staging does) is compared the same way, its input
 * activated by darknet's own activate_array.
 */
#include "core.h"

#include "activations.h" /* activate_array */
#include "box_loss.h"  /* IOU_LOSS */
#include "yolo_layer.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "check.h"

static int omp_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

typedef struct yolo_case {
    const char *name;
    int w, batch, truths; /* truths per image (image 1 gets 90, image 2 none, where batch > 2) */
    IOU_LOSS loss;
    float iou_normalizer, cls_normalizer, obj_normalizer, iou_thresh, scale_x_y, max_delta;
    float truth_thresh;
    int map, train;
    int bad; /* image 0's first truths: a centre at the image's right edge (x = 1, which
                darknet puts in the next row's cell), a class beyond the layer's */
    int new_coords, objectness_smooth; /* 0: the cfg without them */
} yolo_case;

static layer make(const yolo_case *c, int *mask)
{
    layer l = make_yolo_layer(c->batch, c->w, c->w, 3, 9, mask, 20);
    const float anchors[18] = {10, 13, 16, 30, 33, 23, 30, 61, 62, 45, 59, 119, 116, 90, 156, 198,
                               373, 326};
    for (int k = 0; k < 18; ++k) l.biases[k] = anchors[k];
    l.max_boxes = 90;
    l.ignore_thresh = .7f;
    l.truth_thresh = c->truth_thresh;
    l.iou_loss = c->loss;
    l.iou_normalizer = c->iou_normalizer;
    l.cls_normalizer = c->cls_normalizer;
    l.obj_normalizer = c->obj_normalizer;
    l.iou_thresh = c->iou_thresh;
    l.scale_x_y = c->scale_x_y;
    l.max_delta = c->max_delta;
    l.new_coords = c->new_coords;
    l.objectness_smooth = c->objectness_smooth;
    if (c->map) {
        l.map = calloc(20, sizeof(int));
        for (int k = 0; k < 20; ++k) l.map[k] = (k * 7) % 20;
    }
    return l;
}

/* What f prints on stdout, into out. */
static void captured(void (*f)(void *), void *arg, char *out, size_t size)
{
    fflush(stdout);
    char path[64];
    snprintf(path, sizeof path, "/tmp/yolo_loss_test.%ld", (long)getpid());
    FILE *tmp = fopen(path, "w+");
    const int saved = dup(1);
    if (!tmp || saved < 0) {
        f(arg);
        snprintf(out, size, "(not captured)");
        return;
    }
    dup2(fileno(tmp), 1);
    f(arg);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    rewind(tmp);
    const size_t n = fread(out, 1, size - 1, tmp);
    out[n] = 0;
    fclose(tmp);
    remove(path);
}

typedef struct call {
    layer l;
    network net;
    int amp, activate;
} call;

static void run(void *p)
{
    call *c = p;
    if (c->amp) amp_yolo_forward(c->l, c->net, c->activate);
    else forward_yolo_layer(c->l, c->net);
}

static size_t differ(const float *a, const float *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; ++i) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

static void check_case(const yolo_case *c, unsigned seed)
{
    int mask[3] = {3, 4, 5};
    layer a = make(c, mask), b = make(c, mask);
    const size_t n = (size_t)a.outputs * a.batch;
    network net = {0};
    net.w = net.h = 416;
    net.train = c->train;
    net.index = 7;
    net.gpu_index = -1;
    float *input = malloc(n * sizeof(float)), *in_a = malloc(n * sizeof(float)),
          *in_b = malloc(n * sizeof(float));
    net.truth = calloc((size_t)a.truths * a.batch, sizeof(float));
    srand(seed);
    for (size_t i = 0; i < n; ++i) input[i] = ((float)rand() / RAND_MAX - .5f) * 6;
    if (c->new_coords) activate_array(input, (int)n, LOGISTIC); /* the convolution's logistic */
    int placed = 0;
    for (int im = 0; im < a.batch; ++im) {
        const int k = im == 1 && a.batch > 2 ? 90 : im == 2 ? 0 : c->truths;
        for (int t = 0; t < k; ++t, ++placed) {
            float *p = net.truth + im * a.truths + t * 5;
            p[0] = .02f + (float)rand() / RAND_MAX * .96f;
            p[1] = .02f + (float)rand() / RAND_MAX * .96f;
            p[2] = .01f + (float)rand() / RAND_MAX * .5f;
            p[3] = .01f + (float)rand() / RAND_MAX * .5f;
            p[4] = (float)(rand() % 20);
        }
    }
    if (c->bad) {
        net.truth[0] = 1; /* x = 1: column w */
        net.truth[5 + 4] = 21; /* class 21 of 20 */
    }
    char line_a[512], line_b[512];
    memcpy(in_a, input, n * sizeof(float));
    memcpy(in_b, input, n * sizeof(float));
    call ca = {a, net, 0, 1}, cb = {b, net, 1, 1};
    ca.net.input = in_a;
    cb.net.input = in_b;
    captured(run, &ca, line_a, sizeof line_a);
    captured(run, &cb, line_b, sizeof line_b);
    const size_t dout = differ(a.output, b.output, n), ddelta = differ(a.delta, b.delta, n);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; ++i) nonzero += a.delta[i] != 0;
    CHECK(dout == 0 && ddelta == 0 && !memcmp(a.cost, b.cost, sizeof(float)) &&
              !strcmp(line_a, line_b) && (!c->train || nonzero > 0) && (!c->train || line_b[0]),
          "%s (%dx%d, batch %d, %d truths): outputs %zu and deltas %zu of %zu differ (%zu deltas "
          "non-zero), cost %.9g against darknet's %.9g, line \"%.*s\"%s",
          c->name, c->w, c->w, c->batch, placed, dout, ddelta, n, nonzero, (double)*b.cost,
          (double)*a.cost, (int)strcspn(line_b, "\n"), line_b,
          strcmp(line_a, line_b) ? " against darknet's other line" : ", as darknet's");

    /* the device's form: the input activated already (darknet's logistic,
     * on darknet's ranges), scale_x_y and the loss on the host */
    layer d = make(c, mask);
    float *in_d = malloc(n * sizeof(float));
    memcpy(in_d, input, n * sizeof(float));
    for (int im = 0; im < d.batch && !c->new_coords; ++im)
        for (int k = 0; k < d.n; ++k) {
            float *at = in_d + im * d.outputs + k * d.w * d.h * (4 + d.classes + 1);
            activate_array(at, 2 * d.w * d.h, LOGISTIC);
            activate_array(at + 4 * d.w * d.h, (1 + d.classes) * d.w * d.h, LOGISTIC);
        }
    call cd = {d, net, 1, 0};
    memcpy(d.output, in_d, n * sizeof(float)); /* in place, as the GPU's staging */
    cd.net.input = d.output;
    char line_d[512];
    captured(run, &cd, line_d, sizeof line_d);
    const size_t dd = differ(a.delta, d.delta, n), od = differ(a.output, d.output, n);
    CHECK(dd == 0 && od == 0 && !memcmp(a.cost, d.cost, sizeof(float)) && !strcmp(line_a, line_d),
          "%s, the device's form (input activated before, the output made in place): outputs "
          "%zu and deltas %zu of %zu "
          "differ, cost %.9g", c->name, od, dd, n, (double)*d.cost);
    free(input), free(in_a), free(in_b), free(in_d), free(net.truth);
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* yolo_loss_test bench [BATCH]: yolov3's three yolo layers at 416 px (80
 * classes, 6 truths an image), darknet's loss against amp_yolo_forward, the
 * best of 3 each, in the CPU's form and (a CUDA build) the device's (input
 * activated already, as on a GPU); one line each. Not a test: a
 * measurement (scripts/gpu-check's bench prints it for the GPU's host). */
static int bench(int batch)
{
    const int sizes[3] = {13, 26, 52};
    const float anchors[18] = {10, 13, 16, 30, 33, 23, 30, 61, 62, 45, 59, 119, 116, 90, 156, 198,
                               373, 326};
    double t[2][2] = {{0, 0}, {0, 0}}; /* [cpu form?][amp?] */
    for (int s = 0; s < 3; ++s) {
        int mask[3] = {(2 - s) * 3, (2 - s) * 3 + 1, (2 - s) * 3 + 2};
        layer l = make_yolo_layer(batch, sizes[s], sizes[s], 3, 9, mask, 80);
        for (int k = 0; k < 18; ++k) l.biases[k] = anchors[k];
        l.ignore_thresh = .7f;
        l.truth_thresh = 1;
        l.max_boxes = 90;
        const size_t n = (size_t)l.outputs * batch;
        float *input = malloc(n * sizeof(float)), *in = malloc(n * sizeof(float));
        network net = {0};
        net.w = net.h = 416;
        net.train = 1;
        net.index = 82;
        net.truth = calloc((size_t)l.truths * batch, sizeof(float));
        srand(3);
        for (size_t i = 0; i < n; ++i) input[i] = ((float)rand() / RAND_MAX - .5f) * 4;
        for (int b = 0; b < batch; ++b)
            for (int k = 0; k < 6; ++k) {
                float *p = net.truth + b * l.truths + k * 5;
                p[0] = .1f + .13f * k, p[1] = .2f + .1f * k, p[2] = .05f + .03f * k;
                p[3] = .07f + .02f * k, p[4] = (float)k;
            }
        for (int cpu = 0; cpu < 2; ++cpu)
            for (int amp = 0; amp < 2; ++amp) {
                double best = 1e30;
                for (int r = 0; r < 3; ++r) {
                    /* AMP's device form in place over the staging, as the
                     * CUDA backend runs it */
                    float *at = !cpu && amp ? l.output : in;
                    memcpy(at, input, n * sizeof(float));
                    net.input = at;
                    net.gpu_index = cpu ? -1 : 0; /* darknet's form: activate or not */
                    call c = {l, net, amp, cpu};
                    char line[512];
                    const double t0 = seconds();
                    captured(run, &c, line, sizeof line);
                    const double dt = seconds() - t0;
                    if (dt < best) best = dt;
                }
                t[cpu][amp] += best;
            }
        free(input), free(in), free(net.truth);
    }
    /* darknet's GPU form (no logistic on the host) is its own only in a
     * CUDA build: a CPU build's darknet activates whatever gpu_index says */
#ifdef GPU
    const int forms = 2;
#else
    const int forms = 1;
#endif
    for (int k = 0; k < forms; ++k) {
        const int cpu = 1 - k;
        printf("yolo loss, yolov3 416 px batch %d, %s form: darknet %.1f ms, AMP's %.1f ms on %d "
               "threads (%.2fx)\n",
               batch, cpu ? "the CPU's" : "a GPU's (input activated on the device)",
               1e3 * t[cpu][0], 1e3 * t[cpu][1], omp_threads(), t[cpu][0] / t[cpu][1]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "bench")) return bench(argc > 2 ? atoi(argv[2]) : 64);
    const yolo_case cases[] = {
        {"mse (yolov3)", 13, 8, 6, IOU_LOSS_MSE, 1, 1, 1, 1, 1, FLT_MAX, 1, 0, 1, 0, 0, 0},
        {"ciou (yolov4)", 26, 6, 9, IOU_LOSS_CIOU, .07f, 1, 1, .213f, 1.05f, 5, 1, 0, 1, 0, 0, 0},
        {"giou, class map, truth_thresh .3", 13, 5, 4, IOU_LOSS_GIOU, .5f, .8f, .9f, .5f, 1.1f,
         FLT_MAX, .3f, 1, 1, 0, 0, 0},
        {"diou, obj_normalizer 2", 19, 4, 12, IOU_LOSS_DIOU, .3f, 1, 2, .3f, 1.2f, 10, 1, 0, 1, 0, 0, 0},
        {"mse, one image", 13, 1, 3, IOU_LOSS_MSE, 1, 1, 1, 1, 1, FLT_MAX, 1, 0, 1, 0, 0, 0},
        {"inference", 13, 4, 6, IOU_LOSS_CIOU, .07f, 1, 1, .213f, 1.05f, 5, 1, 0, 0, 0, 0, 0},
        {"no truths at all", 13, 2, 0, IOU_LOSS_MSE, 1, 1, 1, 1, 1, FLT_MAX, 1, 0, 1, 0, 0, 0},
        {"a truth outside the image, a class out of range", 13, 4, 5, IOU_LOSS_CIOU, .07f, 1, 1,
         .213f, 1.05f, 5, 1, 0, 1, 1, 0, 0},
        {"ciou, new_coords, objectness_smooth (yolov7)", 26, 6, 9, IOU_LOSS_CIOU, .05f, .5f, 1,
         .2f, 2, 2, 1, 0, 1, 0, 1, 1},
        {"mse, new_coords, objectness_smooth, truth_thresh .3", 13, 5, 6, IOU_LOSS_MSE, 1, 1, .4f,
         .2f, 2, FLT_MAX, .3f, 1, 1, 0, 1, 1},
        {"giou, objectness_smooth, obj_normalizer 4 (yolov4-csp)", 19, 4, 12, IOU_LOSS_GIOU, .05f,
         .5f, 4, .2f, 2, 5, 1, 0, 1, 0, 0, 1},
        {"diou, new_coords, inference", 13, 4, 6, IOU_LOSS_DIOU, .05f, 1, 1, .2f, 2, 2, 1, 0, 0,
         0, 1, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; ++k) check_case(&cases[k], 11 + (unsigned)k);
    return check_report();
}
