/* darknet's hook table for AMP: reads and validates the AMP keys of every cfg,
 * attaches AMP to networks whose [net] says amp=1, keeps the scaler state in a
 * <weights>.amp sidecar, and adds the scale to the training progress line. */
#include "amp_internal.h"
#include "options.h"
#include "state_file.h"

#include <stdio.h>
#include <string.h>

#ifdef GPU
#define AMP_DEFAULT_DTYPE AMP_DTYPE_FLOAT16
#else
#define AMP_DEFAULT_DTYPE AMP_DTYPE_BFLOAT16
#endif

/* The parse record lives in net->hook_data from [net] to network_parsed. */
static int on_net_options(void *ctx, network *net, list *options, const char *cfgfile, char *err,
                          size_t errlen)
{
    (void)ctx;
    int enabled = 0;
    amp_options o;
    if (amp_options_parse_net(options, cfgfile, AMP_DEFAULT_DTYPE, &enabled, &o, err, errlen) !=
        AMP_OK)
        return 1;
    amp_net *an = amp_net_new(net);
    amp_scaler *s = NULL;
    if (!an || (enabled && amp_scaler_create(&o, &s, err, errlen) != AMP_OK)) {
        if (!err[0]) amp_errorf(err, errlen, "%s: out of memory", cfgfile);
        amp_net_free(an);
        return 1;
    }
    an->enabled = enabled;
    an->owns_scaler = s != NULL;
    snprintf(an->cfgfile, sizeof an->cfgfile, "%s", cfgfile);
    an->parsed = s; /* not an->scaler: amp_net_of() must not see a half-built record */
    net->hook_data = an;
    return 0;
}

static int on_layer_options(void *ctx, network *net, int index, const char *type, list *options,
                            const char *cfgfile, char *err, size_t errlen)
{
    (void)ctx;
    amp_net *an = net->hook_data;
    int half = 1;
    if (amp_options_parse_layer(options, cfgfile, index, type, &half, err, errlen) != AMP_OK)
        return 1;
    if (an && index < net->n) an->layers[index].half_allowed = half;
    return 0;
}

static void describe(const amp_net *an)
{
    const amp_options *o = &an->scaler->opt;
    int params = 0;
    for (int i = 0; i < an->net->n; ++i) params += an->net->layers[i].update != NULL;
    if (o->dynamic)
        fprintf(stderr, "amp: %s: %s, dynamic loss scale %.10g (x%g after %ld good steps, x%g on "
                        "overflow%s, within [%.10g, %.10g])",
                an->cfgfile, amp_dtype_name(o->dtype), o->init_scale, o->growth_factor,
                o->growth_interval, o->backoff_factor, o->hysteresis > 1 ? " after hysteresis" : "",
                o->min_scale, o->max_scale);
    else
        fprintf(stderr, "amp: %s: %s, static loss scale %g", an->cfgfile, amp_dtype_name(o->dtype),
                o->init_scale);
    fprintf(stderr, "; %d layers with parameters; layer precision:\n", params);
    amp_policy_print(an, stderr);
    int native = 0;
    const char *isa = amp_onednn_isa(&native);
    if (o->dtype == AMP_DTYPE_BFLOAT16 && !native && !an->gpu)
        fprintf(stderr, "amp: warning: this CPU has neither AVX512-BF16 nor AMX (oneDNN sees %s): "
                        "bfloat16 is converted in software here and will be slow, possibly "
                        "slower than float32 (amp=0)\n", isa);
}

static int on_network_parsed(void *ctx, network *net, const char *cfgfile, char *err,
                             size_t errlen)
{
    (void)ctx, (void)cfgfile;
    amp_net *an = net->hook_data;
    if (!an) return 0;
    amp_scaler *s = an->parsed;
    an->parsed = NULL;
    if (!an->enabled) {
        amp_net_free(an);
        return 0;
    }
    if (amp_net_attach(an, s, err, errlen) != AMP_OK) {
        an->scaler = s;
        amp_net_free(an);
        net->hook_data = NULL;
        return 1;
    }
    describe(an);
    return 0;
}

amp_status amp_save_state(const network *net, const char *weights, char *err, size_t errlen)
{
    amp_net *an = amp_net_of(net);
    if (!an || !weights) {
        amp_errorf(err, errlen, "amp_save_state: %s", an ? "NULL path" : "AMP is not attached");
        return AMP_ERR_INVALID;
    }
#ifdef GPU
    amp_gpu_poll(an, 1); /* the scale lives on the device */
#endif
    return amp_state_file_write(weights, an->scaler->opt.dtype, &an->scaler->state, err, errlen);
}

