/* fuzz.state: the state file reader (amp_state_file_read, plugin/state_file.c)
 * and the weights identity it compares (amp_weights_identify).
 *
 * Each input starts from a valid file of one of three kinds, written by the
 * plugin's own writer: version 2 bound to weights, version 2 bound to none,
 * version 1 (hand-made: the writer writes version 2 only). mutate.h changes
 * its bytes (flips, interesting bytes, runs inserted, deleted or repeated,
 * tokens of the format spliced in, truncation, extension); then, 7 times in
 * 10, the CRC-32 at the offset its version field names is made right again,
 * so that the checks behind the CRC (version, length, values) are reached.
 * The file goes to SCRATCH/f.weights.amp and is read. Beside it, a weights
 * file of mutated darknet headers and a few bytes is identified.
 *
 * The contract (docs/state-file.md), on every input:
 * - read: AMP_OK with found 1 and a state the scaler can run from (a known
 *   dtype, amp_scale_state_invalid says nothing, bound 0 or 1 and 0 with
 *   zeros), from a file of exactly 64 or 88 bytes; or an error with a message
 *   (fuzz.h: NUL-terminated in the buffer, printable, starting with
 *   "state file ", not cut), found 0 and the outputs untouched;
 * - identify: AMP_OK, bound, with the file's size and CRC-32; or
 *   AMP_ERR_FORMAT for a file shorter than darknet's header, with a message
 *   starting with "weights file ";
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
#define MAX_FILE 1024

static const char *const dict[] = {"DNAMPST", "\x01\0\0\0", "\x02\0\0\0", "\x03\0\0\0",
                                   "\x2c\0\0\0", "\x44\0\0\0", "\xff\xff\xff\xff",
                                   "\0\0\x80\x7f", "\0\0\xc0\x7f", "\0\0\x80\xff",
                                   "\0\0\0\x80", "\x01\0\0\0\0\0\0\x80"};
#define NDICT (sizeof dict / sizeof dict[0])

typedef struct input {
    fz_buf file;      /* the state file's bytes */
    fz_buf weights;   /* the weights file's bytes */
    const char *kind; /* what it was made from */
} input;

static char path[4096], wpath[4096];
static unsigned char seeds[3][128];
static size_t seed_len[3];
static const char *const seed_kind[3] = {"version 2, bound", "version 2, no weights",
                                         "version 1"};

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

/* The three starting files, from the plugin's writer. */
static void make_seeds(const char *dir)
{
    char err[AMP_MSG_LEN];
    amp_scale_state s = {1024.0f, 17, 2, 1, 300, 9};
    amp_weights_id id = {1, 123456, 8712628, 0x0beb92f3ul};
    snprintf(path, sizeof path, "%s/f.weights.amp", dir);
    snprintf(wpath, sizeof wpath, "%s/f.weights", dir);
    unlink(wpath);
    for (int k = 0; k < 2; ++k) {
        if (amp_state_file_write(wpath, AMP_DTYPE_FLOAT16, &s, k == 0 ? &id : NULL, err,
                                 sizeof err) != AMP_OK) {
            fprintf(stderr, "FAIL: writing a seed file: %s\n", err);
            exit(1);
        }
        seed_len[k] = slurp(path, seeds[k], sizeof seeds[k]);
    }
    memcpy(seeds[2], seeds[1], 60); /* version 1: the first 60 bytes and its own CRC */
    put32(seeds[2] + 8, 1);
    put32(seeds[2] + 12, 44);
    put32(seeds[2] + 60, (uint32_t)crc32(0L, seeds[2], 60));
    seed_len[2] = 64;
}

/* Makes the CRC right for the length the version field names, if it fits. */
static void fix_crc(fz_buf *b)
{
    if (b->len < 16) return;
    const uint32_t v = get32((const unsigned char *)b->p + 8);
    const size_t at = v == 1 ? 60 : 84;
    if (b->len < at + 4) return;
    put32((unsigned char *)b->p + at, (uint32_t)crc32(0L, (const unsigned char *)b->p, (uInt)at));
}

static void make_input(input *in, fz_rng *r)
{
    const size_t k = fz_below(r, 3);
    in->kind = seed_kind[k];
    fz_buf_set(&in->file, seeds[k], seed_len[k]);
    fz_mutate(&in->file, r, dict, NDICT, 4);
    if (fz_chance(r, 70)) fix_crc(&in->file);
    /* weights: darknet's header in one of its two forms, or less, then bytes */
    unsigned char w[64];
    int head[3] = {0, fz_chance(r, 50) ? 2 : 1, 0};
    memcpy(w, head, sizeof head);
    for (size_t i = sizeof head; i < sizeof w; ++i) w[i] = (unsigned char)fz_next(r);
    fz_buf_set(&in->weights, w, sizeof w);
    fz_mutate(&in->weights, r, dict, NDICT, 2);
}

static void check(fz_run *run, fz_rng *r, const input *in, fz_count *reads, fz_count *ids)
{
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
    char *err = fz_err_reset(&e, r);
    amp_status st = amp_state_file_read(wpath, &d, &s, &id, &found, err, e.len);
    const char *why = fz_check_message(st, &e, "state file ", 0);
    if (why) fz_violation(run, why, err);
    if (st == AMP_OK) {
        char buf[160];
        if (found != 1) fz_violation(run, "AMP_OK for an existing file but found is not 1", NULL);
        if (in->file.len != 64 && in->file.len != 88)
            fz_violation(run, "accepted a file that is neither 64 nor 88 bytes", NULL);
        if (d != AMP_DTYPE_FLOAT32 && d != AMP_DTYPE_FLOAT16 && d != AMP_DTYPE_BFLOAT16)
            fz_violation(run, "accepted an unknown dtype", NULL);
        if (amp_scale_state_invalid(&s, buf, sizeof buf))
            fz_violation(run, "accepted a state the scaler refuses", buf);
        if (id.bound != 0 && id.bound != 1)
            fz_violation(run, "accepted a bound that is neither 0 nor 1", NULL);
        if (!id.bound && (id.seen || id.size || id.crc))
            fz_violation(run, "accepted bound 0 with weights fields set", NULL);
        reads->n_yes++;
    } else {
        if (found != 0) fz_violation(run, "an error but found is not 0", NULL);
        if (d != (amp_dtype)77 || memcmp(&s, &sentinel, sizeof s) || id.bound != 7)
            fz_violation(run, "an error but the outputs were written", err);
        reads->n_no++;
    }

    err = fz_err_reset(&e, r);
    amp_weights_id w;
    st = amp_weights_identify(wpath, &w, err, e.len);
    why = fz_check_message(st, &e, "weights file ", 0);
    if (why) fz_violation(run, why, err);
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
    run.print_input = print_input;
    run.ctx = &in;
    for (run.index = 0; run.index < run.n; ++run.index) {
        fz_rng r = fz_rng_at(run.seed, run.index);
        make_input(&in, &r);
        check(&run, &r, &in, reads, ids);
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
    static fz_count *reads, *ids;
    static int ready;
    if (!ready) {
        const char *dir = getenv("DARKNET_AMP_FUZZ_DIR");
        make_seeds(dir ? dir : "/tmp");
        fz_buf_init(&in.file, MAX_FILE);
        fz_buf_init(&in.weights, MAX_FILE);
        fz_begin(&run, "fuzz.state (libFuzzer)", 0, 0);
        reads = fz_counter(&run, "amp_state_file_read", "accepted", "refused");
        ids = fz_counter(&run, "amp_weights_identify", "identified", "refused");
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
    check(&run, &r, &in, reads, ids);
    return 0;
}
#endif
