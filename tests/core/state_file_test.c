/* The scaler's state sidecar (plugin/state_file.c): the exact byte layout,
 * bit-exact round trips for every dtype, a missing file, every single-byte
 * change, every truncation, trailing bytes, another version, out-of-range
 * values behind a correct CRC, version 1 files still read (and checked the
 * same way), the weights a state is bound to: round trip, identity of a
 * weights file (seen in both header forms, size, CRC), missing weights, I/O errors naming the path, NULL/0 err
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

#define FILE_SIZE 88 /* version 2: 16-byte header, 68-byte payload, 4-byte CRC */
#define CRC_OFFSET 84
#define V1_FILE_SIZE 64 /* version 1: 16-byte header, 44-byte payload, 4-byte CRC */
#define V1_CRC_OFFSET 60

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

/* Version 2 (bound to no weights) or, with version 1, the 64-byte version 1. */
static void encode(unsigned char *b, uint32_t version, uint32_t dtype, const amp_scale_state *s)
{
    memcpy(b, "DNAMPST", 8);
    le32(b + 8, version);
    le32(b + 12, version == 1 ? 44 : 68);
    le32(b + 16, dtype);
    le32(b + 20, fbits(s->scale));
    le64(b + 24, (uint64_t)(int64_t)s->growth_tracker);
    le32(b + 32, (uint32_t)(int32_t)s->hysteresis_left);
    le64(b + 36, (uint64_t)(int64_t)s->consecutive_skips);
    le64(b + 44, (uint64_t)s->steps);
    le64(b + 52, (uint64_t)s->skips);
    if (version == 1) {
        le32(b + V1_CRC_OFFSET, crc32_ref(b, V1_CRC_OFFSET));
        return;
    }
    memset(b + 60, 0, 24); /* bound 0: weights seen, size and CRC zero */
    le32(b + CRC_OFFSET, crc32_ref(b, CRC_OFFSET));
}

static void fix_crc(unsigned char *b)
{
    le32(b + CRC_OFFSET, crc32_ref(b, CRC_OFFSET));
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

/* Reads weights' sidecar into a sentinel-filled state and says whether it was
 * refused as wanted: status want, found 0, state untouched, message naming the
 * sidecar and containing must_contain (if given). got: what happened. */
static int refused(const char *weights, amp_status want, const char *must_contain, char *got,
                   size_t gotlen, char *msg, size_t msglen)
{
    char sidecar[4200], err[512];
    amp_dtype d;
    amp_scale_state s;
    int found = 77, untouched, names, contains;
    amp_status st;
    fill_sentinel(&d, &s);
    sidecar_of(sidecar, sizeof sidecar, weights);
    st = amp_state_file_read(weights, &d, &s, NULL, &found, err, sizeof err);
    untouched = is_sentinel(&d, &s);
    names = strstr(err, sidecar) != NULL;
    contains = !must_contain || strstr(err, must_contain) != NULL;
    snprintf(got, gotlen, "%s, found %d, state %s, message \"%s\"", status_name(st), found,
             untouched ? "untouched" : "WRITTEN", err);
    if (msg) snprintf(msg, msglen, "%s", err);
    return st == want && found == 0 && untouched && names && contains;
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
        amp_status st = amp_state_file_write(longw, AMP_DTYPE_FLOAT16, &s, NULL, err, sizeof err);
        snprintf(got, sizeof got, "%s", status_name(st));
        check(st == AMP_ERR_INVALID, "write with a 5000-character weights path is refused",
              "AMP_ERR_INVALID", got);
        st = amp_state_file_read(longw, &d, &s, NULL, &found, err, sizeof err);
        snprintf(got, sizeof got, "%s", status_name(st));
        check(st == AMP_ERR_INVALID, "read with a 5000-character weights path is refused",
              "AMP_ERR_INVALID", got);
    }
    free(longw);
}

