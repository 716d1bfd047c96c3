/* darknet-amp: automatic mixed precision for darknet.
 *
 * Public C API. No CUDA types: CPU-only programs can include it. Every name
 * starts with amp_ / AMP_. Functions report errors by returning an amp_status
 * and, where they take one, writing a message into err (errlen bytes, always
 * NUL-terminated); none of them exits. Free functions accept NULL.
 */
#ifndef DARKNET_AMP_H
#define DARKNET_AMP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the library's exported functions: libdarknet_amp.so is built with
 * hidden visibility and exports these alone. */
#if defined(__GNUC__)
#define AMP_API __attribute__((visibility("default")))
#else
#define AMP_API
#endif

#define DARKNET_AMP_VERSION_MAJOR 0
#define DARKNET_AMP_VERSION_MINOR 2
#define DARKNET_AMP_VERSION_PATCH 0

struct network;

typedef enum amp_dtype {
    AMP_DTYPE_FLOAT32 = 0, /* the AMP machinery with no precision change */
    AMP_DTYPE_FLOAT16 = 1, /* IEEE binary16 */
    AMP_DTYPE_BFLOAT16 = 2
} amp_dtype;

typedef enum amp_status {
    AMP_OK = 0,
    AMP_ERR_INVALID = 1,   /* a bad argument or cfg value */
    AMP_ERR_STATE = 2,     /* a call out of order (e.g. unscale twice before step) */
    AMP_ERR_IO = 3,        /* a file could not be read or written */
    AMP_ERR_FORMAT = 4,    /* a state file is corrupt, truncated or of another version */
    AMP_ERR_NONFINITE = 5, /* amp_max_skips consecutive steps were skipped */
    AMP_ERR_NOMEM = 6,
    AMP_ERR_DEVICE = 7     /* a CUDA, cuBLAS, cuDNN or oneDNN call failed, or the GPU cannot
                              run the dtype */
} amp_status;

/* The scaler's settings, set by the names of the [net] cfg keys of docs/cfg.md
 * (amp_dtype, loss_scale, amp_init_scale, amp_growth_factor, ...), with the
 * values, checks and messages a cfg gets. An opaque object, as zstd's
 * ZSTD_CCtx_setParameter: a key added in a later version changes no layout
 * a program was built with.
 *   amp_config *c;
 *   if (amp_config_create(AMP_DTYPE_FLOAT16, &c, err, n) ||
 *       amp_config_set(c, "amp_growth_interval", "1000", err, n)) ...
 * create: the dtype's defaults (PyTorch GradScaler's 65536, x2, x0.5, 2000,
 * hysteresis 1, scale in [1, 2^24], no skip limit; bfloat16: a static scale
 * of 1). set: one key as a cfg line would give it; a key given again
 * replaces its value; a value, or a combination with the keys set before,
 * that a cfg would refuse is refused with the same message and leaves c as it
 * was. amp (the cfg's on/off switch) is not a setting. */
typedef struct amp_config amp_config;
AMP_API amp_status amp_config_create(amp_dtype dtype, amp_config **out, char *err, size_t errlen);
AMP_API amp_status amp_config_set(amp_config *c, const char *key, const char *value, char *err,
                                  size_t errlen);
AMP_API void amp_config_free(amp_config *c);

AMP_API const char *amp_version(void);
AMP_API const char *amp_dtype_name(amp_dtype dtype);
AMP_API const char *amp_status_name(amp_status status);

/* Makes darknet attach AMP to every network whose cfg says [net] amp=1 (and
 * validate the AMP keys of every cfg). The fork's darknet program does this at
 * start-up; other programs call it once. Idempotent. Detach every network
 * before amp_unregister, or their attachments are not freed with them. */
AMP_API amp_status amp_register(void);
AMP_API void amp_unregister(void);

