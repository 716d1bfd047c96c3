/* fuzz.inject: the DARKNET_AMP_INJECT spec (amp_parse_injection,
 * plugin/inject.c) on mutated specs.
 *
 * The network is tests/fuzz/inject.cfg's, built once (no training, no
 * backend): its layer records and gradient list (amp_net_new,
 * amp_collect_tensors) are all the parser looks at. Each input is a spec
 * of items "LAYER:TENSOR:VALUE:STEPS" built from parts (good layers and
 * tensors, a cost layer's delta and loss, -1, n, overflowing and signed
 * numbers, unknown and 31/32/33 character names, nan, inf, 1e999, -0, hex;
 * steps lists with 0, an overflow, empty entries, 17 and more steps; a
 * field too few or too many; empty items; more than 8 items; padding past
 * AMP_MSG_LEN), then mutated (mutate.h). One input in ten starts with
 * injections already recorded.
 *
 * The contract, on every input: the spec is read as docs/api.md says,
 * checked against a reference reader written here from that text:
 * - items separated by ';' (empty ones skipped), each exactly four
 *   non-empty fields separated by ':'; LAYER a decimal integer (digits
 *   only) in [0, n); TENSOR one of that layer's gradients, or delta or loss
 *   of a cost layer; VALUE what strtof reads as the whole field; STEPS 1 to
 *   16 decimal integers >= 1 (digits only, no overflow) separated by ',';
 *   at most 8 injections in all;
 * - AMP_OK exactly when the reference accepts, with the same injections
 *   (layer, tensor, value bit for bit, steps) appended, the earlier ones
 *   untouched;
 * - an error: nothing recorded (the earlier injections as they were), a
 *   message that fits the buffer, NUL-terminated, printable, starting with
 *   "DARKNET_AMP_INJECT" (fuzz.h);
 * - nothing reads or writes out of bounds (the sanitized build).
 *
 *   inject_fuzz CFG                N and seed: DARKNET_AMP_FUZZ_N, DARKNET_AMP_FUZZ_SEED
 */
#include "fuzz.h"
#include "core.h" /* amp_net, amp_net_new, amp_collect_tensors, amp_parse_injection */
#include "step.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>

#define DEFAULT_N 1000000
#define DEFAULT_SEED 20240612u
#define SPEC_MAX 4096
#define MAX_INJECT ((int)(sizeof((amp_net *)0)->inject / sizeof((amp_net *)0)->inject[0]))
#define MAX_STEPS ((int)(sizeof((amp_injection *)0)->steps / sizeof(unsigned long)))
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define PICK(r, a) ((a)[fz_below((r), COUNT(a))])

static amp_net *an;

/* ---- The reference reader (docs/api.md) ---- */

