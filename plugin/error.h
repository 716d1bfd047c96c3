/* The plugin's one error convention, zstd's in spirit.
 *
 * Every internal function that can fail returns an amp_status (AMP_OK is 0)
 * and writes one message into the caller's buffer (err, errlen: always
 * NUL-terminated, AMP_MSG_LEN bytes are always enough); a function that
 * cannot fail returns void or a value. The macros below are the only ways a
 * failure travels:
 *
 *   AMP_RETURN_ERROR_IF(cond, status, err, errlen, fmt, ...)
 *   AMP_RETURN_ERROR(status, err, errlen, fmt, ...)
 *       a failure found here: the message, then return status;
 *   AMP_FORWARD_IF_ERROR(expr)
 *       a failure found below (its message already written): return it;
 *   AMP_NET_RETURN_IF_ERROR(an, expr, err)
 *       the same inside darknet's void layer callbacks, which cannot return
 *       a status: the message becomes the network's stored error
 *       (amp_net_fail), which the training loop reports and stops on.
 */
#ifndef AMP_ERROR_H
#define AMP_ERROR_H

#include "darknet_amp.h" /* amp_status */

#include <stddef.h>

/* Enough for any message of the plugin (a cfg path, a section, a key and why). */
#define AMP_MSG_LEN 512

#if defined(__GNUC__)
#define AMP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define AMP_PRINTF(f, a)
#endif

/* snprintf into err (NULL or errlen 0: nothing); returns the length it wanted. */
int amp_errorf(char *err, size_t errlen, const char *fmt, ...) AMP_PRINTF(3, 4);

/* Text from outside (a cfg value, an environment variable) as a message
 * quotes it: printable ASCII as is, any other byte as \xNN, cut after max
 * characters with "...", so that the message stays one readable line that
 * fits AMP_MSG_LEN. Writes out (NUL-terminated; s NULL reads as "") and
 * returns it. */
const char *amp_show(char *out, size_t size, const char *s, size_t max);

#define AMP_RETURN_ERROR_IF(cond, status, err, errlen, ...)                                       \
    do {                                                                                          \
        if (cond) {                                                                               \
            amp_errorf((err), (errlen), __VA_ARGS__);                                             \
            return (status);                                                                      \
        }                                                                                         \
    } while (0)

#define AMP_RETURN_ERROR(status, err, errlen, ...)                                                \
    do {                                                                                          \
        amp_errorf((err), (errlen), __VA_ARGS__);                                                 \
        return (status);                                                                          \
    } while (0)

#define AMP_FORWARD_IF_ERROR(expr)                                                                \
    do {                                                                                          \
        const amp_status amp_st_ = (expr);                                                        \
        if (amp_st_ != AMP_OK) return amp_st_;                                                    \
    } while (0)

struct amp_net;
/* Keeps the first failure of a network's training step (status and message,
 * printed once on stderr); later ones are dropped. */
void amp_net_fail(struct amp_net *an, amp_status status, const char *fmt, ...) AMP_PRINTF(3, 4);

#define AMP_NET_RETURN_IF_ERROR(an, expr, err)                                                    \
    do {                                                                                          \
        const amp_status amp_st_ = (expr);                                                        \
        if (amp_st_ != AMP_OK) {                                                                  \
            amp_net_fail((an), amp_st_, "%s", (err));                                             \
            return;                                                                               \
        }                                                                                         \
    } while (0)

#endif
