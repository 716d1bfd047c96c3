/* darknet's hook table for AMP (patches 0004 and 0006): reads and validates
 * the AMP keys of every cfg, attaches AMP to networks whose [net] says amp=1,
 * keeps the scaler state in a <weights>.amp state file, and adds the scale to
 * the training progress line. Also amp_attach, for programs that build
 * networks themselves. */
#include "backend.h"
#include "step.h"
#include "dist.h"
#include "options.h"
#include "state_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The program beside the library, when there is one (amp_program_set). */
static const amp_program *program;

void amp_program_set(const amp_program *p)
{
    program = p;
}

/* The parse record lives in net->hook_data from [net] to network_parsed. */
static int on_net_options(void *ctx, network *net, list *options, const char *cfgfile, char *err,
                          size_t errlen)
{
    (void)ctx;
    int enabled = 0;
    amp_options o;
    /* The dtype by default: the network's backend's (float16 on a GPU,
     * bfloat16 on the CPU); darknet has set net->gpu_index by now. */
    const amp_dtype dtype = amp_backend_for(net)->default_dtype;
    amp_net_override ov = {0}; /* the program's -amp */
    if (program && program->net_override) ov = *program->net_override();
    if (ov.set && ov.device_default) ov.dtype = dtype;
    char conflict[AMP_MSG_LEN];
    if (amp_options_parse_net_override(options, cfgfile, dtype, &ov, &enabled, &o, conflict,
                                       sizeof conflict, err, errlen) != AMP_OK)
        return 1;
    /* A data-parallel launch (docs/distributed.md): the cfg's batch is the
     * whole step's, each process trains its share; with amp=0 the step
     * machinery still runs, in float32 at a scale of 1 (darknet's own
     * arithmetic, bit for bit), to sum the gradients before each step. */
    const amp_comm *comm = NULL;
    if (amp_dist_get(&comm, err, errlen) != AMP_OK) return 1;
    if (comm) {
        AMP_RETURN_ERROR_IF(net->batch % comm->size != 0, 1, err, errlen,
                            "%s: [net] batch=%d with subdivisions=%d: the %d images of each "
                            "forward pass do not divide among %d processes (docs/distributed.md)",
                            cfgfile, net->batch * net->subdivisions, net->subdivisions,
                            net->batch, comm->size);
        net->batch /= comm->size;
    }
    /* the program's start-up line */
    if (program && program->net_read)
        program->net_read(net, cfgfile, enabled, o.dtype, comm != NULL, conflict);
    if (comm && !enabled) {
        amp_options_init(&o, AMP_DTYPE_FLOAT32);
        o.dynamic = 0;
        o.init_scale = 1;
        enabled = 1;
    }
    amp_net *an = amp_net_new(net);
    amp_scaler *s = NULL;
    if (!an || (enabled && amp_scaler_create_options(&o, &s, err, errlen) != AMP_OK)) {
        if (!err[0]) amp_errorf(err, errlen, "%s: out of memory", cfgfile);
        amp_net_free(an);
        return 1;
    }
    an->enabled = enabled;
    an->comm = comm;
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

void amp_describe(const amp_net *an, FILE *out)
{
    const amp_options *o = &an->scaler->opt;
    int params = 0;
    for (int i = 0; i < an->net->n; ++i) params += an->net->layers[i].update != NULL;
    if (o->dynamic)
        fprintf(out, "amp: %s: %s, dynamic loss scale %.10g (x%g after %ld good steps, x%g on "
                     "overflow%s, within [%.10g, %.10g])",
                an->cfgfile, amp_dtype_name(o->dtype), o->init_scale, o->growth_factor,
                o->growth_interval, o->backoff_factor, o->hysteresis > 1 ? " after hysteresis" : "",
                o->min_scale, o->max_scale);
    else
        fprintf(out, "amp: %s: %s, static loss scale %g", an->cfgfile, amp_dtype_name(o->dtype),
                o->init_scale);
    fprintf(out, "; %d layers with parameters; layer precision:\n", params);
    amp_policy_print(an, out);
    amp_plan_print(an, out);
    if (an->comm)
        fprintf(out, "amp:   data-parallel: process %d of %d; every step's gradients and batch-norm "
                     "statistics summed over the processes%s\n",
                an->comm->rank, an->comm->size,
                an->ops->average_statistics ? " on the devices" : "");
    if (an->ops->describe) an->ops->describe(an, out);
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
    if (amp_net_attach(an, s, amp_backend_for(net), err, errlen) != AMP_OK) {
        an->scaler = s;
        amp_net_free(an);
        net->hook_data = NULL;
        return 1;
    }
    amp_describe(an, stderr);
    return 0;
}

/* The state file for weights identified as id (as they are on disk now;
 * unbound when there is no file yet: such a state loads beside any weights). */
static amp_status save_state(amp_net *an, const char *weights, const amp_weights_id *id,
                             char *err, size_t errlen)
{
    amp_net_sync(an, 1); /* the scale may live on a device */
    amp_state_extra *x = malloc(sizeof *x);
    AMP_RETURN_ERROR_IF(!x, AMP_ERR_NOMEM, err, errlen, "%s.amp: out of memory", weights);
    amp_fallback_save(an, x);
    const amp_status st =
        amp_state_file_write(weights, an->scaler->opt.dtype, &an->scaler->state, id, x, err,
                             errlen);
    free(x);
    return st;
}

amp_status amp_save_state(const network *net, const char *weights, char *err, size_t errlen)
{
    amp_net *an = amp_net_of(net);
    AMP_RETURN_ERROR_IF(!an || !weights, AMP_ERR_INVALID, err, errlen, "amp_save_state: %s",
                        an ? "NULL path" : "AMP is not attached");
    amp_weights_id id;
    AMP_FORWARD_IF_ERROR(amp_weights_identify(weights, &id, err, errlen));
    return save_state(an, weights, &id, err, errlen);
}

/* amp_load_state; *stale set when a state file was there but belongs to
 * other weights (the scaler then starts afresh); *x what the file keeps of
 * fallbacks (zeros when none is resumed). */
static amp_status load_state(network *net, const char *weights, int *found, int *stale,
                             amp_state_extra *x, char *err, size_t errlen)
{
    memset(x, 0, sizeof *x);
    amp_net *an = amp_net_of(net);
    *found = *stale = 0;
    AMP_RETURN_ERROR_IF(!an || !weights, AMP_ERR_INVALID, err, errlen, "amp_load_state: %s",
                        an ? "NULL path" : "AMP is not attached");
    /* Settle a device's last step first: its outcome still in flight would
     * otherwise land after the loaded state and overwrite it. */
    amp_net_sync(an, 1);
    amp_dtype dtype;
    amp_scale_state st;
    amp_weights_id saved_with;
    amp_status r = amp_state_file_read(weights, &dtype, &st, &saved_with, x, found, err, errlen);
    if (r != AMP_OK || !*found) return r;
    if (dtype != an->scaler->opt.dtype) {
        *found = 0;
        AMP_RETURN_ERROR(AMP_ERR_FORMAT, err, errlen,
                         "%s.amp: the scaler state was saved for amp_dtype=%s but %s says %s; "
                         "delete the file to start with a fresh scaler",
                         weights, amp_dtype_name(dtype), an->cfgfile,
                         amp_dtype_name(an->scaler->opt.dtype));
    }
    if (saved_with.bound) {
        amp_weights_id now;
        AMP_FORWARD_IF_ERROR(amp_weights_identify(weights, &now, err, errlen));
        if (!amp_weights_same(&saved_with, &now)) {
            char was[96], is[96];
            amp_weights_describe(&saved_with, was, sizeof was);
            amp_weights_describe(&now, is, sizeof is);
            *found = 0;
            *stale = 1;
            /* The weights are good; only the scale history is lost. */
            amp_scale_state_init(&an->scaler->state, &an->scaler->params,
                                 an->scaler->opt.init_scale);
            if (an->ops->push_state) an->ops->push_state(an);
            memset(x, 0, sizeof *x);
            fprintf(stderr,
                    "amp: %s.amp belongs to other weights (saved with %s; %s has %s), as a crash "
                    "between saving the weights and their state leaves it: starting with a fresh "
                    "scaler from %s (scale %g); the next save writes a matching state file\n",
                    weights, was, weights, is, an->cfgfile[0] ? an->cfgfile : "the cfg",
                    an->scaler->state.scale);
            return AMP_OK;
        }
    }
    amp_scale_state_fit(&st, &an->scaler->opt);
    an->scaler->state = st;
    if (an->ops->push_state) an->ops->push_state(an);
    return AMP_OK;
}

/* The fallbacks a state file keeps, after load_state: a data-parallel
 * launch takes rank 0's, so that every process runs the same layers in
 * float32. */
static amp_status resume_fallbacks(amp_net *an, const char *weights, amp_state_extra *x,
                                   char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(an->comm && an->comm->bcast(x, sizeof *x, 0) != 0, AMP_ERR_INVALID, err,
                        errlen, "amp: %s: rank %d: the state file's fallbacks could not be "
                        "shared from rank 0 (MPI failed)", an->cfgfile, an->comm->rank);
    char from[AMP_MSG_LEN];
    snprintf(from, sizeof from, "%s.amp", weights);
    const int kept = amp_fallback_resume(an, x, from);
    AMP_FORWARD_IF_ERROR(amp_net_restructure(an, err, errlen));
    if (kept)
        fprintf(stderr, "amp: %d layer%s run%s in float32 as in the run that saved %s "
                        "(amp_fallback)\n",
                kept, kept == 1 ? "" : "s", kept == 1 ? "s" : "", from);
    return AMP_OK;
}

amp_status amp_load_state(network *net, const char *weights, int *found, char *err,
                          size_t errlen)
{
    int dummy, stale;
    amp_state_extra *x = malloc(sizeof *x);
    AMP_RETURN_ERROR_IF(!x, AMP_ERR_NOMEM, err, errlen, "amp_load_state: out of memory");
    amp_status st = load_state(net, weights, found ? found : &dummy, &stale, x, err, errlen);
    if (st == AMP_OK && amp_net_of(net)) st = resume_fallbacks(amp_net_of(net), weights, x, err, errlen);
    free(x);
    return st;
}

/* Every save is read back once: its values checked (a non-finite one said
 * by layer and array, with or without AMP) and, with AMP, its identity bound
 * into the state file. */
static void on_weights_saved(void *ctx, network *net, const char *filename)
{
    char err[AMP_MSG_LEN];
    (void)ctx;
    amp_net *an = amp_net_of(net);
    amp_weights_id id;
    if (amp_check_saved(an, net, filename, &id) == AMP_OK && an &&
        save_state(an, filename, &id, err, sizeof err) != AMP_OK)
        fprintf(stderr, "amp: warning: %s (the weights themselves were saved)\n", err);
}

static int on_weights_loaded(void *ctx, network *net, const char *filename, char *err,
                             size_t errlen)
{
    int found = 0, stale = 0;
    (void)ctx;
    amp_net *an = amp_net_of(net);
    if (!an) return 0;
    an->weights_version += 1; /* half weight copies are stale */
    amp_state_extra *x = malloc(sizeof *x);
    if (!x) {
        amp_errorf(err, errlen, "amp: %s.amp: out of memory", filename);
        return 1;
    }
    /* Data-parallel: rank 0's weights, scaler state and fallbacks are every
     * process's, whatever file each process found. */
    const int bad = load_state(net, filename, &found, &stale, x, err, errlen) != AMP_OK ||
                    (an->comm && amp_dist_share(an, err, errlen) != AMP_OK) ||
                    resume_fallbacks(an, filename, x, err, errlen) != AMP_OK;
    free(x);
    if (bad) return 1;
    if (stale) return 0; /* said */
    unsigned long long steps, skips;
    amp_steps_counted(&an->scaler->state, an->forward_skips, an->loss_skips, &steps, &skips);
    if (found)
        fprintf(stderr, "amp: resumed the scaler from %s.amp: scale %g, %llu steps, %llu skipped\n",
                filename, an->scaler->state.scale, steps, skips);
    else
        fprintf(stderr, "amp: no %s.amp: starting with a fresh scaler (scale %g)\n", filename,
                an->scaler->state.scale);
    return 0;
}

static void on_network_freed(void *ctx, network *net)
{
    (void)ctx;
    amp_net_free(net->hook_data);
}

/* Patch 0015: darknet made every layer's arrays again at a new size (random=1):
 * the backend stores the plan's half tensors again. */
static void on_network_resized(void *ctx, network *net)
{
    (void)ctx;
    amp_net *an = amp_net_of(net);
    if (!an) return;
    char err[AMP_MSG_LEN];
    const amp_status st = amp_net_resized(an, err, sizeof err);
    if (st != AMP_OK) amp_net_fail(an, st, "%s", err);
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
    amp_net_sync(an, 0); /* no wait: the line may show the step before */
    /* every skipped step, whatever the reason (amp_step_settled) */
    unsigned long long steps, skips;
    amp_steps_counted(&an->scaler->state, an->forward_skips, an->loss_skips, &steps, &skips);
    snprintf(status, n, ", scale %g, %llu skipped", an->scaler->state.scale, skips);
    return 0;
}

/* The end of a run where more than half of the steps were skipped: one line
 * naming the main cause and what to do. */
static void say_mostly_skipped(const amp_net *an, unsigned long long steps,
                               unsigned long long grads, unsigned long long fwd,
                               unsigned long long loss)
{
    if (2 * (grads + fwd + loss) <= steps || steps < 2) return;
    const amp_scaler *s = an->scaler;
    if (fwd >= grads && fwd >= loss)
        fprintf(stderr, "amp: most steps were skipped (%llu of %llu), most for a half layer's "
                        "forward overflow (%s): run that layer in float32 (amp=0 in its section of "
                        "the cfg) or train with amp_dtype=bfloat16\n",
                grads + fwd + loss, steps, an->bad[0] ? an->bad : "see the skip lines");
    else if (loss >= grads)
        fprintf(stderr, "amp: most steps were skipped (%llu of %llu), most for a non-finite loss "
                        "with every half layer finite: check the training data (labels) and the "
                        "cost layer; mixed precision is not the cause\n",
                grads + fwd + loss, steps);
    else if (s->opt.dynamic && s->state.scale > s->opt.min_scale)
        /* the scale never reached its floor: the backoff of a run's first steps */
        fprintf(stderr, "amp: most steps were skipped (%llu of %llu), most for a gradient "
                        "overflow while the dynamic loss scale backed off from amp_init_scale %g "
                        "to %g: the first steps of a %s run find the scale, a large share of a run "
                        "this short; a longer run skips a smaller share (a lower amp_init_scale, "
                        "fewer)\n",
                grads + fwd + loss, steps, s->opt.init_scale, s->state.scale,
                amp_dtype_name(s->opt.dtype));
    else
        fprintf(stderr, "amp: most steps were skipped (%llu of %llu), most for a gradient "
                        "overflow (the loss scale ended at %g, amp_min_scale %g): the gradients "
                        "overflow %s even at small scales; train with amp_dtype=bfloat16, or give "
                        "the layer the skip lines name amp=0\n",
                grads + fwd + loss, steps, s->state.scale, s->opt.min_scale,
                amp_dtype_name(s->opt.dtype));
}

static void on_train_done(void *ctx, network *net)
{
    (void)ctx;
    amp_net *an = amp_net_of(net);
    if (!an) return;
    amp_net_sync(an, 1);
    const amp_scale_state *st = &an->scaler->state;
    const unsigned long long other = an->forward_skips + an->loss_skips;
    unsigned long long steps, skips;
    amp_steps_counted(st, an->forward_skips, an->loss_skips, &steps, &skips);
    fprintf(stderr, "amp: training done: %llu steps, %llu skipped (%.2f%%), final loss scale %g\n",
            steps, skips, steps ? 100.0 * skips / steps : 0.0, st->scale);
    if (other)
        fprintf(stderr, "amp: skipped: %llu for a gradient overflow, %llu for a half layer's "
                        "forward overflow, %llu for a non-finite loss\n",
                st->skips, an->forward_skips, an->loss_skips);
    say_mostly_skipped(an, steps, st->skips, an->forward_skips, an->loss_skips);
    if (an->nonfinite_saves)
        fprintf(stderr, "amp: warning: %lu weights file%s saved with non-finite values in this "
                        "run, the last %s\n",
                an->nonfinite_saves, an->nonfinite_saves == 1 ? " was" : "s were",
                an->nonfinite_last);
    amp_fallback_report(an, stderr);
    if (an->comm)
        fprintf(stderr, "amp: data-parallel, rank %d of %d: summing the gradients over the "
                        "processes took %.3f s in all, %.2f ms a step\n",
                an->comm->rank, an->comm->size, an->dist_reduce_s,
                st->steps ? 1e3 * an->dist_reduce_s / (double)st->steps : 0.0);
    if (an->env.profile == 1 && (an->ops->host_timing || an->ops->prof_begin)) {
        amp_profile_print(an, stderr);
        an->env.profile = 2; /* printed */
    }
}

/* Patch 0014: the data-parallel launch this process is part of. */
static void on_train_world(void *ctx, int *rank, int *size)
{
    (void)ctx;
    const amp_comm *c = NULL;
    char err[AMP_MSG_LEN];
    if (amp_dist_get(&c, err, sizeof err) == AMP_OK && c) {
        *rank = c->rank;
        *size = c->size;
    }
}

/* Patch 0014: v's mean over the processes of a data-parallel launch. */
static float on_train_mean(void *ctx, float v)
{
    (void)ctx;
    const amp_comm *c = NULL;
    char err[AMP_MSG_LEN];
    double d = v;
    if (amp_dist_get(&c, err, sizeof err) != AMP_OK || !c || c->sum_f64(&d, 1) != 0) return v;
    return (float)(d / c->size);
}

/* Patch 0021: the program's commands and options (`darknet-amp amp show FILE`, -amp, -map). */
static int on_command(void *ctx, int *argc, char **argv, int *status)
{
    (void)ctx;
    return program && program->command ? program->command(argc, argv, status) : 0;
}

static void on_train_progress(void *ctx, network *net, const darknet_train_progress *p)
{
    (void)ctx;
    if (program && program->progress) program->progress(net, p);
}

/* [net] ema_alpha's average moves only with a step taken (weights_ema.h). */
static int on_step_skipped(void *ctx, network *net)
{
    (void)ctx;
    return amp_step_skipped(NULL, net) == 1;
}

/* The average replaced the weights: half copies are stale. */
static void on_weights_changed(void *ctx, network *net)
{
    (void)ctx;
    amp_net *an = amp_net_of(net);
    if (an) an->weights_version += 1;
}

static const darknet_hooks amp_hooks = {
    .net_options = on_net_options,
    .layer_options = on_layer_options,
    .network_parsed = on_network_parsed,
    .weights_saved = on_weights_saved,
    .weights_loaded = on_weights_loaded,
    .network_freed = on_network_freed,
    .train_iteration = on_train_iteration,
    .train_done = on_train_done,
    .train_world = on_train_world,
    .train_mean = on_train_mean,
    .network_resized = on_network_resized,
    .command = on_command,
    .train_progress = on_train_progress,
    .step_skipped = on_step_skipped,
    .weights_changed = on_weights_changed,
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

/* ---- networks built by a program ---- */

/* Attaches AMP with s as the scaler; owned: the attachment frees s and steps
 * it inside darknet's update_network (a cfg's amp=1 does the same). */
static amp_status attach_with(network *net, amp_scaler *s, int owned, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(!net, AMP_ERR_INVALID, err, errlen, "amp_attach: NULL network");
    AMP_RETURN_ERROR_IF(net->hook_data, AMP_ERR_STATE, err, errlen,
                        "amp_attach: the network already has AMP attached");
    /* The hooks free the attachment with the network and keep the state file. */
    AMP_RETURN_ERROR_IF(!darknet_get_hooks() && amp_register() != AMP_OK, AMP_ERR_STATE, err,
                        errlen, "amp_attach: cannot register darknet's hooks");
    amp_net *an = amp_net_new(net);
    if (!an) {
        if (owned) amp_scaler_free(s);
        AMP_RETURN_ERROR_IF(1, AMP_ERR_NOMEM, err, errlen, "amp_attach: out of memory");
    }
    an->enabled = 1;
    an->owns_scaler = owned;
    amp_status st = amp_net_attach(an, s, amp_backend_for(net), err, errlen);
    if (st != AMP_OK) {
        an->scaler = owned ? s : NULL; /* an owned scaler goes with it */
        amp_net_free(an);
        net->hook_data = NULL;
    }
    return st;
}

amp_status amp_attach(network *net, amp_scaler *s, char *err, size_t errlen)
{
    if (s) return attach_with(net, s, 0, err, errlen);
    amp_options o;
    amp_options_init(&o, AMP_DTYPE_FLOAT32);
    return amp_attach_options(net, &o, err, errlen);
}

amp_status amp_attach_options(network *net, const amp_options *o, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(!o, AMP_ERR_INVALID, err, errlen, "amp_attach_options: NULL options");
    amp_scaler *s = NULL;
    AMP_FORWARD_IF_ERROR(amp_scaler_create_options(o, &s, err, errlen));
    return attach_with(net, s, 1, err, errlen);
}

amp_status amp_attach_config(network *net, const amp_config *c, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(!c, AMP_ERR_INVALID, err, errlen, "amp_attach_config: NULL config");
    return amp_attach_options(net, amp_config_options(c), err, errlen);
}

void amp_detach(network *net)
{
    amp_net_free(net ? net->hook_data : NULL);
}

amp_scaler *amp_network_scaler(const network *net)
{
    amp_net *an = amp_net_of(net);
    return an ? an->scaler : NULL;
}
