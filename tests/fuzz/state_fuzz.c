/* fuzz.state: the state file reader (amp_state_file_read, plugin/state_file.c)
 * and the weights identity it compares (amp_weights_identify).
 *
 * Each input starts from a valid file of one of eight kinds: version 3 bound
 * to weights or to none, without a fallback list, with 3 and 40 entries and
 * with the longest list (AMP_STATE_MAX_FALLBACK entries), written by the
 * plugin's own writer; version 2 bound and unbound, and version 1, made by
 * hand from them (the writer writes version 3 only). Every seed is first
 * shown to be read. One time in four the version 3 list is given another
 * length (n, the payload length and the file's size made to agree, new
 * entries mostly in order). mutate.h changes its bytes (flips, interesting
 * bytes, runs inserted, deleted or repeated, tokens of the format spliced in,
 * truncation, extension); 3 times in 10 a 4-byte field is then set to a value
 * the format cares about; then, 7 times in 10, the CRC-32 at the offset its
 * version field (and for version 3 its n) names is made right again (where
 * that is not in the file, its last 4 bytes), so that the checks behind the
 * CRC (version, length, n, values, the list) are reached. The file goes to
 * SCRATCH/f.weights.amp and is read. Beside it, a weights file of mutated
 * darknet headers and a few bytes is identified.
 *
 * The contract (docs/state-file.md), on every input:
 * - read: AMP_OK with found 1 and a state the scaler can run from (a known
 *   dtype, amp_scale_state_invalid says nothing, bound 0 or 1 and 0 with
 *   zeros), from a file with the magic, exactly its version's size (64 bytes
 *   for version 1, 88 for version 2, 108 + 8 n for version 3, n at most
 *   AMP_STATE_MAX_FALLBACK read from the file) and a right CRC-32 in its last
 *   4 bytes; the dtype, state and weights read are the file's; the extras
 *   (read 4 times in 5) are zero for versions 1 and 2, for version 3 the
 *   file's own forward_skips, loss_skips and list, its layers increasing from
 *   0, every why 1 to 3; or an error with a message (fuzz.h: NUL-terminated
 *   in the buffer, printable, starting with "state file ", not cut; and
 *   naming the file where the buffer is AMP_MSG_LEN long), found 0 and the
 *   outputs, extras included, untouched;
 * - identify: AMP_OK, bound, with the file's size and CRC-32; or
 *   AMP_ERR_FORMAT for a file shorter than darknet's header, with a message
 *   starting with "weights file " (and naming it, as above);
 * - nothing reads or writes out of bounds (the sanitized build).
 *
 *   state_fuzz SCRATCH          N and seed: DARKNET_AMP_FUZZ_N, DARKNET_AMP_FUZZ_SEED
 */
#include "fuzz.h"
#include "core.h"       /* amp_scale_state_invalid */
#include "state_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define DEFAULT_N 60000
#define DEFAULT_SEED 20261123u
/* The longest version 3 file, and room to grow past it. */
#define V3_SIZE(n) (108 + 8 * (size_t)(n))
#define SEED_MAX V3_SIZE(AMP_STATE_MAX_FALLBACK)
#define MAX_FILE 16384
#define NSEEDS 8

/* Tokens end at their first NUL (mutate.h splices C strings): "\x01\0\0\0"
 * is the one byte 1. set_field() writes whole little-endian u32 values. */
static const char *const dict[] = {"DNAMPST", "\x01\0\0\0", "\x02\0\0\0", "\x03\0\0\0",
                                   "\x2c\0\0\0", "\x44\0\0\0", "\x58\0\0\0", "\x68\0\0\0",
                                   "\x01\x04\0\0", "\xff\xff\xff\xff", "\xff\xff\xff\x7f",
                                   "\0\0\x80\x7f", "\0\0\xc0\x7f", "\0\0\x80\xff",
                                   "\0\0\0\x80", "\x01\0\0\0\0\0\0\x80"};
#define NDICT (sizeof dict / sizeof dict[0])

typedef struct input {
    fz_buf file;      /* the state file's bytes */
    fz_buf weights;   /* the weights file's bytes */
    const char *kind; /* what it was made from */
} input;

static char path[4096], wpath[4096];
static unsigned char seeds[NSEEDS][SEED_MAX];
static size_t seed_len[NSEEDS];
static const char *const seed_kind[NSEEDS] = {
    "version 3, bound",           "version 3, no weights",
    "version 3, bound, 3 layers", "version 3, no weights, 40 layers",
    "version 3, bound, the most layers", "version 2, bound",
    "version 2, no weights",      "version 1"};

