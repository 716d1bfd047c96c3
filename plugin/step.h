/* The training step's tier (docs/architecture.md, "Layers"): attach and
 * detach, the step's outcome settled, the fallbacks' rules and their
 * application, the probe. The hooks and the tests include it; a backend does
 * not: it returns what the step needs (backend.h) and never calls up. */
#ifndef AMP_STEP_H
#define AMP_STEP_H

#include "core.h"

/* ---- contract.c ---- */
/* AMP_OK, or why the backend's table breaks backend.h's contract (another
 * version, a required member missing, half of a pair). */
amp_status amp_backend_check(const amp_backend_ops *ops, char *err, size_t errlen);

/* ---- step.c ---- */
/* Attaches an (its layer records, half_allowed, cfgfile set) with scaler s,
 * run by the backend ops. On failure nothing stays installed. */
amp_status amp_net_attach(amp_net *an, amp_scaler *s, const amp_backend_ops *ops, char *err,
                          size_t errlen);
/* darknet's function-pointer slots of every layer pointed at the wrappers
 * and the backends' forms (al->forward, ...), at attach and again after a
 * layer fell back or the probe ended; DARKNET_AMP_PROFILE's timers kept. */
void amp_point_slots(amp_net *an);
/* Detaches (darknet's pointers back; a batch in progress handed back
 * unscaled) and frees an and everything it owns. NULL is fine. */
void amp_net_free(amp_net *an);
/* The backend's view of the step brought to the host (device backends) and
 * settled; wait: block until it has arrived. */
void amp_net_sync(amp_net *an, int wait);
/* The network's structure changed where it is due, between steps: every
 * fallback due applied (fallback.c) and the slots pointed again. */
amp_status amp_net_restructure(amp_net *an, char *err, size_t errlen);
/* darknet's resize made every array again in float32 (random=1): the
 * backend stores the plan's half tensors again, the plan made again first
 * where the new shapes change it (a route whose inputs no longer match
 * leaves the region, and comes back when they do). */
amp_status amp_net_resized(amp_net *an, char *err, size_t errlen);

/* ---- settle.c: what a step's outcome means ---- */
/* Applies an outcome: the skip message, the pending flags of a shared scaler,
 * the scale's update (here, or as the device did it) and its message,
 * amp_max_skips as the network's error, and the fallbacks it makes due. The
 * one place these are decided; it changes no structure (step.c applies the
 * fallbacks at the step's end). */
void amp_step_settled(amp_net *an, const amp_step_outcome *o);

/* ---- fallback.c: amp_fallback's rules and their application (docs/design.md) ---- */
/* Whether layer k stores values it computed in the half dtype: a half
 * layer, or a data-movement layer running its half form (plan.c's region),
 * whose sum (a shortcut's) can overflow it. */
int amp_layer_stores_half(const amp_layer *al);
/* Whether layer k could fall back (amp_fallback on, a backend that can): a
 * half layer to darknet's float32 layer, a half form out of the region. */
int amp_fallback_possible(const amp_net *an, int k);
/* k due to fall back for why, its line said (because): 1, or 0 where it cannot. */
int amp_fallback_due(amp_net *an, int k, amp_fallback_why why, const char *because);
/* The rules, as a step is settled: a step skipped for layer k's forward
 * overflow makes k due (1 when it did) ... */
int amp_fallback_due_forward(amp_net *an, int k);
/* ... any other step (skipped, bad_tensor the first non-finite gradient, at
 * batch_scale; or taken) feeds the gradient rule. */
void amp_fallback_due_gradient(amp_net *an, int skipped, int bad_tensor, float batch_scale);
/* Every layer due falls back: the backend's layer_fallback, the activation
 * plan made again (once). The slots are not pointed again: the caller's
 * (amp_net_restructure). Only between steps. */
amp_status amp_fallback_apply(amp_net *an, char *err, size_t errlen);
/* What the state file keeps of fallbacks: the skip counts and the layers. */
struct amp_state_extra;
void amp_fallback_save(const amp_net *an, struct amp_state_extra *x);
/* Resumes them from a state file's (from: its name, for the lines said):
 * the counts, and each listed layer that runs in half now made due (not with
 * amp_fallback=0; a layer the network lacks is said and ignored); how many. */
int amp_fallback_resume(amp_net *an, const struct amp_state_extra *x, const char *from);
/* The layers that fell back, and the precision table as the run ends. */
void amp_fallback_report(const amp_net *an, FILE *out);

/* ---- probe.c: amp_probe ---- */
/* Half layer al's forward of the first batch, with its output compared to
 * float32's (the backend's probe_forward) ... */
void amp_probe_forward(amp_net *an, amp_layer *al, layer l, network net);
/* ... and when that step has ended: the report (the worst layers against the
 * dtype's bound), the layers beyond it due to fall back (with amp_fallback; a
 * data-parallel launch takes every process's); step.c then applies them and
 * points the slots without the probe. */
void amp_probe_end(amp_net *an);
/* amp_probe's bound on a half layer's output's relative 2-norm difference. */
double amp_probe_bound(amp_dtype dtype);

#endif
