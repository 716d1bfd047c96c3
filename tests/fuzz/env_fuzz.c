/* fuzz.env: the DARKNET_AMP_* environment variables (plugin/options.c) and
 * the two of them the CPU backend parses (DARKNET_AMP_CPU and
 * DARKNET_AMP_CONV, amp_cpu_path_parse and amp_conv_form_parse in
 * plugin/cpu/settings.c).
 *
 * Each input sets (putenv) or unsets DARKNET_AMP_PROFILE, DARKNET_AMP_CPU,
 * DARKNET_AMP_INJECT, DARKNET_AMP_TEST_CRASH_IN_SAVE and DARKNET_AMP_CONV, each value from
 * that variable's corpus (its words, near misses, "", "0 ", "1 ", case
 * variants), then mutated (mutate.h: random and non-ASCII bytes, thousands
 * of characters). Then amp_env_read, amp_env_crash_in_save, amp_cpu_env_read,
 * amp_cpu_path_parse and amp_conv_form_parse read them. CRASH_IN_SAVE=1 is only read here: no
 * state file is written, so nothing crashes on purpose.
 *
 * The contract (docs/cfg.md, docs/state-file.md), on every input:
 * - amp_env_read: profile is 1 exactly when DARKNET_AMP_PROFILE is set,
 *   not empty and not "0"; inject is the variable's value as set (NULL when
 *   unset); amp_cpu_env_read: cpu and conv the same;
 * - amp_env_crash_in_save: 1 exactly when the variable is "1";
 * - amp_cpu_path_parse: unset, "" and "auto" are auto, "onednn" and
 *   "emulate" theirs; anything else AMP_ERR_INVALID with a message that
 *   fits the buffer, is NUL-terminated and printable, and starts with
 *   "DARKNET_AMP_CPU=" (fuzz.h);
 * - amp_conv_form_parse: the same with auto, timed, direct, matmul and
 *   rule (auto: timed, or rule when seeded; both tried), and
 *   "DARKNET_AMP_CONV=";
 * - nothing reads or writes out of bounds (the sanitized build).
 *
 *   env_fuzz                      N and seed: DARKNET_AMP_FUZZ_N, DARKNET_AMP_FUZZ_SEED
 */
#define _XOPEN_SOURCE 700 /* putenv */

#include "fuzz.h"
#include "core.h" /* amp_env, amp_env_read, amp_env_crash_in_save */
#include "cpu.h"  /* amp_cpu_env_read, amp_cpu_path_parse, amp_conv_form_parse */

#define DEFAULT_N 500000
#define DEFAULT_SEED 20240612u
#define VAL_MAX 6000
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

enum { PROFILE, CPU, INJECT, CRASH, CONV, NVARS };

static const char *const names[NVARS] = {"DARKNET_AMP_PROFILE", "DARKNET_AMP_CPU",
                                         "DARKNET_AMP_INJECT", "DARKNET_AMP_TEST_CRASH_IN_SAVE",
                                         "DARKNET_AMP_CONV"};

static const char *const profile_words[] = {"1", "0", "", "2", "yes", "00", "0 ", " 0", "off",
                                            "-0", "false"};
static const char *const cpu_words[] = {"auto", "onednn", "emulate", "AUTO", "", "emulated",
                                        "oneDNN", "auto ", "onednn\n", "dnnl", "emulate\xff"};
static const char *const inject_words[] = {"3:weights:nan:2,5", "", "0:biases:inf:1",
                                           "1:uz.weights:-inf:4;2:scales:nan:1"};
static const char *const conv_words[] = {"auto",   "timed",    "direct", "matmul", "rule",
                                         "",       "MATMUL",   "im2col", "direct ", "matmul\n",
                                         "Auto",   "rules",    "gemm"};
static const char *const crash_words[] = {"1", "0", "", "11", "1 ", " 1", "true", "01", "+1",
                                          "1\n"};

static const char *dict[64];
static size_t ndict;

static void dict_init(void)
{
    static const char *const *lists[] = {profile_words, cpu_words, inject_words, crash_words,
                                         conv_words};
    static const size_t sizes[] = {COUNT(profile_words), COUNT(cpu_words), COUNT(inject_words),
                                   COUNT(crash_words), COUNT(conv_words)};
    size_t i, j;
    for (i = 0; i < COUNT(lists); ++i)
        for (j = 0; j < sizes[i] && ndict < COUNT(dict); ++j) dict[ndict++] = lists[i][j];
}

typedef struct input {
    fz_buf val[NVARS];
    int set[NVARS];
    char *entry[NVARS]; /* "NAME=value", as putenv takes it */
} input;

static void print_input(void *ctx, FILE *out)
{
    const input *in = ctx;
    int v;
    for (v = 0; v < NVARS; ++v) {
        fprintf(out, "\n    %s", names[v]);
        if (in->set[v]) {
            fputc('=', out);
            fz_print_str(out, fz_str(&in->val[v]));
        } else {
            fputs(" unset", out);
        }
    }
}

