/* The scaler's state sidecar, <weights>.amp.
 *
 * Format, version 3: 108 + 8 n bytes, every integer little-endian whatever
 * the host, written and read field by field with explicit shifts, so the file
 * does not depend on the host's struct layout, padding or byte order.
 *
 *   offset size field
 *        0    8 magic "DNAMPST\0"
 *        8    4 u32 format version (3)
 *       12    4 u32 payload length (88 + 8 n)
 *       16    4 u32 dtype (amp_dtype: 0 float32, 1 float16, 2 bfloat16)
 *       20    4 f32 scale, its IEEE 754 binary32 bits as a u32
 *       24    8 i64 growth_tracker (two's complement)
 *       32    4 i32 hysteresis_left
 *       36    8 i64 consecutive_skips
 *       44    8 u64 steps
 *       52    8 u64 skips
 *       60    4 u32 bound: 1 when the next three fields identify the weights
 *                   file the state was saved with, 0 (and zeros) when none
 *       64    8 u64 the weights' seen (darknet's header)
 *       72    8 u64 the weights file's size in bytes
 *       80    4 u32 CRC-32 of the weights file's bytes
 *       84    8 u64 forward_skips: steps skipped for a half layer's forward overflow
 *       92    8 u64 loss_skips: steps skipped for a non-finite loss (data or model)
 *      100    4 u32 n: layers amp_fallback put back to float32, at most 1024
 *      104  8 n n times: u32 layer index (increasing), u32 why (1 forward
 *                   overflow, 2 gradient overflow, 3 amp_probe)
 *  104+8 n    4 u32 CRC-32 (IEEE 802.3: reflected polynomial 0xEDB88320,
 *                   initial value and final xor 0xFFFFFFFF) of the bytes before it
 *
 * Version 2 is version 3's first 84 bytes with its own CRC-32 at 84 (88
 * bytes, payload length 68); version 1 the first 60 with the CRC-32 at 60 (64
 * bytes, payload length 44, no weights named). Both are still read.
 *
 * The reader accepts a file only if its size is its version's, the magic,
 * version, payload length and CRC match, and the values are in range: scale
 * finite and > 0, a known dtype, growth_tracker, hysteresis_left and
 * consecutive_skips >= 0, skips <= steps, bound 0 or 1 (0 with zeros), n at
 * most 1024, layers increasing and below 2^31, why 1 to 3. A
 * later version may have another length: the version is checked before the
 * size, so the message says which.
 *
 * Saving is atomic: a temporary file "<weights>.amp.tmp.<pid>.<n>" in the same
 * directory (rename() is atomic only within one file system) is written,
 * fsync'ed and closed, then rename()d over the sidecar, and the directory is
 * fsync'ed so that the rename itself survives a power cut. A crash leaves the
 * old sidecar or the new one, whole, plus possibly a stray temporary file,
 * which the reader never looks at. The weights file and its sidecar are two
 * renames: the binding tells a reader when a crash fell between them.
 *
 * Test aid: DARKNET_AMP_TEST_CRASH_IN_SAVE=1 in the environment makes
 * amp_state_file_write write the first half of the temporary file and then
 * raise(SIGKILL), so a test can show that an interrupted save leaves the
 * previous sidecar readable. Any other value, or none, is ignored.
 */
#include "state_file.h"
#include "core.h" /* amp_errorf, amp_scale_state_invalid, amp_env_crash_in_save */
#include "math/half_format.h" /* amp_f32_bits */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <zlib.h> /* crc32 */

#define SF_MAGIC "DNAMPST" /* with its NUL: 8 bytes */
#define SF_MAGIC_SIZE 8
#define SF_HEADER_SIZE 16
#define SF_V1_PAYLOAD_SIZE 44
#define SF_V2_PAYLOAD_SIZE 68
#define SF_PAYLOAD_FIXED 88 /* version 3 without its fallback list */
#define SF_NFALLBACK_OFFSET 100
#define SF_LIST_OFFSET 104
#define SF_ENTRY_SIZE 8
#define SF_FILE_SIZE_OF(n) (SF_LIST_OFFSET + SF_ENTRY_SIZE * (size_t)(n) + 4)
#define SF_MAX_FILE_SIZE SF_FILE_SIZE_OF(AMP_STATE_MAX_FALLBACK)
#define SF_BOUND_OFFSET 60
/* Linux's PATH_MAX; open() refuses longer paths anyway. */
#define SF_PATH_MAX 4096
/* Temporary names carry the pid; a few more tries cover a stale file left by
 * a killed writer whose pid has been reused. */
