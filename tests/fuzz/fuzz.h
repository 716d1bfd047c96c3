/* What the fuzz harnesses share: the run's settings (N inputs from one seed,
 * DARKNET_AMP_FUZZ_N and DARKNET_AMP_FUZZ_SEED override the test's fixed
 * ones), its counts and report, the error buffer with guard bytes, the
 * contract on a reader's message, and how a violation is reported: the
 * input, escaped, and exit 1 (abort() under libFuzzer, which then keeps the
 * input as a crash file).
 *
 * A harness is one file with a per-input check used twice: by its main
 * (the deterministic run, a ctest test) and, built with FUZZ_LIBFUZZER, by
 * LLVMFuzzerTestOneInput (tests/fuzz/CMakeLists.txt, DARKNET_AMP_FUZZ).
 */
#ifndef DARKNET_AMP_FUZZ_H
#define DARKNET_AMP_FUZZ_H

#include "darknet_amp.h" /* amp_status */
#include "error.h"       /* AMP_MSG_LEN */
#include "mutate.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Counts and report ---- */

typedef struct fz_count {
    const char *what, *yes, *no; /* "amp_options_parse_net", "accepted", "refused" */
    unsigned long n_yes, n_no;
} fz_count;

typedef struct fz_run {
    const char *test;                /* the ctest name, "fuzz.options" */
    uint64_t seed;
    unsigned long n, index;          /* inputs to run; the one being checked */
    fz_count counts[4];
    int ncounts;
    double t0;
    /* Prints the input being checked (escaped), for a violation's report. */
    void (*print_input)(void *ctx, FILE *out);
    void *ctx;
} fz_run;

static inline double fz_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline fz_count *fz_counter(fz_run *run, const char *what, const char *yes, const char *no)
{
    fz_count *c = &run->counts[run->ncounts++];
    c->what = what;
    c->yes = yes;
    c->no = no;
    c->n_yes = c->n_no = 0;
    return c;
}

/* A decimal from the environment, or def; a malformed one ends the run. */
static inline uint64_t fz_env_u64(const char *name, uint64_t def)
{
    const char *s = getenv(name);
    char *end;
    unsigned long long v;
    if (!s || !*s) return def;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (*end || errno || s[0] == '-') {
        fprintf(stderr, "%s=%s: expected a decimal integer >= 0\n", name, s);
        exit(2);
    }
    return (uint64_t)v;
}

static inline void fz_begin(fz_run *run, const char *test, unsigned long default_n,
                            uint64_t default_seed)
{
    memset(run, 0, sizeof *run);
    run->test = test;
    run->n = (unsigned long)fz_env_u64("DARKNET_AMP_FUZZ_N", default_n);
    run->seed = fz_env_u64("DARKNET_AMP_FUZZ_SEED", default_seed);
    run->t0 = fz_now();
}

/* The report: each reader's counts, the seed, N and the time; returns 0. */
static inline int fz_end(const fz_run *run)
{
    int i;
    printf("%s: seed %llu, %lu inputs, %.2f s\n", run->test, (unsigned long long)run->seed,
           run->n, fz_now() - run->t0);
    for (i = 0; i < run->ncounts; ++i)
        printf("  %s: %lu %s, %lu %s\n", run->counts[i].what, run->counts[i].n_yes,
               run->counts[i].yes, run->counts[i].n_no, run->counts[i].no);
    printf("PASS: no contract violation\n");
    return 0;
}

/* ---- Inputs in messages ---- */

/* p[0..n) as a C string literal: printable ASCII as is, the rest escaped. */
static inline void fz_print_escaped(FILE *out, const void *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    size_t i;
    fputc('"', out);
    for (i = 0; i < n; ++i) {
        if (s[i] == '"' || s[i] == '\\')
            fprintf(out, "\\%c", s[i]);
        else if (s[i] >= 0x20 && s[i] < 0x7f)
            fputc(s[i], out);
        else if (s[i] == '\n')
            fputs("\\n", out);
        else if (s[i] == '\t')
            fputs("\\t", out);
        else
            /* octal: a hex escape would swallow a following hex digit */
            fprintf(out, "\\%03o", s[i]);
    }
    fputc('"', out);
}