/* The writer's bytes are exactly the documented layout, as this file encodes it. */
static void test_layout(void)
{
    char w[4200], sc[4200], err[512], got[1024], what[1024];
    unsigned char file[FILE_SIZE + 8], want[FILE_SIZE];
#if LONG_MAX >= 0x0102030405060708
    const long gt = 0x0102030405060708L;
#else
    const long gt = 0x01020304L;
#endif
    amp_scale_state s = make_state(0x1p-10f, gt, 0x11223344, 7, 0xA1B2C3D4E5F60718ULL,
                                   0x0A0B0C0D0E0F1011ULL);
    amp_status st;
    long n;
    int i, first = -1;

    in_scratch(w, sizeof w, "sft_layout.weights");
    sidecar_of(sc, sizeof sc, w);
    st = amp_state_file_write(w, AMP_DTYPE_BFLOAT16, &s, NULL, err, sizeof err);
    snprintf(got, sizeof got, "%s \"%s\"", status_name(st), err);
    check(st == AMP_OK, "write a state for the layout check", "AMP_OK", got);
    n = read_raw(sc, file, sizeof file);
    snprintf(got, sizeof got, "%ld bytes", n);
    check(n == FILE_SIZE, "the sidecar is exactly 88 bytes", "88 bytes", got);
    encode(want, 2, AMP_DTYPE_BFLOAT16, &s);
    for (i = 0; i < FILE_SIZE && n == FILE_SIZE; i++)
        if (file[i] != want[i]) {
            first = i;
            break;
        }
    if (first >= 0)
        snprintf(got, sizeof got, "byte %d is 0x%02x", first, file[first]);
    else
        snprintf(got, sizeof got, "%s", n == FILE_SIZE ? "identical" : "wrong size");
    snprintf(what, sizeof what,
             "the sidecar's bytes are the documented little-endian layout with its CRC-32");
    check(n == FILE_SIZE && first < 0, what,
          first >= 0 ? "the independently encoded byte" : "identical", got);
}

