/* The scaler's state sidecar (plugin/state_file.c): the exact byte layout of
 * version 3 (with and without a fallback list), bit-exact round trips for
 * every dtype with the extras version 3 adds (other skips, fallback lists of
 * 0, 1, several and AMP_STATE_MAX_FALLBACK layers), a missing file, every
 * single-byte change, every truncation, trailing bytes, other versions,
 * out-of-range values and inconsistent list headers behind a correct CRC,
 * version 1 and 2 files still read (and checked the same way, their extras
 * zero), the writer refusing what the reader would refuse, the weights a state
 * is bound to: round trip, identity of a weights file (seen in both header
 * forms, size, CRC), missing weights, I/O errors naming the path, NULL/0 err
 * buffers, and an interrupted save (a writer killed by SIGKILL halfway through
 * its temporary file) leaving the previous sidecar whole.
 *
 *   state_file_test SCRATCH_DIR    (created if missing; the test's own files
 *                                   in it start with "sft_")
 *
 * Files the test crafts carry a CRC-32 from this file's own implementation,
 * checked against the standard check value, so a crafted file that is refused
 * is refused for its values, not for its checksum (the unchanged re-encoding
 * of a valid file is shown to be accepted).
 */
#include "state_file.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* version 3: 16-byte header, (88 + 8 n)-byte payload, 4-byte CRC */
#define V3_SIZE(n) (108 + 8 * (size_t)(n))
#define N_OFFSET 100    /* u32 n */
#define LIST_OFFSET 104 /* n entries of (u32 layer, u32 why) */
/* The whys the format defines: 1 a forward overflow, 2 a gradient overflow at
 * the minimum scale, 3 amp_probe. */
#define WHY_FORWARD 1
#define WHY_GRADIENT 2
#define WHY_PROBE 3
#define V2_FILE_SIZE 88 /* version 2: 16-byte header, 68-byte payload, 4-byte CRC */
#define V2_CRC_OFFSET 84
#define V1_FILE_SIZE 64 /* version 1: 16-byte header, 44-byte payload, 4-byte CRC */
#define V1_CRC_OFFSET 60
/* Room for a crafted list one entry longer than the format allows, and then
 * some trailing bytes. */
#define BUF_SIZE (V3_SIZE(AMP_STATE_MAX_FALLBACK + 1) + 128)

static int failures;
static const char *scratch;

static void check(int ok, const char *what, const char *expected, const char *got)
{
    if (ok) {
        printf("ok: %s\n", what);
    } else {
        printf("FAIL: %s (expected %s, got %s)\n", what, expected, got);
        ++failures;
    }
}

static const char *status_name(amp_status s)
{
    switch (s) {
    case AMP_OK: return "AMP_OK";
    case AMP_ERR_INVALID: return "AMP_ERR_INVALID";
    case AMP_ERR_STATE: return "AMP_ERR_STATE";
    case AMP_ERR_IO: return "AMP_ERR_IO";
    case AMP_ERR_FORMAT: return "AMP_ERR_FORMAT";
    case AMP_ERR_NONFINITE: return "AMP_ERR_NONFINITE";
    case AMP_ERR_NOMEM: return "AMP_ERR_NOMEM";
    case AMP_ERR_DEVICE: return "AMP_ERR_DEVICE";
    }
    return "unknown status";
}

static const char *dtype_name(amp_dtype d)
{
    switch (d) {
    case AMP_DTYPE_FLOAT32: return "float32";
    case AMP_DTYPE_FLOAT16: return "float16";
    case AMP_DTYPE_BFLOAT16: return "bfloat16";
    }
    return "unknown dtype";
}

/* The test's paths must fit its buffers; a scratch directory too long for
 * them is a usage error, not a result. */
static void fit(int n, size_t size, const char *what)
{
    if (n < 0 || (size_t)n >= size) {
        printf("FAIL: path for %s does not fit %zu bytes (expected a shorter scratch directory, "
               "got %s)\n", what, size, scratch);
        exit(1);
    }
}

/* "<scratch>/<name>" */
static void in_scratch(char *out, size_t size, const char *name)
{
    fit(snprintf(out, size, "%s/%s", scratch, name), size, name);
}

static void sidecar_of(char *out, size_t size, const char *weights)
{
    fit(snprintf(out, size, "%s.amp", weights), size, weights);
}

/* ---- an independent encoder: bitwise CRC-32 and little-endian stores ---- */

static uint32_t crc32_ref(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    size_t i;
    int k;
    for (i = 0; i < n; i++) {
        c ^= p[i];
        for (k = 0; k < 8; k++) c = c & 1u ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    }
    return ~c;
}

