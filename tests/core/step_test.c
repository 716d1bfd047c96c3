/* The core's training step (plugin/step.c, scaler.c) on a fake backend: the
 * core's objects alone, linked without the CPU and CUDA backends (no oneDNN,
 * no GPU), the backend table (backend.h) over darknet's host arrays, in its
 * two kinds:
 * - host-decided, as the CPU backend: the step is decided at once;
 * - device-decided, as the CUDA backend: a "device" (a struct here) decides,
 *   darknet's updates all run, a skipped step is undone at step_end and its
 *   outcome is published, and only a sync settles it on the host.
 *
 *   step_test CFG OUTDIR
 *
 * On CFG's network (a CPU network, float32 layers, loss scale 2^16, dynamic),
 * for each kind: four steps with a NaN injected into layer 0's weight
 * gradient at step 2: the skipped step leaves every parameter and darknet's t
 * as they were, the scale backs off once, the calls reach the backend in the
 * order the protocol says; an update with no training pass moves the weights
 * and weights_version; amp_max_skips stops with AMP_ERR_NONFINITE naming the
 * layer. A non-finite loss (a cost layer's delta before scaling, or its
 * loss) skips the step with the scale and the scaler's counters as they
 * were, names the cost layer, and amp_max_skips of them stop the run; a
 * gradient overflow in the same run still backs off. For the device-decided
 * kind also: the outcome is not on the host
 * before a sync, and a state file loaded while a step is in flight is not
 * overwritten by that step's outcome.
 */
#include "backend.h"
#include "step.h"
#include "check.h"
#include "nets.h"
#include "state_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the fake backend ---- */

typedef struct fake_net {
    float *saved;          /* histories at the batch start */
    float *params_saved;   /* parameters before a device-decided step */
    /* the "device" (device-decided kind) */
    amp_scale_state dev;
    int dev_found, dev_skipped, dev_bad, dev_loss;
    unsigned long long dev_seq;
    amp_scale_state mirror;
    int mirror_skipped, mirror_bad, mirror_loss;
    unsigned long long mirror_seq;
    float mirror_batch_scale;
    int in_flight, arrived;
    int returned_loss;                 /* sync returned a loss skip's outcome ... */
    char settled_where[AMP_MSG_LEN]; /* ... and what the core, settling it, named (an->bad),
                                        as the next decide finds it */
    /* what the core asked for */
    int n_begin, n_scale_loss, n_rescale, n_unscale, n_restore, n_decide, n_step_end, n_push;
} fake_net;

static fake_net *fk(const amp_net *an)
{
    return an->bk;
}

static amp_slots slots(layer *l)
{
    return (amp_slots){&l->forward, &l->backward, &l->update};
}

static amp_status net_init(amp_net *an, char *err, size_t errlen)
{
    fake_net *f = calloc(1, sizeof *f);
    AMP_RETURN_ERROR_IF(!f, AMP_ERR_NOMEM, err, errlen, "out of memory");
    an->bk = f;
    f->saved = calloc(an->nparams, sizeof(float));
    f->params_saved = calloc(an->nparams, sizeof(float));
    f->dev = an->scaler->state;
    return AMP_OK;
}

static void net_free(amp_net *an)
{
    fake_net *f = fk(an);
    if (!f) return;
    free(f->saved);
    free(f->params_saved);
    free(f);
    an->bk = NULL;
}

static amp_status layer_install(amp_layer *al, layer *l, char *err, size_t errlen)
{
    (void)l, (void)err, (void)errlen;
    if (al->precision == AMP_PRECISION_HALF) al->precision = AMP_PRECISION_FALLBACK;
    return AMP_OK;
}

static void layer_free(amp_layer *al)
{
    (void)al;
}

static float scale_of(const amp_net *an)
{
    return an->ops->decide ? fk(an)->dev.scale : an->scaler->state.scale;
}

