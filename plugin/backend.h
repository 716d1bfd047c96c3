/* The backend interface: what runs a network's AMP work on a device, as a
 * table of functions (ggml's backends in spirit). The core (step.c) owns the
 * training step's phases, the layer wrappers and every decision it can make
 * on the host; a backend owns the memory the work touches. Two implement it:
 * the CPU (plugin/cpu/backend.c) and CUDA (cuda/backend.c); backends.c is the
 * one place that chooses.
 *
 * Two kinds of step decision:
 * - host-decided (no decide member): unscale() sets an->found_inf and
 *   an->bad_tensor; on a non-finite gradient the core calls restore() and
 *   skips every layer's update; the outcome is settled at once;
 * - device-decided (decide set): the device decides, darknet's updates all
 *   run, step_end() undoes a skipped step on the device and publishes the
 *   outcome, and sync() later brings it to the host and returns it to the
 *   core, which settles it (amp_net_sync). The host never waits for the
 *   decision. A backend never calls up into the step: it returns what the
 *   step needs, and the step decides what follows.
 *
 * What a backend reads and writes of amp_net (its view; build.backend_view
 * holds the backends' sources to it), every other field being the core's own
 * (the phase, the step's bookkeeping, the skip counters, the plan's records):
 * - it reads: net, layers (its own bk and label, the plan's io and
 *   decisions), bk, scaler (the options; the state's scale), env (profile),
 *   comm, cfgfile, tensors, ntensors, nparams, states, nstates,
 *   nstate_elems, weights_version, owns_scaler, error, ops;
 * - it writes, for the step: batch_scale (begin_batch), found_inf and
 *   bad_tensor (a host-decided unscale), loss_bad and loss_element
 *   (scale_loss), prof_steps (a device profile's batches); and, at
 *   attach, plan_off (why it offers the plan no half tensor, for the
 *   start-up table).
 *
 * Every member is required unless marked optional; contract.c checks a
 * table before a network attaches to it (the version, every required
 * member, the members that come in pairs) and refuses one that falls short,
 * naming the member. Members that return nothing report a failure with
 * amp_net_fail(); the training loop stops on it.
 */
#ifndef AMP_BACKEND_H
#define AMP_BACKEND_H

#include "core.h"

/* The layout of this table. A change to a member's meaning or signature, or
 * a new required member, increments it; a backend says which it was written
 * for, and one written for another is refused at attach. */
#define AMP_BACKEND_VERSION 2

struct amp_backend_ops {
    int version;                     /* AMP_BACKEND_VERSION */
    const char *name;                /* "CPU", "CUDA" */
    amp_dtype default_dtype;         /* amp_dtype when the cfg names none */
    int host_timing;                 /* DARKNET_AMP_PROFILE's timers mean something here */

    /* The function-pointer slots of a layer this backend runs. */
    amp_slots (*slots)(layer *l);
    /* A pure query: whether the backend has a half form for layers of kind k
     * (kinds.c) in the half dtype: a half layer of the policy (a GEMM or
     * recurrent kind) the core makes AMP_PRECISION_FALLBACK without asking
     * layer_install when not; a data-movement kind, that the activation plan
     * can carry half tensors through it. 0 for float32 and for the kinds it
     * has nothing for. A layer of a supported kind may still be refused by
     * layer_install for its shape. */
    int (*supports)(const amp_layer_kind *k, amp_dtype dtype);

    /* Per-network state, after the core collected the tensors and before any
     * layer is installed: AMP_OK, or refuses (a shared scaler, a GPU that
     * cannot run the dtype) with why. */
    amp_status (*net_init)(amp_net *an, char *err, size_t errlen);
    /* Frees what net_init and layer_install made (after every layer_free);
     * also after a failed net_init. */
    void (*net_free)(amp_net *an);

    /* Called for every layer at attach, al->precision set by the policy and
     * al->forward/backward/update by the slots: the backend may point
     * forward/backward at its own implementation (a half path), set
     * al->label (what runs it, in the backend's words), install sub-layers, or change al->precision
     * (a half layer it cannot run becomes AMP_PRECISION_FALLBACK, with a line on stderr where that
     * is news). AMP_OK also when the layer stays darknet's. */
    amp_status (*layer_install)(amp_layer *al, layer *l, char *err, size_t errlen);
    /* Frees what layer_install made for al (its sub-layers included). */
    void (*layer_free)(amp_layer *al);
    /* Optional: the activation plan (plan.c), made from the io that
     * layer_install set, carried out: the tensors it stores in half allocated,
     * darknet's float32 arrays of them freed (their pointers NULL, or the half
     * storage), the layers' half forms pointed at them. Called at attach and
     * again after darknet resized the network (resize_network). Without it
     * (or where it fails) every tensor stays darknet's float32. */
    amp_status (*activations)(amp_net *an, char *err, size_t errlen);
    /* Optional, with activations: the plan's half storage given back as
     * darknet's float32 arrays and every layer's half form undone, so that
     * the plan can be made again (a layer fell back). */
    void (*activations_release)(amp_net *an);
    /* Optional: half layer al runs darknet's own float32 code from the next
     * step on (amp_fallback; the plan released before it): the backend's half
     * path and its state freed, al->forward and al->backward darknet's again
     * (al->orig_*), al->io AMP_IO_FLOAT32, al->label NULL. Without it no
     * layer falls back on this backend. */
    amp_status (*layer_fallback)(amp_layer *al, layer *l, char *err, size_t errlen);