static void le32(unsigned char *p, uint32_t v)
{
    int i;
    for (i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void le64(unsigned char *p, uint64_t v)
{
    int i;
    for (i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The file the writer makes of state s, bound to no weights: version 3 with
 * x's extras (x NULL: none), 108 + 8 n bytes; version 2 (88 bytes) or version
 * 1 (64 bytes), which have no extras. x's list is written as it is, even one
 * the reader refuses (at most AMP_STATE_MAX_FALLBACK entries: the struct
 * holds no more). Returns the file's size. */
static size_t encode_x(unsigned char *b, uint32_t version, uint32_t dtype, const amp_scale_state *s,
                       const amp_state_extra *x)
{
    size_t n = 0, k;
    memcpy(b, "DNAMPST", 8);
    le32(b + 8, version);
    le32(b + 16, dtype);
    le32(b + 20, fbits(s->scale));
    le64(b + 24, (uint64_t)(int64_t)s->growth_tracker);
    le32(b + 32, (uint32_t)(int32_t)s->hysteresis_left);
    le64(b + 36, (uint64_t)(int64_t)s->consecutive_skips);
    le64(b + 44, (uint64_t)s->steps);
    le64(b + 52, (uint64_t)s->skips);
    if (version == 1) {
        le32(b + 12, 44);
        le32(b + V1_CRC_OFFSET, crc32_ref(b, V1_CRC_OFFSET));
        return V1_FILE_SIZE;
    }
    memset(b + 60, 0, 24); /* bound 0: weights seen, size and CRC zero */
    if (version == 2) {
        le32(b + 12, 68);
        le32(b + V2_CRC_OFFSET, crc32_ref(b, V2_CRC_OFFSET));
        return V2_FILE_SIZE;
    }
    if (x && x->nfallback > 0)
        n = x->nfallback > AMP_STATE_MAX_FALLBACK ? AMP_STATE_MAX_FALLBACK : (size_t)x->nfallback;
    le32(b + 12, (uint32_t)(88 + 8 * n));
    le64(b + 84, x ? (uint64_t)x->forward_skips : 0);
    le64(b + 92, x ? (uint64_t)x->loss_skips : 0);
    le32(b + N_OFFSET, (uint32_t)n);
    for (k = 0; k < n; k++) {
        le32(b + LIST_OFFSET + 8 * k, (uint32_t)x->fallback[k].layer);
        le32(b + LIST_OFFSET + 8 * k + 4, (uint32_t)x->fallback[k].why);
    }
    le32(b + LIST_OFFSET + 8 * n, crc32_ref(b, LIST_OFFSET + 8 * n));
    return V3_SIZE(n);
}

static size_t encode(unsigned char *b, uint32_t version, uint32_t dtype, const amp_scale_state *s)
{
    return encode_x(b, version, dtype, s, NULL);
}

/* The CRC-32 of a file of size bytes: its last 4, over the bytes before. */
static void fix_crc(unsigned char *b, size_t size)
{
    le32(b + size - 4, crc32_ref(b, size - 4));
}

/* The version 2 file of a version 3 file's state and weights, made by hand
 * as the format defines it: the first 84 bytes, version 2, payload length 68,
 * their own CRC-32 at 84. */
static void v3_to_v2(const unsigned char *v3, unsigned char *v2)
{
    memcpy(v2, v3, V2_CRC_OFFSET);
    le32(v2 + 8, 2);
    le32(v2 + 12, 68);
    fix_crc(v2, V2_FILE_SIZE);
}

/* The first byte where a and b differ, or -1. */
static long first_diff(const unsigned char *a, const unsigned char *b, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (a[i] != b[i]) return (long)i;
    return -1;
}

/* ---- raw file access ---- */

static long read_raw(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n;
    if (!f) return -1;
    n = fread(buf, 1, cap, f);
    fclose(f);
    return (long)n;
}

static int write_raw(const char *path, const unsigned char *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return -1;
    ok = fwrite(buf, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* ---- state comparison ---- */

static amp_scale_state make_state(float scale, long gt, int hl, long cs, unsigned long long steps,
                                  unsigned long long skips)
{
    amp_scale_state s;
    memset(&s, 0, sizeof s);
    s.scale = scale;
    s.growth_tracker = gt;
    s.hysteresis_left = hl;
    s.consecutive_skips = cs;
    s.steps = steps;
    s.skips = skips;
    return s;
}

static void describe(char *out, size_t size, amp_dtype d, const amp_scale_state *s)
{
    snprintf(out, size,
             "%s scale %a (bits 0x%08lx) growth_tracker %ld hysteresis_left %d "
             "consecutive_skips %ld steps %llu skips %llu",
             dtype_name(d), (double)s->scale, (unsigned long)fbits(s->scale), s->growth_tracker,
             s->hysteresis_left, s->consecutive_skips, s->steps, s->skips);
}

static int same_state(const amp_scale_state *a, const amp_scale_state *b)
{
    return fbits(a->scale) == fbits(b->scale) && a->growth_tracker == b->growth_tracker &&
           a->hysteresis_left == b->hysteresis_left &&
           a->consecutive_skips == b->consecutive_skips && a->steps == b->steps &&
           a->skips == b->skips;
}

/* ---- the extras of version 3 ---- */

static void extra_clear(amp_state_extra *x, unsigned long long forward, unsigned long long loss)
{
    memset(x, 0, sizeof *x);
    x->forward_skips = forward;
    x->loss_skips = loss;
}

/* Appends an entry as it is (the test makes bad lists too); a list already
 * full is a bug of the test. */
static void extra_add(amp_state_extra *x, int lk, int why)
{
    if (x->nfallback < 0 || x->nfallback >= AMP_STATE_MAX_FALLBACK) {
        printf("FAIL: the test appends to a full fallback list (expected at most %d entries, got "
               "%d)\n", AMP_STATE_MAX_FALLBACK, x->nfallback);
        exit(1);
    }
    x->fallback[x->nfallback].layer = lk;
    x->fallback[x->nfallback].why = why;
    x->nfallback++;
}

/* "forward_skips F, loss_skips L, n N: layer/why ..." (a long list: its first
 * 4 entries and its last) */
static void describe_extra(char *out, size_t size, const amp_state_extra *x)
{
    size_t used;
    int k, n = x->nfallback < 0 || x->nfallback > AMP_STATE_MAX_FALLBACK ? 0 : x->nfallback;
    snprintf(out, size, "forward_skips %llu, loss_skips %llu, n %d", x->forward_skips,
             x->loss_skips, x->nfallback);
    for (k = 0; k < n; k++) {
        if (k == 4 && n > 5) k = n - 1;
        used = strlen(out);
        snprintf(out + used, size - used, "%s%d/%d", k == 0 ? ": " : k == n - 1 && n > 5 ? " ... " : " ",
                 x->fallback[k].layer, x->fallback[k].why);
    }
}

/* 0 when got holds want's extras (entries past nfallback do not count);
 * otherwise 1 and the first difference in out. */
static int extra_diff(const amp_state_extra *want, const amp_state_extra *got, char *out,
                      size_t size)
{
    int k;
    if (got->forward_skips != want->forward_skips || got->loss_skips != want->loss_skips ||
        got->nfallback != want->nfallback) {
        describe_extra(out, size, got);
        return 1;
    }
    for (k = 0; k < want->nfallback && k < AMP_STATE_MAX_FALLBACK; k++)
        if (got->fallback[k].layer != want->fallback[k].layer ||
            got->fallback[k].why != want->fallback[k].why) {
            snprintf(out, size, "entry %d is layer %d, why %d (expected layer %d, why %d)", k,
                     got->fallback[k].layer, got->fallback[k].why, want->fallback[k].layer,
                     want->fallback[k].why);
            return 1;
        }
    snprintf(out, size, "the same extras");
    return 0;
}

/* What a version 1 or 2 file reads as: no other skips, no fallbacks. */
static int extra_is_zero(const amp_state_extra *x)
{
    return x->forward_skips == 0 && x->loss_skips == 0 && x->nfallback == 0;
}

/* The sentinel a refused or missing read must leave alone, padding included. */
static void fill_sentinel(amp_dtype *d, amp_scale_state *s)
{
    memset(d, 0xA5, sizeof *d);
    memset(s, 0xA5, sizeof *s);
}

static int is_sentinel(const amp_dtype *d, const amp_scale_state *s)
{
    amp_dtype d0;
    amp_scale_state s0;
    fill_sentinel(&d0, &s0);
    return memcmp(d, &d0, sizeof d0) == 0 && memcmp(s, &s0, sizeof s0) == 0;
}

/* The same for the other outputs: the weights' identity and the extras. */
static void fill_sentinel_more(amp_weights_id *id, amp_state_extra *x)
{
    memset(id, 0xA5, sizeof *id);
    memset(x, 0xA5, sizeof *x);
}

static int is_sentinel_more(const amp_weights_id *id, const amp_state_extra *x)
{
    const unsigned char *p = (const unsigned char *)x;
    amp_weights_id id0;
    size_t i;
    memset(&id0, 0xA5, sizeof id0);
    for (i = 0; i < sizeof *x; i++)
        if (p[i] != 0xA5) return 0;
    return memcmp(id, &id0, sizeof id0) == 0;
}

/* Reads weights' sidecar into sentinel-filled outputs and says whether it
 * was refused as wanted: status want, found 0, outputs (dtype, state, weights
 * id, extras) untouched, message naming the sidecar and containing
 * must_contain (if given). got: what happened. */
static int refused(const char *weights, amp_status want, const char *must_contain, char *got,
                   size_t gotlen, char *msg, size_t msglen)
{
    char sidecar[4200], err[512];
    amp_dtype d;
    amp_scale_state s;
    amp_weights_id id;
    amp_state_extra x;
    int found = 77, untouched, untouched_more, names, contains;
    amp_status st;
    fill_sentinel(&d, &s);
    fill_sentinel_more(&id, &x);
    sidecar_of(sidecar, sizeof sidecar, weights);
    st = amp_state_file_read(weights, &d, &s, &id, &x, &found, err, sizeof err);
    untouched = is_sentinel(&d, &s);
    untouched_more = is_sentinel_more(&id, &x);
    names = strstr(err, sidecar) != NULL;
    contains = !must_contain || strstr(err, must_contain) != NULL;
    snprintf(got, gotlen, "%s, found %d, %s, message \"%s\"", status_name(st), found,
             untouched && untouched_more ? "outputs untouched"
             : untouched                 ? "weights id or extras WRITTEN"
                                         : "dtype or state WRITTEN",
             err);
    if (msg) snprintf(msg, msglen, "%s", err);
    return st == want && found == 0 && untouched && untouched_more && names && contains;
}

/* ---- the checks ---- */

static void test_crc_reference(void)
{
    char got[1024];
    uint32_t c = crc32_ref((const unsigned char *)"123456789", 9);
    snprintf(got, sizeof got, "0x%08lx", (unsigned long)c);
    check(c == 0xCBF43926u, "the test's CRC-32 gives the standard check value for \"123456789\"",
          "0xcbf43926", got);
}

static void test_path_helper(void)
{
    char out[64], got[1024], *longw;
    size_t n = 5000;
    int r;

    r = amp_state_file_path("runs/yolo.weights", out, sizeof out);
    snprintf(got, sizeof got, "%d \"%s\"", r, r == 0 ? out : "");
    check(r == 0 && strcmp(out, "runs/yolo.weights.amp") == 0, "path helper appends .amp",
          "0 \"runs/yolo.weights.amp\"", got);

    /* "a.weights.amp" is 13 characters: 14 bytes fit, 13 do not. */
    r = amp_state_file_path("a.weights", out, 14);
    snprintf(got, sizeof got, "%d", r);
    check(r == 0, "path helper: an exactly fitting buffer (14 bytes for 13 characters)", "0", got);
    r = amp_state_file_path("a.weights", out, 13);
    snprintf(got, sizeof got, "%d", r);
    check(r == -1, "path helper rejects a buffer one byte short", "-1", got);

    longw = malloc(n + 1);
    if (!longw) {
        check(0, "path helper: allocating a long path", "memory", "none");
        return;
    }
    memset(longw, 'w', n);
    longw[n] = '\0';
    r = amp_state_file_path(longw, out, sizeof out);
    snprintf(got, sizeof got, "%d", r);
    check(r == -1, "path helper rejects a 5000-character weights path in a 64-byte buffer", "-1",
          got);
    r = amp_state_file_path(NULL, out, sizeof out);
    snprintf(got, sizeof got, "%d", r);
    check(r == -1, "path helper rejects a NULL weights path", "-1", got);
    r = amp_state_file_path("x", out, 0);
    snprintf(got, sizeof got, "%d", r);
    check(r == -1, "path helper rejects a 0-byte buffer", "-1", got);

    {
        /* Past the module's 4096-byte path buffers the functions refuse too. */
        char err[256];
        amp_scale_state s = make_state(1.0f, 0, 1, 0, 0, 0);
        amp_dtype d;
        int found;
        amp_status st = amp_state_file_write(longw, AMP_DTYPE_FLOAT16, &s, NULL, NULL, err, sizeof err);
        snprintf(got, sizeof got, "%s", status_name(st));
        check(st == AMP_ERR_INVALID, "write with a 5000-character weights path is refused",
              "AMP_ERR_INVALID", got);
        st = amp_state_file_read(longw, &d, &s, NULL, NULL, &found, err, sizeof err);
        snprintf(got, sizeof got, "%s", status_name(st));
        check(st == AMP_ERR_INVALID, "read with a 5000-character weights path is refused",
              "AMP_ERR_INVALID", got);
    }
    free(longw);
}

/* Compares a written file (n bytes) with the independently encoded one:
 * returns 1 when they are the same, else 0 and the first difference in got. */
static int same_bytes(const unsigned char *file, long n, const unsigned char *want, size_t size,
                      char *got, size_t gotlen)
{
    long first = n == (long)size ? first_diff(file, want, size) : -1;
    if (n != (long)size)
        snprintf(got, gotlen, "%ld bytes, encoded %zu", n, size);
    else if (first >= 0)
        snprintf(got, gotlen, "byte %ld is 0x%02x, encoded 0x%02x", first, file[first],
                 want[first]);
    else
        snprintf(got, gotlen, "identical");
    return n == (long)size && first < 0;
}

/* The file's offset of the first byte of file[off, off + len) that differs
 * from want, or -1. */
static long diff_at(const unsigned char *file, size_t off, const unsigned char *want, size_t len)
{
    long d = first_diff(file + off, want, len);
    return d < 0 ? -1 : (long)off + d;
}

/* got for a check against the format's table: "as documented", or the first
 * wrong byte (at), or a wrong size (n bytes, size expected). */
static void describe_at(char *got, size_t gotlen, const unsigned char *file, long n, size_t size,
                        long at)
{
    if (n != (long)size)
        snprintf(got, gotlen, "%ld bytes", n);
    else if (at >= 0)
        snprintf(got, gotlen, "byte %ld is 0x%02x", at, file[at]);
    else
        snprintf(got, gotlen, "as documented");
}

/* The writer's bytes are exactly the documented layout, as this file encodes
 * it: without a fallback list, and with the list of layers 3 and 17, checked
 * byte for byte against the format's table as well. */
static void test_layout(void)
{
    char w[4200], sc[4200], err[512], got[1024];
    unsigned char file[BUF_SIZE], want[BUF_SIZE], v2[V2_FILE_SIZE], c[4];
#if LONG_MAX >= 0x0102030405060708
    const long gt = 0x0102030405060708L;
#else
    const long gt = 0x01020304L;
#endif
    amp_scale_state s = make_state(0x1p-10f, gt, 0x11223344, 7, 0xA1B2C3D4E5F60718ULL,
                                   0x0A0B0C0D0E0F1011ULL);
    amp_state_extra x;
    /* version 3 at 8, payload length 88 + 8 n at 12 */
    static const unsigned char head0[8] = {0x03, 0, 0, 0, 0x58, 0, 0, 0};
    static const unsigned char head2[8] = {0x03, 0, 0, 0, 0x68, 0, 0, 0};
    /* offsets 84..119 of the file with layers 3 and 17 */
    static const unsigned char tail2[36] = {
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /*  84 forward_skips 0x1122334455667788 */
        0x80, 0x70, 0x60, 0x50, 0x40, 0x30, 0x20, 0x10, /*  92 loss_skips 0x1020304050607080 */
        0x02, 0x00, 0x00, 0x00,                         /* 100 n 2 */
        0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, /* 104 layer 3, why 1 (forward) */
        0x11, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, /* 112 layer 17, why 2 (gradient) */
    };
    static const unsigned char zeros[20] = {0};
    amp_status st;
    long n, at = -1;
    size_t size;

    in_scratch(w, sizeof w, "sft_layout.weights");
    sidecar_of(sc, sizeof sc, w);

    /* No extras: 108 bytes, forward_skips, loss_skips and n zero. */
    st = amp_state_file_write(w, AMP_DTYPE_BFLOAT16, &s, NULL, NULL, err, sizeof err);
    snprintf(got, sizeof got, "%s \"%s\"", status_name(st), err);
    check(st == AMP_OK, "write a state without extras for the layout check", "AMP_OK", got);
    n = read_raw(sc, file, sizeof file);
    snprintf(got, sizeof got, "%ld bytes", n);
    check(n == 108, "the sidecar without a fallback list is exactly 108 bytes", "108 bytes", got);
    size = encode(want, 3, AMP_DTYPE_BFLOAT16, &s);
    check(same_bytes(file, n, want, size, got, sizeof got),
          "the sidecar's bytes are the documented little-endian layout with its CRC-32 (n = 0)",
          "identical", got);
    if (n == 108) {
        le32(c, crc32_ref(file, 104));
        if ((at = diff_at(file, 8, head0, 8)) < 0 && (at = diff_at(file, 84, zeros, 20)) < 0)
            at = diff_at(file, 104, c, 4);
    }
    describe_at(got, sizeof got, file, n, 108, at);
    check(n == 108 && at < 0,
          "n = 0: version 3 at 8, payload length 88 at 12, zeros at 84..103, CRC-32 of bytes "
          "0..103 at 104",
          "as documented", got);

    /* Layers 3 (forward overflow) and 17 (gradient overflow): 124 bytes. */
    extra_clear(&x, 0x1122334455667788ULL, 0x1020304050607080ULL);
    extra_add(&x, 3, 1);
    extra_add(&x, 17, 2);
    st = amp_state_file_write(w, AMP_DTYPE_BFLOAT16, &s, NULL, &x, err, sizeof err);
    snprintf(got, sizeof got, "%s \"%s\"", status_name(st), err);
    check(st == AMP_OK, "write a state with layers 3 and 17 fallen back for the layout check",
          "AMP_OK", got);
    n = read_raw(sc, file, sizeof file);
    snprintf(got, sizeof got, "%ld bytes", n);
    check(n == 124, "the sidecar with 2 fallback entries is exactly 108 + 8 x 2 = 124 bytes",
          "124 bytes", got);
    size = encode_x(want, 3, AMP_DTYPE_BFLOAT16, &s, &x);
    check(same_bytes(file, n, want, size, got, sizeof got),
          "the sidecar's bytes are the documented little-endian layout with its CRC-32 (n = 2)",
          "identical", got);
    /* Against the format's table itself, not the encoder. */
    at = -1;
    if (n == 124) {
        le32(c, crc32_ref(file, 120));
        if ((at = diff_at(file, 8, head2, 8)) < 0 && (at = diff_at(file, 84, tail2, 36)) < 0)
            at = diff_at(file, 120, c, 4);
    }
    describe_at(got, sizeof got, file, n, 124, at);
    check(n == 124 && at < 0,
          "n = 2: version 3 at 8, payload length 104 at 12, forward_skips at 84, loss_skips at 92, "
          "n 2 at 100, (layer 3, why 1) at 104, (17, 2) at 112, CRC-32 of bytes 0..119 at 120",
          "as documented", got);

    /* Bytes 0..83 are version 2's, apart from the version and the length. */
    encode(v2, 2, AMP_DTYPE_BFLOAT16, &s);
    if ((at = diff_at(file, 0, v2, 8)) < 0) at = diff_at(file, 16, v2 + 16, 68);
    if (at >= 0)
        snprintf(got, sizeof got, "byte %ld is 0x%02x, version 2 has 0x%02x", at, file[at], v2[at]);
    else
        snprintf(got, sizeof got, "the same");
    check(at < 0, "bytes 0..7 and 16..83 of version 3 are version 2's", "the same", got);
}

/* The longest list: AMP_STATE_MAX_FALLBACK layers from 0 to INT_MAX, every
 * why. */
static void extra_longest(amp_state_extra *x, unsigned long long forward, unsigned long long loss)
{
    int k;
    extra_clear(x, forward, loss);
    for (k = 0; k < AMP_STATE_MAX_FALLBACK - 1; k++)
        extra_add(x, k * 2097000 + k % 3, 1 + k % 3);
    extra_add(x, INT_MAX, WHY_FORWARD);
}

/* Every state, dtype and kind of extras written, read back and compared bit
 * for bit; the written bytes are also the independent encoding's. */
static void test_round_trips(void)
{
    static const amp_dtype dtypes[] = {AMP_DTYPE_FLOAT32, AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    static amp_state_extra xs[5], r_x, zero_x; /* large: not on the stack */
    static unsigned char file[BUF_SIZE], bytes[BUF_SIZE];
    const char *xnames[5] = {"no extras (NULL)", "n 0 with other skips", "n 1", "n 6",
                             "n AMP_STATE_MAX_FALLBACK"};
    amp_scale_state states[8];
    char w[4200], sc[4200], err[512], what[1400], want[400], got[1024], xs_got[400];
    size_t i, j, k, ns = 0, size;
    int bad_bytes = 0, tried = 0;

    states[ns++] = make_state(65536.0f, 0, 1, 0, 0, 0);        /* GradScaler's start */
    states[ns++] = make_state(0x1p-10f, 3, 2, 1, 10, 4);        /* 2^-10 */
    states[ns++] = make_state(0x1p24f, 1999, 0, 0, 123456789012345ULL, 1234567ULL); /* 2^24 */
    states[ns++] = make_state(1.0f, LONG_MAX, INT_MAX, LONG_MAX, ULLONG_MAX, ULLONG_MAX);
    states[ns++] = make_state(FLT_MAX, 1, 1, 0, 1ULL << 63, (1ULL << 63) - 1);
    states[ns++] = make_state(0x1p-149f, 0, 0, 5, 5, 5);        /* smallest subnormal */
    states[ns++] = make_state(0.1f, 42, 3, 2, 4294967296ULL, 4294967295ULL); /* inexact bits */
    states[ns++] = make_state(3.0f, 2000000000L, 65536, 2147483647L, 9007199254740993ULL,
                              9007199254740992ULL);

    extra_clear(&zero_x, 0, 0);                      /* what x NULL writes */
    extra_clear(&xs[0], 0, 0);
    extra_clear(&xs[1], 5, 7);
    extra_clear(&xs[2], ULLONG_MAX, 0);
    extra_add(&xs[2], 0, 2);
    extra_clear(&xs[3], 0, ULLONG_MAX);
    extra_add(&xs[3], 1, WHY_FORWARD);
    extra_add(&xs[3], 2, WHY_GRADIENT);
    extra_add(&xs[3], 30, WHY_PROBE);
    extra_add(&xs[3], 31, WHY_GRADIENT);
    extra_add(&xs[3], 1000, WHY_FORWARD);
    extra_add(&xs[3], INT_MAX, WHY_PROBE);
    extra_longest(&xs[4], 123456789ULL, 4294967296ULL);

    in_scratch(w, sizeof w, "sft_roundtrip.weights");
    sidecar_of(sc, sizeof sc, w);
    for (j = 0; j < 5; j++) {
        const amp_state_extra *xw = j == 0 ? NULL : &xs[j];
        for (k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) {
            for (i = 0; i < ns; i++) {
                amp_dtype d;
                amp_scale_state r;
                amp_weights_id id;
                int found = 0, same_x;
                amp_status ws, rs;
                long n;
                fill_sentinel(&d, &r);
                fill_sentinel_more(&id, &r_x);
                /* The same file each time: every write replaces the previous one. */
                ws = amp_state_file_write(w, dtypes[k], &states[i], NULL, xw, err, sizeof err);
                n = ws == AMP_OK ? read_raw(sc, file, sizeof file) : -1;
                rs = ws == AMP_OK ? amp_state_file_read(w, &d, &r, &id, &r_x, &found, err, sizeof err)
                                  : ws;
                describe(want, sizeof want, dtypes[k], &states[i]);
                snprintf(what, sizeof what, "round trip, %s: %s", xnames[j], want);
                if (rs == AMP_OK && found == 1)
                    describe(got, sizeof got, d, &r);
                else
                    snprintf(got, sizeof got, "write %s, read %s, found %d, \"%s\"",
                             status_name(ws), status_name(rs), found, err);
                same_x = rs == AMP_OK && !extra_diff(j == 0 ? &zero_x : &xs[j], &r_x, xs_got,
                                                     sizeof xs_got);
                if (rs == AMP_OK && !same_x)
                    snprintf(got + strlen(got), sizeof got - strlen(got), "; extras: %s", xs_got);
                check(rs == AMP_OK && found == 1 && d == dtypes[k] && same_state(&r, &states[i]) &&
                          same_x && id.bound == 0,
                      what, "the same state, extras and bound 0", got);

                /* The bytes: counted, the first few differences reported. */
                size = encode_x(bytes, 3, dtypes[k], &states[i], xw);
                ++tried;
                if (!same_bytes(file, n, bytes, size, got, sizeof got) && ++bad_bytes <= 5) {
                    snprintf(what, sizeof what, "the bytes written for %s, %s", xnames[j], want);
                    check(0, what, "the independently encoded bytes", got);
                }
            }
        }
    }
    snprintf(what, sizeof what,
             "all %d round trips wrote the independently encoded version 3 bytes", tried);
    snprintf(got, sizeof got, "%d different", bad_bytes);
    check(bad_bytes == 0, what, "0 different", got);

    /* x NULL: a file with a list is read all the same, its extras ignored. */
    {
        amp_dtype d;
        amp_scale_state r;
        int found = 0;
        amp_status st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &states[1], NULL, &xs[3], err,
                                             sizeof err);
        fill_sentinel(&d, &r);
        if (st == AMP_OK) st = amp_state_file_read(w, &d, &r, NULL, NULL, &found, err, sizeof err);
        snprintf(got, sizeof got, "%s, found %d, same state %d \"%s\"", status_name(st), found,
                 same_state(&r, &states[1]), err);
        check(st == AMP_OK && found == 1 && d == AMP_DTYPE_FLOAT16 && same_state(&r, &states[1]),
              "a file with 6 fallback entries read with x NULL: AMP_OK, the same state",
              "AMP_OK, found 1, same state 1", got);
    }
}

static void test_missing(void)
{
    char w[4200], err[512], got[1024];
    amp_dtype d;
    amp_scale_state s;
    amp_weights_id id;
    static amp_state_extra x;
    int found = 77;
    amp_status st;
    in_scratch(w, sizeof w, "sft_never_written.weights");
    fill_sentinel(&d, &s);
    fill_sentinel_more(&id, &x);
    st = amp_state_file_read(w, &d, &s, &id, &x, &found, err, sizeof err);
    snprintf(got, sizeof got, "%s, found %d, dtype and state %s, weights id and extras %s",
             status_name(st), found, is_sentinel(&d, &s) ? "untouched" : "WRITTEN",
             is_sentinel_more(&id, &x) ? "untouched" : "WRITTEN");
    check(st == AMP_OK && found == 0 && is_sentinel(&d, &s) && is_sentinel_more(&id, &x),
          "missing sidecar: AMP_OK, found 0, dtype, state, weights id and extras untouched",
          "AMP_OK, found 0, outputs untouched", got);
}

/* State A, and the extras of the base files: layers 3 (forward) and 17
 * (gradient) fallen back, 4 forward and 2 loss skips. */
static amp_scale_state state_a(void)
{
    return make_state(1024.0f, 17, 2, 0, 100, 3);
}

static void extra_a(amp_state_extra *x)
{
    extra_clear(x, 4, 2);
    extra_add(x, 3, 1);
    extra_add(x, 17, 2);
}

/* A valid version 3 file of state A with extras x (NULL: none) in the sidecar
 * of weights, by the writer; its bytes in base (BUF_SIZE). Returns its size,
 * or 0 (reported) when it could not be made. */
static size_t write_base(const char *weights, const amp_state_extra *x, unsigned char *base)
{
    char sc[4200], err[512], got[1024];
    const amp_scale_state a = state_a();
    const size_t want = V3_SIZE(x ? x->nfallback : 0);
    amp_status st = amp_state_file_write(weights, AMP_DTYPE_FLOAT16, &a, NULL, x, err, sizeof err);
    long n = -1;
    sidecar_of(sc, sizeof sc, weights);
    if (st != AMP_OK || (n = read_raw(sc, base, BUF_SIZE)) != (long)want) {
        snprintf(got, sizeof got, "%s, %ld bytes \"%s\"", status_name(st), n, err);
        snprintf(err, sizeof err, "AMP_OK and %zu bytes", want);
        check(0, "writing a base file", err, got);
        return 0;
    }
    return want;
}

static void test_byte_changes(void)
{
    char w[4200], sc[4200], got[1024], msg[512], what[1024];
    unsigned char base[BUF_SIZE], b[BUF_SIZE];
    amp_state_extra x;
    size_t size;
    int pos, xv, bad, tried, list;

    in_scratch(w, sizeof w, "sft_flip.weights");
    sidecar_of(sc, sizeof sc, w);
    extra_a(&x);
    /* Without a list and with layers 3 and 17: the list's bytes are covered. */
    for (list = 0; list < 2; list++) {
        if ((size = write_base(w, list ? &x : NULL, base)) == 0) return;
        bad = tried = 0;
        /* Every position, every non-zero xor: CRC-32 catches any error burst
         * of up to 32 bits, so not one of these may be accepted. */
        for (pos = 0; pos < (int)size; pos++) {
            for (xv = 1; xv < 256; xv++) {
                memcpy(b, base, size);
                b[pos] ^= (unsigned char)xv;
                ++tried;
                if (write_raw(sc, b, size) != 0) {
                    snprintf(what, sizeof what, "writing the changed file (byte %d ^ 0x%02x)", pos,
                             xv);
                    check(0, what, "a written file", strerror(errno));
                    return;
                }
                if (!refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0)) {
                    if (++bad <= 20) { /* the first few say enough */
                        snprintf(what, sizeof what, "n = %d: byte %d ^ 0x%02x refused", list ? 2 : 0,
                                 pos, xv);
                        check(0, what,
                              "AMP_ERR_FORMAT, found 0, outputs untouched, message naming the file",
                              got);
                    }
                }
            }
        }
        snprintf(what, sizeof what,
                 "all %d single-byte changes (%zu positions x 255 xor values) of a version 3 file "
                 "with %d fallback entries refused with AMP_ERR_FORMAT, outputs untouched, message "
                 "naming the file",
                 tried, size, list ? 2 : 0);
        snprintf(got, sizeof got, "%d accepted or wrongly refused", bad);
        check(bad == 0 && tried == (int)size * 255, what, "0 accepted or wrongly refused", got);
    }

    /* The flip of byte 20 (scale) and of a why (byte 108) show what a user reads. */
    memcpy(b, base, size);
    b[20] ^= 0x01;
    if (write_raw(sc, b, size) == 0) {
        refused(w, AMP_ERR_FORMAT, "checksum", got, sizeof got, msg, sizeof msg);
        snprintf(what, sizeof what, "a flipped scale bit is a checksum mismatch: \"%s\"", msg);
        check(strstr(msg, "checksum") != NULL, what, "a message mentioning the checksum", got);
    }
    memcpy(b, base, size);
    b[108] ^= 0x02;
    if (write_raw(sc, b, size) == 0) {
        refused(w, AMP_ERR_FORMAT, "checksum", got, sizeof got, msg, sizeof msg);
        snprintf(what, sizeof what,
                 "a flipped bit in a fallback entry's why is a checksum mismatch: \"%s\"", msg);
        check(strstr(msg, "checksum") != NULL, what, "a message mentioning the checksum", got);
    }
}

static void test_truncation_and_trailing(void)
{
    char w[4200], sc[4200], got[1024], msg[512], what[1024];
    static unsigned char base[BUF_SIZE], b[BUF_SIZE];
    static amp_state_extra x;
    size_t size, sizes[3];
    int len, bad = 0, tried = 0, k;

    in_scratch(w, sizeof w, "sft_trunc.weights");
    sidecar_of(sc, sizeof sc, w);
    /* Every length short of a whole file, for no list, 2 entries and the
     * longest list. */
    for (k = 0; k < 3; k++) {
        if (k == 1)
            extra_a(&x);
        else if (k == 2)
            extra_longest(&x, 4, 2);
        if ((size = write_base(w, k == 0 ? NULL : &x, base)) == 0) return;
        sizes[k] = size;
        for (len = 0; len < (int)size; len++) {
            ++tried;
            if (write_raw(sc, base, (size_t)len) != 0 ||
                !refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0)) {
                if (++bad <= 20) {
                    snprintf(what, sizeof what, "a %zu-byte file truncated to %d bytes refused",
                             size, len);
                    check(0, what,
                          "AMP_ERR_FORMAT, found 0, outputs untouched, message naming the file",
                          got);
                }
            }
        }
    }
    snprintf(what, sizeof what,
             "all %d truncations (to 0..%zu, 0..%zu and 0..%zu bytes of files with 0, 2 and %d "
             "fallback entries) refused with AMP_ERR_FORMAT, outputs untouched",
             tried, sizes[0] - 1, sizes[1] - 1, sizes[2] - 1, AMP_STATE_MAX_FALLBACK);
    snprintf(got, sizeof got, "%d not refused", bad);
    check(bad == 0, what, "0 not refused", got);

    /* The longest file and one byte more: exactly what the reader's buffer
     * holds. */
    memcpy(b, base, sizes[2]);
    b[sizes[2]] = 0;
    write_raw(sc, b, sizes[2] + 1);
    {
        int ok = refused(w, AMP_ERR_FORMAT, "trailing", got, sizeof got, msg, sizeof msg);
        snprintf(what, sizeof what, "one trailing byte after the longest list (%zu bytes) refused: "
                 "\"%s\"", sizes[2], msg);
        check(ok, what, "AMP_ERR_FORMAT, outputs untouched, a message saying trailing", got);
    }

    extra_a(&x);
    if ((size = write_base(w, &x, base)) == 0) return;
    write_raw(sc, base, 40);
    refused(w, AMP_ERR_FORMAT, "truncated", got, sizeof got, msg, sizeof msg);
    snprintf(what, sizeof what, "a 40-byte file is reported as truncated: \"%s\"", msg);
    check(strstr(msg, "truncated") != NULL, what, "a message saying truncated", got);
    write_raw(sc, base, 116);
    refused(w, AMP_ERR_FORMAT, "truncated", got, sizeof got, msg, sizeof msg);
    snprintf(what, sizeof what,
             "a 2-entry file cut after its first entry (116 bytes) is reported as truncated: \"%s\"",
             msg);
    check(strstr(msg, "truncated") != NULL, what, "a message saying truncated", got);

    memcpy(b, base, size);
    b[size] = 0;
    write_raw(sc, b, size + 1);
    {
        int ok = refused(w, AMP_ERR_FORMAT, "trailing", got, sizeof got, msg, sizeof msg);
        snprintf(what, sizeof what, "one trailing byte refused: \"%s\"", msg);
        check(ok, what, "AMP_ERR_FORMAT, outputs untouched, a message saying trailing", got);
    }
    memset(b + size, 0xEE, 100);
    write_raw(sc, b, size + 100);
    check(refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0), "100 trailing bytes refused",
          "AMP_ERR_FORMAT, outputs untouched", got);
    /* A whole entry more: the file of n + 1 entries with n's header. */
    memcpy(b + size - 4, base + LIST_OFFSET, 8);
    le32(b + size + 4, crc32_ref(b, size + 4));
    write_raw(sc, b, size + 8);
    check(refused(w, AMP_ERR_FORMAT, "trailing", got, sizeof got, NULL, 0),
          "one more whole entry than n says (and a CRC-32 at the end) refused as trailing bytes",
          "AMP_ERR_FORMAT, outputs untouched, a message saying trailing", got);
}

/* Reads weights' sidecar and says whether it was accepted as want_d, want_s
 * and want_x (extras; zeros for versions 1 and 2). got: what was read. */
static int accepted(const char *weights, amp_dtype want_d, const amp_scale_state *want_s,
                    const amp_state_extra *want_x, char *got, size_t gotlen)
{
    char err[512], xs[400];
    amp_dtype d;
    amp_scale_state s;
    amp_weights_id id;
    static amp_state_extra x;
    int found = 77, same_x;
    amp_status st;
    fill_sentinel(&d, &s);
    fill_sentinel_more(&id, &x);
    st = amp_state_file_read(weights, &d, &s, &id, &x, &found, err, sizeof err);
    same_x = st == AMP_OK && !extra_diff(want_x, &x, xs, sizeof xs);
    if (st == AMP_OK && found == 1) {
        describe(got, gotlen, d, &s);
        snprintf(got + strlen(got), gotlen - strlen(got), "; extras: %s", xs);
    } else {
        snprintf(got, gotlen, "%s, found %d \"%s\"", status_name(st), found, err);
    }
    return st == AMP_OK && found == 1 && d == want_d && same_state(&s, want_s) && same_x;
}

/* A field of a file set to a value behind a correct CRC, and the word the
 * refusal must say. */
typedef struct crafted {
    const char *what, *contains;
    int off, width; /* width 4 or 8 */
    uint64_t value;
} crafted;

/* base (size bytes, a file of kind) with c's field set and its CRC made right
 * is refused: AMP_ERR_FORMAT, outputs untouched, a message naming the file
 * and saying c->contains. */
static void check_crafted(const char *w, const char *sc, const char *kind,
                          const unsigned char *base, size_t size, const crafted *c)
{
    char got[1400], msg[512], what[1024];
    static unsigned char b[BUF_SIZE];
    int ok;
    memcpy(b, base, size);
    if (c->width == 4)
        le32(b + c->off, (uint32_t)c->value);
    else
        le64(b + c->off, c->value);
    fix_crc(b, size);
    write_raw(sc, b, size);
    ok = refused(w, AMP_ERR_FORMAT, c->contains, got, sizeof got, msg, sizeof msg);
    snprintf(what, sizeof what, "%s: %s with a correct CRC refused: \"%s\"", kind, c->what, msg);
    snprintf(got + strlen(got), sizeof got - strlen(got), " (must mention \"%s\")", c->contains);
    check(ok, what, "AMP_ERR_FORMAT, outputs untouched, message naming the file and the field",
          got);
}

/* A whole file (size bytes) behind a correct CRC is refused, saying contains. */
static void check_crafted_file(const char *w, const char *sc, const char *what_file,
                               const unsigned char *b, size_t size, const char *contains)
{
    char got[1400], msg[512], what[1024];
    int ok;
    write_raw(sc, b, size);
    ok = refused(w, AMP_ERR_FORMAT, contains, got, sizeof got, msg, sizeof msg);
    snprintf(what, sizeof what, "%s refused: \"%s\"", what_file, msg);
    snprintf(got + strlen(got), sizeof got - strlen(got), " (must mention \"%s\")", contains);
    check(ok, what, "AMP_ERR_FORMAT, outputs untouched, message naming the file and what is wrong",
          got);
}

/* Files with a correct CRC whose header, values or fallback list are wrong:
 * the values in files of all three versions, the headers and lists in the
 * version each belongs to. */
static void test_crafted(void)
{
    char w[4200], sc[4200], got[1024], what[1024];
    static unsigned char base[BUF_SIZE], v2[BUF_SIZE], v1[BUF_SIZE], b[BUF_SIZE];
    static amp_state_extra x, zero_x;
    const amp_scale_state a = state_a();
    size_t size, i, k;
    static const crafted values[] = {
        {"scale NaN", "scale", 20, 4, 0x7FC00000u},
        {"scale NaN with payload, sign set", "scale", 20, 4, 0xFF800001u},
        {"scale +inf", "scale", 20, 4, 0x7F800000u},
        {"scale -inf", "scale", 20, 4, 0xFF800000u},
        {"scale 0", "scale", 20, 4, 0x00000000u},
        {"scale -0", "scale", 20, 4, 0x80000000u},
        {"scale -1", "scale", 20, 4, 0xBF800000u},
        {"scale -2^-149", "scale", 20, 4, 0x80000001u},
        {"dtype 3", "dtype", 16, 4, 3},
        {"dtype 0xFFFFFFFF", "dtype", 16, 4, 0xFFFFFFFFu},
        {"growth_tracker -1", "growth_tracker", 24, 8, UINT64_MAX},
        {"growth_tracker INT64_MIN", "growth_tracker", 24, 8, 1ULL << 63},
        {"hysteresis_left -1", "hysteresis_left", 32, 4, 0xFFFFFFFFu},
        {"consecutive_skips -1", "consecutive_skips", 36, 8, UINT64_MAX},
        {"skips 101 > steps 100", "skips", 52, 8, 101},
        /* not in version 1 */
        {"bound 2", "bound", 60, 4, 2},
        {"bound 0 with a weights seen", "bound", 64, 8, 5},
        {"bound 0 with a weights size", "bound", 72, 8, 1000},
        {"bound 0 with a weights CRC", "bound", 80, 4, 0xDEADBEEFu},
    };
    /* On the 2-entry base: layers 3 (why 1) at 104, 17 (why 2) at 112. */
    static const crafted v3_cases[] = {
        {"format version 4", "version", 8, 4, 4},
        {"format version 0", "version", 8, 4, 0},
        {"format version 0xFFFFFFFF", "version", 8, 4, 0xFFFFFFFFu},
        {"format version 2 with version 3's length", "length", 8, 4, 2},
        {"format version 1 with version 3's length", "length", 8, 4, 1},
        {"payload length 45", "length", 12, 4, 45},
        {"payload length 68 (version 2's)", "length", 12, 4, 68},
        {"payload length 88 (n 0's) with n 2", "length", 12, 4, 88},
        {"payload length 96 (n 1's) with n 2", "length", 12, 4, 96},
        {"payload length 112 (n 3's) with n 2", "length", 12, 4, 112},
        {"n 0 with n 2's payload length", "length", 100, 4, 0},
        {"n 1 with n 2's payload length", "length", 100, 4, 1},
        {"n 3 with n 2's payload length", "length", 100, 4, 3},
        {"n 1025", "fell back", 100, 4, 1025},
        {"n 0x20000002 (88 + 8 n is n 2's 104 in 32 bits)", "fell back", 100, 4, 0x20000002u},
        {"n 0x80000000", "fell back", 100, 4, 0x80000000u},
        {"n 0xFFFFFFFF", "fell back", 100, 4, 0xFFFFFFFFu},
        {"layers out of order (3, then 2)", "fallback", 112, 4, 2},
        {"layers out of order (18, then 17)", "fallback", 104, 4, 18},
        {"layers equal (3, then 3)", "fallback", 112, 4, 3},
        {"layer 2^31 (3, then 0x80000000: increasing as a u32)", "fallback", 112, 4,
         0x80000000u},
        {"layer 2^32 - 1 (3, then 0xFFFFFFFF)", "fallback", 112, 4, 0xFFFFFFFFu},
        {"first layer 2^31", "fallback", 104, 4, 0x80000000u},
        {"why 0", "fallback", 108, 4, 0},
        {"why 4", "fallback", 108, 4, 4},
        {"why 0x101 (1 in its low byte)", "fallback", 116, 4, 0x101},
        {"why 0x103 (3 in its low byte)", "fallback", 116, 4, 0x103},
        {"why 0x80000001", "fallback", 116, 4, 0x80000001u},
        {"why 0xFFFFFFFF", "fallback", 116, 4, 0xFFFFFFFFu},
    };
    static const crafted v2_cases[] = {
        {"format version 3 with version 2's length", "version", 8, 4, 3},
        {"format version 1 with version 2's length", "length", 8, 4, 1},
        {"format version 4", "version", 8, 4, 4},
        {"payload length 45", "length", 12, 4, 45},
        {"payload length 88 (version 3's with n 0)", "length", 12, 4, 88},
    };
    static const crafted v1_cases[] = {
        {"format version 2 with version 1's length", "length", 8, 4, 2},
        {"format version 3 with version 1's length", "version", 8, 4, 3},
        {"payload length 68 (version 2's)", "length", 12, 4, 68},
    };

    in_scratch(w, sizeof w, "sft_crafted.weights");
    sidecar_of(sc, sizeof sc, w);
    extra_a(&x);
    extra_clear(&zero_x, 0, 0);
    if ((size = write_base(w, &x, base)) == 0) return;
    v3_to_v2(base, v2);
    encode(v1, 1, AMP_DTYPE_FLOAT16, &a);

    /* Controls: the test's own CRC of each base is the writer's, and the
     * bases are accepted, so the refusals below come from the values. */
    memcpy(b, base, size);
    fix_crc(b, size);
    write_raw(sc, b, size);
    snprintf(got, sizeof got, "CRC %s; ", memcmp(b, base, size) == 0 ? "the same" : "DIFFERENT");
    check(memcmp(b, base, size) == 0 &&
              accepted(w, AMP_DTYPE_FLOAT16, &a, &x, got + strlen(got), sizeof got - strlen(got)),
          "control: the test's CRC of an unchanged version 3 file equals the writer's and it is "
          "accepted",
          "the same CRC, AMP_OK with state A and its extras", got);
    write_raw(sc, v2, V2_FILE_SIZE);
    check(accepted(w, AMP_DTYPE_FLOAT16, &a, &zero_x, got, sizeof got),
          "control: the version 2 base is accepted, its extras zero", "AMP_OK with state A", got);
    write_raw(sc, v1, V1_FILE_SIZE);
    check(accepted(w, AMP_DTYPE_FLOAT16, &a, &zero_x, got, sizeof got),
          "control: the version 1 base is accepted, its extras zero", "AMP_OK with state A", got);

    for (i = 0; i < sizeof values / sizeof values[0]; i++) {
        check_crafted(w, sc, "version 3", base, size, &values[i]);
        check_crafted(w, sc, "version 2", v2, V2_FILE_SIZE, &values[i]);
        if (values[i].off + values[i].width <= V1_CRC_OFFSET)
            check_crafted(w, sc, "version 1", v1, V1_FILE_SIZE, &values[i]);
    }
    for (i = 0; i < sizeof v3_cases / sizeof v3_cases[0]; i++)
        check_crafted(w, sc, "version 3", base, size, &v3_cases[i]);
    for (i = 0; i < sizeof v2_cases / sizeof v2_cases[0]; i++)
        check_crafted(w, sc, "version 2", v2, V2_FILE_SIZE, &v2_cases[i]);
    for (i = 0; i < sizeof v1_cases / sizeof v1_cases[0]; i++)
        check_crafted(w, sc, "version 1", v1, V1_FILE_SIZE, &v1_cases[i]);

    /* Headers consistent in themselves, other than the file. */
    memcpy(b, base, size);
    le32(b + N_OFFSET, 1);
    le32(b + 12, 96);
    fix_crc(b, size);
    check_crafted_file(w, sc, "n 1 with n 1's payload length in n 2's 124 bytes (CRC at the end)",
                       b, size, "trailing");
    fix_crc(b, V3_SIZE(1));
    check_crafted_file(w, sc, "n 1 with n 1's payload length and CRC at 112, in 124 bytes", b, size,
                       "trailing");
    memcpy(b, base, size);
    le32(b + N_OFFSET, 3);
    le32(b + 12, 112);
    fix_crc(b, size);
    check_crafted_file(w, sc, "n 3 with n 3's payload length in n 2's 124 bytes", b, size,
                       "truncated");
    /* 0x20000000 entries: 88 + 8 n and 108 + 8 n are 88 and 108 in 32 bits. */
    encode(b, 3, AMP_DTYPE_FLOAT16, &a);
    le32(b + N_OFFSET, 0x20000000u);
    fix_crc(b, V3_SIZE(0));
    check_crafted_file(w, sc,
                       "n 0x20000000 with payload length 88 in 108 bytes (sizes that wrap a u32)",
                       b, V3_SIZE(0), "fell back");

    /* The longest list is read; one entry more, in a file whose length, size
     * and CRC all agree with it, is not. */
    extra_clear(&x, 1, 1);
    for (k = 0; k < AMP_STATE_MAX_FALLBACK; k++) extra_add(&x, (int)k, 1 + (int)(k % 3));
    size = encode_x(b, 3, AMP_DTYPE_FLOAT16, &a, &x);
    write_raw(sc, b, size);
    snprintf(what, sizeof what, "%d fallback entries (the most, %zu bytes) accepted",
             AMP_STATE_MAX_FALLBACK, size);
    check(accepted(w, AMP_DTYPE_FLOAT16, &a, &x, got, sizeof got), what,
          "AMP_OK with the same state and list", got);
    le32(b + size - 4, (uint32_t)AMP_STATE_MAX_FALLBACK); /* entry 1024: layer 1024, why 1 */
    le32(b + size, 1);
    le32(b + N_OFFSET, (uint32_t)AMP_STATE_MAX_FALLBACK + 1);
    le32(b + 12, (uint32_t)(88 + 8 * (AMP_STATE_MAX_FALLBACK + 1)));
    size = V3_SIZE(AMP_STATE_MAX_FALLBACK + 1);
    fix_crc(b, size);
    snprintf(what, sizeof what, "%d fallback entries in %zu bytes, length and CRC consistent",
             AMP_STATE_MAX_FALLBACK + 1, size);
    check_crafted_file(w, sc, what, b, size, "fell back");

    /* Boundary values the reader must accept. */
    {
        amp_scale_state edge = make_state(0x1p-149f, 0, 0, 0, 9, 9);
        int version;
        for (version = 3; version >= 2; version--) {
            size = encode(b, (uint32_t)version, AMP_DTYPE_FLOAT32, &edge);
            write_raw(sc, b, size);
            snprintf(what, sizeof what,
                     "version %d: boundary values accepted (subnormal scale, hysteresis_left 0, "
                     "skips == steps)",
                     version);
            check(accepted(w, AMP_DTYPE_FLOAT32, &edge, &zero_x, got, sizeof got), what,
                  "AMP_OK with the same state", got);
        }
        extra_clear(&x, UINT64_MAX, UINT64_MAX);
        extra_add(&x, 0, WHY_GRADIENT);
        extra_add(&x, 1, WHY_PROBE);
        extra_add(&x, INT_MAX, WHY_FORWARD);
        size = encode_x(b, 3, AMP_DTYPE_FLOAT32, &edge, &x);
        write_raw(sc, b, size);
        check(accepted(w, AMP_DTYPE_FLOAT32, &edge, &x, got, sizeof got),
              "boundary extras accepted (forward and loss skips 2^64 - 1, layers 0 and 2^31 - 1, "
              "whys 1 to 3)",
              "AMP_OK with the same extras", got);
    }
}

static int stray_files(const char *prefix, const char *keep, long allowed_pid, char *report,
                       size_t size);

static void test_writer_refuses_invalid(void)
{
    char w[4200], sc[4200], err[512], got[1024], what[1024];
    amp_scale_state bad[6];
    const char *names[6] = {"scale NaN", "scale 0", "scale -1", "growth_tracker -1",
                            "hysteresis_left -1", "skips > steps"};
    const uint32_t nan_bits = 0x7FC00000u;
    int i;
    bad[0] = make_state(0.0f, 0, 1, 0, 0, 0);
    memcpy(&bad[0].scale, &nan_bits, sizeof bad[0].scale);
    bad[1] = make_state(0.0f, 0, 1, 0, 0, 0);
    bad[2] = make_state(-1.0f, 0, 1, 0, 0, 0);
    bad[3] = make_state(1.0f, -1, 1, 0, 0, 0);
    bad[4] = make_state(1.0f, 0, -1, 0, 0, 0);
    bad[5] = make_state(1.0f, 0, 1, 0, 3, 4);
    in_scratch(w, sizeof w, "sft_invalid.weights");
    sidecar_of(sc, sizeof sc, w);
    unlink(sc);
    for (i = 0; i < 6; i++) {
        amp_status st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &bad[i], NULL, NULL, err, sizeof err);
        snprintf(what, sizeof what, "writer refuses %s, writes nothing: \"%s\"", names[i], err);
        snprintf(got, sizeof got, "%s, sidecar %s", status_name(st),
                 exists(sc) ? "exists" : "absent");
        check(st == AMP_ERR_INVALID && !exists(sc) && strstr(err, sc) != NULL, what,
              "AMP_ERR_INVALID, no sidecar, message naming it", got);
    }
    {
        amp_scale_state ok = make_state(1.0f, 0, 1, 0, 0, 0);
        amp_status st = amp_state_file_write(w, (amp_dtype)3, &ok, NULL, NULL, err, sizeof err);
        snprintf(got, sizeof got, "%s \"%s\"", status_name(st), err);
        check(st == AMP_ERR_INVALID && !exists(sc), "writer refuses dtype 3", "AMP_ERR_INVALID",
              got);
    }
}

/* Extras the reader would refuse: the writer says AMP_ERR_INVALID and writes
 * nothing, neither where no sidecar is nor over one. */
static void test_writer_refuses_bad_extras(void)
{
    enum { NBAD = 11 };
    char w[4200], sc[4200], err[512], got[1024], what[1400];
    static amp_state_extra bad[NBAD];
    static unsigned char before[BUF_SIZE], after[BUF_SIZE];
    const char *names[NBAD] = {"nfallback -1", "nfallback 1025", "nfallback INT_MIN",
                               "layers out of order (17, then 3)", "layers equal (3, then 3)",
                               "layer -1", "layer INT_MIN after layer 3", "why 0", "why 4",
                               "why -1", "why 2 then why 0"};
    const amp_scale_state ok = make_state(1.0f, 0, 1, 0, 0, 0);
    long n_before, n_after;
    int i, changed = 0, strays;

    for (i = 0; i < NBAD; i++) extra_clear(&bad[i], 1, 1);
    extra_add(&bad[0], 3, 1);
    bad[0].nfallback = -1;
    extra_longest(&bad[1], 1, 1);
    bad[1].nfallback = AMP_STATE_MAX_FALLBACK + 1;
    bad[2].nfallback = INT_MIN;
    extra_add(&bad[3], 17, 1);
    extra_add(&bad[3], 3, 2);
    extra_add(&bad[4], 3, 1);
    extra_add(&bad[4], 3, 2);
    extra_add(&bad[5], -1, 1);
    extra_add(&bad[6], 3, 1);
    extra_add(&bad[6], INT_MIN, 2);
    extra_add(&bad[7], 3, 0);
    extra_add(&bad[8], 3, 4);
    extra_add(&bad[9], 3, -1);
    extra_add(&bad[10], 3, 2);
    extra_add(&bad[10], 17, 0);

    in_scratch(w, sizeof w, "sft_badextra.weights");
    sidecar_of(sc, sizeof sc, w);
    unlink(sc);
    for (i = 0; i < NBAD; i++) {
        amp_status st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &ok, NULL, &bad[i], err, sizeof err);
        snprintf(what, sizeof what, "writer refuses %s, writes nothing: \"%s\"", names[i], err);
        snprintf(got, sizeof got, "%s, sidecar %s", status_name(st),
                 exists(sc) ? "exists" : "absent");
        check(st == AMP_ERR_INVALID && !exists(sc) && strstr(err, sc) != NULL, what,
              "AMP_ERR_INVALID, no sidecar, message naming it", got);
        unlink(sc);
    }

    /* Over a sidecar: it keeps its bytes, and no temporary file is left. */
    {
        amp_state_extra x;
        extra_a(&x);
        if (amp_state_file_write(w, AMP_DTYPE_FLOAT16, &ok, NULL, &x, err, sizeof err) != AMP_OK) {
            check(0, "writing a sidecar to keep", "AMP_OK", err);
            return;
        }
    }
    n_before = read_raw(sc, before, sizeof before);
    if (n_before != (long)V3_SIZE(2)) {
        snprintf(got, sizeof got, "%ld bytes", n_before);
        check(0, "reading the sidecar to keep", "124 bytes", got);
        return;
    }
    for (i = 0; i < NBAD; i++) {
        amp_status st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &ok, NULL, &bad[i], err, sizeof err);
        n_after = read_raw(sc, after, sizeof after);
        if (st != AMP_ERR_INVALID || n_after != n_before ||
            memcmp(before, after, (size_t)n_before) != 0) {
            ++changed;
            snprintf(what, sizeof what, "writer refuses %s over a sidecar, which keeps its %ld bytes",
                     names[i], n_before);
            snprintf(got, sizeof got, "%s, %ld bytes%s \"%s\"", status_name(st), n_after,
                     n_after == n_before ? ", changed" : "", err);
            check(0, what, "AMP_ERR_INVALID, the sidecar unchanged", got);
            write_raw(sc, before, (size_t)n_before); /* the next case starts from it again */
        }
    }
    strays = stray_files("sft_badextra.weights", "sft_badextra.weights.amp", 0, got, sizeof got);
    snprintf(what, sizeof what,
             "all %d bad extras refused over an existing sidecar, which keeps its bytes; besides it "
             "the directory holds: %s", NBAD, got);
    snprintf(got, sizeof got, "%d written or accepted, %d stray files", changed, strays);
    check(changed == 0 && strays == 0, what, "0 written or accepted, 0 stray files", got);
}