static void begin_batch(amp_net *an)
{
    fake_net *f = fk(an);
    f->n_begin++;
    f->dev_loss = 0;
    an->batch_scale = scale_of(an);
    for (int k = 0; k < an->ntensors; ++k) {
        amp_tensor *t = &an->tensors[k];
        memcpy(f->saved + t->offset, t->grad, t->n * sizeof(float));
        for (size_t i = 0; i < t->n; ++i) t->grad[i] *= an->batch_scale;
    }
}

static void scale_loss(amp_net *an, const layer *l, int index)
{
    fake_net *f = fk(an);
    int finite = 1;
    f->n_scale_loss++;
    for (int i = 0; l->delta && i < l->outputs * l->batch; ++i) {
        finite &= amp_finite(l->delta[i]);
        l->delta[i] *= an->batch_scale;
    }
    int *flag = an->ops->decide ? &f->dev_loss : &an->loss_bad;
    if (!finite && !*flag) *flag = index + 1;
}

static void multiply(amp_net *an, float k, int *found, int *bad)
{
    for (int j = an->ntensors - 1; j >= 0; --j) {
        amp_tensor *t = &an->tensors[j];
        int nonfinite = 0;
        for (size_t i = 0; i < t->n; ++i) {
            t->grad[i] *= k;
            nonfinite |= !amp_finite(t->grad[i]);
        }
        if (nonfinite && found && !*found) *found = 1, *bad = j;
    }
}

static void rescale(amp_net *an)
{
    fk(an)->n_rescale++;
    multiply(an, an->batch_scale, NULL, NULL);
}

static void unscale(amp_net *an)
{
    fake_net *f = fk(an);
    f->n_unscale++;
    if (an->ops->decide) {
        f->dev_found = 0;
        multiply(an, 1 / an->batch_scale, &f->dev_found, &f->dev_bad);
    } else {
        multiply(an, 1 / an->batch_scale, &an->found_inf, &an->bad_tensor);
    }
}

static void restore(amp_net *an)
{
    fake_net *f = fk(an);
    f->n_restore++;
    for (int k = 0; k < an->ntensors; ++k)
        memcpy(an->tensors[k].grad, f->saved + an->tensors[k].offset,
               an->tensors[k].n * sizeof(float));
}

static void copy_params(amp_net *an, int to_saved)
{
    fake_net *f = fk(an);
    for (int k = 0; k < an->ntensors; ++k) {
        amp_tensor *t = &an->tensors[k];
        float *s = f->params_saved + t->offset;
        memcpy(to_saved ? s : t->param, to_saved ? t->param : s, t->n * sizeof(float));
    }
}

/* The "device": decide and update the scale, keep the parameters aside. */
static void decide(amp_net *an)
{
    fake_net *f = fk(an);
    f->n_decide++;
    if (f->returned_loss) { /* the core settled it before this decision (amp_net_sync) */
        snprintf(f->settled_where, sizeof f->settled_where, "%s", an->bad);
        f->returned_loss = 0;
    }
    if (!f->dev_loss) f->dev_loss = an->loss_bad; /* the host's, passed with the launch */
    f->dev_skipped = amp_step_decide(&f->dev, &an->scaler->params, (unsigned)f->dev_found,
                                     (unsigned)f->dev_loss, 1);
    f->dev_seq++;
    if (f->dev_skipped) copy_params(an, 1);
}

static void step_end(amp_net *an)
{
    fake_net *f = fk(an);
    f->n_step_end++;
    if (f->dev_skipped) {
        copy_params(an, 0);
        restore(an);
        f->n_restore--; /* counted as the device's undo, not a host restore */
    }
    f->mirror = f->dev;
    f->mirror_skipped = f->dev_skipped;
    f->mirror_bad = f->dev_found ? f->dev_bad : -1;
    f->mirror_seq = f->dev_seq;
    f->mirror_loss = f->dev_loss;
    f->mirror_batch_scale = an->batch_scale;
    f->in_flight = 1;
    f->arrived = 0;
}

/* The copy "arrives" at the second look, or at once when waited for; it is
 * returned to the core, which settles it. */
