/* The scaler's state sidecar, <weights>.amp: saved next to a darknet weights
 * file so that training resumes with the loss scale and counters it stopped
 * with. The binary layout is described at the top of state_file.c and in
 * docs/state-file.md. Private to the plugin.
 */
#ifndef AMP_STATE_FILE_H
#define AMP_STATE_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "darknet_amp.h" /* amp_status, amp_dtype */
#include "math/scale_rule.h"  /* amp_scale_state */

#define AMP_STATE_FORMAT_VERSION 3
/* The most layers a state file lists as fallen back to float32. */
#define AMP_STATE_MAX_FALLBACK 1024

/* What identifies a weights file: darknet's seen from its header, its size
 * and the CRC-32 of its bytes. A state file records its weights' identity;
 * bound 0 means it names none (a version 1 file, or a state saved where no
 * weights file was). */
typedef struct amp_weights_id {
    int bound;
    unsigned long long seen;
    unsigned long long size;
    unsigned long crc;
} amp_weights_id;

/* Identifies the weights file at path: AMP_OK with id->bound 1; a missing
 * file is AMP_OK with id->bound 0; a file that cannot be read, or is shorter
 * than darknet's header, is AMP_ERR_IO or AMP_ERR_FORMAT naming it. */
amp_status amp_weights_identify(const char *weights, amp_weights_id *id, char *err, size_t errlen);

/* The float32 values after a weights file's header: how many, how many are
 * not finite (an inf or a NaN), and the first such one's index. */
typedef struct amp_weights_values {
    unsigned long long values, nonfinite, first_nonfinite;
} amp_weights_values;

/* amp_weights_identify, and in the same read of the file its values
 * counted into *v (zeros when the file is missing). */
amp_status amp_weights_read(const char *weights, amp_weights_id *id, amp_weights_values *v,
                            char *err, size_t errlen);

/* 1 when two identities name the same weights (both bound, all equal). */
int amp_weights_same(const amp_weights_id *a, const amp_weights_id *b);

/* "seen 1200, 8712628 bytes, CRC-32 0x1a2b3c4d" (or "no weights") into out. */
void amp_weights_describe(const amp_weights_id *id, char *out, size_t size);

/* What version 3 adds to the scaler's state: the steps skipped for other
 * reasons than a gradient overflow, and the layers amp_fallback put back to
 * float32 (layer in increasing order, why 1 for a forward overflow, 2 for a
 * gradient overflow, 3 for amp_probe: amp_fallback_why's values). Zeros for
 * versions 1 and 2. */
typedef struct amp_state_extra {
    unsigned long long forward_skips; /* a half layer's forward pass overflowed */
    unsigned long long loss_skips;    /* a non-finite loss with every half output finite */
    int nfallback;
    struct {
        int layer;
        int why;
    } fallback[AMP_STATE_MAX_FALLBACK];
} amp_state_extra;

/* A run's steps, and of them the skipped ones, as its progress line, its
 * summary and `amp show` count them: the scaler's state counts the steps
 * that went through the scale's update (taken, and skipped for a gradient
 * overflow); the steps skipped with the scale left alone (a half layer's
 * forward overflow, a non-finite loss) come besides. */
static inline void amp_steps_counted(const amp_scale_state *s, unsigned long long forward_skips,
                                     unsigned long long loss_skips, unsigned long long *steps,
                                     unsigned long long *skips)
{
    *steps = s->steps + forward_skips + loss_skips;
    *skips = s->skips + forward_skips + loss_skips;
}

/* Writes <weights>.amp (version 3, bound to the weights id names; id NULL or
 * unbound: bound to none; x NULL: no other skips, no fallbacks) atomically: a
 * temporary file in the same directory, written, flushed, fsync'ed, then
 * rename()d over the old one (and the directory fsync'ed), so a crash at any
 * point leaves either the old or the new file, whole. A state the reader
 * would refuse (scale not finite or <= 0, unknown dtype, negative counters,
 * skips > steps, a fallback list out of order, too long or with an unknown
 * why) is AMP_ERR_INVALID and nothing is written; a file that cannot be
 * written is AMP_ERR_IO.
 *
 * Test aid: with DARKNET_AMP_TEST_CRASH_IN_SAVE=1 in the environment, the
 * process writes the first half of the temporary file and then kills itself
 * with SIGKILL (see docs/state-file.md). */
amp_status amp_state_file_write(const char *weights, amp_dtype dtype, const amp_scale_state *s,
                                const amp_weights_id *id, const amp_state_extra *x, char *err,
                                size_t errlen);

/* Reads <weights>.amp. Missing: AMP_OK with *found = 0, *s untouched.
 * Otherwise the whole file is read and validated before *dtype and *s are written
 * (never half-read): wrong magic, other version, wrong size/truncated,
 * trailing bytes, checksum mismatch, or out-of-range values -> AMP_ERR_FORMAT
 * with a message naming the file and what is wrong; unreadable -> AMP_ERR_IO.
 * On success *found = 1 and, when id is not NULL, *id the weights the state
 * was saved with (bound 0 for a version 1 file) and, when x is not NULL, *x
 * what version 3 adds (zeros for older files). Versions 1 to 3 are read. */
amp_status amp_state_file_read(const char *weights, amp_dtype *dtype, amp_scale_state *s,
                               amp_weights_id *id, amp_state_extra *x, int *found, char *err,
                               size_t errlen);

/* The sidecar path for a weights path ("<weights>.amp") into out (size
 * bytes). Returns 0, or -1 if it does not fit (or an argument is NULL). */
int amp_state_file_path(const char *weights, char *out, size_t size);

#endif