static void make_input(input *in, fz_rng *r)
{
    static const char *const *words[NVARS] = {profile_words, cpu_words, inject_words,
                                              crash_words, conv_words};
    static const size_t nwords[NVARS] = {COUNT(profile_words), COUNT(cpu_words),
                                         COUNT(inject_words), COUNT(crash_words),
                                         COUNT(conv_words)};
    int v;
    for (v = 0; v < NVARS; ++v) {
        in->set[v] = !fz_chance(r, 20);
        fz_buf_set_str(&in->val[v], words[v][fz_below(r, nwords[v])]);
        if (fz_chance(r, 45)) fz_mutate(&in->val[v], r, dict, ndict, 4);
    }
}

static fz_count *profile_count, *crash_count, *cpu_count, *conv_count;

/* The CPU backend's two choices: the names each takes, and the enum value
 * (cpu.h) each name is read as. DARKNET_AMP_CONV's auto is timed, or the
 * rule in a seeded run (DARKNET_SEED set). */
static const char *const cpu_names[] = {"auto", "onednn", "emulate"};
static const int cpu_values[] = {AMP_CPU_AUTO, AMP_CPU_ONEDNN, AMP_CPU_EMULATE};
static const char *const conv_names[] = {"auto", "timed", "direct", "matmul", "rule"};
static const int conv_values[2][5] = {
    {AMP_CONV_TIMED, AMP_CONV_TIMED, AMP_CONV_DIRECT, AMP_CONV_MATMUL, AMP_CONV_RULE},
    {AMP_CONV_RULE, AMP_CONV_TIMED, AMP_CONV_DIRECT, AMP_CONV_MATMUL, AMP_CONV_RULE}};
typedef amp_status (*parse_fn)(const char *value, int seeded, int *out, char *err, size_t errlen);

static amp_status cpu_parse(const char *value, int seeded, int *out, char *err, size_t errlen)
{
    amp_cpu_path path = (amp_cpu_path)-1;
    amp_status st = amp_cpu_path_parse(value, &path, err, errlen);
    *out = (int)path;
    return st;
}

static amp_status conv_parse(const char *value, int seeded, int *out, char *err, size_t errlen)
{
    amp_conv_form form = (amp_conv_form)-1;
    amp_status st = amp_conv_form_parse(value, seeded, &form, err, errlen);
    *out = (int)form;
    return st;
}

/* value (NULL: unset) read by parse as documented: unset, "" and words[0]
 * as words[0], each of the n words as values[its index], anything else
 * refused with a message starting "VAR=" that names every word. */
static void check_choice(fz_run *run, fz_rng *r, const char *var, const char *value, int seeded,
                         const char *const *words, const int *values, int n, parse_fn parse,
                         fz_count *count)
{
    char prefix[64], msg[160];
    const char *why;
    fz_err e;
    int got = -1, want = !value || !*value ? values[0] : -1;
    for (int i = 0; i < n && value && *value && want < 0; ++i)
        if (!strcmp(value, words[i])) want = values[i];
    fz_err_reset(&e, r); /* before e.len is read */
    amp_status st = parse(value, seeded, &got, e.buf, e.len);
    snprintf(prefix, sizeof prefix, "%s=", var);
    if ((why = fz_check_message(st, &e, prefix, 0))) fz_violation(run, why, e.buf);
    if (want >= 0 && (st != AMP_OK || got != want)) {
        snprintf(msg, sizeof msg, "%s: a documented value not read as documented (seeded %d)",
                 var, seeded);
        fz_violation(run, msg, st ? e.buf : NULL);
    }
    if (want < 0 && st == AMP_OK) {
        snprintf(msg, sizeof msg, "%s: accepted a value that is none of its %d names", var, n);
        fz_violation(run, msg, NULL);
    }
    if (st == AMP_OK)
        ++count->n_yes;
    else
        ++count->n_no;
}

