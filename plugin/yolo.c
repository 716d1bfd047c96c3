/* darknet's yolo loss (forward_yolo_layer, with patches 0009, 0020 and 0034) with
 * the batch's images in parallel, bit for bit darknet's.
 *
 * darknet computes a [yolo] layer's loss on the host, one image after
 * another, on every backend (its GPU form copies the activated output to the
 * host and the deltas back). Each image's deltas depend on that image alone,
 * so the images run on as many threads as OpenMP gives; within an image the
 * loop is darknet's, every value made by darknet's own functions (box,
 * IoU, the box and class deltas) in darknet's order. What darknet sums over
 * the whole batch (its printed statistics, sums of floats) is summed again
 * here in darknet's order after the images are done, from what each image
 * recorded; the cost is darknet's mag_array of the deltas. So the deltas,
 * the cost and the printed line are darknet's to the bit (unit.yolo_loss
 * compares them with darknet's function on every loss form).
 *
 * The few operations here are written as darknet's build (-Ofast, baseline
 * x86-64, read from its machine code) carries them out: the printed averages as products with 1/count, and no
 * fused multiply-add (this file is compiled with -ffp-contract=off), so the
 * box scale 2 - w*h rounds twice as there.
 */
#include "core.h"

#include "activations.h" /* activate_array */
#include "blas.h"        /* mag_array */
#include "utils.h"       /* int_index */
#include "yolo_layer.h"  /* the box, class and objectness deltas, scale_yolo_xy */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the truth loop adds to darknet's batch sums for one (truth, anchor)
 * pair, in the order darknet adds them. */
typedef struct yolo_match {
    float iou, obj, cat;
} yolo_match;

/* darknet's entry_index (static in yolo_layer.c). */
static int entry_index(const layer *l, int batch, int location, int entry)
{
    const int n = location / (l->w * l->h);
    const int loc = location % (l->w * l->h);
    return batch * l->outputs + n * l->w * l->h * (4 + l->classes + 1) + entry * l->w * l->h + loc;
}

static box truth_of(const network *net, const layer *l, int b, int t)
{
    return float_to_box(net->truth + t * (4 + 1) + b * l->truths, 1);
}

static int class_of(const network *net, const layer *l, int b, int t)
{
    int class = net->truth[t * (4 + 1) + b * l->truths + 4];
    return l->map ? l->map[class] : class;
}

/* Image b's deltas, darknet's two loops; the (truth, anchor) pairs in m, the
 * count returned. */
static int image_loss(const layer *l, const network *net, int b, yolo_match *m)
{
    const int stride = l->w * l->h;
    for (int j = 0; j < l->h; ++j)
        for (int i = 0; i < l->w; ++i)
            for (int n = 0; n < l->n; ++n) {
                const int box_index = entry_index(l, b, n * stride + j * l->w + i, 0);
                const box pred = get_yolo_box_coords(l->output, l->biases, l->mask[n], box_index,
                                                     i, j, l->w, l->h, net->w, net->h, stride,
                                                     l->new_coords);
                float best_iou = 0;
                int best_t = 0;
                for (int t = 0; t < l->max_boxes; ++t) {
                    const box truth = truth_of(net, l, b, t);
                    if (!truth.x) break;
                    const float iou = box_iou(pred, truth);
                    if (iou > best_iou) {
                        best_iou = iou;
                        best_t = t;
                    }
                }
                const int obj_index = entry_index(l, b, n * stride + j * l->w + i, 4);
                l->delta[obj_index] = yolo_obj_delta_unmatched(l, l->output[obj_index], best_iou);
                if (best_iou > l->truth_thresh) {
                    const int class_index = entry_index(l, b, n * stride + j * l->w + i, 4 + 1);
                    const int class = class_of(net, l, b, best_t);
                    delta_yolo_class_scaled(l->output, l->delta, class_index, class, l->classes,
                                            stride, NULL, 1);
                    yolo_deltas_truth_thresh(l, l->delta, obj_index, class_index, class, best_iou);
                    const box truth = truth_of(net, l, b, best_t);
                    delta_yolo_box_kind(l, truth, l->output, l->biases, l->mask[n], box_index, i, j,
                                        l->w, l->h, net->w, net->h, l->delta,
                                        (2 - truth.w * truth.h), stride);
                }
            }
    int count = 0;
    for (int t = 0; t < l->max_boxes; ++t) {
        const box truth = truth_of(net, l, b, t);
        if (!truth.x) break;
        float best_iou = 0;
        int best_n = 0;
        const int i = (truth.x * l->w);
        const int j = (truth.y * l->h);
        box truth_shift = truth;
        truth_shift.x = truth_shift.y = 0;
        for (int n = 0; n < l->total; ++n) {
            box pred = {0};
            pred.w = l->biases[2 * n] / net->w;
            pred.h = l->biases[2 * n + 1] / net->h;
            const float iou = box_iou(pred, truth_shift);
            if (iou > best_iou) {
                best_iou = iou;
                best_n = n;
            }
        }
        for (int n = 0; n < l->total; ++n) {
            const int mask_n = int_index(l->mask, n, l->n);
            if (mask_n < 0) continue;
            if (n != best_n) {
                if (l->iou_thresh >= 1) continue;
                box anchor = {0};
                anchor.w = l->biases[2 * n] / net->w;
                anchor.h = l->biases[2 * n + 1] / net->h;
                if (box_iou(anchor, truth_shift) <= l->iou_thresh) continue;
            }
            const int box_index = entry_index(l, b, mask_n * stride + j * l->w + i, 0);
            const float iou = delta_yolo_box_kind(l, truth, l->output, l->biases, n, box_index, i, j,
                                                  l->w, l->h, net->w, net->h, l->delta,
                                                  (2 - truth.w * truth.h), stride);
            const int obj_index = entry_index(l, b, mask_n * stride + j * l->w + i, 4);
            m[count].obj = l->output[obj_index];
            yolo_obj_delta_matched(l, l->delta, obj_index);
            const int class = class_of(net, l, b, t);
            const int class_index = entry_index(l, b, mask_n * stride + j * l->w + i, 4 + 1);
            float cat = 0; /* what darknet adds to avg_cat: nothing for a class out of range */
            delta_yolo_class_scaled(l->output, l->delta, class_index, class, l->classes, stride,
                                    &cat, 1);
            m[count].cat = cat;
            m[count].iou = iou;
            ++count;
        }
    }
    return count;
}

