/* A skipped step leaves no trace, then training goes on.
 *
 *   skip_test CFG LAYER TENSOR VALUE [static1 | nofallback]
 *
 * Trains CFG (no AMP keys needed) with AMP attached through the C API
 * (float32, dynamic scale 65536; static1: a static scale of 1, bfloat16's
 * default, whose check only reads the gradients), on deterministic random
 * data. At step 3,
 * DARKNET_AMP_INJECT puts VALUE (nan, inf, -inf) into gradient TENSOR of
 * LAYER (e.g. 0 weights, 1 scales, 0 uz.weights). Checks, bit for bit: step 3
 * was skipped; every parameter (weights, biases, batch-norm scales), every
 * momentum history, darknet's t and every piece of state a training forward
 * pass changes (the rolling statistics of every batch-normalising layer and
 * sub-layer, a [batchnorm] layer's too, and a gru's or lstm's hidden state,
 * gathered here from darknet's layers, not from the plugin's list) are
 * exactly as after step 2; the scale halved; the skip names the layer; step
 * 4 runs and changes the weights and the rolling statistics (so that the
 * forward pass of step 3 did change them, and the skip put them back).
 * TENSOR delta or loss (LAYER a cost layer):
 * a non-finite loss, not an overflow: the same checks, except that the
 * scale and the scaler's counters stay as they were, and the skip names the
 * image whose delta was not finite (delta: the middle element's, image
 * batch/2 of the paths train_network would set) or the batch (loss).
 * TENSOR forward (VALUE a factor, e.g. 1e5): float16, and LAYER's weights
 * multiplied by VALUE before step 3, so that its half forward pass
 * overflows: skipped for that (a forward skip, the scale left alone) and,
 * with amp_fallback, LAYER in float32 from step 4, which then runs; with
 * nofallback (amp_fallback=0) still in float16, and step 4 skipped alike.
 * Every case ends by saving the weights and reading every value back: none
 * may be inf or NaN.
 *
 * ema: [net] ema_alpha=0.5 from step 1 on, through the plugin's hooks: the
 * skipped step 3 leaves the average as it was after step 2, bit for bit, and
 * step 4 moves it.
 *
 * Launched as several processes (mpirun -np 2), AMP attaches through the
 * cfg's [net] keys as a data-parallel launch does (the same keys as the C
 * API's options above, written into a copy of CFG): every process checks
 * its own state, and the processes are compared after every step
 * (DARKNET_AMP_DIST_CHECK=1 set here; a difference is the network's error,
 * checked at the end).
 */
#include "core.h"
#include "dist.h" /* amp_dist_launched_size */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include "check.h"
#include "nets.h" /* test_saved_nonfinite */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The arrays a training forward pass changes, found in darknet's layers by
 * this test itself: rolling statistics by the count each type keeps, and
 * the hidden states gru and lstm layers carry into the next batch. */
#define MAX_STATES 256
typedef struct {
    float *p[MAX_STATES];
    size_t n[MAX_STATES];
    int count;
    size_t total;
} state_list;

static void add_array(state_list *s, float *p, size_t n)
{
    if (!p || !n || s->count == MAX_STATES) return;
    s->p[s->count] = p;
    s->n[s->count++] = n;
    s->total += n;
}

static void add_stats(state_list *s, layer *l)
{
    if (!l) return;
    size_t n = 0;
    if (l->type == BATCHNORM) n = (size_t)l->c;
    else if (l->batch_normalize && l->type == CONNECTED) n = (size_t)l->outputs;
    else if (l->batch_normalize) n = (size_t)l->n;
    add_array(s, l->rolling_mean, n);
    add_array(s, l->rolling_variance, n);
}

static state_list forward_states(network *net)
{
    state_list s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        add_stats(&s, l);
        layer *subs[] = {l->input_layer, l->self_layer, l->output_layer, l->uz, l->wz, l->ur,
                         l->wr, l->uh, l->wh, l->wf, l->wi, l->wg, l->wo, l->uf, l->ui, l->ug,
                         l->uo};
        for (size_t k = 0; k < sizeof subs / sizeof subs[0]; ++k) add_stats(&s, subs[k]);
        const size_t hidden = (size_t)l->outputs * l->batch;
        if (l->type == GRU) add_array(&s, l->state, hidden);
        if (l->type == LSTM) add_array(&s, l->h_cpu, hidden), add_array(&s, l->c_cpu, hidden);
    }
    return s;
}

typedef struct {
    float *params;
    float *history;
    float *states;
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
    const state_list st = forward_states(net);
    s.states = malloc((st.total ? st.total : 1) * sizeof(float));
    for (int k = 0, at = 0; k < st.count; at += (int)st.n[k], ++k)
        memcpy(s.states + at, st.p[k], st.n[k] * sizeof(float));
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

/* ... and in the forward states (n of them). */
static size_t compare_states(const snapshot *a, const snapshot *b, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; ++i) d += memcmp(&a->states[i], &b->states[i], sizeof(float)) != 0;
    return d;
}