static int sync(amp_net *an, int wait, amp_step_outcome *out)
{
    fake_net *f = fk(an);
    if (!f->in_flight) return 0;
    if (!wait && !f->arrived++) return 0;
    f->in_flight = 0;
    *out = (amp_step_outcome){.skipped = f->mirror_skipped,
                              .bad_tensor = f->mirror_bad,
                              .batch_scale = f->mirror_batch_scale,
                              .seq = f->mirror_seq,
                              .device_state = 1,
                              .state = f->mirror,
                              .take_back_t = 1,
                              .loss_layer = f->mirror_loss - 1};
    f->returned_loss = f->mirror_loss != 0;
    return 1;
}

static void push_state(amp_net *an)
{
    fk(an)->n_push++;
    fk(an)->dev = an->scaler->state;
}

static void end_mid_batch(amp_net *an)
{
    multiply(an, 1 / an->batch_scale, NULL, NULL);
}

static void poke(amp_net *an, int k, size_t i, float value)
{
    an->tensors[k].grad[i] = value;
}

static void poke_delta(amp_net *an, const layer *l, size_t i, float value)
{
    (void)an;
    l->delta[i] = value;
}

/* Every GEMM kind, as darknet's float32 layers here (layer_install). */
static int supports(const amp_layer_kind *k, amp_dtype dtype)
{
    return k && dtype != AMP_DTYPE_FLOAT32 && k->role == AMP_ROLE_GEMM;
}

static const amp_backend_ops host_decided = {
    .version = AMP_BACKEND_VERSION, .supports = supports,
    .name = "fake host-decided", .default_dtype = AMP_DTYPE_FLOAT32, .slots = slots,
    .net_init = net_init, .net_free = net_free, .layer_install = layer_install,
    .layer_free = layer_free, .begin_batch = begin_batch, .scale_loss = scale_loss,
    .rescale = rescale, .unscale = unscale, .restore = restore, .end_mid_batch = end_mid_batch,
    .poke = poke, .poke_delta = poke_delta,
};

static const amp_backend_ops device_decided = {
    .version = AMP_BACKEND_VERSION, .supports = supports,
    .name = "fake device-decided", .default_dtype = AMP_DTYPE_FLOAT32, .slots = slots,
    .net_init = net_init, .net_free = net_free, .layer_install = layer_install,
    .layer_free = layer_free, .begin_batch = begin_batch, .scale_loss = scale_loss,
    .rescale = rescale, .unscale = unscale, .decide = decide, .step_end = step_end,
    .sync = sync, .push_state = push_state, .end_mid_batch = end_mid_batch, .poke = poke,
    .poke_delta = poke_delta,
};

/* The registry (plugin/backends.c) is left out of this test's build: its
 * own says that every network runs on the fake backend. */
const amp_backend_ops *amp_backend_for(const network *net)
{
    (void)net;
    return &host_decided;
}

/* ---- the test ---- */

static network *build(const char *cfg, const amp_backend_ops *ops, long max_skips)
{
    network *net = test_net(cfg, 0);
    amp_options o;
    amp_options_init(&o, AMP_DTYPE_FLOAT32);
    o.max_skips = max_skips;
    amp_scaler *s = NULL;
    char err[AMP_MSG_LEN] = "";
    amp_net *an = amp_net_new(net);
    an->enabled = 1;
    an->owns_scaler = 1;
    snprintf(an->cfgfile, sizeof an->cfgfile, "%s", cfg);
    if (!an || amp_register() != AMP_OK || amp_scaler_create_options(&o, &s, err, sizeof err) != AMP_OK ||
        amp_net_attach(an, s, ops, err, sizeof err) != AMP_OK) {
        printf("FAIL: attach %s: %s\n", ops->name, err);
        exit(1);
    }
    return net;
}

/* Every parameter, concatenated. */
static float *params_of(const amp_net *an)
{
    float *p = malloc(an->nparams * sizeof(float));
    for (int k = 0; k < an->ntensors; ++k)
        memcpy(p + an->tensors[k].offset, an->tensors[k].param, an->tensors[k].n * sizeof(float));
    return p;
}