#define SF_TMP_TRIES 100

typedef char sf_float_is_binary32[sizeof(float) == 4 ? 1 : -1];
#if INT_MAX < INT32_MAX
#error "amp_scale_state.hysteresis_left (int) must hold an i32"
#endif
#if ULLONG_MAX > UINT64_MAX
#error "amp_scale_state.steps/skips (unsigned long long) must fit a u64"
#endif


/* CRC-32 (IEEE 802.3), zlib's: the state file's own and the weights'. */
static uint32_t sf_crc32(const unsigned char *p, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    while (n > 0) { /* zlib takes a uInt length */
        const uInt k = n > 0x40000000u ? 0x40000000u : (uInt)n;
        c = crc32(c, p, k);
        p += k;
        n -= k;
    }
    return (uint32_t)c;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v & 0xFFu);
    p[1] = (unsigned char)((v >> 8) & 0xFFu);
    p[2] = (unsigned char)((v >> 16) & 0xFFu);
    p[3] = (unsigned char)((v >> 24) & 0xFFu);
}

static void put_u64(unsigned char *p, uint64_t v)
{
    put_u32(p, (uint32_t)(v & 0xFFFFFFFFu));
    put_u32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* Two's complement decoding without the implementation-defined conversion of
 * an out-of-range unsigned value to a signed type. */
static int64_t i64_from_u64(uint64_t u)
{
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

static int32_t i32_from_u32(uint32_t u)
{
    return u <= (uint32_t)INT32_MAX ? (int32_t)u : -(int32_t)(~u) - 1;
}


/* The decoded values, in the file's own widths. */
typedef struct sf_values {
    uint32_t dtype;
    float scale;
    int64_t growth_tracker;
    int32_t hysteresis_left;
    int64_t consecutive_skips;
    uint64_t steps, skips;
    uint32_t bound;                 /* the weights: */
    uint64_t seen, size;
    uint32_t crc;
    amp_state_extra x; /* version 3 */
} sf_values;

/* 0 when v is a state the scaler can run from; otherwise -1 and why. Shared by
 * the writer (never write what the reader would refuse) and the reader. */
static amp_scale_state to_state(const sf_values *v)
{
    amp_scale_state st;
    st.scale = v->scale;
    st.growth_tracker = (long)v->growth_tracker;
    st.hysteresis_left = (int)v->hysteresis_left;
    st.consecutive_skips = (long)v->consecutive_skips;
    st.steps = (unsigned long long)v->steps;
    st.skips = (unsigned long long)v->skips;
    return st;
}

/* The file's values: a known dtype, counters that fit this host's types, and
 * the scaler state's own invariants (scaler.c). */
static int check_values(const sf_values *v, char *why, size_t n)
{
    if (v->dtype != AMP_DTYPE_FLOAT32 && v->dtype != AMP_DTYPE_FLOAT16 &&
        v->dtype != AMP_DTYPE_BFLOAT16) {
        snprintf(why, n, "unknown dtype %" PRIu32, v->dtype);
        return -1;
    }
#if LONG_MAX < INT64_MAX
    if (v->growth_tracker > LONG_MAX || v->growth_tracker < LONG_MIN ||
        v->consecutive_skips > LONG_MAX || v->consecutive_skips < LONG_MIN) {
        snprintf(why, n, "a counter (growth_tracker %" PRId64 ", consecutive_skips %" PRId64
                         ") does not fit a long here", v->growth_tracker, v->consecutive_skips);
        return -1;
    }
#endif
    if (v->bound > 1 || (!v->bound && (v->seen || v->size || v->crc))) {
        snprintf(why, n, "bound is %" PRIu32 " with weights seen %" PRIu64 ", size %" PRIu64
                         ", CRC-32 0x%08" PRIx32 " (expected 1, or 0 with zeros)",
                 v->bound, v->seen, v->size, v->crc);
        return -1;
    }
    if (v->x.nfallback < 0 || v->x.nfallback > AMP_STATE_MAX_FALLBACK) {
        snprintf(why, n, "%d layers fell back to float32, at most %d are kept", v->x.nfallback,
                 AMP_STATE_MAX_FALLBACK);
        return -1;
    }
    for (int k = 0; k < v->x.nfallback; ++k) {
        const int lk = v->x.fallback[k].layer, w = v->x.fallback[k].why;
        if (lk < 0 || (k > 0 && lk <= v->x.fallback[k - 1].layer) ||
            w < AMP_FELL_FORWARD || w > AMP_FELL_PROBE) {
            snprintf(why, n, "fallback entry %d: layer %d, why %d (expected layers in increasing "
                             "order from 0, why %d to %d)",
                     k, lk, w, AMP_FELL_FORWARD, AMP_FELL_PROBE);
            return -1;
        }
    }
    const amp_scale_state st = to_state(v);
    return amp_scale_state_invalid(&st, why, n) ? -1 : 0;
}

int amp_state_file_path(const char *weights, char *out, size_t size)
{
    int n;
    if (!weights || !out || size == 0) return -1;
    n = snprintf(out, size, "%s.amp", weights);
    if (n < 0 || (size_t)n >= size) {
        out[0] = '\0';
        return -1;
    }
    return 0;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Makes the rename durable. File systems that cannot fsync a directory say
 * EINVAL (or ENOTSUP); there is nothing more to do on them. */
static amp_status sync_dir(const char *sidecar, char *err, size_t errlen)
{
    char dir[SF_PATH_MAX];
    const char *slash = strrchr(sidecar, '/');
    int fd, e;
    if (!slash) {
        snprintf(dir, sizeof dir, ".");
    } else if (slash == sidecar) {
        snprintf(dir, sizeof dir, "/");
    } else {
        size_t len = (size_t)(slash - sidecar);
        memcpy(dir, sidecar, len); /* len < strlen(sidecar) < SF_PATH_MAX */
        dir[len] = '\0';
    }
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        amp_errorf(err, errlen,
                "state file %s: saved, but cannot open its directory %s to sync it: %s", sidecar,
                dir, strerror(errno));
        return AMP_ERR_IO;
    }
    if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP) {
        e = errno;
        close(fd);
        amp_errorf(err, errlen, "state file %s: saved, but syncing its directory %s failed: %s",
                sidecar, dir, strerror(e));
        return AMP_ERR_IO;
    }
    close(fd);
    return AMP_OK;
}

amp_status amp_state_file_write(const char *weights, amp_dtype dtype, const amp_scale_state *s,
                                const amp_weights_id *id, const amp_state_extra *x, char *err,
                                size_t errlen)
{
    char path[SF_PATH_MAX], tmp[SF_PATH_MAX], why[160];
    unsigned char buf[SF_MAX_FILE_SIZE];
    const int crash = amp_env_crash_in_save();
    sf_values v;
    int fd = -1, attempt, e;

    if (err && errlen) err[0] = '\0';
    if (!weights || !s) {
        amp_errorf(err, errlen, "amp_state_file_write: %s is NULL",
                weights ? "the state" : "the weights path");
        return AMP_ERR_INVALID;
    }
    if (amp_state_file_path(weights, path, sizeof path) != 0) {
        amp_errorf(err, errlen, "state file for %s: path longer than %d bytes", weights,
                SF_PATH_MAX - 1);
        return AMP_ERR_INVALID;
    }
#if LONG_MAX > INT64_MAX
    if (s->growth_tracker > INT64_MAX || s->consecutive_skips > INT64_MAX) {
        amp_errorf(err, errlen, "state file %s: refusing to save: a counter does not fit an i64",
                path);
        return AMP_ERR_INVALID;
    }
#endif
    v.dtype = (uint32_t)dtype;
    v.scale = s->scale;
    v.growth_tracker = s->growth_tracker;
    v.hysteresis_left = s->hysteresis_left;
    v.consecutive_skips = s->consecutive_skips;
    v.steps = s->steps;
    v.skips = s->skips;
    v.bound = id && id->bound;
    v.seen = v.bound ? id->seen : 0;
    v.size = v.bound ? id->size : 0;
    v.crc = v.bound ? (uint32_t)id->crc : 0;
    if (x) {
        v.x.forward_skips = x->forward_skips;
        v.x.loss_skips = x->loss_skips;
        v.x.nfallback = x->nfallback;
        const int n = x->nfallback < 0 || x->nfallback > AMP_STATE_MAX_FALLBACK ? 0 : x->nfallback;
        memcpy(v.x.fallback, x->fallback, sizeof x->fallback[0] * (size_t)n);
    } else {
        v.x.forward_skips = v.x.loss_skips = 0;
        v.x.nfallback = 0;
    }
    if (check_values(&v, why, sizeof why) != 0) {
        amp_errorf(err, errlen, "state file %s: refusing to save: %s", path, why);
        return AMP_ERR_INVALID;
    }

    const size_t size = SF_FILE_SIZE_OF(v.x.nfallback), crc_at = size - 4;
    memcpy(buf, SF_MAGIC, SF_MAGIC_SIZE);
    put_u32(buf + 8, AMP_STATE_FORMAT_VERSION);
    put_u32(buf + 12, (uint32_t)(size - SF_HEADER_SIZE - 4));
    put_u32(buf + 16, v.dtype);
    put_u32(buf + 20, amp_f32_bits(v.scale));
    put_u64(buf + 24, (uint64_t)v.growth_tracker);
    put_u32(buf + 32, (uint32_t)v.hysteresis_left);
    put_u64(buf + 36, (uint64_t)v.consecutive_skips);
    put_u64(buf + 44, v.steps);
    put_u64(buf + 52, v.skips);
    put_u32(buf + SF_BOUND_OFFSET, v.bound);
    put_u64(buf + 64, v.seen);
    put_u64(buf + 72, v.size);
    put_u32(buf + 80, v.crc);
    put_u64(buf + 84, (uint64_t)v.x.forward_skips);
    put_u64(buf + 92, (uint64_t)v.x.loss_skips);
    put_u32(buf + SF_NFALLBACK_OFFSET, (uint32_t)v.x.nfallback);
    for (int k = 0; k < v.x.nfallback; ++k) {
        put_u32(buf + SF_LIST_OFFSET + SF_ENTRY_SIZE * k, (uint32_t)v.x.fallback[k].layer);
        put_u32(buf + SF_LIST_OFFSET + SF_ENTRY_SIZE * k + 4, (uint32_t)v.x.fallback[k].why);
    }
    put_u32(buf + crc_at, sf_crc32(buf, crc_at));

    for (attempt = 0; attempt < SF_TMP_TRIES; attempt++) {
        int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%d", path, (long)getpid(), attempt);
        if (n < 0 || (size_t)n >= sizeof tmp) {
            amp_errorf(err, errlen, "state file %s: temporary file name longer than %d bytes", path,
                    SF_PATH_MAX - 1);
            return AMP_ERR_INVALID;
        }
        /* O_EXCL: never write through a file (or symlink) someone else made. */
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST) break;
    }
    if (fd < 0) {
        amp_errorf(err, errlen, "state file %s: cannot create temporary file %s: %s", path, tmp,
                attempt == SF_TMP_TRIES ? "too many stale temporary files" : strerror(errno));
        return AMP_ERR_IO;
    }

    if (crash) {
        /* write() has no user-space buffer, so the half is in the kernel, as a
         * crash between two writes of a buffered writer would leave it. */
        if (write_all(fd, buf, size / 2) == 0) raise(SIGKILL);
        /* Not reached: an unblockable signal raised by a single-threaded
         * process is delivered before raise() returns. */
        close(fd);
        unlink(tmp);
        amp_errorf(err, errlen,
                "state file %s: DARKNET_AMP_TEST_CRASH_IN_SAVE=1 did not kill the process", path);
        return AMP_ERR_IO;
    }

    if (write_all(fd, buf, size) != 0) {
        e = errno;
        close(fd);
        unlink(tmp);
        amp_errorf(err, errlen, "state file %s: writing temporary file %s failed: %s", path, tmp,
                strerror(e));
        return AMP_ERR_IO;
    }
    if (fsync(fd) != 0) {
        e = errno;
        close(fd);
        unlink(tmp);
        amp_errorf(err, errlen, "state file %s: fsync of temporary file %s failed: %s", path, tmp,
                strerror(e));
        return AMP_ERR_IO;
    }
    if (close(fd) != 0) {
        e = errno;
        unlink(tmp);
        amp_errorf(err, errlen, "state file %s: closing temporary file %s failed: %s", path, tmp,
                strerror(e));
        return AMP_ERR_IO;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        amp_errorf(err, errlen, "state file %s: renaming %s over it failed: %s", path, tmp,
                strerror(e));
        return AMP_ERR_IO;
    }
    return sync_dir(path, err, errlen);
}