    /* The batch start, before the first layer's training forward: every
     * history saved and multiplied by the scaler's scale, every forward state
     * (an->states) saved; an->batch_scale set to the scale (device backends:
     * read on the device, the host's value for messages). */
    void (*begin_batch)(amp_net *an);
    /* A loss layer's delta (its gradient) multiplied by the batch's scale;
     * a delta element not finite before scaling marks the batch's loss as
     * bad (host-decided: an->loss_bad = index + 1 and an->loss_element the
     * first such element, if not yet set; device-decided: a device flag its
     * decide() reads). */
    void (*scale_loss)(amp_net *an, const layer *l, int index);
    /* A backward after amp_unscale: the histories multiplied by the scale again. */
    void (*rescale)(amp_net *an);
    /* Every history multiplied by 1/scale and checked (host-decided: found_inf
     * and bad_tensor set; device-decided: a device flag). */
    void (*unscale)(amp_net *an);
    /* Data-parallel (an->comm): the gradients this batch added, summed over
     * the processes, back on top of the batch-start histories (in the
     * batch's scaled units), before unscale. Nonzero when the exchange
     * failed. Optional: a backend without it refuses multi-process launches. */
    int (*reduce)(amp_net *an);
    /* Data-parallel, backends whose arrays live on a device (optional: NULL
     * where darknet's host arrays are the network's): copy the parameters,
     * histories and batch-norm statistics (stats_only: the statistics) to
     * the host arrays, or back, for dist.c's averages, checks and broadcasts.
     * Nonzero on failure. */
    int (*pull)(amp_net *an, int stats_only);
    int (*push)(amp_net *an, int stats_only);
    /* Host-decided: every history and every forward state back as it was at
     * the batch start. */
    void (*restore)(amp_net *an);
    /* Device-decided only (else NULL): the decision and the scale's update on
     * the device, before darknet's updates run (a step with a non-finite loss,
     * an->loss_bad from the host or the device's own flag, is skipped with
     * the scale left as it is)... */
    void (*decide)(amp_net *an);
    /* ...and after the last of them: undo a skipped step (parameters, Adam
     * moments, histories, forward states), publish the outcome. */
    void (*step_end)(amp_net *an);
    /* Optional: a published outcome brought to the host if it has arrived,
     * or (wait) once it has: 1 with it in *out (the core settles it), 0 when
     * none has (a failure: amp_net_fail, and 0). */
    int (*sync)(amp_net *an, int wait, amp_step_outcome *out);
    /* Optional: the host's scaler state replaced it (a state file was loaded). */
    void (*push_state)(amp_net *an);
    /* Detached mid-batch: the histories multiplied by 1/scale, this batch's
     * gradients kept. */
    void (*end_mid_batch)(amp_net *an);
    /* Sets element i of tensor k's gradient (DARKNET_AMP_INJECT). */
    void (*poke)(amp_net *an, int k, size_t i, float value);
    /* Sets element i of a cost layer's delta, after its forward and before
     * scale_loss (DARKNET_AMP_INJECT's LAYER:delta). */
    void (*poke_delta)(amp_net *an, const layer *l, size_t i, float value);
    /* Optional: of this batch's nonzero gradient elements entering half
     * layers, the fraction that rounding to the half type flushed to zero
     * (amp_network_flushed); without it, 0. */
    double (*flushed)(const amp_net *an);
    /* Optional: the bytes the backend holds beside darknet's arrays, for
     * DARKNET_AMP_PROFILE's memory line: per-parameter copies (the saved
     * histories, half weights) and workspaces (buffers the layers share, a
     * library's). */
    void (*memory)(const amp_net *an, double *copies, double *workspaces);
    /* Optional: a training forward left the loss of cost layer `last` not
     * finite. The first layer, in forward order up to last, whose output as
     * the backend stores it (first its convolution's output before
     * batch-norm, where that is kept) holds an inf or NaN, that tensor's scan
     * in *scan, and in *params_finite whether the layer's own parameters are
     * finite; -1 when every output is finite. Only after a non-finite loss,
     * never on a healthy step: a device backend may wait for the device. */
    int (*nonfinite_output)(amp_net *an, int last, amp_overflow_scan *scan, int *params_finite);
    /* Optional (amp_probe, on the first batch): runs half layer al's forward
     * as its wrapper would, after darknet's float32 forward of the layer on
     * the same input into scratch (the layer's arrays, batch-norm statistics
     * included, untouched by it); *rel the relative 2-norm difference of the
     * outputs, inf where the half output is not finite and float32's is, NaN
     * where float32's is not finite either. 0, or -1 (the forward run, no
     * comparison) for a layer it cannot probe. */
    int (*probe_forward)(amp_layer *al, layer l, network net, double *rel);
    /* Optional, data-parallel: every batch-norm statistic (amp_state_is_statistic)
     * replaced by its mean over the processes where the backend keeps it,
     * packed and summed in one exchange, with no blocking call; 0, or nonzero
     * on failure. Without it the core reads them (pull), sums them packed in
     * one call of the communicator and writes them back (push). */
    int (*average_statistics)(amp_net *an);
    /* Optional, where the work runs asynchronously (a GPU): DARKNET_AMP_PROFILE's
     * intervals on the device's clock. prof_begin marks a start in the
     * device's stream and returns a handle (-1: not timed), prof_end its
     * end; prof_collect waits for the marks so far and hands each finished
     * interval to amp_prof_add, once per batch (at the next batch's first
     * forward) and before the profile prints. Without them, the host's clock
     * (host_timing). */
    int (*prof_begin)(amp_net *an, amp_layer *al, amp_prof_what what);
    void (*prof_end)(amp_net *an, int handle);
    void (*prof_collect)(amp_net *an);
    /* Optional: start-up warnings (a CPU without bfloat16 instructions). */
    void (*describe)(const amp_net *an, FILE *out);
};

#endif