static void steps(const char *cfg, const amp_backend_ops *ops)
{
    const int device = ops->decide != NULL;
    const char *kind = ops->name;
    setenv("DARKNET_AMP_INJECT", "0:weights:nan:2", 1);
    network *net = build(cfg, ops, 0);
    unsetenv("DARKNET_AMP_INJECT");
    amp_net *an = amp_net_of(net);
    fake_net *f = fk(an);
    amp_scaler *s = an->scaler;

    test_inputs(net, 1, 1);
    train_network_datum(net);
    amp_net_sync(an, 1);
    CHECK(f->n_begin == 1 && f->n_unscale == 1 && f->n_scale_loss == 1 && f->n_restore == 0 &&
              f->n_decide == device && f->n_step_end == device,
          "%s: step 1 reached the backend as begin_batch 1, scale_loss %d, unscale %d, "
          "restore %d, decide %d, step_end %d",
          kind, f->n_scale_loss, f->n_unscale, f->n_restore, f->n_decide, f->n_step_end);
    float *before = params_of(an);
    const int t_before = *net->t;
    const unsigned long version = an->weights_version;

    test_inputs(net, 2, 1); /* the NaN goes into layer 0's weight gradient */
    train_network_datum(net);
    float *after = params_of(an);
    size_t d = test_ndiff(before, after, an->nparams);
    CHECK(d == 0, "%s: step 2 (NaN injected) left the parameters as they were: %zu of %zu "
                  "elements differ", kind, d, an->nparams);
    if (device) {
        CHECK(amp_scaler_skips(s) == 0 && !an->skipped,
              "%s: the skip is not known on the host before a sync (skips %llu)", kind,
              amp_scaler_skips(s));
        amp_net_sync(an, 0); /* not arrived yet */
        CHECK(amp_scaler_skips(s) == 0, "%s: a sync that finds the copy still in flight "
                                        "settles nothing", kind);
        amp_net_sync(an, 0);
    }
    CHECK(an->skipped && amp_scaler_skips(s) == 1 && amp_scaler_steps(s) == 2,
          "%s: step 2 settled as skipped: %llu steps, %llu skipped", kind, amp_scaler_steps(s),
          amp_scaler_skips(s));
    CHECK(*net->t == t_before, "%s: darknet's t taken back for the skipped step (%d, was %d)",
          kind, *net->t, t_before);
    CHECK(amp_scaler_get_scale(s) == 32768.0f, "%s: the scale backed off once: %g", kind,
          amp_scaler_get_scale(s));
    CHECK(strstr(an->bad, "layer 0") && strstr(an->bad, "weights"),
          "%s: the skip names the tensor: \"%s\"", kind, an->bad);
    CHECK(device ? an->weights_version == version + 1 : an->weights_version == version,
          "%s: weights_version after the skipped step %lu (was %lu; a device-decided step "
          "always moves it, the host does not know)", kind, an->weights_version, version);

    test_inputs(net, 3, 1);
    train_network_datum(net);
    amp_net_sync(an, 1);
    free(after);
    after = params_of(an);
    d = test_ndiff(before, after, an->nparams);
    CHECK(d > an->nparams / 2 && !an->skipped,
          "%s: step 3 ran: %zu of %zu parameters changed", kind, d, an->nparams);

    /* An update with no training pass: darknet's own, and the weights moved. */
    const unsigned long v3 = an->weights_version;
    free(before);
    before = params_of(an);
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (l->update && l->weight_updates) l->weight_updates[0] = 100;
    }
    update_network(net);
    free(after);
    after = params_of(an);
    d = test_ndiff(before, after, an->nparams);
    CHECK(d > 0 && an->weights_version == v3 + 1 && an->phase == AMP_PHASE_IDLE,
          "%s: an update with no training pass ran (%zu elements moved) and moved "
          "weights_version (%lu -> %lu)", kind, d, v3, an->weights_version);
    free(before);
    free(after);
    amp_detach(net);
    free_network(net);
}