static void print_input(void *ctx, FILE *out)
{
    const input *in = ctx;
    fprintf(out, "from %s, %zu bytes: ", in->kind, in->file.len);
    fz_print_escaped(out, in->file.p, in->file.len);
    fprintf(out, "\n  weights, %zu bytes: ", in->weights.len);
    fz_print_escaped(out, in->weights.p, in->weights.len > 64 ? 64 : in->weights.len);
}

static int spit(const char *p, const void *b, size_t n)
{
    unlink(p); /* a new file: rewriting one in place is slow on some disks */
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    const int bad = n && write(fd, b, n) != (ssize_t)n;
    return close(fd) != 0 || bad ? -1 : 0;
}

static size_t slurp(const char *p, unsigned char *b, size_t cap)
{
    FILE *f = fopen(p, "rb");
    if (!f) return 0;
    size_t n = fread(b, 1, cap, f);
    fclose(f);
    return n;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* The CRC-32 of the bytes before at, in zlib's uInt pieces. */
static uint32_t crc_before(const unsigned char *p, size_t at)
{
    return (uint32_t)crc32(0L, p, (uInt)at);
}

/* Version 2 from a version 3 file: its first 84 bytes and its own CRC. */
static size_t to_v2(unsigned char *v2, const unsigned char *v3)
{
    memcpy(v2, v3, 84);
    put32(v2 + 8, 2);
    put32(v2 + 12, 68);
    put32(v2 + 84, crc_before(v2, 84));
    return 88;
}

/* The starting files: the plugin's writer's, and versions 2 and 1 by hand. */
static void make_seeds(const char *dir)
{
    char err[AMP_MSG_LEN];
    amp_scale_state s = {1024.0f, 17, 2, 1, 300, 9};
    amp_weights_id id = {1, 123456, 8712628, 0x0beb92f3ul};
    static amp_state_extra x[5];
    int k;
    snprintf(path, sizeof path, "%s/f.weights.amp", dir);
    snprintf(wpath, sizeof wpath, "%s/f.weights", dir);
    unlink(wpath);
    memset(x, 0, sizeof x);
    x[2].forward_skips = 3;
    x[2].loss_skips = 1;
    x[2].nfallback = 3;
    x[2].fallback[0].layer = 0;
    x[2].fallback[0].why = 2;
    x[2].fallback[1].layer = 5;
    x[2].fallback[1].why = 1;
    x[2].fallback[2].layer = 77;
    x[2].fallback[2].why = 2;
    x[3].loss_skips = 12;
    x[3].nfallback = 40;
    for (k = 0; k < 40; ++k) {
        x[3].fallback[k].layer = k * k + 1;
        x[3].fallback[k].why = 1 + k % 3;
    }
    x[4].forward_skips = 100;
    x[4].loss_skips = 200;
    x[4].nfallback = AMP_STATE_MAX_FALLBACK;
    for (k = 0; k < AMP_STATE_MAX_FALLBACK; ++k) {
        x[4].fallback[k].layer = 3 * k + k % 3;
        x[4].fallback[k].why = k % 5 ? 1 + k % 2 : 3;
    }
    for (k = 0; k < 5; ++k) {
        /* bound: 0, 2, 4 */
        if (amp_state_file_write(wpath, AMP_DTYPE_FLOAT16, &s, k % 2 == 0 ? &id : NULL,
                                 k < 2 ? NULL : &x[k], err, sizeof err) != AMP_OK) {
            fprintf(stderr, "FAIL: writing a seed file: %s\n", err);
            exit(1);
        }
        seed_len[k] = slurp(path, seeds[k], sizeof seeds[k]);
        if (seed_len[k] != V3_SIZE(x[k].nfallback)) {
            fprintf(stderr, "FAIL: the seed file %s is %zu bytes (expected %zu)\n", path,
                    seed_len[k], V3_SIZE(x[k].nfallback));
            exit(1);
        }
    }
    seed_len[5] = to_v2(seeds[5], seeds[0]);
    seed_len[6] = to_v2(seeds[6], seeds[1]);
    memcpy(seeds[7], seeds[1], 60); /* version 1: the first 60 bytes and its own CRC */
    put32(seeds[7] + 8, 1);
    put32(seeds[7] + 12, 44);
    put32(seeds[7] + 60, crc_before(seeds[7], 60));
    seed_len[7] = 64;
    /* Control: every seed reads, so that what the mutations do is the
     * refusals' cause. */
    for (k = 0; k < NSEEDS; ++k) {
        amp_dtype d;
        amp_scale_state back;
        int found = 0;
        const int written = spit(path, seeds[k], seed_len[k]) == 0;
        if (!written || amp_state_file_read(wpath, &d, &back, NULL, &x[0], &found, err,
                                            sizeof err) != AMP_OK || !found) {
            fprintf(stderr, "FAIL: the seed file %s (%s, %zu bytes) is not read back (expected "
                    "AMP_OK, got \"%s\")\n", path, seed_kind[k], seed_len[k],
                    written ? err : "not written");
            exit(1);
        }
    }
}

/* The size a file's header says it has: 64 for version 1, 88 for version 2,
 * 108 + 8 n for version 3 (n at 100, when the file reaches it and n is at
 * most AMP_STATE_MAX_FALLBACK); 0 for none of these. */
static size_t size_for_header(const fz_buf *b)
{
    if (b->len < 16) return 0;
    const uint32_t v = get32(b->p + 8);
    if (v == 1) return 64;
    if (v == 2) return 88;
    if (v != 3 || b->len < 104) return 0;
    const uint32_t n = get32(b->p + 100);
    return n <= AMP_STATE_MAX_FALLBACK ? V3_SIZE(n) : 0;
}

/* Makes the CRC right for the length the version field (and for version 3,
 * or an unknown version, n) names; where that does not fit the file, the
 * file's last 4 bytes (so that a reader computing a size that wraps, or one
 * trusting the file's own size, meets a right CRC). */
static void fix_crc(fz_buf *b)
{
    if (b->len < 16) return;
    const uint32_t v = get32(b->p + 8);
    uint64_t at = v == 1 ? 60 : 84;
    if (v != 1 && v != 2) at = b->len < 104 ? b->len : 104 + 8 * (uint64_t)get32(b->p + 100);
    if (b->len < at + 4) at = b->len - 4;
    put32(b->p + at, crc_before(b->p, (size_t)at));
}

/* Gives a version 3 file's list another length: n, the payload length and
 * the size agree; entries past the old ones are mostly in increasing order
 * with a why of 1 to 3 (1 time in 10 anything), so that the checks of the list
 * itself are reached. */
static void resize_list(fz_buf *b, fz_rng *r)
{
    if (b->len < 104 || get32(b->p + 8) != 3) return;
    const uint32_t old = get32(b->p + 100);
    uint32_t n;
    switch (fz_below(r, 6)) {
    case 0: n = (uint32_t)fz_below(r, 3); break;
    case 1: n = old + 1; break;
    case 2: n = old ? old - 1 : 0; break;
    case 3: n = AMP_STATE_MAX_FALLBACK - (uint32_t)fz_below(r, 2); break;
    case 4: n = AMP_STATE_MAX_FALLBACK + 1; break;
    default: n = (uint32_t)fz_below(r, AMP_STATE_MAX_FALLBACK + 1); break;
    }
    const size_t size = V3_SIZE(n);
    if (size > b->max) return;
    /* the entries there are (all of them in a seed) */
    size_t have = old <= AMP_STATE_MAX_FALLBACK ? old : 0;
    if (V3_SIZE(have) > b->len) have = 0;
    uint32_t lk = have ? get32(b->p + 104 + 8 * (have - 1)) : 0;
    if (size > b->len) memset(b->p + b->len, 0, size - b->len);
    for (size_t k = have; k < n; ++k) {
        lk += (uint32_t)(k == 0 ? fz_below(r, 3) : 1 + fz_below(r, 3));
        put32(b->p + 104 + 8 * k, fz_chance(r, 10) ? (uint32_t)fz_next(r) : lk);
        put32(b->p + 104 + 8 * k + 4,
              fz_chance(r, 10) ? (uint32_t)fz_below(r, 6) : 1 + (uint32_t)fz_below(r, 3));
    }
    b->len = size;
    b->p[size] = '\0';
    put32(b->p + 100, n);
    put32(b->p + 12, (uint32_t)(88 + 8 * (size_t)n));
    fix_crc(b);
}

/* Sets a 4-byte field (all the format's fields start at multiples of 4) to
 * a value the format cares about: versions, payload lengths, n at and past
 * its limit and where 8 n wraps a u32, whys (0 to 4), the ends of i32 and
 * u32, float specials; or, for a payload length, the one the file's n asks
 * for, and for n, the file's own plus 2^29 (the same 8 n in 32 bits). */
static void set_field(fz_buf *b, fz_rng *r)
{
    static const uint32_t values[] = {0u,          1u,          2u,          3u,
                                      4u,          44u,         68u,         88u,
                                      96u,         104u,        1024u,       1025u,
                                      0x20000000u, 0x20000002u, 0x7fffffffu, 0x80000000u,
                                      0xffffffffu, 0x7f800000u, 0x7fc00000u, 0xff800000u};
    if (b->len < 4) return;
    const size_t at = 4 * fz_below(r, b->len / 4);
    uint32_t v = values[fz_below(r, sizeof values / sizeof values[0])];
    if (at == 12 && b->len >= 104 && fz_chance(r, 50)) v = 88 + 8 * get32(b->p + 100);
    /* n whose 8 n wraps to the file's own: 88 + 8 n is the payload length there */
    if (at == 100 && fz_chance(r, 30)) v = get32(b->p + 100) + 0x20000000u;
    put32(b->p + at, v);
}

static void make_input(input *in, fz_rng *r)
{
    const size_t k = fz_below(r, NSEEDS);
    in->kind = seed_kind[k];
    fz_buf_set(&in->file, seeds[k], seed_len[k]);
    if (fz_chance(r, 25)) resize_list(&in->file, r);
    fz_mutate(&in->file, r, dict, NDICT, 4);
    if (fz_chance(r, 30)) set_field(&in->file, r);
    if (fz_chance(r, 70)) fix_crc(&in->file);
    /* weights: darknet's header in one of its two forms, or less, then bytes */
    unsigned char w[64];
    int head[3] = {0, fz_chance(r, 50) ? 2 : 1, 0};
    memcpy(w, head, sizeof head);
    for (size_t i = sizeof head; i < sizeof w; ++i) w[i] = (unsigned char)fz_next(r);
    fz_buf_set(&in->weights, w, sizeof w);
    fz_mutate(&in->weights, r, dict, NDICT, 2);
}

/* An accepted file's dtype, state and weights against its bytes: NULL, or
 * what is wrong, with detail. */
static const char *check_read_values(const fz_buf *f, amp_dtype d, const amp_scale_state *s,
                                     const amp_weights_id *id, char *detail, size_t size)
{
    const unsigned char *p = f->p;
    uint32_t bits;
    memcpy(&bits, &s->scale, sizeof bits);
    snprintf(detail, size, "read: dtype %d, scale bits 0x%08lx, growth_tracker %ld, "
             "hysteresis_left %d, consecutive_skips %ld, steps %llu, skips %llu, bound %d, seen "
             "%llu, size %llu, CRC-32 0x%08lx", (int)d, (unsigned long)bits, s->growth_tracker,
             s->hysteresis_left, s->consecutive_skips, s->steps, s->skips, id->bound, id->seen,
             id->size, id->crc);
    if ((uint32_t)d != get32(p + 16)) return "accepted a file but the dtype read is not the file's";
    if (bits != get32(p + 20) || (uint64_t)s->growth_tracker != get64(p + 24) ||
        (uint32_t)s->hysteresis_left != get32(p + 32) ||
        (uint64_t)s->consecutive_skips != get64(p + 36) || s->steps != get64(p + 44) ||
        s->skips != get64(p + 52))
        return "accepted a file but the state read is not the file's";
    if (get32(p + 8) == 1 ? id->bound != 0
                          : (uint32_t)id->bound != get32(p + 60) || id->seen != get64(p + 64) ||
                                id->size != get64(p + 72) || id->crc != get32(p + 80))
        return "accepted a file but the weights read are not the ones it names";
    return NULL;
}

/* An accepted file's extras against its bytes (len is its version's size,
 * already checked): NULL, or what is wrong, with detail. */
static const char *check_extras(const fz_buf *f, const amp_state_extra *x, char *detail,
                                size_t size)
{
    const uint32_t v = get32(f->p + 8);
    if (v != 3) {
        snprintf(detail, size, "forward_skips %llu, loss_skips %llu, nfallback %d",
                 x->forward_skips, x->loss_skips, x->nfallback);
        return x->forward_skips || x->loss_skips || x->nfallback
                   ? "accepted a version 1 or 2 file with extras that are not zero"
                   : NULL;
    }
    const uint32_t n = get32(f->p + 100);
    snprintf(detail, size, "file: forward_skips %llu, loss_skips %llu, n %lu; read: %llu, %llu, %d",
             (unsigned long long)get64(f->p + 84), (unsigned long long)get64(f->p + 92),
             (unsigned long)n, x->forward_skips, x->loss_skips, x->nfallback);
    if (x->forward_skips != get64(f->p + 84) || x->loss_skips != get64(f->p + 92) ||
        x->nfallback < 0 || (uint32_t)x->nfallback != n)
        return "accepted a version 3 file but the extras read are not the file's";
    for (int k = 0; k < x->nfallback; ++k) {
        const int lk = x->fallback[k].layer, w = x->fallback[k].why;
        snprintf(detail, size, "entry %d: file layer %lu, why %lu; read layer %d, why %d", k,
                 (unsigned long)get32(f->p + 104 + 8 * (size_t)k),
                 (unsigned long)get32(f->p + 108 + 8 * (size_t)k), lk, w);
        if (lk < 0 || (uint32_t)lk != get32(f->p + 104 + 8 * (size_t)k) || w < 0 ||
            (uint32_t)w != get32(f->p + 108 + 8 * (size_t)k))
            return "accepted a version 3 file but a fallback entry read is not the file's";
        if (k > 0 && lk <= x->fallback[k - 1].layer)
            return "accepted a fallback list whose layers are not increasing";
        if (w < 1 || w > 3) return "accepted a fallback entry whose why is not 1 to 3";
    }
    return NULL;
}

static void check(fz_run *run, fz_rng *r, const input *in, fz_count *reads, fz_count *ids,
                  fz_count *lists)
{
    /* large: kept out of the stack; the sentinel a refusal must leave */
    static amp_state_extra x, x_sentinel;
    fz_err e;
    if (spit(path, in->file.p, in->file.len) != 0 || spit(wpath, in->weights.p, in->weights.len) != 0) {
        fz_violation(run, "cannot write the input files", NULL);
    }
    amp_dtype d = (amp_dtype)77;
    amp_scale_state s;
    memset(&s, 0x5a, sizeof s);
    const amp_scale_state sentinel = s;
    amp_weights_id id = {7, 7, 7, 7};
    int found = 5;
    memset(&x_sentinel, 0x5a, sizeof x_sentinel);
    x = x_sentinel;
    amp_state_extra *xp = fz_chance(r, 80) ? &x : NULL; /* x NULL: ignored */
    char *err = fz_err_reset(&e, r);
    amp_status st = amp_state_file_read(wpath, &d, &s, &id, xp, &found, err, e.len);
    const char *why = fz_check_message(st, &e, "state file ", 0);
    if (why) fz_violation(run, why, err);
    if (st != AMP_OK && e.len >= AMP_MSG_LEN && !strstr(err, path))
        fz_violation(run, "the message does not name the state file", err);
    if (st == AMP_OK) {
        char buf[400];
        const size_t want = size_for_header(&in->file);
        if (found != 1) fz_violation(run, "AMP_OK for an existing file but found is not 1", NULL);
        if (in->file.len < 8 || memcmp(in->file.p, "DNAMPST", 8) != 0)
            fz_violation(run, "accepted a file without the magic", NULL);
        if (want == 0 || in->file.len != want)
            fz_violation(run, "accepted a file whose size is not its version's (64 bytes, 88, or "
                              "108 + 8 n with n from the file)", NULL);
        if (get32(in->file.p + want - 4) != crc_before(in->file.p, want - 4))
            fz_violation(run, "accepted a file whose last 4 bytes are not the CRC-32 of the others",
                         NULL);
        if (d != AMP_DTYPE_FLOAT32 && d != AMP_DTYPE_FLOAT16 && d != AMP_DTYPE_BFLOAT16)
            fz_violation(run, "accepted an unknown dtype", NULL);
        if (amp_scale_state_invalid(&s, buf, sizeof buf))
            fz_violation(run, "accepted a state the scaler refuses", buf);
        if (id.bound != 0 && id.bound != 1)
            fz_violation(run, "accepted a bound that is neither 0 nor 1", NULL);
        if (!id.bound && (id.seen || id.size || id.crc))
            fz_violation(run, "accepted bound 0 with weights fields set", NULL);
        if ((why = check_read_values(&in->file, d, &s, &id, buf, sizeof buf)) != NULL)
            fz_violation(run, why, buf);
        if (xp && (why = check_extras(&in->file, &x, buf, sizeof buf)) != NULL)
            fz_violation(run, why, buf);
        reads->n_yes++;
        if (get32(in->file.p + 8) == 3) {
            if (get32(in->file.p + 100))
                lists->n_yes++;
            else
                lists->n_no++;
        }
    } else {
        if (found != 0) fz_violation(run, "an error but found is not 0", NULL);
        if (d != (amp_dtype)77 || memcmp(&s, &sentinel, sizeof s) || id.bound != 7 ||
            id.seen != 7 || id.size != 7 || id.crc != 7 || memcmp(&x, &x_sentinel, sizeof x))
            fz_violation(run, "an error but the outputs were written", err);
        reads->n_no++;
    }

    err = fz_err_reset(&e, r);
    amp_weights_id w;
    st = amp_weights_identify(wpath, &w, err, e.len);
    why = fz_check_message(st, &e, "weights file ", 0);
    if (why) fz_violation(run, why, err);
    if (st != AMP_OK && e.len >= AMP_MSG_LEN && !strstr(err, wpath))
        fz_violation(run, "the message does not name the weights file", err);
    if (st == AMP_OK) {
        const uLong crc = crc32(0L, (const unsigned char *)in->weights.p, (uInt)in->weights.len);
        if (!w.bound || w.size != in->weights.len || w.crc != (unsigned long)crc)
            fz_violation(run, "identify: not the file's size and CRC-32", NULL);
        ids->n_yes++;
    } else {
        if (st != AMP_ERR_FORMAT || in->weights.len >= 3 * sizeof(int) + sizeof(size_t))
            fz_violation(run, "identify refused a file as long as darknet's header", err);
        ids->n_no++;
    }
}

#ifndef FUZZ_LIBFUZZER
int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: state_fuzz SCRATCH\n");
        return 2;
    }
    mkdir(argv[1], 0755);
    make_seeds(argv[1]);
    fz_run run;
    input in;
    fz_buf_init(&in.file, MAX_FILE);
    fz_buf_init(&in.weights, MAX_FILE);
    fz_begin(&run, "fuzz.state", DEFAULT_N, DEFAULT_SEED);
    fz_count *reads = fz_counter(&run, "amp_state_file_read", "accepted", "refused");
    fz_count *ids = fz_counter(&run, "amp_weights_identify", "identified", "refused");
    fz_count *lists = fz_counter(&run, "version 3 files accepted", "with fallback entries",
                                 "without");
    run.print_input = print_input;
    run.ctx = &in;
    for (run.index = 0; run.index < run.n; ++run.index) {
        fz_rng r = fz_rng_at(run.seed, run.index);
        make_input(&in, &r);
        check(&run, &r, &in, reads, ids, lists);
    }
    fz_buf_free(&in.file);
    fz_buf_free(&in.weights);
    return fz_end(&run);
}
#else
/* libFuzzer: the bytes are the state file; the weights file beside it is a
 * fixed one. Files go to DARKNET_AMP_FUZZ_DIR (default /tmp). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fz_run run;
    static input in;
    static fz_count *reads, *ids, *lists;
    static int ready;
    if (!ready) {
        const char *dir = getenv("DARKNET_AMP_FUZZ_DIR");
        make_seeds(dir ? dir : "/tmp");
        fz_buf_init(&in.file, MAX_FILE);
        fz_buf_init(&in.weights, MAX_FILE);
        fz_begin(&run, "fuzz.state (libFuzzer)", 0, 0);
        reads = fz_counter(&run, "amp_state_file_read", "accepted", "refused");
        ids = fz_counter(&run, "amp_weights_identify", "identified", "refused");
        lists = fz_counter(&run, "version 3 files accepted", "with fallback entries", "without");
        run.print_input = print_input;
        run.ctx = &in;
        ready = 1;
    }
    fz_rng r = {size};
    in.kind = "libFuzzer";
    fz_buf_set(&in.file, data, size);
    const int head[3] = {0, 2, 0};
    unsigned char w[40] = {0};
    memcpy(w, head, sizeof head);
    fz_buf_set(&in.weights, w, sizeof w);
    ++run.index;
    check(&run, &r, &in, reads, ids, lists);
    return 0;
}
#endif