static void test_io_errors(void)
{
    char w[4200], sc[4200], dir[4200], err[512], got[1024], what[1024];
    amp_scale_state s = make_state(2.0f, 0, 1, 0, 0, 0);
    amp_status st;

    in_scratch(w, sizeof w, "sft_no_such_dir/sub/x.weights");
    sidecar_of(sc, sizeof sc, w);
    st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, NULL, err, sizeof err);
    snprintf(what, sizeof what, "write into a missing directory: \"%s\"", err);
    snprintf(got, sizeof got, "%s, message %s the path", status_name(st),
             strstr(err, sc) ? "names" : "does NOT name");
    check(st == AMP_ERR_IO && strstr(err, sc) != NULL, what, "AMP_ERR_IO, message names the path",
          got);

    in_scratch(dir, sizeof dir, "sft_readonly_dir");
    mkdir(dir, 0755);
    chmod(dir, 0555);
    in_scratch(w, sizeof w, "sft_readonly_dir/x.weights");
    sidecar_of(sc, sizeof sc, w);
    if (geteuid() == 0) {
        printf("skip: write into a non-writable directory: running as root, which bypasses "
               "directory permissions\n");
    } else {
        st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, NULL, err, sizeof err);
        snprintf(what, sizeof what, "write into a non-writable directory: \"%s\"", err);
        snprintf(got, sizeof got, "%s, message %s the path", status_name(st),
                 strstr(err, sc) ? "names" : "does NOT name");
        check(st == AMP_ERR_IO && strstr(err, sc) != NULL && !exists(sc), what,
              "AMP_ERR_IO, message names the path, no sidecar", got);
    }
    chmod(dir, 0755);

    /* A sidecar that is a directory: open() succeeds, read() fails (EISDIR). */
    in_scratch(w, sizeof w, "sft_isdir.weights");
    sidecar_of(sc, sizeof sc, w);
    mkdir(sc, 0755);
    {
        int ok = refused(w, AMP_ERR_IO, NULL, got, sizeof got, err, sizeof err);
        snprintf(what, sizeof what, "a sidecar that cannot be read (a directory): \"%s\"", err);
        check(ok, what, "AMP_ERR_IO, outputs untouched, message naming the path", got);
    }
    /* Writing over it fails at the rename and leaves no temporary file. */
    st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, NULL, err, sizeof err);
    snprintf(what, sizeof what, "write over a directory in the sidecar's place: \"%s\"", err);
    snprintf(got, sizeof got, "%s", status_name(st));
    check(st == AMP_ERR_IO && strstr(err, sc) != NULL, what, "AMP_ERR_IO naming the path", got);
    check(stray_files("sft_isdir.weights", "sft_isdir.weights.amp", 0, got, sizeof got) == 0,
          "the failed write removed its temporary file", "nothing", got);

    in_scratch(w, sizeof w, "sft_noperm.weights");
    sidecar_of(sc, sizeof sc, w);
    if (geteuid() == 0) {
        printf("skip: read of a sidecar without read permission: running as root, which bypasses "
               "file permissions\n");
    } else if (amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, NULL, err, sizeof err) == AMP_OK) {
        int ok;
        chmod(sc, 0);
        ok = refused(w, AMP_ERR_IO, NULL, got, sizeof got, err, sizeof err);
        snprintf(what, sizeof what, "read of a sidecar without read permission: \"%s\"", err);
        check(ok, what, "AMP_ERR_IO, outputs untouched, message naming the path", got);
        chmod(sc, 0644);
    }
}