static void test_round_trips(void)
{
    static const amp_dtype dtypes[] = {AMP_DTYPE_FLOAT32, AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    amp_scale_state states[8];
    char w[4200], err[512], what[1024], want[400], got[1024];
    size_t i, k, ns = 0;

    states[ns++] = make_state(65536.0f, 0, 1, 0, 0, 0);        /* GradScaler's start */
    states[ns++] = make_state(0x1p-10f, 3, 2, 1, 10, 4);        /* 2^-10 */
    states[ns++] = make_state(0x1p24f, 1999, 0, 0, 123456789012345ULL, 1234567ULL); /* 2^24 */
    states[ns++] = make_state(1.0f, LONG_MAX, INT_MAX, LONG_MAX, ULLONG_MAX, ULLONG_MAX);
    states[ns++] = make_state(FLT_MAX, 1, 1, 0, 1ULL << 63, (1ULL << 63) - 1);
    states[ns++] = make_state(0x1p-149f, 0, 0, 5, 5, 5);        /* smallest subnormal */
    states[ns++] = make_state(0.1f, 42, 3, 2, 4294967296ULL, 4294967295ULL); /* inexact bits */
    states[ns++] = make_state(3.0f, 2000000000L, 65536, 2147483647L, 9007199254740993ULL,
                              9007199254740992ULL);

    in_scratch(w, sizeof w, "sft_roundtrip.weights");
    for (k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) {
        for (i = 0; i < ns; i++) {
            amp_dtype d;
            amp_scale_state r;
            int found = 0;
            amp_status ws, rs;
            fill_sentinel(&d, &r);
            /* The same file each time: every write replaces the previous one. */
            ws = amp_state_file_write(w, dtypes[k], &states[i], NULL, err, sizeof err);
            rs = ws == AMP_OK ? amp_state_file_read(w, &d, &r, NULL, &found, err, sizeof err) : ws;
            describe(want, sizeof want, dtypes[k], &states[i]);
            snprintf(what, sizeof what, "round trip: %s", want);
            if (rs == AMP_OK && found == 1)
                describe(got, sizeof got, d, &r);
            else
                snprintf(got, sizeof got, "write %s, read %s, found %d, \"%s\"", status_name(ws),
                         status_name(rs), found, err);
            check(rs == AMP_OK && found == 1 && d == dtypes[k] && same_state(&r, &states[i]), what,
                  want, got);
        }
    }
}

static void test_missing(void)
{
    char w[4200], err[512], got[1024];
    amp_dtype d;
    amp_scale_state s;
    int found = 77;
    amp_status st;
    in_scratch(w, sizeof w, "sft_never_written.weights");
    fill_sentinel(&d, &s);
    st = amp_state_file_read(w, &d, &s, NULL, &found, err, sizeof err);
    snprintf(got, sizeof got, "%s, found %d, state %s", status_name(st), found,
             is_sentinel(&d, &s) ? "untouched" : "WRITTEN");
    check(st == AMP_OK && found == 0 && is_sentinel(&d, &s),
          "missing sidecar: AMP_OK, found 0, dtype and state untouched",
          "AMP_OK, found 0, state untouched", got);
}

/* A valid file of state A in the sidecar of weights; its bytes in base. */
static int write_base(const char *weights, unsigned char *base)
{
    char sc[4200], err[512], got[1024];
    amp_scale_state a = make_state(1024.0f, 17, 2, 0, 100, 3);
    amp_status st = amp_state_file_write(weights, AMP_DTYPE_FLOAT16, &a, NULL, err, sizeof err);
    sidecar_of(sc, sizeof sc, weights);
    if (st != AMP_OK || read_raw(sc, base, FILE_SIZE) != FILE_SIZE) {
        snprintf(got, sizeof got, "%s \"%s\"", status_name(st), err);
        check(0, "writing a base file", "AMP_OK and 88 bytes", got);
        return -1;
    }
    return 0;
}

static void test_byte_changes(void)
{
    char w[4200], sc[4200], got[1024], msg[512], what[1024];
    unsigned char base[FILE_SIZE], b[FILE_SIZE];
    int pos, x, bad = 0, tried = 0;

    in_scratch(w, sizeof w, "sft_flip.weights");
    sidecar_of(sc, sizeof sc, w);
    if (write_base(w, base) != 0) return;
    /* Every position, every non-zero xor: CRC-32 catches any error burst of
     * up to 32 bits, so not one of these may be accepted. */
    for (pos = 0; pos < FILE_SIZE; pos++) {
        for (x = 1; x < 256; x++) {
            memcpy(b, base, sizeof b);
            b[pos] ^= (unsigned char)x;
            ++tried;
            if (write_raw(sc, b, sizeof b) != 0) {
                snprintf(what, sizeof what, "writing the changed file (byte %d ^ 0x%02x)", pos, x);
                check(0, what, "a written file", strerror(errno));
                return;
            }
            if (!refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0)) {
                if (++bad <= 20) { /* the first few say enough */
                    snprintf(what, sizeof what, "byte %d ^ 0x%02x refused", pos, x);
                    check(0, what,
                          "AMP_ERR_FORMAT, found 0, state untouched, message naming the file", got);
                }
            }
        }
    }
    snprintf(what, sizeof what,
             "all %d single-byte changes (88 positions x 255 xor values) refused with "
             "AMP_ERR_FORMAT, state untouched, message naming the file", tried);
    snprintf(got, sizeof got, "%d accepted or wrongly refused", bad);
    check(bad == 0, what, "0 accepted or wrongly refused", got);

    /* The flip of byte 0 (magic) and of byte 20 (scale) show what a user reads. */
    memcpy(b, base, sizeof b);
    b[20] ^= 0x01;
    if (write_raw(sc, b, sizeof b) == 0) {
        refused(w, AMP_ERR_FORMAT, "checksum", got, sizeof got, msg, sizeof msg);
        snprintf(what, sizeof what, "a flipped scale bit is a checksum mismatch: \"%s\"", msg);
        check(strstr(msg, "checksum") != NULL, what, "a message mentioning the checksum", got);
    }
}

