/* The scaler's state sidecar, <weights>.amp: saved next to a darknet weights
 * file so that training resumes with the loss scale and counters it stopped
 * with. The binary layout is described at the top of state_file.c and in
 * docs/state-file.md. Private to the plugin.
 */
#ifndef AMP_STATE_FILE_H
#define AMP_STATE_FILE_H

#include <stddef.h>

#include "darknet_amp.h" /* amp_status, amp_dtype */
#include "scale_rule.h"  /* amp_scale_state */

#define AMP_STATE_FORMAT_VERSION 1

/* Writes <weights>.amp atomically: a temporary file in the same directory,
 * written, flushed, fsync'ed, then rename()d over the old one (and the
 * directory fsync'ed), so a crash at any point leaves either the old or the
 * new file, whole. A state the reader would refuse (scale not finite or <= 0,
 * unknown dtype, negative counters, skips > steps) is AMP_ERR_INVALID and
 * nothing is written; a file that cannot be written is AMP_ERR_IO.
 *
 * Test aid: with DARKNET_AMP_TEST_CRASH_IN_SAVE=1 in the environment, the
 * process writes the first half of the temporary file and then kills itself
 * with SIGKILL (see docs/state-file.md). */
amp_status amp_state_file_write(const char *weights, amp_dtype dtype, const amp_scale_state *s,
                                char *err, size_t errlen);

/* Reads <weights>.amp. Missing: AMP_OK with *found = 0, *s untouched.
 * Otherwise the whole file is read and validated before *dtype and *s are written
 * (never half-read): wrong magic, other version, wrong size/truncated,
 * trailing bytes, checksum mismatch, or out-of-range values -> AMP_ERR_FORMAT
 * with a message naming the file and what is wrong; unreadable -> AMP_ERR_IO.
 * On success *found = 1. */
amp_status amp_state_file_read(const char *weights, amp_dtype *dtype, amp_scale_state *s,
                               int *found, char *err, size_t errlen);

/* The sidecar path for a weights path ("<weights>.amp") into out (size
 * bytes). Returns 0, or -1 if it does not fit (or an argument is NULL). */
int amp_state_file_path(const char *weights, char *out, size_t size);

#endif