static void test_err_buffers(void)
{
    char w[4200], sc[4200], small[8], untouched[16], got[1024];
    unsigned char junk[3] = {1, 2, 3};
    amp_scale_state s = make_state(2.0f, 0, 1, 0, 0, 0);
    amp_dtype d;
    int found, i, ok;
    amp_status a, b, c;

    in_scratch(w, sizeof w, "sft_no_such_dir/x.weights");
    a = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, NULL, NULL, 0);
    b = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, NULL, NULL, 100);
    in_scratch(w, sizeof w, "sft_errbuf.weights");
    sidecar_of(sc, sizeof sc, w);
    write_raw(sc, junk, sizeof junk);
    c = amp_state_file_read(w, &d, &s, NULL, NULL, &found, NULL, 0);
    snprintf(got, sizeof got, "%s, %s, %s", status_name(a), status_name(b), status_name(c));
    check(a == AMP_ERR_IO && b == AMP_ERR_IO && c == AMP_ERR_FORMAT,
          "err NULL: failing write (errlen 0 and 100) and read still return their status",
          "AMP_ERR_IO, AMP_ERR_IO, AMP_ERR_FORMAT", got);

    memset(untouched, 'X', sizeof untouched);
    c = amp_state_file_read(w, &d, &s, NULL, NULL, &found, untouched, 0);
    for (ok = 1, i = 0; i < (int)sizeof untouched; i++) ok &= untouched[i] == 'X';
    snprintf(got, sizeof got, "%s, buffer %s", status_name(c), ok ? "untouched" : "WRITTEN");
    check(c == AMP_ERR_FORMAT && ok, "errlen 0: the err buffer is not touched",
          "AMP_ERR_FORMAT, buffer untouched", got);

    memset(small, 'X', sizeof small);
    c = amp_state_file_read(w, &d, &s, NULL, NULL, &found, small, sizeof small);
    ok = memchr(small, '\0', sizeof small) != NULL;
    snprintf(got, sizeof got, "%s, %s", status_name(c), ok ? "terminated" : "NOT terminated");
    check(c == AMP_ERR_FORMAT && ok, "an 8-byte err buffer gets a NUL-terminated message",
          "AMP_ERR_FORMAT, terminated", got);

    c = amp_state_file_read(NULL, &d, &s, NULL, NULL, &found, NULL, 0);
    a = amp_state_file_write(NULL, AMP_DTYPE_FLOAT16, &s, NULL, NULL, NULL, 0);
    b = amp_state_file_write(w, AMP_DTYPE_FLOAT16, NULL, NULL, NULL, NULL, 0);
    snprintf(got, sizeof got, "%s, %s, %s", status_name(c), status_name(a), status_name(b));
    check(a == AMP_ERR_INVALID && b == AMP_ERR_INVALID && c == AMP_ERR_INVALID,
          "NULL weights path or state: AMP_ERR_INVALID", "AMP_ERR_INVALID x3", got);
}