/* ---- Explicit scaler, for custom loops and several networks (GradScaler) ----
 *
 * One scaler may serve several networks. Per iteration, for each network:
 * forward + backward as usual (train_network_datum, or forward_network +
 * backward_network), then amp_unscale (optional) and amp_step; then one
 * amp_update for all of them. A network attached through its cfg with no
 * explicit scaler does all three by itself inside darknet's update_network.
 */
typedef struct amp_scaler amp_scaler;

/* A scaler of c's settings (NULL: float32's defaults); c may be freed after. */
AMP_API amp_status amp_scaler_create(const amp_config *c, amp_scaler **out, char *err,
                                     size_t errlen);
AMP_API void amp_scaler_free(amp_scaler *s);
AMP_API float amp_scaler_get_scale(const amp_scaler *s);
/* Totals since creation (or since the state was loaded). */
AMP_API unsigned long long amp_scaler_steps(const amp_scaler *s);
AMP_API unsigned long long amp_scaler_skips(const amp_scaler *s);

/* Attaches AMP to a built network with s as its scaler (s must outlive the
 * attachment; NULL: a scaler of its own with float32's defaults, updated
 * inside darknet's update_network). With an explicit
 * scaler, darknet's own update_network still takes or skips the step but
 * leaves the scale update to amp_update. Registers the hooks (amp_register)
 * if none are, so that free_network frees the attachment and save_weights /
 * load_weights keep the <weights>.amp sidecar.
 * AMP scales the deltas of cost layers (l.cost != NULL); a gradient a program
 * writes into a delta itself (a custom loss, a GAN generator fed the
 * discriminator's input delta of another scaler) must be multiplied by
 * amp_scaler_get_scale() too. */
AMP_API amp_status amp_attach(struct network *net, amp_scaler *s, char *err, size_t errlen);
/* Attaches AMP with a scaler of its own made from c, stepped inside darknet's
 * update_network as with amp=1 in a cfg: no amp_step or amp_update to call.
 * The way to attach on the GPU, where an explicit scaler is refused. */
AMP_API amp_status amp_attach_config(struct network *net, const amp_config *c, char *err,
                                     size_t errlen);
AMP_API void amp_detach(struct network *net);
/* The scaler a network uses, or NULL when AMP is not attached. */
AMP_API amp_scaler *amp_network_scaler(const struct network *net);

/* Checks every parameter gradient of net for inf/NaN and unscales it. A second
 * call before amp_step is AMP_ERR_STATE. */
AMP_API amp_status amp_unscale(amp_scaler *s, struct network *net, char *err, size_t errlen);
/* darknet's update_network(net) if the gradients were finite; otherwise the
 * step is skipped and weights, momentum and t stay as before the batch.
 * Unscales first if amp_unscale was not called. */
AMP_API amp_status amp_step(amp_scaler *s, struct network *net, char *err, size_t errlen);
/* Updates the scale once from the OR of the overflow flags of the networks
 * stepped since the last update. AMP_ERR_STATE when none was stepped;
 * AMP_ERR_NONFINITE when amp_max_skips is reached. */
AMP_API amp_status amp_update(amp_scaler *s, char *err, size_t errlen);
/* 1 when net's last step was skipped, 0 when it ran, -1 when not attached. */
AMP_API int amp_step_skipped(const amp_scaler *s, const struct network *net);

/* Diagnostics: of the nonzero gradient elements that entered net's
 * half-precision layers in the current or last batch, the fraction that
 * rounding to the half type flushed to zero (underflow: what loss scaling is
 * for). 0 without half layers; -1 when AMP is not attached. */
AMP_API double amp_network_flushed(const struct network *net);

/* The scaler state of net, saved next to a weights file as <weights>.amp and
 * loaded from there. darknet's save_weights/load_weights do this by
 * themselves for attached networks. A missing file is AMP_OK with *found = 0. */
AMP_API amp_status amp_save_state(const struct network *net, const char *weights, char *err,
                                  size_t errlen);
AMP_API amp_status amp_load_state(struct network *net, const char *weights, int *found,
                                  char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