amp_status amp_state_file_read(const char *weights, amp_dtype *dtype, amp_scale_state *s,
                               amp_weights_id *id, amp_state_extra *x, int *found, char *err,
                               size_t errlen)
{
    char path[SF_PATH_MAX], why[160];
    /* One byte more than a file may have, to see trailing bytes. */
    unsigned char buf[SF_MAX_FILE_SIZE + 1];
    size_t n = 0;
    uint32_t version, length, stored, computed;
    sf_values v;
    int fd, e;

    if (err && errlen) err[0] = '\0';
    if (found) *found = 0;
    if (!weights || !dtype || !s || !found) {
        amp_errorf(err, errlen, "amp_state_file_read: NULL argument");
        return AMP_ERR_INVALID;
    }
    if (amp_state_file_path(weights, path, sizeof path) != 0) {
        amp_errorf(err, errlen, "state file for %s: path longer than %d bytes", weights,
                SF_PATH_MAX - 1);
        return AMP_ERR_INVALID;
    }

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return AMP_OK;
        amp_errorf(err, errlen, "state file %s: cannot open: %s", path, strerror(errno));
        return AMP_ERR_IO;
    }
    while (n < sizeof buf) {
        ssize_t r = read(fd, buf + n, sizeof buf - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            e = errno;
            close(fd);
            amp_errorf(err, errlen, "state file %s: cannot read: %s", path, strerror(e));
            return AMP_ERR_IO;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);

    if (n < SF_HEADER_SIZE) {
        amp_errorf(err, errlen,
                   "state file %s: truncated: %zu bytes, shorter than the %d-byte header", path, n,
                   SF_HEADER_SIZE);
        return AMP_ERR_FORMAT;
    }
    if (memcmp(buf, SF_MAGIC, SF_MAGIC_SIZE) != 0) {
        amp_errorf(err, errlen, "state file %s: not a darknet-amp state file (bad magic)", path);
        return AMP_ERR_FORMAT;
    }
    version = get_u32(buf + 8);
    if (version < 1 || version > AMP_STATE_FORMAT_VERSION) {
        amp_errorf(err, errlen,
                "state file %s: format version %" PRIu32 ", this build reads versions 1 to %d",
                path, version, AMP_STATE_FORMAT_VERSION);
        return AMP_ERR_FORMAT;
    }
    /* Version 3's length follows from its list's, which must be there. */
    uint32_t nfallback = 0;
    if (version == 3) {
        if (n < SF_LIST_OFFSET) {
            amp_errorf(err, errlen, "state file %s: truncated: %zu bytes, version 3 has at least %d",
                    path, n, (int)SF_FILE_SIZE_OF(0));
            return AMP_ERR_FORMAT;
        }
        nfallback = get_u32(buf + SF_NFALLBACK_OFFSET);
        if (nfallback > AMP_STATE_MAX_FALLBACK) {
            amp_errorf(err, errlen, "state file %s: %" PRIu32 " layers fell back to float32, at "
                    "most %d are kept", path, nfallback, AMP_STATE_MAX_FALLBACK);
            return AMP_ERR_FORMAT;
        }
    }
    const size_t want_payload = version == 1   ? SF_V1_PAYLOAD_SIZE
                                : version == 2 ? SF_V2_PAYLOAD_SIZE
                                               : SF_PAYLOAD_FIXED + (size_t)SF_ENTRY_SIZE * nfallback;
    const size_t want_size = SF_HEADER_SIZE + want_payload + 4, crc_at = want_size - 4;
    length = get_u32(buf + 12);
    if (length != want_payload) {
        amp_errorf(err, errlen, "state file %s: payload length %" PRIu32 ", version %" PRIu32
                " has %zu", path, length, version, want_payload);
        return AMP_ERR_FORMAT;
    }
    if (n < want_size) {
        amp_errorf(err, errlen, "state file %s: truncated: %zu bytes, expected %zu", path, n,
                want_size);
        return AMP_ERR_FORMAT;
    }
    if (n > want_size) {
        amp_errorf(err, errlen, "state file %s: trailing bytes after the %zu bytes version %"
                PRIu32 " defines", path, want_size, version);
        return AMP_ERR_FORMAT;
    }
    stored = get_u32(buf + crc_at);
    computed = sf_crc32(buf, crc_at);
    if (stored != computed) {
        amp_errorf(err, errlen, "state file %s: checksum mismatch (stored 0x%08" PRIx32
                ", computed 0x%08" PRIx32 ")", path, stored, computed);
        return AMP_ERR_FORMAT;
    }

    v.dtype = get_u32(buf + 16);
    v.scale = amp_f32_from_bits(get_u32(buf + 20));
    v.growth_tracker = i64_from_u64(get_u64(buf + 24));
    v.hysteresis_left = i32_from_u32(get_u32(buf + 32));
    v.consecutive_skips = i64_from_u64(get_u64(buf + 36));
    v.steps = get_u64(buf + 44);
    v.skips = get_u64(buf + 52);
    v.bound = version == 1 ? 0 : get_u32(buf + SF_BOUND_OFFSET);
    v.seen = version == 1 ? 0 : get_u64(buf + 64);
    v.size = version == 1 ? 0 : get_u64(buf + 72);
    v.crc = version == 1 ? 0 : get_u32(buf + 80);
    memset(&v.x, 0, sizeof v.x);
    if (version == 3) {
        v.x.forward_skips = get_u64(buf + 84);
        v.x.loss_skips = get_u64(buf + 92);
        v.x.nfallback = (int)nfallback;
        for (uint32_t k = 0; k < nfallback; ++k) {
            const uint32_t lk = get_u32(buf + SF_LIST_OFFSET + SF_ENTRY_SIZE * k);
            const uint32_t w = get_u32(buf + SF_LIST_OFFSET + SF_ENTRY_SIZE * k + 4);
            if (lk > INT32_MAX || w > INT32_MAX) {
                amp_errorf(err, errlen, "state file %s: fallback entry %" PRIu32 ": layer %" PRIu32
                        ", why %" PRIu32 " (expected layers in increasing order below 2^31, why %d "
                        "to %d)", path, k, lk, w, AMP_FELL_FORWARD, AMP_FELL_PROBE);
                return AMP_ERR_FORMAT;
            }
            v.x.fallback[k].layer = (int)lk;
            v.x.fallback[k].why = (int)w;
        }
    }
    if (check_values(&v, why, sizeof why) != 0) {
        amp_errorf(err, errlen, "state file %s: %s", path, why);
        return AMP_ERR_FORMAT;
    }

    *dtype = (amp_dtype)v.dtype;
    *s = to_state(&v);
    if (x) *x = v.x;
    if (id) {
        id->bound = (int)v.bound;
        id->seen = v.seen;
        id->size = v.size;
        id->crc = v.crc;
    }
    *found = 1;
    return AMP_OK;
}