static void release(snapshot *s)
{
    free(s->params);
    free(s->history);
    free(s->states);
}

/* static1: the test's own scaler, which the caller updates after each step
 * (amp_update), as a program sharing one does. */
static amp_scaler *own_scaler;

/* [net] ema_alpha's averages of the convolutional layers, one copy. */
typedef struct {
    float *v;
    size_t n;
} ema_list;

static ema_list ema_take(const network *net)
{
    ema_list e = {NULL, 0};
    for (int pass = 0; pass < 2; ++pass) {
        size_t n = 0;
        for (int i = 0; i < net->n; ++i) {
            const layer *l = &net->layers[i];
            const float *a[3] = {l->weights_ema, l->biases_ema, l->scales_ema};
            const size_t c[3] = {(size_t)l->nweights, (size_t)l->n, (size_t)l->n};
            for (int k = 0; l->type == CONVOLUTIONAL && k < 3; ++k)
                for (size_t j = 0; a[k] && j < c[k]; ++j, ++n)
                    if (pass) e.v[n] = a[k][j];
        }
        if (!pass) e.v = calloc(n ? n : 1, sizeof(float));
        e.n = n;
    }
    return e;
}

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

/* CFG with the AMP keys in its [net] section, as out (a data-parallel launch
 * attaches through them); 0 on success. */
static int cfg_with_keys(const char *cfg, const char *keys, char *out, size_t size)
{
    FILE *in = fopen(cfg, "r");
    snprintf(out, size, "/tmp/skip_test.%ld.cfg", (long)getpid());
    FILE *o = fopen(out, "w");
    char line[1024];
    int done = 0;
    while (in && o && fgets(line, sizeof line, in)) {
        fputs(line, o);
        if (!done && !strncmp(line, "[net]", 5)) fprintf(o, "%s", keys), done = 1;
    }
    if (in) fclose(in);
    return !o || fclose(o) != 0 || !done;
}