static void check(fz_run *run, fz_rng *r, const input *in)
{
    const char *val[NVARS];
    amp_env env;
    amp_cpu_env cpu_env;
    int v, profile, crash;
    /* putenv with the harness's own buffer rather than setenv: glibc's
     * setenv keeps a copy of every value it was ever given (getenv's
     * pointers must stay valid), a million inputs' worth of memory. */
    for (v = 0; v < NVARS; ++v) {
        val[v] = in->set[v] ? fz_str(&in->val[v]) : NULL;
        unsetenv(names[v]);
        if (!val[v]) continue;
        sprintf(in->entry[v], "%s=%s", names[v], val[v]);
        if (putenv(in->entry[v]) != 0)
            fz_violation(run, "putenv failed (the harness, not the reader)", NULL);
    }

    memset(&env, 0x5a, sizeof env);
    amp_env_read(&env);
    profile = val[PROFILE] && *val[PROFILE] && strcmp(val[PROFILE], "0") != 0;
    if (env.profile != profile)
        fz_violation(run, "amp_env_read: profile is not 1 exactly for a set, non-empty, non-0 "
                          "DARKNET_AMP_PROFILE", NULL);
    memset(&cpu_env, 0x5a, sizeof cpu_env);
    amp_cpu_env_read(&cpu_env);
    if (val[CPU] ? !cpu_env.cpu || strcmp(cpu_env.cpu, val[CPU]) : cpu_env.cpu != NULL)
        fz_violation(run, "amp_cpu_env_read: cpu is not DARKNET_AMP_CPU as set", NULL);
    if (val[CONV] ? !cpu_env.conv || strcmp(cpu_env.conv, val[CONV]) : cpu_env.conv != NULL)
        fz_violation(run, "amp_cpu_env_read: conv is not DARKNET_AMP_CONV as set", NULL);
    if (val[INJECT] ? !env.inject || strcmp(env.inject, val[INJECT]) : env.inject != NULL)
        fz_violation(run, "amp_env_read: inject is not DARKNET_AMP_INJECT as set", NULL);
    if (profile)
        ++profile_count->n_yes;
    else
        ++profile_count->n_no;

    crash = amp_env_crash_in_save();
    if (crash != (val[CRASH] && strcmp(val[CRASH], "1") == 0))
        fz_violation(run, "amp_env_crash_in_save is not 1 exactly for \"1\"", NULL);
    if (crash)
        ++crash_count->n_yes;
    else
        ++crash_count->n_no;

    check_choice(run, r, "DARKNET_AMP_CPU", cpu_env.cpu, 0, cpu_names, cpu_values, 3, cpu_parse,
                 cpu_count);
    for (int seeded = 0; seeded < 2; ++seeded)
        check_choice(run, r, "DARKNET_AMP_CONV", cpu_env.conv, seeded, conv_names,
                     conv_values[seeded], 5, conv_parse, conv_count);
}

static void counters(fz_run *run)
{
    profile_count = fz_counter(run, "amp_env_read (DARKNET_AMP_PROFILE)", "on", "off");
    crash_count = fz_counter(run, "amp_env_crash_in_save", "on", "off");
    cpu_count = fz_counter(run, "amp_cpu_path_parse (DARKNET_AMP_CPU)", "accepted", "refused");
    conv_count = fz_counter(run, "amp_conv_form_parse (DARKNET_AMP_CONV)", "accepted", "refused");
}

static void input_init(input *in)
{
    int v;
    for (v = 0; v < NVARS; ++v) {
        fz_buf_init(&in->val[v], VAL_MAX);
        if (!(in->entry[v] = malloc(strlen(names[v]) + VAL_MAX + 2))) abort();
    }
}

/* Before the entries' buffers go: the environment holds them. */
static void unset_all(void)
{
    int v;
    for (v = 0; v < NVARS; ++v) unsetenv(names[v]);
}

#ifndef FUZZ_LIBFUZZER
int main(void)
{
    fz_run run;
    input in;
    int v;
    dict_init();
    input_init(&in);
    fz_begin(&run, "fuzz.env", DEFAULT_N, DEFAULT_SEED);
    counters(&run);
    run.print_input = print_input;
    run.ctx = &in;
    for (run.index = 0; run.index < run.n; ++run.index) {
        fz_rng r = fz_rng_at(run.seed, run.index);
        make_input(&in, &r);
        check(&run, &r, &in);
    }
    unset_all();
    for (v = 0; v < NVARS; ++v) {
        fz_buf_free(&in.val[v]);
        free(in.entry[v]);
    }
    return fz_end(&run);
}
#else
/* libFuzzer: byte 0 seeds the buffer sizes and says which variables are
 * set (bits 0-4); then the five values, separated by 0 bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fz_run run;
    static input in;
    static int ready;
    size_t pos = 1;
    int v;
    fz_rng r;
    if (!ready) {
        dict_init();
        input_init(&in);
        fz_begin(&run, "fuzz.env (libFuzzer)", 0, 0);
        counters(&run);
        run.print_input = print_input;
        run.ctx = &in;
        ready = 1;
    }
    if (size < 1) return 0;
    r.s = data[0];
    for (v = 0; v < NVARS; ++v) {
        const uint8_t *end = pos < size ? memchr(data + pos, 0, size - pos) : NULL;
        size_t len = pos >= size ? 0 : end ? (size_t)(end - (data + pos)) : size - pos;
        in.set[v] = (data[0] >> v) & 1;
        fz_buf_set(&in.val[v], pos < size ? data + pos : data, len);
        pos += len + 1;
    }
    ++run.index;
    check(&run, &r, &in);
    unset_all();
    return 0;
}
#endif
