/* A non-finite gradient skips the step without a trace, then training goes on.
 *
 *   skip_test CFG LAYER TENSOR VALUE [static1]
 *
 * Trains CFG (no AMP keys needed) with AMP attached through the C API
 * (float32, dynamic scale 65536; static1: a static scale of 1, bfloat16's
 * default, whose check only reads the gradients), on deterministic random
 * data. At step 3,
 * DARKNET_AMP_INJECT puts VALUE (nan, inf, -inf) into gradient TENSOR of
 * LAYER (e.g. 0 weights, 1 scales, 0 uz.weights). Checks, bit for bit: step 3
 * was skipped; every parameter (weights, biases, batch-norm scales), every
 * momentum history and darknet's t are exactly as after step 2 (batch-norm
 * rolling statistics are not parameters: they follow every forward pass, as
 * in PyTorch); the scale halved; the skip names the layer; step 4
 * runs and changes the weights. TENSOR delta or loss (LAYER a cost layer):
 * a non-finite loss, not an overflow: the same checks, except that the
 * scale and the scaler's counters stay as they were, and the skip names the
 * image whose delta was not finite (delta: the middle element's, image
 * batch/2 of the paths train_network would set) or the batch (loss).
 */
#include "core.h"

#include <math.h>
#include <stdio.h>
#include "check.h"
#include <stdlib.h>
#include <string.h>



typedef struct {
    float *params;
    float *history;
    int t;
    float scale;
} snapshot;

static snapshot take(network *net)
{
    snapshot s = {0};
    amp_net *an = amp_net_of(net);
    s.params = malloc(an->nparams * sizeof(float));
    s.history = malloc(an->nparams * sizeof(float));
    for (int k = 0; k < an->ntensors; ++k) {
        const amp_tensor *t = &an->tensors[k];
        memcpy(s.params + t->offset, t->param, t->n * sizeof(float));
        memcpy(s.history + t->offset, t->grad, t->n * sizeof(float));
    }
    s.t = *net->t;
    s.scale = amp_scaler_get_scale(an->scaler);
    return s;
}

/* Elements whose bits differ, in the parameters and in the histories. */
static void compare(const snapshot *a, const snapshot *b, const amp_net *an, size_t *pdiff,
                    size_t *hdiff)
{
    *pdiff = *hdiff = 0;
    for (size_t i = 0; i < an->nparams; ++i) {
        *pdiff += memcmp(&a->params[i], &b->params[i], sizeof(float)) != 0;
        *hdiff += memcmp(&a->history[i], &b->history[i], sizeof(float)) != 0;
    }
}

/* static1: the test's own scaler, which the caller updates after each step
 * (amp_update), as a program sharing one does. */
static amp_scaler *own_scaler;

static void train_step(network *net)
{
    int n = net->batch * net->inputs, m = net->batch * net->truths;
    for (int i = 0; i < n; ++i) net->input[i] = (float)rand() / RAND_MAX - .5f;
    memset(net->truth, 0, m * sizeof(float));
    for (int b = 0; b < net->batch; ++b) net->truth[b * net->truths + rand() % net->truths] = 1;
    train_network_datum(net);
    char err[512] = "";
    if (own_scaler && amp_update(own_scaler, err, sizeof err) != AMP_OK)
        printf("amp_update: %s\n", err); /* the checks below fail on what it left */
}