/* Entries of the scratch directory starting with prefix, other than keep and
 * the temporary name of pid allowed (may be 0); reports them all. Returns the
 * number of unexpected ones. */
static int stray_files(const char *prefix, const char *keep, long allowed_pid, char *report,
                       size_t size)
{
    DIR *dp = opendir(scratch);
    struct dirent *e;
    char allowed[300];
    int unexpected = 0;
    size_t used = 0;
    report[0] = '\0';
    snprintf(allowed, sizeof allowed, "%s.tmp.%ld.", keep, allowed_pid);
    if (!dp) return -1;
    while ((e = readdir(dp)) != NULL) {
        char path[4200];
        struct stat st;
        const char *kind;
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || strcmp(e->d_name, keep) == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", scratch, e->d_name);
        if (allowed_pid && strncmp(e->d_name, allowed, strlen(allowed)) == 0) {
            kind = "the killed writer's temporary file";
        } else {
            kind = "UNEXPECTED";
            ++unexpected;
        }
        if (stat(path, &st) != 0) st.st_size = -1;
        if (used < size) {
            int n = snprintf(report + used, size - used, "%s%s (%ld bytes, %s)", used ? ", " : "",
                             e->d_name, (long)st.st_size, kind);
            if (n > 0) used += (size_t)n;
        }
    }
    closedir(dp);
    if (!report[0]) snprintf(report, size, "nothing");
    return unexpected;
}