amp_status amp_load_state(network *net, const char *weights, int *found, char *err,
                          size_t errlen)
{
    amp_net *an = amp_net_of(net);
    int dummy;
    if (!found) found = &dummy;
    *found = 0;
    if (!an || !weights) {
        amp_errorf(err, errlen, "amp_load_state: %s", an ? "NULL path" : "AMP is not attached");
        return AMP_ERR_INVALID;
    }
#ifdef GPU
    /* Settle the device's last step first: its copy still in flight would
     * otherwise land after the loaded state and overwrite it. */
    amp_gpu_poll(an, 1);
#endif
    amp_dtype dtype;
    amp_scale_state st;
    amp_status r = amp_state_file_read(weights, &dtype, &st, found, err, errlen);
    if (r != AMP_OK || !*found) return r;
    if (dtype != an->scaler->opt.dtype) {
        *found = 0;
        amp_errorf(err, errlen,
                   "%s.amp: the scaler state was saved for amp_dtype=%s but %s says %s; delete "
                   "the file to start with a fresh scaler",
                   weights, amp_dtype_name(dtype), an->cfgfile, amp_dtype_name(an->scaler->opt.dtype));
        return AMP_ERR_FORMAT;
    }
    /* A static scale is the cfg's; only the counters come from the file. A
     * dynamic one is kept within this cfg's bounds, which may have changed. */
    const amp_options *o = &an->scaler->opt;
    if (!o->dynamic) st.scale = o->init_scale;
    if (st.scale < o->min_scale) st.scale = o->min_scale;
    if (st.scale > o->max_scale && o->dynamic) st.scale = o->max_scale;
    if (st.hysteresis_left > o->hysteresis || st.hysteresis_left < 1) st.hysteresis_left = o->hysteresis;
    an->scaler->state = st;
#ifdef GPU
    amp_gpu_push_state(an);
#endif
    return AMP_OK;
}

static void on_weights_saved(void *ctx, network *net, const char *filename)
{
    char err[512];
    (void)ctx;
    if (amp_net_of(net) && amp_save_state(net, filename, err, sizeof err) != AMP_OK)
        fprintf(stderr, "amp: warning: %s (the weights themselves were saved)\n", err);
}

static int on_weights_loaded(void *ctx, network *net, const char *filename, char *err,
                             size_t errlen)
{
    int found = 0;
    (void)ctx;
    amp_net *an = amp_net_of(net);
    if (!an) return 0;
    an->weights_version += 1; /* half weight copies are stale */
    if (amp_load_state(net, filename, &found, err, errlen) != AMP_OK) return 1;
    if (found)
        fprintf(stderr, "amp: resumed the scaler from %s.amp: scale %g, %llu steps, %llu skipped\n",
                filename, an->scaler->state.scale, an->scaler->state.steps,
                an->scaler->state.skips);
    else
        fprintf(stderr, "amp: no %s.amp: starting with a fresh scaler (scale %g)\n", filename,
                an->scaler->state.scale);
    return 0;
}

static void on_network_freed(void *ctx, network *net)
{
    (void)ctx;
    amp_net *an = net->hook_data;
    if (!an) return;
    amp_net_free(an);
}

static int on_train_iteration(void *ctx, network *net, char *status, size_t n)
{
    (void)ctx;
    amp_net *an = amp_net_of(net);
    if (!an) return 0;
    if (an->error[0]) {
        snprintf(status, n, "%s", an->error);
        return 1;
    }
#ifdef GPU
    amp_gpu_poll(an, 0); /* no wait: the line may show the step before */
#endif
    snprintf(status, n, ", scale %g, %llu skipped", an->scaler->state.scale,
             an->scaler->state.skips);
    return 0;
}

static void on_train_done(void *ctx, network *net)
{
    (void)ctx;
    amp_net *an = amp_net_of(net);
    if (!an) return;
#ifdef GPU
    amp_gpu_poll(an, 1);
#endif
    const amp_scale_state *st = &an->scaler->state;
    fprintf(stderr, "amp: training done: %llu steps, %llu skipped (%.2f%%), final loss scale %g\n",
            st->steps, st->skips, st->steps ? 100.0 * st->skips / st->steps : 0.0, st->scale);
    if (an->profile == 1) {
        amp_profile_print(an, stderr);
        an->profile = 2; /* printed */
    }
}

static const darknet_hooks amp_hooks = {
    NULL,
    on_net_options,
    on_layer_options,
    on_network_parsed,
    on_weights_saved,
    on_weights_loaded,
    on_network_freed,
    on_train_iteration,
    on_train_done,
};

amp_status amp_register(void)
{
    const darknet_hooks *old = darknet_get_hooks();
    if (old && old != &amp_hooks) return AMP_ERR_STATE; /* another plugin's table */
    darknet_set_hooks(&amp_hooks);
    return AMP_OK;
}

void amp_unregister(void)
{
    if (darknet_get_hooks() == &amp_hooks) darknet_set_hooks(NULL);
}