static void max_skips(const char *cfg, const amp_backend_ops *ops)
{
    setenv("DARKNET_AMP_INJECT", "1:biases:inf:1,2", 1);
    network *net = build(cfg, ops, 2);
    unsetenv("DARKNET_AMP_INJECT");
    amp_net *an = amp_net_of(net);
    for (int k = 1; k <= 2; ++k) {
        test_inputs(net, k, 1);
        train_network_datum(net);
    }
    amp_net_sync(an, 1);
    CHECK(an->error_status == AMP_ERR_NONFINITE && strstr(an->error, "amp_max_skips=2") &&
              strstr(an->error, "layer 1"),
          "%s: amp_max_skips=2 reached: the network's error (status %d): %s", ops->name,
          (int)an->error_status, an->error);
    test_inputs(net, 3, 1);
    train_network_datum(net);
    amp_net_sync(an, 1);
    CHECK(an->error[0] == 0, "%s: a good step after it clears the stop (\"%s\")", ops->name,
          an->error);
    amp_detach(net);
    free_network(net);
}

/* The last layer with a cost (the loss layer) of cfg's network. */
static int cost_layer(const char *cfg)
{
    network *net = test_net(cfg, 0);
    int c = -1;
    for (int i = 0; i < net->n; ++i)
        if (net->layers[i].cost) c = i;
    free_network(net);
    return c;
}

/* A non-finite loss is not an overflow: step 2's delta NaN and step 3's loss
 * inf are skipped with the scaler untouched; step 4's gradient NaN backs off. */
static void loss_steps(const char *cfg, const amp_backend_ops *ops)
{
    const char *kind = ops->name;
    const int c = cost_layer(cfg);
    char spec[128];
    snprintf(spec, sizeof spec, "%d:delta:nan:2;%d:loss:inf:3;0:weights:nan:4", c, c);
    setenv("DARKNET_AMP_INJECT", spec, 1);
    network *net = build(cfg, ops, 3);
    unsetenv("DARKNET_AMP_INJECT");
    amp_net *an = amp_net_of(net);
    amp_scaler *s = an->scaler;

    test_inputs(net, 1, 1);
    train_network_datum(net);
    amp_net_sync(an, 1);
    const amp_scale_state st1 = s->state;
    const int t1 = *net->t;
    float *before = params_of(an);
    for (int k = 2; k <= 3; ++k) {
        test_inputs(net, k, 1);
        train_network_datum(net);
        amp_net_sync(an, 1);
        float *after = params_of(an);
        const size_t d = test_ndiff(before, after, an->nparams);
        free(after);
        CHECK(d == 0 && an->skipped && an->loss_skips == (unsigned long long)(k - 1) &&
                  amp_scale_state_same(&s->state, &st1) && *net->t == t1 && !an->error[0],
              "%s: step %d (%s of layer %d not finite) skipped: %zu parameters moved, scale %g "
              "(was %g), scaler steps %llu skips %llu (were %llu, %llu), loss skips %llu, t %d "
              "(was %d)", kind, k, k == 2 ? "delta" : "loss", c, d, s->state.scale, st1.scale,
              s->state.steps, s->state.skips, st1.steps, st1.skips, an->loss_skips, *net->t, t1);
    }
    test_inputs(net, 4, 1);
    train_network_datum(net);
    amp_net_sync(an, 1);
    CHECK(an->skipped && s->state.scale == st1.scale / 2 && s->state.skips == st1.skips + 1 &&
              an->loss_skips == 2 && an->loss_skips_in_row == 0,
          "%s: step 4 (a gradient NaN) skipped and backed off: scale %g, skips %llu, loss skips "
          "%llu", kind, s->state.scale, s->state.skips, an->loss_skips);
    free(before);
    amp_detach(net);
    free_network(net);

    /* amp_max_skips=2 non-finite losses in a row stop the run naming the layer. */
    snprintf(spec, sizeof spec, "%d:delta:inf:1,2", c);
    setenv("DARKNET_AMP_INJECT", spec, 1);
    net = build(cfg, ops, 2);
    unsetenv("DARKNET_AMP_INJECT");
    an = amp_net_of(net);
    for (int k = 1; k <= 2; ++k) {
        test_inputs(net, k, 1);
        train_network_datum(net);
    }
    amp_net_sync(an, 1);
    char layer_name[32];
    snprintf(layer_name, sizeof layer_name, "layer %d", c);
    CHECK(an->error_status == AMP_ERR_NONFINITE && strstr(an->error, "amp_max_skips=2") &&
              strstr(an->error, "loss of") && strstr(an->error, layer_name) &&
              an->scaler->state.scale == 65536.0f,
          "%s: amp_max_skips=2 non-finite losses stop the run at scale %g: %s", kind,
          an->scaler->state.scale, an->error);
    amp_detach(net);
    free_network(net);
}