static void test_interrupted_save(void)
{
    char w[4200], sc[4200], err[512], want[400], got[1200], what[1400], xs[400];
    amp_scale_state a = make_state(0x1p-10f, 12, 1, 0, 777, 5);
    amp_scale_state b = make_state(0x1p24f, 0, 2, 3, 900, 40), r;
    /* A with 2 fallback entries, B with the longest list: its half is more
     * than A's whole file. */
    static amp_state_extra xa, xb, xr;
    amp_dtype d;
    amp_status st;
    int status = 0, found = 0, unexpected;
    pid_t pid;

    extra_a(&xa);
    extra_longest(&xb, 9, 8);
    in_scratch(w, sizeof w, "sft_atomic.weights");
    sidecar_of(sc, sizeof sc, w);
    st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &a, NULL, &xa, err, sizeof err);
    snprintf(got, sizeof got, "%s \"%s\"", status_name(st), err);
    check(st == AMP_OK, "write state A", "AMP_OK", got);

    unexpected = stray_files("sft_atomic.weights", "sft_atomic.weights.amp", 0, got, sizeof got);
    check(unexpected == 0, "no temporary file left after a completed save", "nothing", got);

    fflush(stdout); /* the child must not print the parent's buffered lines again */
    pid = fork();
    if (pid < 0) {
        check(0, "fork", "a child", strerror(errno));
        return;
    }
    if (pid == 0) {
        setenv("DARKNET_AMP_TEST_CRASH_IN_SAVE", "1", 1);
        amp_state_file_write(w, AMP_DTYPE_BFLOAT16, &b, NULL, &xb, err, sizeof err);
        _exit(3); /* only if the crash aid did not kill us */
    }
    if (waitpid(pid, &status, 0) != pid) {
        check(0, "waitpid", "the child's status", strerror(errno));
        return;
    }
    if (WIFSIGNALED(status))
        snprintf(got, sizeof got, "killed by signal %d", WTERMSIG(status));
    else
        snprintf(got, sizeof got, "exit status %d", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    check(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
          "the child writing state B with DARKNET_AMP_TEST_CRASH_IN_SAVE=1 dies by SIGKILL",
          "killed by signal 9", got);

    fill_sentinel(&d, &r);
    memset(&xr, 0xA5, sizeof xr);
    st = amp_state_file_read(w, &d, &r, NULL, &xr, &found, err, sizeof err);
    describe(want, sizeof want, AMP_DTYPE_FLOAT16, &a);
    strcat(want, " and its 2 fallback entries");
    if (st == AMP_OK && found) {
        describe(got, sizeof got, d, &r);
        extra_diff(&xa, &xr, xs, sizeof xs);
        snprintf(got + strlen(got), sizeof got - strlen(got), "; extras: %s", xs);
    } else {
        snprintf(got, sizeof got, "%s, found %d \"%s\"", status_name(st), found, err);
    }
    check(st == AMP_OK && found == 1 && d == AMP_DTYPE_FLOAT16 && same_state(&r, &a) &&
              !extra_diff(&xa, &xr, xs, sizeof xs),
          "after the killed save the sidecar still reads as exactly state A", want, got);

    unexpected = stray_files("sft_atomic.weights", "sft_atomic.weights.amp", (long)pid, got,
                             sizeof got);
    snprintf(what, sizeof what,
             "besides the sidecar, the directory holds: %s (a killed writer's temporary file is "
             "acceptable; the sidecar is whole)", got);
    check(unexpected == 0, what, "at most the killed writer's temporary file", got);

    /* The next save is not disturbed by the leftover. */
    st = amp_state_file_write(w, AMP_DTYPE_BFLOAT16, &b, NULL, &xb, err, sizeof err);
    if (st == AMP_OK) st = amp_state_file_read(w, &d, &r, NULL, &xr, &found, err, sizeof err);
    describe(want, sizeof want, AMP_DTYPE_BFLOAT16, &b);
    strcat(want, " and its 1024 fallback entries");
    if (st == AMP_OK && found) {
        describe(got, sizeof got, d, &r);
        extra_diff(&xb, &xr, xs, sizeof xs);
        snprintf(got + strlen(got), sizeof got - strlen(got), "; extras: %s", xs);
    } else {
        snprintf(got, sizeof got, "%s \"%s\"", status_name(st), err);
    }
    check(st == AMP_OK && d == AMP_DTYPE_BFLOAT16 && same_state(&r, &b) &&
              !extra_diff(&xb, &xr, xs, sizeof xs),
          "a later save of state B in the same place succeeds and reads back as B", want, got);
}