static inline void fz_print_str(FILE *out, const char *s)
{
    if (s)
        fz_print_escaped(out, s, strlen(s));
    else
        fputs("NULL", out);
}

/* A contract violation: what, the input, the way to run it again; the end. */
static inline void fz_violation(const fz_run *run, const char *why, const char *detail)
{
    fflush(stdout);
    fprintf(stderr, "FAIL: %s: input %lu of seed %llu: %s\n", run->test, run->index,
            (unsigned long long)run->seed, why);
    if (detail) {
        fprintf(stderr, "  message: ");
        /* bounded: a message the reader left unterminated ends nowhere */
        fz_print_escaped(stderr, detail, strnlen(detail, AMP_MSG_LEN));
        fputc('\n', stderr);
    }
    if (run->print_input) {
        fprintf(stderr, "  input: ");
        run->print_input(run->ctx, stderr);
        fputc('\n', stderr);
    }
    fprintf(stderr, "  again: DARKNET_AMP_FUZZ_SEED=%llu DARKNET_AMP_FUZZ_N=%lu (input %lu is "
                    "the last one)\n",
            (unsigned long long)run->seed, run->index + 1, run->index);
#ifdef FUZZ_LIBFUZZER
    abort();
#else
    exit(1);
#endif
}

/* ---- The error buffer and the contract on a message ---- */

#define FZ_GUARD 16
#define FZ_GUARD_BYTE 0xa5

/* A reader's err buffer: errlen bytes followed by guard bytes, so that a
 * write past errlen is seen in any build (ASan alone would not see one
 * inside the allocation). Mostly AMP_MSG_LEN, the size every caller in the
 * plugin passes; one in five a short one, to check truncation. */
typedef struct fz_err {
    char buf[AMP_MSG_LEN + FZ_GUARD];
    size_t len;
} fz_err;

static inline char *fz_err_reset(fz_err *e, fz_rng *r)
{
    e->len = fz_chance(r, 80) ? AMP_MSG_LEN : 2 + fz_below(r, AMP_MSG_LEN - 2);
    memset(e->buf, 'E', e->len); /* no NUL: a reader that leaves it so is caught */
    memset(e->buf + e->len, FZ_GUARD_BYTE, FZ_GUARD);
    return e->buf;
}

/* The contract on everything but the value: NULL, or why it is broken.
 * AMP_OK: nothing written past the buffer; with ok_clears (the reader
 * documents an empty message on success) err is "". An error: a status of
 * darknet_amp.h, a non-empty message, NUL-terminated within the buffer,
 * one line of printable ASCII (a reader escapes what it quotes), starting
 * with prefix (the reader names the cfg file and section, or the variable),
 * and complete when the buffer is AMP_MSG_LEN long (error.h: "AMP_MSG_LEN
 * bytes are always enough"). */
static inline const char *fz_check_message(amp_status st, const fz_err *e, const char *prefix,
                                           int ok_clears)
{
    const char *err = e->buf, *nul;
    size_t i, n, plen = strlen(prefix);
    for (i = 0; i < FZ_GUARD; ++i)
        if ((unsigned char)e->buf[e->len + i] != FZ_GUARD_BYTE)
            return "the reader wrote past the end of the err buffer";
    nul = (const char *)memchr(err, '\0', e->len);
    if (st == AMP_OK) {
        if (ok_clears && (!nul || err[0])) return "AMP_OK but err is not empty";
        return NULL;
    }
    if (st < AMP_ERR_INVALID || st > AMP_ERR_DEVICE) return "an unknown amp_status";
    if (!nul) return "an error with a message that is not NUL-terminated within errlen";
    if (!err[0]) return "an error with an empty message";
    n = (size_t)(nul - err);
    for (i = 0; i < n; ++i)
        if ((unsigned char)err[i] < 0x20 || (unsigned char)err[i] >= 0x7f)
            return "the message holds a control or non-ASCII byte (not escaped)";
    if (strncmp(err, prefix, n < plen ? n : plen) != 0)
        return "the message does not start by naming its subject";
    if (e->len >= AMP_MSG_LEN && n >= AMP_MSG_LEN - 1)
        return "the message fills AMP_MSG_LEN: cut short";
    return NULL;
}

#endif