/* A device's outcome is settled after the next batch has begun: a loss skip
 * still names its own batch's images, not the next one's (nor none). */
static void where_delayed(const char *cfg)
{
    const int c = cost_layer(cfg);
    char spec[64];
    snprintf(spec, sizeof spec, "%d:loss:inf:1", c);
    setenv("DARKNET_AMP_INJECT", spec, 1);
    network *net = build(cfg, &device_decided, 0);
    unsetenv("DARKNET_AMP_INJECT");
    amp_net *an = amp_net_of(net);
    char names[2][8][16], *paths[2][8];
    for (int k = 0; k < 2; ++k)
        for (int b = 0; b < 8; ++b) {
            snprintf(names[k][b], sizeof names[k][b], "%c%d.png", "AB"[k], b);
            paths[k][b] = names[k][b];
        }
    if (net->batch > 8) return;
    net->paths = paths[0];
    test_inputs(net, 1, 1);
    train_network_datum(net); /* step 1: loss inf, its outcome in flight */
    net->paths = paths[1];
    test_inputs(net, 2, 1);
    train_network_datum(net); /* step 2 begins before step 1 is settled */
    amp_net_sync(an, 1);
    net->paths = NULL;
    const char *w = fk(an)->settled_where;
    CHECK(strstr(w, "A0.png") && !strstr(w, "B0.png"),
          "fake device-decided: a loss skip settled after the next batch began names its own "
          "batch: \"%s\"", w);
    amp_detach(net);
    free_network(net);
}

/* A state file loaded while the device's last step is in flight: that step's
 * outcome is settled first, then the loaded state replaces it, on the host
 * and on the device. */
static void load_in_flight(const char *cfg, const char *dir)
{
    network *net = build(cfg, &device_decided, 0);
    amp_net *an = amp_net_of(net);
    test_inputs(net, 1, 1);
    train_network_datum(net); /* in flight now */
    char path[AMP_MSG_LEN], err[AMP_MSG_LEN];
    snprintf(path, sizeof path, "%s/loaded.weights", dir);
    amp_scale_state st = an->scaler->state;
    st.scale = 1024;
    st.steps = st.skips = 7;
    int found = 0;
    amp_status r = amp_state_file_write(path, AMP_DTYPE_FLOAT32, &st, NULL, NULL, err, sizeof err);
    CHECK(r == AMP_OK && fk(an)->in_flight, "a state file written while a step is in flight (%s)",
          r == AMP_OK ? "ok" : err);
    r = amp_load_state(net, path, &found, err, sizeof err);
    amp_net_sync(an, 1);
    CHECK(r == AMP_OK && found && amp_scaler_get_scale(an->scaler) == 1024.0f &&
              amp_scaler_steps(an->scaler) == 7 && fk(an)->dev.scale == 1024.0f &&
              fk(an)->n_push == 1,
          "the loaded state stays: host scale %g, %llu steps; device scale %g, %d pushes",
          amp_scaler_get_scale(an->scaler), amp_scaler_steps(an->scaler), fk(an)->dev.scale,
          fk(an)->n_push);
    amp_detach(net);
    free_network(net);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: step_test CFG OUTDIR\n");
        return 2;
    }
    steps(argv[1], &host_decided);
    steps(argv[1], &device_decided);
    max_skips(argv[1], &host_decided);
    max_skips(argv[1], &device_decided);
    loss_steps(argv[1], &host_decided);
    loss_steps(argv[1], &device_decided);
    where_delayed(argv[1]);
    load_in_flight(argv[1], argv[2]);
    return check_report();
}