static void test_truncation_and_trailing(void)
{
    char w[4200], sc[4200], got[1024], msg[512], what[1024];
    unsigned char base[FILE_SIZE], b[FILE_SIZE + 100];
    int len, bad = 0;

    in_scratch(w, sizeof w, "sft_trunc.weights");
    sidecar_of(sc, sizeof sc, w);
    if (write_base(w, base) != 0) return;
    for (len = 0; len < FILE_SIZE; len++) {
        if (write_raw(sc, base, (size_t)len) != 0 ||
            !refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0)) {
            snprintf(what, sizeof what, "file truncated to %d bytes refused", len);
            check(0, what, "AMP_ERR_FORMAT, found 0, state untouched, message naming the file",
                  got);
            ++bad;
        }
    }
    snprintf(got, sizeof got, "%d not refused", bad);
    check(bad == 0, "every truncation to 0..87 bytes refused with AMP_ERR_FORMAT, state untouched",
          "0 not refused", got);

    write_raw(sc, base, 40);
    refused(w, AMP_ERR_FORMAT, "truncated", got, sizeof got, msg, sizeof msg);
    snprintf(what, sizeof what, "a 40-byte file is reported as truncated: \"%s\"", msg);
    check(strstr(msg, "truncated") != NULL, what, "a message saying truncated", got);

    memcpy(b, base, FILE_SIZE);
    b[FILE_SIZE] = 0;
    write_raw(sc, b, FILE_SIZE + 1);
    {
        int ok = refused(w, AMP_ERR_FORMAT, "trailing", got, sizeof got, msg, sizeof msg);
        snprintf(what, sizeof what, "one trailing byte refused: \"%s\"", msg);
        check(ok, what, "AMP_ERR_FORMAT, state untouched, a message saying trailing", got);
    }
    memset(b + FILE_SIZE, 0xEE, 100);
    write_raw(sc, b, sizeof b);
    check(refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0), "100 trailing bytes refused",
          "AMP_ERR_FORMAT, state untouched", got);
}

