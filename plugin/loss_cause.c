/* Why a detection layer's loss is not finite, when no layer before it made
 * the first inf or NaN (step.c's find_origin found none): the batch's labels,
 * or the loss itself.
 *
 * - A label that is not a box darknet can learn (a coordinate that is not
 *   finite, a centre off the image, a size <= 0, a class that is not one of
 *   the layer's) is a data problem, named by image and box.
 * - Valid labels and a finite input: the loss layer made the inf or NaN
 *   itself. darknet computes every loss in float32, in every precision, so
 *   FP32 training has it too: the model is diverging (box sizes of e^t
 *   anchors overflow once a raw output t passes about 88), not AMP and not
 *   the data.
 *
 * Only the yolo and region layers, whose labels (x, y, w, h, class per box,
 * in net.truth) and output (their input, squashed in place: the raw w, h are
 * as they came) are on the host on every backend; elsewhere the cause stays
 * unsaid ("a data or model problem").
 */
#include "core.h"

#include <math.h>
#include <stdio.h>

/* The first label of image b that is not a box, said into out; 0 if all are. */
static int bad_label(const layer *l, const network *net, int b, char *out, size_t n)
{
    const int stride = l->type == REGION ? l->coords + 1 : 5;
    const int boxes = stride > 4 ? l->truths / stride : 0;
    const char *img = net->paths && net->paths[b] ? net->paths[b] : NULL;
    for (int t = 0; t < boxes; ++t) {
        const float *v = net->truth + (size_t)b * l->truths + (size_t)t * stride;
        if (v[0] == 0) break; /* darknet's end of the list: x == 0 */
        const float c = v[stride - 1];
        const char *what = NULL;
        if (!isfinite(v[0]) || !isfinite(v[1]) || !isfinite(v[2]) || !isfinite(v[3])) {
            what = "a coordinate that is not finite";
        } else if (v[0] < 0 || v[0] > 1 || v[1] < 0 || v[1] > 1) {
            what = "its centre off the image";
        } else if (!(v[2] > 0) || !(v[3] > 0)) {
            what = "a width or height <= 0";
        } else if (!isfinite(c) || c < 0 || c >= l->classes || c != floorf(c)) {
            snprintf(out, n, "a data problem: %s%s%slabel %d is class %g, the layer has %d "
                     "classes (0 to %d)", img ? "image " : "", img ? img : "", img ? ", " : "",
                     t + 1, (double)c, l->classes, l->classes - 1);
            return 1;
        }
        if (what) {
            snprintf(out, n, "a data problem: %s%s%slabel %d (%g %g %g %g) has %s",
                     img ? "image " : "", img ? img : "", img ? ", " : "", t + 1, (double)v[0],
                     (double)v[1], (double)v[2], (double)v[3], what);
            return 1;
        }
    }
    return 0;
}

void amp_loss_cause(const layer *l, const network *net, char *out, size_t n)
{
    out[0] = 0;
    if ((l->type != YOLO && l->type != REGION) || !net->truth || !l->output || n == 0) return;
    for (int b = 0; b < l->batch; ++b)
        if (bad_label(l, net, b, out, n)) return;
    float top = 0;
    const size_t count = (size_t)l->outputs * (size_t)l->batch;
    for (size_t i = 0; i < count; ++i) {
        const float a = fabsf(l->output[i]);
        if (!isfinite(a)) return; /* its input was not finite: not its own */
        if (a > top) top = a;
    }
    snprintf(out, n,
             "the loss layer's own, FP32 training has it too: valid labels, a finite input "
             "(largest magnitude %.3g), a float32 loss at every precision; the model diverges "
             "(lower learning_rate, longer burn_in)",
             (double)top);
}
