/* The backend contract (backend.h) checked before a network attaches: a
 * table of another version, one without a required member, or one with half
 * of a pair, is refused with the member named (ggml's backends check their
 * interface the same way, at registration). */
#include "backend.h"
#include "step.h"

#define MISSING(member) (!ops->member ? #member : NULL)

amp_status amp_backend_check(const amp_backend_ops *ops, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(!ops, AMP_ERR_INVALID, err, errlen, "amp: no backend");
    const char *who = ops->name ? ops->name : "unnamed";
    AMP_RETURN_ERROR_IF(ops->version != AMP_BACKEND_VERSION, AMP_ERR_INVALID, err, errlen,
                        "amp: the %s backend was written for version %d of the backend "
                        "interface, this core is version %d (plugin/backend.h)",
                        who, ops->version, AMP_BACKEND_VERSION);
    /* every backend's members */
    const char *const always[] = {
        MISSING(name),      MISSING(slots),       MISSING(supports),     MISSING(net_init),
        MISSING(net_free),  MISSING(layer_install), MISSING(layer_free), MISSING(begin_batch),
        MISSING(scale_loss), MISSING(rescale),    MISSING(unscale),      MISSING(end_mid_batch),
        MISSING(poke),      MISSING(poke_delta),
    };
    /* the members that come with another the backend has */
    const char *const paired[] = {
        /* a step is decided on the host (restore) or on the device (decide, step_end) */
        ops->decide ? MISSING(step_end) : MISSING(restore),
        ops->step_end ? MISSING(decide) : NULL,
        ops->activations_release ? MISSING(activations) : NULL,
        ops->prof_begin || ops->prof_end || ops->prof_collect
            ? (MISSING(prof_begin) ? MISSING(prof_begin)
               : MISSING(prof_end) ? MISSING(prof_end) : MISSING(prof_collect))
            : NULL,
        ops->pull ? MISSING(push) : ops->push ? MISSING(pull) : NULL,
    };
    for (size_t i = 0; i < sizeof always / sizeof always[0]; ++i)
        AMP_RETURN_ERROR_IF(always[i], AMP_ERR_INVALID, err, errlen,
                            "amp: the %s backend lacks %s, which backend.h requires", who,
                            always[i]);
    for (size_t i = 0; i < sizeof paired / sizeof paired[0]; ++i)
        AMP_RETURN_ERROR_IF(paired[i], AMP_ERR_INVALID, err, errlen,
                            "amp: the %s backend lacks %s, which backend.h requires (the members "
                            "that come with what it has)",
                            who, paired[i]);
    return AMP_OK;
}