void amp_yolo_forward(layer l, network net, int activate)
{
    const long per = l.outputs, batch = l.batch;
    const int stride = l.w * l.h;
#pragma omp parallel for schedule(static)
    for (long b = 0; b < batch; ++b) {
        if (l.output != net.input) /* the same array: in place (a GPU's staging) */
            memcpy(l.output + b * per, net.input + b * per, (size_t)per * sizeof(float));
        for (int n = 0; activate && !l.new_coords && n < l.n; ++n) {
            activate_array(l.output + entry_index(&l, (int)b, n * stride, 0), 2 * stride, LOGISTIC);
            activate_array(l.output + entry_index(&l, (int)b, n * stride, 4),
                           (1 + l.classes) * stride, LOGISTIC);
        }
        layer one = l; /* darknet's scale_yolo_xy of this image alone */
        one.batch = 1;
        scale_yolo_xy(one, l.output + b * per);
        memset(l.delta + b * per, 0, (size_t)per * sizeof(float));
    }
    if (!net.train) return;
    /* A truth whose centre lies outside the image, or whose class is not the
     * layer's, makes darknet write into other cells' or images' deltas (and
     * read past its own): then the images go one after another, as in
     * darknet, whose order those writes depend on. */
    int serial = 0;
    for (long b = 0; b < batch && !serial; ++b)
        for (int t = 0; t < l.max_boxes; ++t) {
            const box truth = truth_of(&net, &l, (int)b, t);
            if (!truth.x) break;
            const int i = (truth.x * l.w), j = (truth.y * l.h), class = class_of(&net, &l, (int)b, t);
            if (i < 0 || i >= l.w || j < 0 || j >= l.h || class < 0 || class >= l.classes) serial = 1;
        }
    const int cap = l.max_boxes * l.n; /* pairs an image can make: each truth, each anchor */
    yolo_match *m = malloc((size_t)(batch * (cap > 0 ? cap : 1)) * sizeof *m);
    int *count = malloc((size_t)batch * sizeof *count);
    if (!m || !count) { /* no memory for the threads' records: darknet's own loop */
        free(m);
        free(count);
        forward_yolo_layer(l, net);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1) if (!serial)
    for (long b = 0; b < batch; ++b) count[b] = image_loss(&l, &net, (int)b, m + b * cap);
    /* darknet's batch sums, in darknet's order */
    float avg_iou = 0, recall = 0, recall75 = 0, avg_cat = 0, avg_obj = 0, avg_anyobj = 0;
    int matches = 0;
    for (long b = 0; b < batch; ++b) {
        for (int j = 0; j < l.h; ++j)
            for (int i = 0; i < l.w; ++i)
                for (int n = 0; n < l.n; ++n)
                    avg_anyobj += l.output[entry_index(&l, (int)b, n * stride + j * l.w + i, 4)];
        for (int k = 0; k < count[b]; ++k) {
            const yolo_match *p = &m[b * cap + k];
            avg_obj += p->obj;
            avg_cat += p->cat;
            ++matches;
            if (p->iou > .5) recall += 1;
            if (p->iou > .75) recall75 += 1;
            avg_iou += p->iou;
        }
    }
    free(m);
    free(count);
    *(l.cost) = pow(mag_array(l.delta, l.outputs * l.batch), 2);
    /* darknet's build (-Ofast) divides by the count once and multiplies */
    const float per_match = 1.0f / matches;
    printf("Region %d Avg IOU: %f, Class: %f, Obj: %f, No Obj: %f, .5R: %f, .75R: %f,  count: %d\n",
           net.index, avg_iou * per_match, avg_cat * per_match, avg_obj * per_match,
           avg_anyobj / (l.w * l.h * l.n * l.batch), recall * per_match, recall75 * per_match,
           matches);
}