/* Removes what earlier runs left: every "sft_" entry, and the directories the
 * test makes (emptied first). */
static void clean_scratch(void)
{
    static const char *dirs[] = {"sft_no_such_dir/sub", "sft_no_such_dir", "sft_readonly_dir",
                                 "sft_isdir.weights.amp"};
    char path[4200];
    DIR *dp;
    struct dirent *e;
    size_t i;
    in_scratch(path, sizeof path, "sft_readonly_dir");
    chmod(path, 0755);
    for (i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        in_scratch(path, sizeof path, dirs[i]);
        rmdir(path);
    }
    dp = opendir(scratch);
    if (!dp) return;
    while ((e = readdir(dp)) != NULL) {
        if (strncmp(e->d_name, "sft_", 4) != 0) continue;
        in_scratch(path, sizeof path, e->d_name);
        chmod(path, 0644);
        unlink(path);
    }
    closedir(dp);
}


/* Version 1 files (64 bytes, no weights named) are still read, their extras
 * zero, and checked as strictly as version 3 ones. */
static void test_version1(void)
{
    char w[4200], sc[4200], got[1024], msg[512], what[1024];
    unsigned char v1[V1_FILE_SIZE], b[V1_FILE_SIZE + 1];
    amp_scale_state a = make_state(2048.0f, 5, 2, 1, 300, 7), r;
    amp_weights_id id = {7, 7, 7, 7};
    static amp_state_extra x;
    amp_dtype d;
    int found = 0, pos, xv, len, bad = 0, tried = 0;

    in_scratch(w, sizeof w, "sft_v1.weights");
    sidecar_of(sc, sizeof sc, w);
    encode(v1, 1, AMP_DTYPE_FLOAT16, &a);
    write_raw(sc, v1, sizeof v1);
    fill_sentinel(&d, &r);
    memset(&x, 0xA5, sizeof x);
    amp_status st = amp_state_file_read(w, &d, &r, &id, &x, &found, msg, sizeof msg);
    snprintf(got, sizeof got, "%s, found %d, same state %d, bound %d, forward_skips %llu, "
             "loss_skips %llu, n %d \"%s\"", status_name(st), found, same_state(&r, &a), id.bound,
             x.forward_skips, x.loss_skips, x.nfallback, msg);
    check(st == AMP_OK && found == 1 && d == AMP_DTYPE_FLOAT16 && same_state(&r, &a) &&
              id.bound == 0 && extra_is_zero(&x),
          "a version 1 file is read: its state, bound to no weights, its extras zero",
          "AMP_OK, found 1, same state, bound 0, zeros", got);

    for (pos = 0; pos < V1_FILE_SIZE; pos++) {
        for (xv = 1; xv < 256; xv++) {
            memcpy(b, v1, sizeof v1);
            b[pos] ^= (unsigned char)xv;
            ++tried;
            write_raw(sc, b, sizeof v1);
            if (!refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0) && ++bad <= 10) {
                snprintf(what, sizeof what, "version 1: byte %d ^ 0x%02x refused", pos, xv);
                check(0, what, "AMP_ERR_FORMAT, outputs untouched", got);
            }
        }
    }
    for (len = 0; len < V1_FILE_SIZE; len++) {
        ++tried;
        write_raw(sc, v1, (size_t)len);
        if (!refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0) && ++bad <= 10) {
            snprintf(what, sizeof what, "version 1 truncated to %d bytes refused", len);
            check(0, what, "AMP_ERR_FORMAT, outputs untouched", got);
        }
    }
    memcpy(b, v1, sizeof v1);
    b[V1_FILE_SIZE] = 0;
    write_raw(sc, b, sizeof b);
    ++tried;
    if (!refused(w, AMP_ERR_FORMAT, "trailing", got, sizeof got, NULL, 0)) ++bad;
    snprintf(what, sizeof what,
             "version 1: all %d changed, truncated or extended files (64 x 255 byte changes, 64 "
             "truncations, one trailing byte) refused", tried);
    snprintf(got, sizeof got, "%d accepted or wrongly refused", bad);
    check(bad == 0 && tried == 64 * 255 + 64 + 1, what, "0 accepted or wrongly refused", got);
}

/* Version 2 files (88 bytes: version 3's first 84 with their own CRC-32) are
 * still read: the state and the weights named, the extras zero; and checked
 * as strictly as version 3 ones. Made by hand from files of the writer. */