int main(int argc, char **argv)
{
    const int static1 = argc == 6 && !strcmp(argv[5], "static1");
    const int nofallback = argc == 6 && !strcmp(argv[5], "nofallback");
    const int ema = argc == 6 && !strcmp(argv[5], "ema");
    if ((argc != 5 && argc != 6) || (argc == 6 && !static1 && !nofallback && !ema)) {
        fprintf(stderr, "usage: skip_test CFG LAYER TENSOR VALUE [static1 | nofallback | ema]\n");
        return 2;
    }
    const int forward = !strcmp(argv[3], "forward");
    const int layer_k = atoi(argv[2]);
    const float factor = forward ? strtof(argv[4], NULL) : 0;
    char spec[256], err[512] = "", cfg[256];
    snprintf(spec, sizeof spec, "%s:%s:%s:3", argv[2], argv[3], argv[4]);
    if (!forward) setenv("DARKNET_AMP_INJECT", spec, 1);
    else snprintf(spec, sizeof spec, "layer %d's weights x%g at step 3", layer_k, factor);
    gpu_index = -1;
    srand(5);
    const int dist = amp_dist_launched_size() > 1;
    network *net;
    amp_scaler *s = NULL;
    if (dist) {
        /* the keys of the C API's options below */
        char keys[256];
        snprintf(keys, sizeof keys, "amp=1\namp_dtype=%s\n%s", forward ? "float16" : "float32",
                 forward ? (nofallback ? "amp_init_scale=256\namp_fallback=0\n"
                                       : "amp_init_scale=256\n")
                         : "");
        setenv("DARKNET_AMP_DIST_CHECK", "1", 1);
        if (static1 || cfg_with_keys(argv[1], keys, cfg, sizeof cfg) != 0 ||
            amp_register() != AMP_OK) {
            printf("FAIL: a data-parallel launch of this case cannot be set up\n");
            return 1;
        }
        net = parse_network_cfg(cfg);
        remove(cfg);
    } else {
        net = parse_network_cfg(argv[1]);
    }
    if (static1) {
        amp_options o;
        amp_options_init(&o, AMP_DTYPE_FLOAT32);
        o.dynamic = 0;
        o.init_scale = 1;
        if (amp_scaler_create_options(&o, &s, err, sizeof err) != AMP_OK) {
            printf("FAIL: amp_scaler_create: %s\n", err);
            return 1;
        }
    }
    own_scaler = s;
    amp_status attached = AMP_OK;
    if (forward && !dist) {
        amp_options o;
        amp_options_init(&o, AMP_DTYPE_FLOAT16);
        o.fallback = !nofallback;
        o.init_scale = 256; /* steps 1-2 taken: a non-trivial history to compare */
        attached = amp_attach_options(net, &o, err, sizeof err);
    } else if (!dist) {
        attached = amp_attach(net, s, err, sizeof err);
    }
    if (attached != AMP_OK || !amp_net_of(net)) {
        printf("FAIL: amp_attach: %s\n", err[0] ? err : "not attached");
        return 1;
    }
    amp_net *an = amp_net_of(net);
    const state_list states = forward_states(net);
    printf("%s: %d parameter gradients, %zu elements; %zu forward-state elements in %d arrays; "
           "%s%s%s\n",
           argv[1], an->ntensors, an->nparams, states.total, states.count,
           forward ? "" : "injecting ", spec,
           dist ? "; one of a data-parallel launch's processes" : "");

    if (ema) { /* [net] ema_alpha=0.5 from step 1 (iteration 1005 of 2010) */
        net->ema_alpha = 0.5f;
        net->max_batches = 2010;
        *net->seen = (size_t)1004 * net->batch * net->subdivisions;
        if (amp_register() != AMP_OK) printf("FAIL: amp_register\n");
    }
    train_step(net);
    train_step(net);
    ema_list ema2 = ema_take(net);
    if (forward) {
        layer *l = &net->layers[layer_k];
        for (int i = 0; i < l->nweights; ++i) l->weights[i] *= factor;
        an->weights_version += 1; /* a load would say so: half copies made again */
    }
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
    const unsigned long long fwd_before = an->forward_skips;
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
    if (ema) {
        ema_list ema3 = ema_take(net);
        CHECK(ema3.n > 0 && ema3.n == ema2.n && !memcmp(ema3.v, ema2.v, ema3.n * sizeof(float)),
              "ema_alpha: the skipped step left the average of %zu values as it was, bit for "
              "bit", ema3.n);
        free(ema3.v);
    }
    const size_t sdiff = compare_states(&before, &skipped, states.total);
    CHECK(sdiff == 0, "rolling statistics and hidden states bit-for-bit as before the batch "
                      "(%zu of %zu elements differ)", sdiff, states.total);
    const int loss = !strcmp(argv[3], "delta") || !strcmp(argv[3], "loss");
    if (forward) {
        CHECK(skipped.scale == before.scale && an->forward_skips == fwd_before + 1,
              "a forward overflow: the scale stays %g (was %g), counted as a forward skip "
              "(%llu, was %llu)", skipped.scale, before.scale, an->forward_skips, fwd_before);
        const amp_precision p = an->layers[layer_k].precision;
        CHECK(nofallback ? p == AMP_PRECISION_HALF : p == AMP_PRECISION_FELL_BACK,
              "layer %d %s (precision %d)", layer_k,
              nofallback ? "stays in half with amp_fallback=0" : "fell back to float32", (int)p);
    } else if (loss) {
        CHECK(skipped.scale == before.scale, "a non-finite %s: the scale stays %g (was %g)",
              argv[3], skipped.scale, before.scale);
        char want[64];
        if (!strcmp(argv[3], "delta"))
            snprintf(want, sizeof want, "image img%d.png", net->batch / 2);
        else
            snprintf(want, sizeof want, "batch of %d images: img0.png", net->batch);
        CHECK(strstr(an->loss_where, want) != NULL || (dist && an->loss_where[0]),
              "the skip names \"%s\" (wanted \"%s\")", an->loss_where, want);
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

    train_step(net); /* step 4: clean (with amp_fallback=0, the same overflow) */
    snapshot after = take(net);
    compare(&plain, &after, an, &wdiff, &hdiff);
    const size_t smoved = compare_states(&plain, &after, states.total);
    if (forward && nofallback) {
        CHECK(amp_step_skipped(NULL, net) == 1 && wdiff == 0 && smoved == 0 &&
                  an->forward_skips == fwd_before + 2,
              "step 4 overflowed again and was skipped alike (%zu parameters, %zu forward-state "
              "elements changed; %llu forward skips)", wdiff, smoved, an->forward_skips);
    } else {
        CHECK(amp_step_skipped(NULL, net) == 0 && wdiff > 0,
              "step 4 ran: %zu of %zu parameters changed, t %d -> %d", wdiff, an->nparams, plain.t,
              after.t);
        CHECK(after.t == plain.t + 1, "t advanced by one");
        if (ema) {
            ema_list ema4 = ema_take(net);
            size_t moved = 0;
            for (size_t i = 0; i < ema4.n && i < ema2.n; ++i) moved += ema4.v[i] != ema2.v[i];
            CHECK(moved > ema4.n / 2, "ema_alpha: step 4 moved the average (%zu of %zu values)",
                  moved, ema4.n);
            free(ema4.v);
            amp_unregister();
        }
        CHECK(smoved > 0 || states.total == 0,
              "step 4's forward pass moved the forward states (%zu of %zu elements): step 3's "
              "did too, and its skip put them back", smoved, states.total);
    }
    long values = 0;
    const long bad = test_saved_nonfinite(net, &values);
    CHECK(bad == 0 && values > 0, "the weights saved now hold no inf or NaN (%ld of %ld values)",
          bad, values);
    if (dist)
        CHECK(!an->error[0], "the processes stayed identical, compared after every step%s%s",
              an->error[0] ? ": " : "", an->error);
    release(&before);
    release(&skipped);
    release(&plain);
    release(&after);
    free(ema2.v);
    if (forward || dist) return check_report(); /* the detach check below: one process, finite */

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