/* Files with a correct CRC whose header or values are wrong. */
static void test_crafted(void)
{
    char w[4200], sc[4200], got[1024], msg[512], what[1024];
    unsigned char base[FILE_SIZE], b[FILE_SIZE];
    amp_dtype d;
    amp_scale_state s;
    int found = 0, i;
    amp_status st;
    struct {
        const char *what, *contains;
        int off, width; /* width 4 or 8 */
        uint64_t value;
    } cases[] = {
        {"format version 3", "version", 8, 4, 3},
        {"format version 0", "version", 8, 4, 0},
        {"format version 1 with version 2's length", "length", 8, 4, 1},
        {"payload length 45", "length", 12, 4, 45},
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
        {"bound 2", "bound", 60, 4, 2},
        {"bound 0 with a weights size", "bound", 72, 8, 1000},
        {"bound 0 with a weights CRC", "bound", 80, 4, 0xDEADBEEFu},
    };

    in_scratch(w, sizeof w, "sft_crafted.weights");
    sidecar_of(sc, sizeof sc, w);
    if (write_base(w, base) != 0) return;

    /* Control: the test's own re-encoding is accepted, so the refusals below
     * come from the values. */
    memcpy(b, base, sizeof b);
    fix_crc(b);
    write_raw(sc, b, sizeof b);
    fill_sentinel(&d, &s);
    st = amp_state_file_read(w, &d, &s, NULL, &found, msg, sizeof msg);
    snprintf(got, sizeof got, "%s, found %d \"%s\"", status_name(st), found, msg);
    check(st == AMP_OK && found == 1 && memcmp(b, base, sizeof b) == 0,
          "control: the test's CRC of an unchanged file equals the writer's and it is accepted",
          "AMP_OK, found 1", got);

    for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        int ok;
        memcpy(b, base, sizeof b);
        if (cases[i].width == 4)
            le32(b + cases[i].off, (uint32_t)cases[i].value);
        else
            le64(b + cases[i].off, cases[i].value);
        fix_crc(b);
        write_raw(sc, b, sizeof b);
        ok = refused(w, AMP_ERR_FORMAT, cases[i].contains, got, sizeof got, msg, sizeof msg);
        snprintf(what, sizeof what, "%s with a correct CRC refused: \"%s\"", cases[i].what, msg);
        snprintf(got + strlen(got), sizeof got - strlen(got), " (must mention \"%s\")",
                 cases[i].contains);
        check(ok, what, "AMP_ERR_FORMAT, state untouched, message naming the file and the field",
              got);
    }

    /* Boundary values the reader must accept. */
    {
        amp_scale_state edge = make_state(0x1p-149f, 0, 0, 0, 9, 9), r;
        memcpy(b, base, sizeof b);
        encode(b, 2, AMP_DTYPE_FLOAT32, &edge);
        write_raw(sc, b, sizeof b);
        fill_sentinel(&d, &r);
        st = amp_state_file_read(w, &d, &r, NULL, &found, msg, sizeof msg);
        snprintf(got, sizeof got, "%s \"%s\"", status_name(st), msg);
        check(st == AMP_OK && found == 1 && same_state(&r, &edge) && d == AMP_DTYPE_FLOAT32,
              "boundary values accepted (subnormal scale, hysteresis_left 0, skips == steps)",
              "AMP_OK with the same state", got);
    }
}

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
        amp_status st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &bad[i], NULL, err, sizeof err);
        snprintf(what, sizeof what, "writer refuses %s, writes nothing: \"%s\"", names[i], err);
        snprintf(got, sizeof got, "%s, sidecar %s", status_name(st),
                 exists(sc) ? "exists" : "absent");
        check(st == AMP_ERR_INVALID && !exists(sc) && strstr(err, sc) != NULL, what,
              "AMP_ERR_INVALID, no sidecar, message naming it", got);
    }
    {
        amp_scale_state ok = make_state(1.0f, 0, 1, 0, 0, 0);
        amp_status st = amp_state_file_write(w, (amp_dtype)3, &ok, NULL, err, sizeof err);
        snprintf(got, sizeof got, "%s \"%s\"", status_name(st), err);
        check(st == AMP_ERR_INVALID && !exists(sc), "writer refuses dtype 3", "AMP_ERR_INVALID",
              got);
    }
}

static int stray_files(const char *prefix, const char *keep, long allowed_pid, char *report,
                       size_t size);

