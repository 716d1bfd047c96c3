/* amp_loss_cause (plugin/loss_cause.c): why a yolo or region layer's loss is
 * not finite when no layer before it made the inf or NaN. A yolo layer of 2
 * images, 3 classes, and its labels as darknet's loader writes them (x, y, w,
 * h, class per box, x == 0 ending the list):
 * - valid labels and a finite output: the loss layer's own, with the largest
 *   input magnitude;
 * - each kind of bad label (a NaN coordinate, a centre off the image, a zero
 *   width, class 3 of 3, class 1.5), in the second image: a data problem
 *   naming that image and the label's number;
 * - a label after the list's end (x == 0) is not read;
 * - an output holding a NaN (the input was not finite: not its own), and a
 *   cost layer of another type: nothing said. */
#include "check.h"
#include "core.h"

#include <math.h>
#include <string.h>

enum { BATCH = 2, CLASSES = 3, BOXES = 4, OUTPUTS = 16 };

static float truth[BATCH * BOXES * 5], output[BATCH * OUTPUTS];
static char *paths[BATCH] = {"data/a.png", "data/b.png"};

static void set_box(int b, int t, float x, float y, float w, float h, float c)
{
    float *v = truth + (b * BOXES + t) * 5;
    v[0] = x, v[1] = y, v[2] = w, v[3] = h, v[4] = c;
}

static void cause(layer *l, network *net, char *out, size_t n)
{
    amp_loss_cause(l, net, out, n);
    printf("    -> \"%s\"\n", out);
}

int main(void)
{
    layer l;
    memset(&l, 0, sizeof l);
    l.type = YOLO;
    l.batch = BATCH;
    l.classes = CLASSES;
    l.truths = BOXES * 5;
    l.outputs = OUTPUTS;
    l.output = output;
    network net;
    memset(&net, 0, sizeof net);
    net.truth = truth;
    net.paths = paths;
    for (int i = 0; i < BATCH * OUTPUTS; ++i) output[i] = (float)(i % 7) - 3;
    output[5] = -71.5f; /* a raw w of a diverging model */
    set_box(0, 0, 0.5f, 0.5f, 0.2f, 0.3f, 0);
    set_box(1, 0, 0.25f, 0.75f, 0.9f, 0.4f, 2);
    set_box(1, 1, 0.6f, 0.1f, 0.1f, 0.1f, 1);
    char out[AMP_MSG_LEN];

    cause(&l, &net, out, sizeof out);
    CHECK(strstr(out, "the loss layer's own, FP32 training has it too: valid labels") &&
              strstr(out, "largest magnitude 71.5"),
          "valid labels, finite output: the loss layer's own, largest magnitude 71.5");

    static const struct {
        float x, y, w, h, c;
        const char *said;
    } bad[] = {
        {NAN, 0.5f, 0.2f, 0.2f, 0, "has a coordinate that is not finite"},
        {0.5f, 1.25f, 0.2f, 0.2f, 0, "has its centre off the image"},
        {0.5f, 0.5f, 0, 0.2f, 0, "has a width or height <= 0"},
        {0.5f, 0.5f, 0.2f, 0.2f, 3, "is class 3, the layer has 3 classes (0 to 2)"},
        {0.5f, 0.5f, 0.2f, 0.2f, 1.5f, "is class 1.5, the layer has 3 classes (0 to 2)"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; ++k) {
        set_box(1, 1, bad[k].x, bad[k].y, bad[k].w, bad[k].h, bad[k].c);
        cause(&l, &net, out, sizeof out);
        CHECK(strstr(out, "a data problem: image data/b.png, label 2 ") && strstr(out, bad[k].said),
              "bad label %zu of 5: \"a data problem: image data/b.png, label 2 ... %s\"", k + 1,
              bad[k].said);
    }

    set_box(1, 1, 0, 0.5f, 0.2f, 0.2f, 0); /* the list's end ... */
    set_box(1, 2, NAN, 0.5f, 0.2f, 0.2f, 7); /* ... so this one is not a label */
    cause(&l, &net, out, sizeof out);
    CHECK(strstr(out, "the loss layer's own") != NULL, "a box after x == 0 is not read");

    output[9] = NAN;
    cause(&l, &net, out, sizeof out);
    CHECK(out[0] == 0, "an output not finite (its input was not): nothing said");
    output[9] = 0;

    l.type = COST;
    cause(&l, &net, out, sizeof out);
    CHECK(out[0] == 0, "a [cost] layer: nothing said (no labels to read)");

    l.type = REGION; /* its boxes are coords + 1 floats */
    l.coords = 4;
    set_box(0, 0, 0.5f, 0.5f, 0.2f, 0.3f, 4);
    cause(&l, &net, out, sizeof out);
    CHECK(strstr(out, "a data problem: image data/a.png, label 1 is class 4") != NULL,
          "a [region] layer's labels are read alike");
    return check_report();
}