static int digits_only(const char *s, size_t n)
{
    size_t i;
    if (!n) return 0;
    for (i = 0; i < n; ++i)
        if (!isdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* s[0..n) as an unsigned long: 0 when it is not digits only or overflows. */
static int read_ulong(const char *s, size_t n, unsigned long *out)
{
    char buf[64];
    char *end;
    if (!digits_only(s, n)) return 0;
    while (n > 1 && *s == '0') ++s, --n; /* leading zeros cannot overflow */
    if (n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    *out = strtoul(buf, &end, 10);
    return errno == 0 && *end == '\0';
}

/* One of the layer's gradients, or a cost layer's delta or loss. */
static int has_tensor(int li, const char *name)
{
    int t;
    for (t = 0; t < an->ntensors; ++t)
        if (an->tensors[t].layer == li && strcmp(an->tensors[t].name, name) == 0) return 1;
    return (!strcmp(name, "delta") || !strcmp(name, "loss")) && an->net->layers[li].cost;
}

/* One item s[0..n): 1 and *out, or 0. */
static int ref_item(const char *s, size_t n, amp_injection *out)
{
    const char *f[5];
    size_t len[5], i, start = 0;
    int nf = 0;
    unsigned long li;
    char value[SPEC_MAX + 1];
    char *end;
    for (i = 0; i <= n; ++i) {
        if (i < n && s[i] != ':') continue;
        if (nf == 4) return 0; /* a fifth field */
        f[nf] = s + start;
        len[nf++] = i - start;
        start = i + 1;
    }
    if (nf != 4) return 0;
    for (i = 0; i < 4; ++i)
        if (!len[i]) return 0;
    if (!read_ulong(f[0], len[0], &li) || li >= (unsigned long)an->net->n) return 0;
    if (len[1] >= sizeof out->tensor) return 0;
    memset(out, 0, sizeof *out);
    out->layer = (int)li;
    memcpy(out->tensor, f[1], len[1]);
    if (!has_tensor(out->layer, out->tensor)) return 0;
    memcpy(value, f[2], len[2]);
    value[len[2]] = '\0';
    out->value = strtof(value, &end);
    if (end == value || *end) return 0;
    for (start = 0, i = 0; i <= len[3]; ++i) {
        unsigned long step;
        if (i < len[3] && f[3][i] != ',') continue;
        if (out->nsteps == MAX_STEPS || !read_ulong(f[3] + start, i - start, &step) || !step)
            return 0;
        out->steps[out->nsteps++] = step;
        start = i + 1;
    }
    return 1;
}

/* The spec: 1 with *count injections in out (room for MAX_INJECT), or 0. */
static int ref_spec(const char *spec, amp_injection *out, int room, int *count)
{
    size_t i, start = 0, n = strlen(spec);
    *count = 0;
    for (i = 0; i <= n; ++i) {
        if (i < n && spec[i] != ';') continue;
        if (i > start) {
            if (*count == room || !ref_item(spec + start, i - start, &out[*count])) return 0;
            ++*count;
        }
        start = i + 1;
    }
    return 1;
}

static int same_injection(const amp_injection *a, const amp_injection *b)
{
    int k;
    if (a->layer != b->layer || strcmp(a->tensor, b->tensor) != 0 || a->nsteps != b->nsteps ||
        memcmp(&a->value, &b->value, sizeof a->value) != 0)
        return 0;
    for (k = 0; k < a->nsteps; ++k)
        if (a->steps[k] != b->steps[k]) return 0;
    return 1;
}

/* ---- Inputs ---- */

typedef struct input {
    fz_buf spec;
    int before; /* injections recorded before the call */
} input;

static const char *dict[128];
static size_t ndict;
static char tensor_names[64][32];
static int ntensor_names;

static const char *const bad_layers[] = {"-1", "5", "6", "99999999999999999999",
                                         "18446744073709551616", "+1", " 1", "0x1", "1a",
                                         "-0", "00", "2147483648", "4294967296"};
static const char *const bad_tensors[] = {"delta", "loss", "weight", "Weights", "uz", "uz.",
                                          ".weights", "uz.weights.", "zz.biases", "weights ",
                                          "0123456789012345678901234567890",
                                          "01234567890123456789012345678901",
                                          "012345678901234567890123456789012"};
static const char *const values[] = {"nan", "inf", "-inf", "1e999", "-0", "0x1p3", "1.5", "abc",
                                     " nan", "nan(123)", "1e-50", "NAN", "infinity", "1.5x",
                                     "-", "1e", "65504", "3.4028236e38"};
static const char *const bad_steps[] = {"0", "18446744073709551615", "18446744073709551616",
                                        "-1", "+2", " 2", "2 ", "1e3", "0x2", "00", "007",
                                        "99999999999999999999999"};

static void dict_init(void)
{
    static const char *const seps[] = {":", ";", ",", ";;", "::", ",,", "0", "1", "7"};
    static const char *const *lists[] = {bad_layers, bad_tensors, values, bad_steps, seps};
    static const size_t sizes[] = {COUNT(bad_layers), COUNT(bad_tensors), COUNT(values),
                                   COUNT(bad_steps), COUNT(seps)};
    size_t i, j;
    int t;
    for (t = 0; t < an->ntensors; ++t) {
        int k, seen = 0;
        for (k = 0; k < ntensor_names; ++k) seen |= !strcmp(tensor_names[k], an->tensors[t].name);
        if (!seen && ntensor_names < (int)COUNT(tensor_names))
            snprintf(tensor_names[ntensor_names++], 32, "%s", an->tensors[t].name);
    }
    for (t = 0; t < ntensor_names; ++t) dict[ndict++] = tensor_names[t];
    for (i = 0; i < COUNT(lists); ++i)
        for (j = 0; j < sizes[i] && ndict < COUNT(dict); ++j) dict[ndict++] = lists[i][j];
}

static void put(fz_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (b->len + n > b->max) n = b->max - b->len;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void put_steps(fz_buf *b, fz_rng *r)
{
    char num[32];
    int k, n = fz_chance(r, 85) ? 1 + (int)fz_below(r, 4) : 14 + (int)fz_below(r, 8);
    for (k = 0; k < n; ++k) {
        if (k) put(b, fz_chance(r, 97) ? "," : ",,");
        if (fz_chance(r, 92)) {
            snprintf(num, sizeof num, "%lu", 1 + (unsigned long)fz_below(r, 20));
            put(b, num);
        } else {
            put(b, PICK(r, bad_steps));
        }
    }
}

static void put_item(fz_buf *b, fz_rng *r)
{
    char num[32];
    int li = (int)fz_below(r, (size_t)an->net->n), field, nfields = 4;
    int t, candidates[64], nc = 0;
    if (fz_chance(r, 8)) nfields = fz_chance(r, 50) ? 3 : 5;
    for (field = 0; field < nfields; ++field) {
        if (field) put(b, ":");
        switch (field) {
        case 0:
            if (fz_chance(r, 85)) {
                /* mostly a layer that has gradients (or a cost) */
                if (fz_chance(r, 70) && an->ntensors)
                    li = an->tensors[fz_below(r, (size_t)an->ntensors)].layer;
                snprintf(num, sizeof num, "%d", li);
                put(b, num);
            } else {
                put(b, PICK(r, bad_layers));
            }
            break;
        case 1:
            for (t = 0; t < an->ntensors; ++t)
                if (an->tensors[t].layer == li) candidates[nc++] = t;
            if (an->net->layers[li].cost && fz_chance(r, 80))
                put(b, fz_chance(r, 50) ? "delta" : "loss");
            else if (nc && fz_chance(r, 80))
                put(b, an->tensors[candidates[fz_below(r, (size_t)nc)]].name);
            else if (fz_chance(r, 50))
                put(b, tensor_names[fz_below(r, (size_t)ntensor_names)]);
            else
                put(b, PICK(r, bad_tensors));
            break;
        case 2:
            put(b, fz_chance(r, 60) ? (fz_chance(r, 50) ? "nan" : "-inf") : PICK(r, values));
            break;
        case 3: put_steps(b, r); break;
        default: put(b, fz_chance(r, 50) ? "1" : ""); break;
        }
    }
}

static void make_input(input *in, fz_rng *r)
{
    int k, n;
    fz_buf *b = &in->spec;
    b->len = 0;
    b->p[0] = '\0';
    n = fz_chance(r, 90) ? (int)fz_below(r, 4) : 7 + (int)fz_below(r, 4);
    for (k = 0; k < n; ++k) {
        if (k || fz_chance(r, 5)) put(b, fz_chance(r, 90) ? ";" : ";;");
        put_item(b, r);
    }
    if (fz_chance(r, 5)) put(b, ";");
    if (fz_chance(r, 4)) {
        /* past AMP_MSG_LEN: the parser must not cut it silently */
        size_t at = fz_below(r, b->len + 1), pad = AMP_MSG_LEN + fz_below(r, 200);
        unsigned char c = fz_chance(r, 50) ? ';' : '0';
        if (b->len + pad > b->max) pad = b->max - b->len;
        fz_gap(b, at, pad);
        memset(b->p + at, c, pad);
    }
    if (fz_chance(r, 35)) fz_mutate(b, r, dict, ndict, 4);
    in->before = fz_chance(r, 90) ? 0 : 1 + (int)fz_below(r, (size_t)MAX_INJECT);
}

static void print_input(void *ctx, FILE *out)
{
    const input *in = ctx;
    fz_print_str(out, fz_str(&in->spec));
    fprintf(out, " (%zu bytes), with %d injections recorded before", strlen(fz_str(&in->spec)),
            in->before);
}

/* ---- The check ---- */

static fz_count *count;

static void check(fz_run *run, fz_rng *r, const input *in)
{
    amp_injection want[16], earlier[16];
    const char *spec = fz_str(&in->spec), *why;
    int k, nwant = 0, ok;
    amp_status st;
    fz_err e;
    /* earlier injections: recognisable values, to see they stay */
    memset(an->inject, 0x6b, sizeof an->inject);
    for (k = 0; k < in->before; ++k) {
        memset(&an->inject[k], 0, sizeof an->inject[k]);
        an->inject[k].layer = k;
        snprintf(an->inject[k].tensor, sizeof an->inject[k].tensor, "earlier%d", k);
        an->inject[k].nsteps = 1;
        an->inject[k].steps[0] = (unsigned long)k + 100;
    }
    an->ninject = in->before;
    memcpy(earlier, an->inject, sizeof an->inject);
    ok = ref_spec(spec, want, MAX_INJECT - in->before, &nwant);

    fz_err_reset(&e, r); /* before e.len is read */
    st = amp_parse_injection(an, spec, e.buf, e.len);
    if ((why = fz_check_message(st, &e, "DARKNET_AMP_INJECT", 0))) fz_violation(run, why, e.buf);
    if (memcmp(an->inject, earlier, (size_t)in->before * sizeof an->inject[0]) != 0)
        fz_violation(run, "the injections recorded before were changed", st ? e.buf : NULL);
    if (st == AMP_OK) {
        ++count->n_yes;
        if (!ok)
            fz_violation(run, "accepted a spec docs/api.md does not allow (the reference refuses)",
                         NULL);
        if (an->ninject != in->before + nwant)
            fz_violation(run, "accepted, with another number of injections than items", NULL);
        for (k = 0; k < nwant; ++k)
            if (!same_injection(&an->inject[in->before + k], &want[k]))
                fz_violation(run, "accepted, and an injection differs from its item", NULL);
    } else {
        ++count->n_no;
        if (ok)
            fz_violation(run, "refused a spec docs/api.md allows (the reference accepts)", e.buf);
        if (an->ninject != in->before)
            fz_violation(run, "refused, yet injections were recorded", e.buf);
    }
}

static void setup(const char *cfg)
{
    char err[AMP_MSG_LEN];
    gpu_index = -1; /* a CPU network, in a CUDA build too */
    network *net = parse_network_cfg((char *)cfg);
    an = net ? amp_net_new(net) : NULL;
    if (!an || amp_collect_tensors(an, err, sizeof err) != AMP_OK || !an->ntensors) {
        fprintf(stderr, "FAIL: %s: no network with gradients\n", cfg);
        exit(2);
    }
    dict_init();
}

#ifndef FUZZ_LIBFUZZER
int main(int argc, char **argv)
{
    fz_run run;
    input in;
    network *net;
    if (argc != 2) {
        fprintf(stderr, "usage: %s CFG\n", argv[0]);
        return 2;
    }
    setup(argv[1]);
    fz_buf_init(&in.spec, SPEC_MAX);
    fz_begin(&run, "fuzz.inject", DEFAULT_N, DEFAULT_SEED);
    count = fz_counter(&run, "amp_parse_injection", "accepted", "refused");
    run.print_input = print_input;
    run.ctx = &in;
    printf("network %s: %d layers, %d gradients\n", argv[1], an->net->n, an->ntensors);
    for (run.index = 0; run.index < run.n; ++run.index) {
        fz_rng r = fz_rng_at(run.seed, run.index);
        make_input(&in, &r);
        check(&run, &r, &in);
    }
    net = an->net;
    amp_net_free(an);
    free_network(net);
    fz_buf_free(&in.spec);
    return fz_end(&run);
}
#else
/* libFuzzer: the bytes are the spec (to a 0 byte); the network's cfg is
 * DARKNET_AMP_FUZZ_CFG (default tests/fuzz/inject.cfg from the source tree
 * the harness was built from). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fz_run run;
    static input in;
    static int ready;
    fz_rng r = {size};
    if (!ready) {
        const char *cfg = getenv("DARKNET_AMP_FUZZ_CFG");
        setup(cfg ? cfg : FUZZ_INJECT_CFG);
        fz_buf_init(&in.spec, SPEC_MAX);
        fz_begin(&run, "fuzz.inject (libFuzzer)", 0, 0);
        count = fz_counter(&run, "amp_parse_injection", "accepted", "refused");
        run.print_input = print_input;
        run.ctx = &in;
        ready = 1;
    }
    fz_buf_set(&in.spec, data, size);
    in.before = 0;
    ++run.index;
    check(&run, &r, &in);
    return 0;
}
#endif