static void test_version2(void)
{
    char w[4200], sc[4200], got[1024], msg[512], what[1024], err[512];
    static unsigned char v3[BUF_SIZE], v2[BUF_SIZE], b[BUF_SIZE], enc[BUF_SIZE];
    amp_scale_state a = make_state(4096.0f, 6, 1, 2, 500, 11), r;
    const amp_weights_id bound = {1, 987654321ULL, 123456789ULL, 0xCAFEBABEul};
    amp_weights_id id;
    static amp_state_extra x;
    amp_dtype d;
    amp_status st;
    long n;
    int found = 0, pos, xv, len, bad = 0, tried = 0;

    in_scratch(w, sizeof w, "sft_v2.weights");
    sidecar_of(sc, sizeof sc, w);

    /* Unbound, no extras: the hand-made file is the independent encoder's. */
    st = amp_state_file_write(w, AMP_DTYPE_BFLOAT16, &a, NULL, NULL, err, sizeof err);
    n = st == AMP_OK ? read_raw(sc, v3, BUF_SIZE) : -1;
    {
        int same = 0;
        if (n == 108) {
            v3_to_v2(v3, v2);
            encode(enc, 2, AMP_DTYPE_BFLOAT16, &a);
            same = same_bytes(v2, V2_FILE_SIZE, enc, V2_FILE_SIZE, got, sizeof got);
        } else {
            snprintf(got, sizeof got, "%s, %ld bytes \"%s\"", status_name(st), n, err);
        }
        check(same,
              "a version 2 file made by hand from the writer's version 3 one is the independently "
              "encoded version 2 file", "identical", got);
    }

    /* Bound, with a list the version 2 file cannot hold. */
    extra_a(&x);
    st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &a, &bound, &x, err, sizeof err);
    n = st == AMP_OK ? read_raw(sc, v3, BUF_SIZE) : -1;
    snprintf(got, sizeof got, "%s, %ld bytes \"%s\"", status_name(st), n, err);
    check(st == AMP_OK && n == 124, "write a bound state with 2 fallback entries", "AMP_OK, 124 bytes",
          got);
    if (n != 124) return;
    v3_to_v2(v3, v2);
    write_raw(sc, v2, V2_FILE_SIZE);
    fill_sentinel(&d, &r);
    fill_sentinel_more(&id, &x);
    st = amp_state_file_read(w, &d, &r, &id, &x, &found, msg, sizeof msg);
    snprintf(got, sizeof got, "%s, found %d, same state %d, same weights %d, forward_skips %llu, "
             "loss_skips %llu, n %d \"%s\"", status_name(st), found, same_state(&r, &a),
             amp_weights_same(&id, &bound), x.forward_skips, x.loss_skips, x.nfallback, msg);
    check(st == AMP_OK && found == 1 && d == AMP_DTYPE_FLOAT16 && same_state(&r, &a) &&
              amp_weights_same(&id, &bound) && extra_is_zero(&x),
          "a version 2 file is read: its state, the weights it names, its extras zero",
          "AMP_OK, found 1, same state, same weights, zeros", got);

    for (pos = 0; pos < V2_FILE_SIZE; pos++) {
        for (xv = 1; xv < 256; xv++) {
            memcpy(b, v2, V2_FILE_SIZE);
            b[pos] ^= (unsigned char)xv;
            ++tried;
            write_raw(sc, b, V2_FILE_SIZE);
            if (!refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0) && ++bad <= 10) {
                snprintf(what, sizeof what, "version 2: byte %d ^ 0x%02x refused", pos, xv);
                check(0, what, "AMP_ERR_FORMAT, outputs untouched", got);
            }
        }
    }
    for (len = 0; len < V2_FILE_SIZE; len++) {
        ++tried;
        write_raw(sc, v2, (size_t)len);
        if (!refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0) && ++bad <= 10) {
            snprintf(what, sizeof what, "version 2 truncated to %d bytes refused", len);
            check(0, what, "AMP_ERR_FORMAT, outputs untouched", got);
        }
    }
    memcpy(b, v2, V2_FILE_SIZE);
    b[V2_FILE_SIZE] = 0;
    write_raw(sc, b, V2_FILE_SIZE + 1);
    ++tried;
    if (!refused(w, AMP_ERR_FORMAT, "trailing", got, sizeof got, NULL, 0) && ++bad <= 10)
        check(0, "version 2: one trailing byte refused", "AMP_ERR_FORMAT saying trailing", got);
    /* Version 2 with version 3's extras after its CRC: a version 3 file's size. */
    memcpy(b, v2, V2_FILE_SIZE);
    memcpy(b + V2_FILE_SIZE, v3 + 84, 36);
    write_raw(sc, b, V2_FILE_SIZE + 36);
    ++tried;
    if (!refused(w, AMP_ERR_FORMAT, "trailing", got, sizeof got, NULL, 0) && ++bad <= 10)
        check(0, "version 2 followed by version 3's 36 bytes of extras refused",
              "AMP_ERR_FORMAT saying trailing", got);
    snprintf(what, sizeof what,
             "version 2: all %d changed, truncated or extended files (88 x 255 byte changes, 88 "
             "truncations, one trailing byte, 36 bytes of version 3 extras) refused", tried);
    snprintf(got, sizeof got, "%d accepted or wrongly refused", bad);
    check(bad == 0 && tried == 88 * 255 + 88 + 2, what, "0 accepted or wrongly refused", got);
}

/* A weights file in darknet's format: major, minor, revision, seen (a size_t
 * from version 0.2 on, an int before), then n bytes of a pattern. */
static long write_weights(const char *path, int major, int minor, unsigned long long seen, size_t n,
                          unsigned char *copy)
{
    unsigned char buf[4096];
    size_t k = 0, i;
    int head[3] = {major, minor, 0};
    memcpy(buf, head, sizeof head);
    k = sizeof head;
    if (major * 10 + minor >= 2) {
        size_t s = (size_t)seen;
        memcpy(buf + k, &s, sizeof s);
        k += sizeof s;
    } else {
        int s = (int)seen;
        memcpy(buf + k, &s, sizeof s);
        k += sizeof s;
    }
    for (i = 0; i < n && k < sizeof buf; i++) buf[k++] = (unsigned char)(i * 37u + 11u);
    if (copy) memcpy(copy, buf, k);
    return write_raw(path, buf, k) == 0 ? (long)k : -1;
}

/* The binding: what identifies a weights file, the state file's record of it,
 * and identities told apart. */
static void test_binding(void)
{
    char w[4200], sc[4200], err[512], got[1024], what[1024];
    unsigned char bytes[4096], file[BUF_SIZE];
    static amp_state_extra x, back_x;
    char xs[400];
    amp_weights_id id, back, other;
    amp_scale_state a = make_state(512.0f, 9, 1, 0, 40, 2), r;
    amp_dtype d;
    int found = 0;
    amp_status st;

    in_scratch(w, sizeof w, "sft_bound.weights");
    sidecar_of(sc, sizeof sc, w);
    long size = write_weights(w, 0, 2, 123456789ULL, 1000, bytes);
    st = amp_weights_identify(w, &id, err, sizeof err);
    const uint32_t crc = size > 0 ? crc32_ref(bytes, (size_t)size) : 0;
    snprintf(got, sizeof got, "%s bound %d, seen %llu, size %llu, CRC-32 0x%08lx \"%s\"",
             status_name(st), id.bound, id.seen, id.size, id.crc, err);
    snprintf(what, sizeof what,
             "identity of a version 0.2 weights file: seen 123456789, %ld bytes, CRC-32 0x%08x",
             size, (unsigned)crc);
    check(st == AMP_OK && id.bound == 1 && id.seen == 123456789ULL && id.size == (unsigned long long)size &&
              id.crc == crc,
          what, "the same", got);

    write_weights(w, 0, 1, 77, 500, NULL); /* an int seen */
    st = amp_weights_identify(w, &other, err, sizeof err);
    snprintf(got, sizeof got, "%s bound %d, seen %llu, size %llu", status_name(st), other.bound,
             other.seen, other.size);
    check(st == AMP_OK && other.bound && other.seen == 77 && other.size == 3 * sizeof(int) + 4 + 500,
          "identity of a version 0.1 weights file (seen an int)", "seen 77, 516 bytes", got);

    write_raw(w, bytes, 10);
    st = amp_weights_identify(w, &other, err, sizeof err);
    snprintf(got, sizeof got, "%s \"%s\"", status_name(st), err);
    check(st == AMP_ERR_FORMAT && strstr(err, w) && strstr(err, "header"),
          "a 10-byte weights file cannot be identified", "AMP_ERR_FORMAT naming the file and the header",
          got);

    unlink(w);
    st = amp_weights_identify(w, &other, err, sizeof err);
    snprintf(got, sizeof got, "%s bound %d", status_name(st), other.bound);
    check(st == AMP_OK && other.bound == 0, "a missing weights file identifies as no weights",
          "AMP_OK, bound 0", got);

    /* The state file records it, in the documented bytes, beside the extras. */
    extra_a(&x);
    st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &a, &id, &x, err, sizeof err);
    long n = read_raw(sc, file, sizeof file);
    int layout = n == 124 && file[60] == 1 && !file[61] && !file[62] && !file[63];
    for (int i = 0; i < 8 && layout; i++)
        layout = file[64 + i] == (unsigned char)(id.seen >> (8 * i)) &&
                 file[72 + i] == (unsigned char)(id.size >> (8 * i));
    for (int i = 0; i < 4 && layout; i++)
        layout = file[80 + i] == (unsigned char)(id.crc >> (8 * i));
    snprintf(got, sizeof got, "%s, %ld bytes, layout %s \"%s\"", status_name(st), n,
             layout ? "as documented" : "DIFFERENT", err);
    check(st == AMP_OK && layout,
          "a bound state file holds bound 1, seen, size and CRC-32 little-endian at 60, 64, 72, 80",
          "AMP_OK, as documented", got);
    fill_sentinel(&d, &r);
    fill_sentinel_more(&back, &back_x);
    st = amp_state_file_read(w, &d, &r, &back, &back_x, &found, err, sizeof err);
    const int same_x = st == AMP_OK && !extra_diff(&x, &back_x, xs, sizeof xs);
    snprintf(got, sizeof got, "%s found %d, same state %d, same weights %d, extras: %s",
             status_name(st), found, same_state(&r, &a), amp_weights_same(&back, &id),
             st == AMP_OK ? xs : err);
    check(st == AMP_OK && found && same_state(&r, &a) && amp_weights_same(&back, &id) && same_x,
          "round trip of a bound state with 2 fallback entries: the same state, weights and extras",
          "AMP_OK, the same", got);

    /* Any one field apart is other weights; unbound is never the same. */
    int apart = 0;
    other = id; other.seen += 1; apart += !amp_weights_same(&other, &id);
    other = id; other.size += 1; apart += !amp_weights_same(&other, &id);
    other = id; other.crc ^= 1; apart += !amp_weights_same(&other, &id);
    other = id; other.bound = 0; apart += !amp_weights_same(&other, &other);
    snprintf(got, sizeof got, "%d of 4 told apart", apart);
    check(apart == 4, "weights that differ in seen, size or CRC, or are unbound, are not the same",
          "4 of 4 told apart", got);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    scratch = argv[1];
    if (mkdir(scratch, 0755) != 0 && errno != EEXIST) {
        printf("FAIL: cannot create scratch directory %s (expected a directory, got %s)\n",
               scratch, strerror(errno));
        return 1;
    }
    clean_scratch();

    test_crc_reference();
    test_path_helper();
    test_layout();
    test_round_trips();
    test_missing();
    test_byte_changes();
    test_truncation_and_trailing();
    test_crafted();
    test_version1();
    test_version2();
    test_binding();
    test_writer_refuses_invalid();
    test_writer_refuses_bad_extras();
    test_io_errors();
    test_err_buffers();
    test_interrupted_save();

    if (failures) {
        printf("FAIL: %d failed checks\n", failures);
        return 1;
    }
    printf("PASS\n");
    return 0;
}