static void test_io_errors(void)
{
    char w[4200], sc[4200], dir[4200], err[512], got[1024], what[1024];
    amp_scale_state s = make_state(2.0f, 0, 1, 0, 0, 0);
    amp_status st;

    in_scratch(w, sizeof w, "sft_no_such_dir/sub/x.weights");
    sidecar_of(sc, sizeof sc, w);
    st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, err, sizeof err);
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
        st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, err, sizeof err);
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
        check(ok, what, "AMP_ERR_IO, state untouched, message naming the path", got);
    }
    /* Writing over it fails at the rename and leaves no temporary file. */
    st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, err, sizeof err);
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
    } else if (amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, err, sizeof err) == AMP_OK) {
        int ok;
        chmod(sc, 0);
        ok = refused(w, AMP_ERR_IO, NULL, got, sizeof got, err, sizeof err);
        snprintf(what, sizeof what, "read of a sidecar without read permission: \"%s\"", err);
        check(ok, what, "AMP_ERR_IO, state untouched, message naming the path", got);
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
    a = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, NULL, 0);
    b = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &s, NULL, NULL, 100);
    in_scratch(w, sizeof w, "sft_errbuf.weights");
    sidecar_of(sc, sizeof sc, w);
    write_raw(sc, junk, sizeof junk);
    c = amp_state_file_read(w, &d, &s, NULL, &found, NULL, 0);
    snprintf(got, sizeof got, "%s, %s, %s", status_name(a), status_name(b), status_name(c));
    check(a == AMP_ERR_IO && b == AMP_ERR_IO && c == AMP_ERR_FORMAT,
          "err NULL: failing write (errlen 0 and 100) and read still return their status",
          "AMP_ERR_IO, AMP_ERR_IO, AMP_ERR_FORMAT", got);

    memset(untouched, 'X', sizeof untouched);
    c = amp_state_file_read(w, &d, &s, NULL, &found, untouched, 0);
    for (ok = 1, i = 0; i < (int)sizeof untouched; i++) ok &= untouched[i] == 'X';
    snprintf(got, sizeof got, "%s, buffer %s", status_name(c), ok ? "untouched" : "WRITTEN");
    check(c == AMP_ERR_FORMAT && ok, "errlen 0: the err buffer is not touched",
          "AMP_ERR_FORMAT, buffer untouched", got);

    memset(small, 'X', sizeof small);
    c = amp_state_file_read(w, &d, &s, NULL, &found, small, sizeof small);
    ok = memchr(small, '\0', sizeof small) != NULL;
    snprintf(got, sizeof got, "%s, %s", status_name(c), ok ? "terminated" : "NOT terminated");
    check(c == AMP_ERR_FORMAT && ok, "an 8-byte err buffer gets a NUL-terminated message",
          "AMP_ERR_FORMAT, terminated", got);

    c = amp_state_file_read(NULL, &d, &s, NULL, &found, NULL, 0);
    a = amp_state_file_write(NULL, AMP_DTYPE_FLOAT16, &s, NULL, NULL, 0);
    b = amp_state_file_write(w, AMP_DTYPE_FLOAT16, NULL, NULL, NULL, 0);
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
    char w[4200], sc[4200], err[512], want[400], got[1200], what[1400];
    amp_scale_state a = make_state(0x1p-10f, 12, 1, 0, 777, 5);
    amp_scale_state b = make_state(0x1p24f, 0, 2, 3, 900, 40), r;
    amp_dtype d;
    amp_status st;
    int status = 0, found = 0, unexpected;
    pid_t pid;

    in_scratch(w, sizeof w, "sft_atomic.weights");
    sidecar_of(sc, sizeof sc, w);
    st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &a, NULL, err, sizeof err);
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
        amp_state_file_write(w, AMP_DTYPE_BFLOAT16, &b, NULL, err, sizeof err);
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
    st = amp_state_file_read(w, &d, &r, NULL, &found, err, sizeof err);
    describe(want, sizeof want, AMP_DTYPE_FLOAT16, &a);
    if (st == AMP_OK && found)
        describe(got, sizeof got, d, &r);
    else
        snprintf(got, sizeof got, "%s, found %d \"%s\"", status_name(st), found, err);
    check(st == AMP_OK && found == 1 && d == AMP_DTYPE_FLOAT16 && same_state(&r, &a),
          "after the killed save the sidecar still reads as exactly state A", want, got);

    unexpected = stray_files("sft_atomic.weights", "sft_atomic.weights.amp", (long)pid, got,
                             sizeof got);
    snprintf(what, sizeof what,
             "besides the sidecar, the directory holds: %s (a killed writer's temporary file is "
             "acceptable; the sidecar is whole)", got);
    check(unexpected == 0, what, "at most the killed writer's temporary file", got);

    /* The next save is not disturbed by the leftover. */
    st = amp_state_file_write(w, AMP_DTYPE_BFLOAT16, &b, NULL, err, sizeof err);
    if (st == AMP_OK) st = amp_state_file_read(w, &d, &r, NULL, &found, err, sizeof err);
    describe(want, sizeof want, AMP_DTYPE_BFLOAT16, &b);
    if (st == AMP_OK && found)
        describe(got, sizeof got, d, &r);
    else
        snprintf(got, sizeof got, "%s \"%s\"", status_name(st), err);
    check(st == AMP_OK && d == AMP_DTYPE_BFLOAT16 && same_state(&r, &b),
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


/* Version 1 files (64 bytes, no weights named) are still read, and checked
 * as strictly as version 2 ones. */
static void test_version1(void)
{
    char w[4200], sc[4200], got[1024], msg[512], what[1024];
    unsigned char v1[V1_FILE_SIZE], b[V1_FILE_SIZE + 1];
    amp_scale_state a = make_state(2048.0f, 5, 2, 1, 300, 7), r;
    amp_weights_id id = {7, 7, 7, 7};
    amp_dtype d;
    int found = 0, pos, x, len, bad = 0, tried = 0;

    in_scratch(w, sizeof w, "sft_v1.weights");
    sidecar_of(sc, sizeof sc, w);
    encode(v1, 1, AMP_DTYPE_FLOAT16, &a);
    write_raw(sc, v1, sizeof v1);
    fill_sentinel(&d, &r);
    amp_status st = amp_state_file_read(w, &d, &r, &id, &found, msg, sizeof msg);
    snprintf(got, sizeof got, "%s, found %d, same state %d, bound %d \"%s\"", status_name(st),
             found, same_state(&r, &a), id.bound, msg);
    check(st == AMP_OK && found == 1 && d == AMP_DTYPE_FLOAT16 && same_state(&r, &a) &&
              id.bound == 0,
          "a version 1 file is read: its state, bound to no weights",
          "AMP_OK, found 1, same state, bound 0", got);

    for (pos = 0; pos < V1_FILE_SIZE; pos++) {
        for (x = 1; x < 256; x++) {
            memcpy(b, v1, sizeof v1);
            b[pos] ^= (unsigned char)x;
            ++tried;
            write_raw(sc, b, sizeof v1);
            if (!refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0) && ++bad <= 10) {
                snprintf(what, sizeof what, "version 1: byte %d ^ 0x%02x refused", pos, x);
                check(0, what, "AMP_ERR_FORMAT, state untouched", got);
            }
        }
    }
    for (len = 0; len < V1_FILE_SIZE; len++) {
        ++tried;
        write_raw(sc, v1, (size_t)len);
        if (!refused(w, AMP_ERR_FORMAT, NULL, got, sizeof got, NULL, 0) && ++bad <= 10) {
            snprintf(what, sizeof what, "version 1 truncated to %d bytes refused", len);
            check(0, what, "AMP_ERR_FORMAT, state untouched", got);
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
    check(bad == 0, what, "0 accepted or wrongly refused", got);
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
    unsigned char bytes[4096], file[FILE_SIZE];
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

    /* The state file records it, in the documented bytes. */
    st = amp_state_file_write(w, AMP_DTYPE_FLOAT16, &a, &id, err, sizeof err);
    long n = read_raw(sc, file, sizeof file);
    int layout = n == FILE_SIZE && file[60] == 1 && !file[61] && !file[62] && !file[63];
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
    memset(&back, 0, sizeof back);
    fill_sentinel(&d, &r);
    st = amp_state_file_read(w, &d, &r, &back, &found, err, sizeof err);
    snprintf(got, sizeof got, "%s found %d, same state %d, same weights %d", status_name(st), found,
             same_state(&r, &a), amp_weights_same(&back, &id));
    check(st == AMP_OK && found && same_state(&r, &a) && amp_weights_same(&back, &id),
          "round trip of a bound state: the same state and the same weights", "AMP_OK, the same",
          got);

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
    test_binding();
    test_writer_refuses_invalid();
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