int main(int argc, char **argv)
{
    const int static1 = argc == 6 && !strcmp(argv[5], "static1");
    if (argc != 5 && !static1) {
        fprintf(stderr, "usage: skip_test CFG LAYER TENSOR VALUE [static1]\n");
        return 2;
    }
    char spec[256], err[512] = "";
    snprintf(spec, sizeof spec, "%s:%s:%s:3", argv[2], argv[3], argv[4]);
    setenv("DARKNET_AMP_INJECT", spec, 1);
    gpu_index = -1;
    srand(5);
    network *net = parse_network_cfg(argv[1]);
    amp_scaler *s = NULL;
    if (static1) {
        amp_options o;
        amp_options_init(&o, AMP_DTYPE_FLOAT32);
        o.dynamic = 0;
        o.init_scale = 1;
        if (amp_scaler_create(&o, &s, err, sizeof err) != AMP_OK) {
            printf("FAIL: amp_scaler_create: %s\n", err);
            return 1;
        }
    }
    own_scaler = s;
    if (amp_attach(net, s, err, sizeof err) != AMP_OK) {
        printf("FAIL: amp_attach: %s\n", err);
        return 1;
    }
    amp_net *an = amp_net_of(net);
    printf("%s: %d parameter gradients, %zu elements; injecting %s\n", argv[1], an->ntensors,
           an->nparams, spec);

    train_step(net);
    train_step(net);
    snapshot before = take(net);
    size_t nonzero = 0;
    for (size_t i = 0; i < an->nparams; ++i) nonzero += before.history[i] != 0;
    CHECK(nonzero > an->nparams / 2, "momentum history after 2 steps is non-trivial "
                                     "(%zu of %zu elements non-zero)", nonzero, an->nparams);

    /* What train_network sets from the loader's paths (patch 0013). */
    char names[64][16], *paths[64];
    for (int b = 0; b < net->batch && b < 64; ++b) {
        snprintf(names[b], sizeof names[b], "img%d.png", b);
        paths[b] = names[b];
    }
    net->paths = net->batch <= 64 ? paths : NULL;
    train_step(net); /* step 3: injected */
    net->paths = NULL;
    snapshot skipped = take(net);
    size_t wdiff, hdiff;
    compare(&before, &skipped, an, &wdiff, &hdiff);
    CHECK(amp_step_skipped(NULL, net) == 1, "step 3 was skipped");
    CHECK(wdiff == 0, "parameters bit-for-bit unchanged by the skipped step "
                      "(%zu of %zu elements differ)", wdiff, an->nparams);
    CHECK(hdiff == 0, "momentum histories bit-for-bit unchanged (%zu of %zu elements differ)",
          hdiff, an->nparams);
    CHECK(skipped.t == before.t, "darknet's t unchanged (%d, was %d)", skipped.t, before.t);
    const int loss = !strcmp(argv[3], "delta") || !strcmp(argv[3], "loss");
    if (loss) {
        CHECK(skipped.scale == before.scale, "a non-finite %s: the scale stays %g (was %g)",
              argv[3], skipped.scale, before.scale);
        char want[64];
        if (!strcmp(argv[3], "delta"))
            snprintf(want, sizeof want, "image img%d.png", net->batch / 2);
        else
            snprintf(want, sizeof want, "batch of %d images: img0.png", net->batch);
        CHECK(strstr(an->loss_where, want) != NULL, "the skip names \"%s\" (wanted \"%s\")",
              an->loss_where, want);
        CHECK(an->loss_skips == 1 && amp_scaler_skips(an->scaler) == 0 &&
                  amp_scaler_steps(an->scaler) == 2,
              "counted as a loss skip (%llu), not by the scaler (%llu steps, %llu skipped)",
              an->loss_skips, amp_scaler_steps(an->scaler), amp_scaler_skips(an->scaler));
    } else {
        if (static1)
            CHECK(skipped.scale == 1 && before.scale == 1, "a static scale stays 1 (%g -> %g)",
                  before.scale, skipped.scale);
        else
            CHECK(skipped.scale == before.scale / 2, "scale backed off %g -> %g", before.scale,
                  skipped.scale);
        char expect[128];
        snprintf(expect, sizeof expect, "layer %s [", argv[2]);
        CHECK(strstr(an->bad, expect) && strstr(an->bad, argv[3]), "the skip names \"%s\"",
              an->bad);
        CHECK(amp_scaler_skips(an->scaler) == 1 && amp_scaler_steps(an->scaler) == 3,
              "scaler counted 3 steps, 1 skipped (%llu, %llu)", amp_scaler_steps(an->scaler),
              amp_scaler_skips(an->scaler));
    }

    /* An update with no backward since the skip runs as darknet's own: the
     * skip must not carry over to it. */
    update_network(net);
    snapshot plain = take(net);
    compare(&skipped, &plain, an, &wdiff, &hdiff);
    CHECK(plain.t == skipped.t + 1 && wdiff > 0,
          "a later update_network without backward runs (t %d -> %d, %zu parameters moved)",
          skipped.t, plain.t, wdiff);

    train_step(net); /* step 4: clean */
    snapshot after = take(net);
    skipped = plain;
    compare(&skipped, &after, an, &wdiff, &hdiff);
    CHECK(amp_step_skipped(NULL, net) == 0 && wdiff > 0,
          "step 4 ran: %zu of %zu parameters changed, t %d -> %d", wdiff, an->nparams, skipped.t, after.t);
    CHECK(after.t == skipped.t + 1, "t advanced by one");

    /* Detached between a backward and its step: darknet gets its histories
     * back unscaled, every element divided by S exactly. */
    *net->seen += net->batch;
    net->train = 1;
    forward_network(net);
    backward_network(net);
    float scale = an->batch_scale;
    double scaled = 0, unscaled = 0;
    for (int k = 0; k < an->ntensors; ++k)
        for (size_t i = 0; i < an->tensors[k].n; ++i) scaled += fabs(an->tensors[k].grad[i]);
    int ntensors = an->ntensors; /* the table goes with the attachment */
    float **grads = malloc(ntensors * sizeof *grads);
    size_t *sizes = malloc(ntensors * sizeof *sizes);
    for (int k = 0; k < ntensors; ++k) grads[k] = an->tensors[k].grad, sizes[k] = an->tensors[k].n;
    /* Not free_network: upstream's free_layer frees an RNN layer's output twice. */
    amp_detach(net);
    for (int k = 0; k < ntensors; ++k)
        for (size_t i = 0; i < sizes[k]; ++i) unscaled += fabs(grads[k][i]);
    CHECK(unscaled * scale == scaled, "detached mid-batch: histories unscaled "
          "(sum |U| %.9g at scale %g, %.9g after detach)", scaled, scale, unscaled);
    free(grads);
    free(sizes);
    return check_report();
}
