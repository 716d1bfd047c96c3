/* plugin/options.c: the AMP cfg keys. Small cfg files ([net] + one
 * [convolutional]) are written, read with darknet's own read_cfg, and parsed:
 * the defaults of each dtype; every key's good values landing in amp_options;
 * for every key several bad values (wrong type, out of range, nan, inf,
 * beyond float, trailing junk) and the cross-key rules, each rejected with a
 * message naming the cfg file, [net], key=value and the valid range, whether
 * amp is 1, 0 or absent; the per-layer amp key.
 *
 *   options_test SCRATCH_DIR
 */
#include "options.h"

#include "list.h"
#include "option_list.h"
#include "cfg_sections.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const char *scratch;
static int checks, failures;
static int cfg_count;

/* The cfg as one line, for the log. */
static const char *one_line(const char *text)
{
    static char buf[512];
    size_t i;
    snprintf(buf, sizeof buf, "%s", *text ? text : "(no AMP keys)");
    for (i = 0; buf[i]; ++i)
        if (buf[i] == '\n') buf[i] = ' ';
    return buf;
}

static void report(int ok, const char *what, const char *result)
{
    ++checks;
    if (!ok) ++failures;
    printf("%s: %s -> %s\n", ok ? "ok" : "FAIL", what, result);
}

/* Writes a cfg with net_keys in [net] and layer_keys in [convolutional]. */
static void write_cfg(char *path, size_t n, const char *net_keys, const char *layer_keys)
{
    FILE *f;
    snprintf(path, n, "%s/options_%03d.cfg", scratch, cfg_count++);
    f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fprintf(f,
            "[net]\n# training\nbatch=2\nsubdivisions=1\nwidth=16\nheight=16\nchannels=3\n"
            "learning_rate=0.001\nmomentum=0.9\n%s\n\n"
            "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\n"
            "activation=leaky\n%s\n",
            net_keys, layer_keys);
    fclose(f);
}

static list *read_sections(char *path, size_t n, const char *net_keys, const char *layer_keys)
{
    list *sections;
    write_cfg(path, n, net_keys, layer_keys);
    sections = read_cfg(path);
    if (sections->size != 2) {
        printf("FAIL: read_cfg(%s) gave %d sections, expected 2\n", path, sections->size);
        exit(1);
    }
    return sections;
}

static cfg_section *section_at(list *sections, int i)
{
    node *n = sections->front;
    while (i-- > 0) n = n->next;
    return (cfg_section *)n->val;
}

/* ---- [net]: good values ---- */

static amp_options defaults(amp_dtype dtype, int dynamic, float init)
{
    amp_options o;
    o.dtype = dtype;
    o.dynamic = dynamic;
    o.init_scale = init;
    o.growth_factor = 2.0f;
    o.backoff_factor = 0.5f;
    o.growth_interval = 2000;
    o.hysteresis = 1;
    o.min_scale = 1.0f;
    o.max_scale = 16777216.0f;
    o.max_skips = 0;
    o.half_activations = 1;
    o.fallback = 1;
    o.fallback_after = 3;
    o.probe = 0;
    return o;
}

static int same_options(const amp_options *a, const amp_options *b, char *diff, size_t n)
{
    diff[0] = '\0';
#define FIELD(f, fmt)                                                                   \
    if (a->f != b->f) {                                                                 \
        snprintf(diff, n, #f " is " fmt ", expected " fmt, a->f, b->f);                 \
        return 0;                                                                       \
    }
    FIELD(dtype, "%d")
    FIELD(dynamic, "%d")
    FIELD(init_scale, "%.9g")
    FIELD(growth_factor, "%.9g")
    FIELD(backoff_factor, "%.9g")
    FIELD(growth_interval, "%ld")
    FIELD(hysteresis, "%d")
    FIELD(min_scale, "%.9g")
    FIELD(max_scale, "%.9g")
    FIELD(max_skips, "%ld")
    FIELD(half_activations, "%d")
    FIELD(fallback, "%d")
    FIELD(fallback_after, "%ld")
    FIELD(probe, "%d")
#undef FIELD
    return 1;
}

static void describe_options(char *buf, size_t n, int enabled, const amp_options *o)
{
    snprintf(buf, n,
             "amp=%d %s %s init=%.9g growth=%.9g backoff=%.9g interval=%ld hysteresis=%d "
             "scale in [%.9g, %.9g] max_skips=%ld activations=%s fallback=%d after %ld probe=%d",
             enabled, amp_dtype_name(o->dtype), o->dynamic ? "dynamic" : "static", o->init_scale,
             o->growth_factor, o->backoff_factor, o->growth_interval, o->hysteresis,
             o->min_scale, o->max_scale, o->max_skips, o->half_activations ? "half" : "float32",
             o->fallback, o->fallback_after, o->probe);
}

static void expect_ok(const char *net_keys, amp_dtype def, int enabled, amp_options want)
{
    char path[512], err[1024], what[640], got[2048], diff[256];
    list *sections = read_sections(path, sizeof path, net_keys, "");
    list *net = section_at(sections, 0)->options;
    amp_options o;
    int on = -1, ok;
    node *n;
    amp_status st = amp_options_parse_net(net, path, def, &on, &o, err, sizeof err);
    snprintf(what, sizeof what, "[%s default] %s", amp_dtype_name(def), one_line(net_keys));
    if (st != AMP_OK) {
        snprintf(got, sizeof got, "status %d, expected AMP_OK: %s", (int)st, err);
        report(0, what, got);
        test_free_sections(sections);
        return;
    }
    ok = same_options(&o, &want, diff, sizeof diff) && on == enabled && err[0] == '\0';
    if (on != enabled) snprintf(diff, sizeof diff, "enabled is %d, expected %d", on, enabled);
    /* AMP keys are marked used (darknet must not call them unused); others are not touched. */
    for (n = net->front; n; n = n->next) {
        kvp *p = (kvp *)n->val;
        int amp_key = strncmp(p->key, "amp", 3) == 0 || strcmp(p->key, "loss_scale") == 0;
        if (p->used != amp_key) {
            ok = 0;
            snprintf(diff, sizeof diff, "key %s has used=%d, expected %d", p->key, p->used,
                     amp_key);
        }
    }
    describe_options(got, sizeof got, on, &o);
    if (!ok) {
        size_t len = strlen(got);
        snprintf(got + len, sizeof got - len, " -- %s", diff);
    }
    report(ok, what, got);
    test_free_sections(sections);
}

static void good_values(void)
{
    amp_options o;
    const amp_dtype F16 = AMP_DTYPE_FLOAT16, BF16 = AMP_DTYPE_BFLOAT16, F32 = AMP_DTYPE_FLOAT32;

    /* Defaults: PyTorch's dynamic scaler; bfloat16 static at 1. */
    expect_ok("", F16, 0, defaults(F16, 1, 65536));
    expect_ok("", BF16, 0, defaults(BF16, 0, 1));
    expect_ok("", F32, 0, defaults(F32, 1, 65536));
    expect_ok("amp=1", F16, 1, defaults(F16, 1, 65536));
    expect_ok("amp=0", F16, 0, defaults(F16, 1, 65536));
    expect_ok("amp=1", BF16, 1, defaults(BF16, 0, 1));

    /* amp_dtype and its aliases; the dtype's own defaults follow it. */
    expect_ok("amp=1\namp_dtype=float16", BF16, 1, defaults(F16, 1, 65536));
    expect_ok("amp=1\namp_dtype=fp16", BF16, 1, defaults(F16, 1, 65536));
    expect_ok("amp=1\namp_dtype=half", BF16, 1, defaults(F16, 1, 65536));
    expect_ok("amp=1\namp_dtype=bfloat16", F16, 1, defaults(BF16, 0, 1));
    expect_ok("amp=1\namp_dtype=bf16", F16, 1, defaults(BF16, 0, 1));
    expect_ok("amp=1\namp_dtype=float32", F16, 1, defaults(F32, 1, 65536));
    expect_ok("amp=1\namp_dtype=fp32", F16, 1, defaults(F32, 1, 65536));
    expect_ok("amp=1\namp_dtype=BFloat16", F16, 1, defaults(BF16, 0, 1));

    /* loss_scale: a number is static (any dtype, even outside [min, max],
     * which only bound a dynamic scale); dynamic turns bfloat16 dynamic. */
    expect_ok("amp=1\nloss_scale=128", F16, 1, defaults(F16, 0, 128));
    expect_ok("amp=1\nloss_scale=0.5", F16, 1, defaults(F16, 0, 0.5f));
    expect_ok("amp=1\nloss_scale=1e8", F16, 1, defaults(F16, 0, 1e8f));
    expect_ok("amp=1\nloss_scale=1024\namp_dtype=bfloat16", F16, 1, defaults(BF16, 0, 1024));
    expect_ok("amp=1\nloss_scale=dynamic", F16, 1, defaults(F16, 1, 65536));
    expect_ok("amp=1\nloss_scale=dynamic", BF16, 1, defaults(BF16, 1, 65536));
    expect_ok("loss_scale=4\namp_min_scale=2\namp_max_scale=8\namp_max_skips=5", F16, 0,
              (o = defaults(F16, 0, 4), o.min_scale = 2, o.max_scale = 8, o.max_skips = 5, o));

    /* Each dynamic key alone. */
    expect_ok("amp=1\namp_init_scale=1024", F16, 1, defaults(F16, 1, 1024));
    expect_ok("amp=1\namp_init_scale=1", F16, 1, defaults(F16, 1, 1));
    expect_ok("amp=1\namp_init_scale=16777216", F16, 1, defaults(F16, 1, 16777216));
    expect_ok("amp=1\namp_growth_factor=4", F16, 1,
              (o = defaults(F16, 1, 65536), o.growth_factor = 4, o));
    expect_ok("amp=1\namp_growth_factor=1.5", F16, 1,
              (o = defaults(F16, 1, 65536), o.growth_factor = 1.5f, o));
    expect_ok("amp=1\namp_backoff_factor=0.25", F16, 1,
              (o = defaults(F16, 1, 65536), o.backoff_factor = 0.25f, o));
    expect_ok("amp=1\namp_backoff_factor=.75", F16, 1,
              (o = defaults(F16, 1, 65536), o.backoff_factor = 0.75f, o));
    expect_ok("amp=1\namp_growth_interval=1", F16, 1,
              (o = defaults(F16, 1, 65536), o.growth_interval = 1, o));
    expect_ok("amp=1\namp_growth_interval=+100", F16, 1,
              (o = defaults(F16, 1, 65536), o.growth_interval = 100, o));
    expect_ok("amp=1\namp_hysteresis=3", F16, 1,
              (o = defaults(F16, 1, 65536), o.hysteresis = 3, o));
    expect_ok("amp=1\namp_min_scale=0.125", F16, 1,
              (o = defaults(F16, 1, 65536), o.min_scale = 0.125f, o));
    expect_ok("amp=1\namp_max_scale=65536", F16, 1,
              (o = defaults(F16, 1, 65536), o.max_scale = 65536, o));
    expect_ok("amp=1\namp_max_scale=3e38", F16, 1,
              (o = defaults(F16, 1, 65536), o.max_scale = 3e38f, o));
    expect_ok("amp=1\namp_max_skips=0", F16, 1, defaults(F16, 1, 65536));
    expect_ok("amp=1\namp_max_skips=10", F16, 1,
              (o = defaults(F16, 1, 65536), o.max_skips = 10, o));
    expect_ok("amp=1\namp_activations=half", F16, 1, defaults(F16, 1, 65536));
    expect_ok("amp=1\namp_activations=FLOAT32", BF16, 1,
              (o = defaults(BF16, 0, 1), o.half_activations = 0, o));
    expect_ok("amp=1\namp_fallback=0", F16, 1, (o = defaults(F16, 1, 65536), o.fallback = 0, o));
    expect_ok("amp=1\namp_fallback=1\namp_fallback_after=1", BF16, 1,
              (o = defaults(BF16, 0, 1), o.fallback_after = 1, o));
    expect_ok("amp=1\namp_probe=1", F16, 1, (o = defaults(F16, 1, 65536), o.probe = 1, o));

    /* A dynamic-only key makes bfloat16 dynamic instead of being ignored. */
    expect_ok("amp=1\namp_growth_interval=100", BF16, 1,
              (o = defaults(BF16, 1, 65536), o.growth_interval = 100, o));
    expect_ok("amp=1\namp_init_scale=256", BF16, 1, defaults(BF16, 1, 256));
    /* Scale bounds alone leave bfloat16 static. */
    expect_ok("amp=1\namp_min_scale=0.5\namp_max_scale=2", BF16, 1,
              (o = defaults(BF16, 0, 1), o.min_scale = 0.5f, o.max_scale = 2, o));

    /* Everything at once, in an unusual order; min = init = max is allowed. */
    expect_ok("amp_max_skips=7\namp_max_scale=1e6\namp_hysteresis=2\namp_growth_interval=500\n"
              "amp_backoff_factor=0.125\namp_growth_factor=8\namp_init_scale=4096\n"
              "amp_min_scale=2\nloss_scale=dynamic\namp_dtype=float32\namp=1",
              F16, 1,
              (o = defaults(F32, 1, 4096), o.growth_factor = 8, o.backoff_factor = 0.125f,
               o.growth_interval = 500, o.hysteresis = 2, o.min_scale = 2, o.max_scale = 1e6f,
               o.max_skips = 7, o));
    expect_ok("amp=1\namp_init_scale=8\namp_min_scale=8\namp_max_scale=8", F16, 1,
              (o = defaults(F16, 1, 8), o.min_scale = 8, o.max_scale = 8, o));
}

/* ---- [net]: bad values ---- */

/* Parses net_keys and expects AMP_ERR_INVALID with a message holding the cfg
 * path, "[net]" and every string of needles ("|"-separated). */
static void expect_bad(const char *net_keys, amp_dtype def, const char *needles)
{
    char path[512], err[1024], what[640], got[2048], missing[512] = "";
    list *sections = read_sections(path, sizeof path, net_keys, "");
    amp_options o;
    int on = -1, ok;
    const char *p = needles;
    amp_status st = amp_options_parse_net(section_at(sections, 0)->options, path, def, &on, &o,
                                          err, sizeof err);
    snprintf(what, sizeof what, "%s", one_line(net_keys));
    ok = st == AMP_ERR_INVALID && strstr(err, path) && strstr(err, "[net]") && on == 0;
    if (!strstr(err, path)) snprintf(missing, sizeof missing, "%s", path);
    while (ok && *p) {
        char needle[200];
        size_t len = strcspn(p, "|");
        snprintf(needle, sizeof needle, "%.*s", (int)len, p);
        if (!strstr(err, needle)) {
            ok = 0;
            snprintf(missing, sizeof missing, "%s", needle);
        }
        p += len + (p[len] == '|');
    }
    if (st != AMP_ERR_INVALID)
        snprintf(got, sizeof got, "status %d, expected AMP_ERR_INVALID (%s)", (int)st, err);
    else if (!ok)
        snprintf(got, sizeof got, "%s -- missing \"%s\"", err, missing);
    else
        snprintf(got, sizeof got, "%s", err);
    report(ok, what, got);
    test_free_sections(sections);
}

typedef struct bad_case {
    const char *keys, *needles;
} bad_case;

/* Each value rule, checked with amp=1, amp=0 and amp absent: a typo must not
 * wait until someone turns AMP on. */
static const bad_case bad_values[] = {
    {"amp_dtype=float8", "amp_dtype=float8|expected float16, bfloat16 or float32"},
    {"amp_dtype=fp64", "amp_dtype=fp64|expected float16, bfloat16 or float32"},
    {"amp_dtype=16", "amp_dtype=16|expected float16, bfloat16 or float32"},

    {"loss_scale=0", "loss_scale=0|expected dynamic or a number > 0"},
    {"loss_scale=-8", "loss_scale=-8|expected dynamic or a number > 0"},
    {"loss_scale=abc", "loss_scale=abc|expected dynamic or a number > 0"},
    {"loss_scale=nan", "loss_scale=nan|expected dynamic or a number > 0"},
    {"loss_scale=inf", "loss_scale=inf|expected dynamic or a number > 0"},
    {"loss_scale=1e39", "loss_scale=1e39|expected dynamic or a number > 0|float range"},
    {"loss_scale=128x", "loss_scale=128x|expected dynamic or a number > 0"},
    {"loss_scale=dynamically", "loss_scale=dynamically|expected dynamic or a number > 0"},

    {"amp_init_scale=0", "amp_init_scale=0|expected a number > 0"},
    {"amp_init_scale=-1024", "amp_init_scale=-1024|expected a number > 0"},
    {"amp_init_scale=big", "amp_init_scale=big|expected a number > 0"},
    {"amp_init_scale=NaN", "amp_init_scale=NaN|expected a number > 0"},
    {"amp_init_scale=1e39", "amp_init_scale=1e39|expected a number > 0|float range"},
    {"amp_init_scale=0x100", "amp_init_scale=0x100|expected a number > 0"},
    {"amp_init_scale=1e-50", "amp_init_scale=1e-50|expected a number > 0|as a float this is 0"},

    {"amp_growth_factor=1", "amp_growth_factor=1|expected a number > 1"},
    {"amp_growth_factor=0.5", "amp_growth_factor=0.5|expected a number > 1"},
    {"amp_growth_factor=abc", "amp_growth_factor=abc|expected a number > 1"},
    {"amp_growth_factor=inf", "amp_growth_factor=inf|expected a number > 1"},
    {"amp_growth_factor=2x", "amp_growth_factor=2x|expected a number > 1"},
    {"amp_growth_factor=1.00000001",
     "amp_growth_factor=1.00000001|expected a number > 1|as a float this is 1"},
    {"amp_growth_factor=-inf", "amp_growth_factor=-inf|expected a number > 1"},

    {"amp_backoff_factor=1", "amp_backoff_factor=1|expected a number in (0, 1)"},
    {"amp_backoff_factor=0", "amp_backoff_factor=0|expected a number in (0, 1)"},
    {"amp_backoff_factor=1.5", "amp_backoff_factor=1.5|expected a number in (0, 1)"},
    {"amp_backoff_factor=-0.5", "amp_backoff_factor=-0.5|expected a number in (0, 1)"},
    {"amp_backoff_factor=half", "amp_backoff_factor=half|expected a number in (0, 1)"},
    {"amp_backoff_factor=0.5.5", "amp_backoff_factor=0.5.5|expected a number in (0, 1)"},
    {"amp_backoff_factor=0.999999999",
     "amp_backoff_factor=0.999999999|expected a number in (0, 1)|as a float this is 1"},

    {"amp_growth_interval=0", "amp_growth_interval=0|expected an integer >= 1"},
    {"amp_growth_interval=1.5", "amp_growth_interval=1.5|expected an integer >= 1"},
    {"amp_growth_interval=1e3", "amp_growth_interval=1e3|expected an integer >= 1"},
    {"amp_growth_interval=-5", "amp_growth_interval=-5|expected an integer >= 1"},
    {"amp_growth_interval=often", "amp_growth_interval=often|expected an integer >= 1"},
    {"amp_growth_interval=99999999999999999999",
     "amp_growth_interval=99999999999999999999|expected an integer >= 1|at most"},
    {"amp_growth_interval=0x10", "amp_growth_interval=0x10|expected an integer >= 1"},

    {"amp_hysteresis=0", "amp_hysteresis=0|expected an integer >= 1"},
    {"amp_hysteresis=2.5", "amp_hysteresis=2.5|expected an integer >= 1"},
    {"amp_hysteresis=two", "amp_hysteresis=two|expected an integer >= 1"},
    {"amp_hysteresis=3000000000", "amp_hysteresis=3000000000|expected an integer >= 1|at most"},

    {"amp_min_scale=0", "amp_min_scale=0|expected a number > 0"},
    {"amp_min_scale=-1", "amp_min_scale=-1|expected a number > 0"},
    {"amp_min_scale=one", "amp_min_scale=one|expected a number > 0"},
    {"amp_min_scale=1e39", "amp_min_scale=1e39|expected a number > 0|float range"},
    {"amp_min_scale=1e-50", "amp_min_scale=1e-50|expected a number > 0"},

    {"amp_max_scale=0", "amp_max_scale=0|expected a number > 0"},
    {"amp_max_scale=huge", "amp_max_scale=huge|expected a number > 0"},
    {"amp_max_scale=inf", "amp_max_scale=inf|expected a number > 0"},
    {"amp_max_scale=1e39", "amp_max_scale=1e39|expected a number > 0|float range"},
    {"amp_max_scale=65536.0f", "amp_max_scale=65536.0f|expected a number > 0"},

    {"amp_max_skips=-1", "amp_max_skips=-1|expected an integer >= 0"},
    {"amp_max_skips=1.5", "amp_max_skips=1.5|expected an integer >= 0"},
    {"amp_max_skips=never", "amp_max_skips=never|expected an integer >= 0"},
    {"amp_max_skips=10k", "amp_max_skips=10k|expected an integer >= 0"},

    {"amp_activations=nchw", "amp_activations=nchw|expected half or float32"},
    {"amp_activations=1", "amp_activations=1|expected half or float32"},

    {"amp_fallback=2", "amp_fallback=2|expected 0 or 1"},
    {"amp_fallback=yes", "amp_fallback=yes|expected 0 or 1"},
    {"amp_fallback_after=0", "amp_fallback_after=0|expected an integer >= 1"},
    {"amp_fallback_after=-3", "amp_fallback_after=-3|expected an integer >= 1"},
    {"amp_fallback_after=2.5", "amp_fallback_after=2.5|expected an integer >= 1"},
    {"amp_probe=2", "amp_probe=2|expected 0 or 1"},
    {"amp_probe=on", "amp_probe=on|expected 0 or 1"},

    /* Keys against each other. */
    {"amp_min_scale=100\namp_max_scale=10",
     "amp_max_scale=10|amp_min_scale=100|expected amp_max_scale >= amp_min_scale"},
    {"amp_min_scale=1e8",
     "amp_min_scale=1e8|amp_max_scale=16777216 (default)|expected amp_max_scale >= "
     "amp_min_scale"},
    {"amp_init_scale=0.5",
     "amp_init_scale=0.5|amp_min_scale=1 (default)|expected amp_min_scale <= amp_init_scale <= "
     "amp_max_scale"},
    {"amp_init_scale=1e9",
     "amp_init_scale=1e9|amp_max_scale=16777216 (default)|expected amp_min_scale <= "
     "amp_init_scale"},
    {"amp_dtype=fp16\namp_max_scale=1000",
     "amp_init_scale=65536 (default)|amp_max_scale=1000|expected amp_min_scale <= "
     "amp_init_scale"},
    {"amp_init_scale=64\namp_min_scale=128\namp_max_scale=1024",
     "amp_init_scale=64|amp_min_scale=128|amp_max_scale=1024"},
    {"loss_scale=dynamic\namp_max_scale=100", "amp_init_scale=65536 (default)|amp_max_scale=100"},
    {"loss_scale=128\namp_growth_factor=3", "loss_scale=128|amp_growth_factor=3|static"},
    {"loss_scale=128\namp_init_scale=256", "loss_scale=128|amp_init_scale=256|static"},
    {"loss_scale=128\namp_backoff_factor=0.25", "loss_scale=128|amp_backoff_factor=0.25|static"},
    {"amp_growth_interval=100\nloss_scale=128", "loss_scale=128|amp_growth_interval=100|static"},
    {"loss_scale=128\namp_hysteresis=2", "loss_scale=128|amp_hysteresis=2|static"},

    /* Keys that are not AMP's, or given twice, or without a value. */
    {"amp_growth_intervall=100",
     "amp_growth_intervall=100|unknown AMP key|did you mean amp_growth_interval?|known keys: "
     "amp, amp_dtype, loss_scale"},
    {"amp_dtpye=float16", "amp_dtpye=float16|unknown AMP key|did you mean amp_dtype?"},
    {"amp_loss_scale=128", "amp_loss_scale=128|unknown AMP key|did you mean loss_scale?"},
    {"amp_backoff=0.5", "amp_backoff=0.5|unknown AMP key|did you mean amp_backoff_factor?"},
    {"AMP_DTYPE=float16", "AMP_DTYPE=float16|unknown AMP key|did you mean amp_dtype?"},
    {"Loss_Scale=8", "Loss_Scale=8|unknown AMP key|did you mean loss_scale?"},
    {"amp_speed=fast", "amp_speed=fast|unknown AMP key|known keys: amp, amp_dtype"},
    {"amp_dtype=float16\namp_dtype=bfloat16",
     "amp_dtype=bfloat16|given twice|amp_dtype=float16"},
    {"amp_dtype", "amp_dtype|no value|expected float16, bfloat16 or float32"},

    /* An empty value: darknet's read_cfg drops "key=" lines (with a "could
     * parse" warning), so the plugin reads the cfg file again for them
     * rather than let the default apply in silence. Spaces are stripped. */
    {"amp_dtype=", "amp_dtype=: no value after '='|expected float16, bfloat16 or float32"},
    {"amp_dtype = ", "amp_dtype=: no value after '='|expected float16, bfloat16 or float32"},
    {"loss_scale=", "loss_scale=: no value after '='|expected dynamic or a number > 0"},
    {"amp_init_scale=\t", "amp_init_scale=: no value after '='|expected a number > 0"},
    {"amp_growth_factor=", "amp_growth_factor=: no value after '='|expected a number > 1"},
    {"amp_backoff_factor=", "amp_backoff_factor=: no value after '='|expected a number in (0, 1)"},
    {"amp_growth_interval=", "amp_growth_interval=: no value after '='|expected an integer >= 1"},
    {"amp_hysteresis=", "amp_hysteresis=: no value after '='|expected an integer >= 1"},
    {"amp_min_scale=", "amp_min_scale=: no value after '='|expected a number > 0"},
    {"amp_max_scale=", "amp_max_scale=: no value after '='|expected a number > 0"},
    {"amp_max_skips=", "amp_max_skips=: no value after '='|expected an integer >= 0"},
    {"amp_dtype=fp16\namp_dtype=", "amp_dtype=: no value after '='|expected float16"},
    {"amp_growth_intervall=", "amp_growth_intervall=: unknown AMP key|did you mean"},
};

/* The amp key itself. */
static const bad_case bad_switch[] = {
    {"amp=", "amp=: no value after '='|expected 0 or 1"},
    {"amp=2", "amp=2|expected 0 or 1"},
    {"amp=abc", "amp=abc|expected 0 or 1"},
    {"amp=-1", "amp=-1|expected 0 or 1"},
    {"amp=1.0", "amp=1.0|expected 0 or 1"},
    {"amp=yes", "amp=yes|expected 0 or 1"},
    {"amp=1\namp=0", "amp=0|given twice|amp=1"},
    {"AMP=1", "AMP=1|unknown AMP key|did you mean amp?"},
    {"amp=1\namp_dtype=fp8", "amp_dtype=fp8|expected float16, bfloat16 or float32"},
};

static void bad_net_values(void)
{
    static const char *prefixes[] = {"amp=1\n", "amp=0\n", ""};
    size_t i, j;
    for (j = 0; j < sizeof prefixes / sizeof prefixes[0]; ++j) {
        for (i = 0; i < sizeof bad_values / sizeof bad_values[0]; ++i) {
            char keys[512];
            snprintf(keys, sizeof keys, "%s%s", prefixes[j], bad_values[i].keys);
            expect_bad(keys, j == 1 ? AMP_DTYPE_BFLOAT16 : AMP_DTYPE_FLOAT16,
                       bad_values[i].needles);
        }
    }
    for (i = 0; i < sizeof bad_switch / sizeof bad_switch[0]; ++i)
        expect_bad(bad_switch[i].keys, AMP_DTYPE_FLOAT16, bad_switch[i].needles);
}

/* Values that read_cfg cannot produce (it drops "key=" lines and strips
 * spaces) but a list built by other code can: parsed on a hand-made list. */
static void hand_made_values(void)
{
    static const bad_case cases[] = {
        {"amp_growth_factor", "amp_growth_factor=|expected a number > 1"},
        {"amp_growth_interval", "amp_growth_interval=|expected an integer >= 1"},
        {"amp_dtype", "amp_dtype=|expected float16"},
        {"amp", "amp=|expected 0 or 1"},
    };
    static const char *values[] = {"", " 2", "2 ", "2\r"};
    size_t i, j;
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        for (j = 0; j < sizeof values / sizeof values[0]; ++j) {
            char key[64], val[16], err[512], what[128], got[700];
            list *l = make_list();
            amp_options o;
            int on, ok;
            amp_status st;
            snprintf(key, sizeof key, "%s", cases[i].keys);
            snprintf(val, sizeof val, "%s", values[j]);
            option_insert(l, key, val);
            st = amp_options_parse_net(l, "handmade.cfg", AMP_DTYPE_FLOAT16, &on, &o, err,
                                       sizeof err);
            snprintf(what, sizeof what, "(list) %s=\"%s\"", key,
                     j == 3 ? "2\\r" : values[j]);
            ok = st == AMP_ERR_INVALID && strstr(err, "handmade.cfg: [net]") &&
                 strstr(err, cases[i].keys) && strstr(err, strchr(cases[i].needles, '|') + 1);
            if (j == 3 && !strstr(err, "\\x0d")) ok = 0; /* unprintables shown escaped */
            snprintf(got, sizeof got, "%s%s", ok ? "" : "unexpected: ", err);
            report(ok, what, got);
            free_list_contents(l);
            free_list(l);
        }
    }
}

/* ---- Layer sections ---- */

static void expect_layer(const char *layer_keys, amp_status want_st, int want_half,
                         const char *needles)
{
    char path[512], err[1024], what[300], got[1200];
    list *sections = read_sections(path, sizeof path, "amp=1", layer_keys);
    cfg_section *s = section_at(sections, 1);
    int half = -1, ok;
    amp_status st = amp_options_parse_layer(s->options, path, 0, s->type, &half, err, sizeof err);
    snprintf(what, sizeof what, "[convolutional] %s", one_line(layer_keys));
    ok = st == want_st;
    if (want_st == AMP_OK) {
        node *n;
        ok = ok && half == want_half && err[0] == '\0';
        for (n = s->options->front; n; n = n->next) {
            kvp *p = (kvp *)n->val;
            if (p->used != (strcmp(p->key, "amp") == 0)) ok = 0;
        }
        snprintf(got, sizeof got, "status %d half_allowed=%d %s", (int)st, half, err);
    } else {
        char prefix[600];
        const char *p = needles;
        snprintf(prefix, sizeof prefix, "%s: layer 0 [convolutional] ", path);
        ok = ok && strstr(err, prefix) != NULL;
        while (ok && *p) {
            char needle[200];
            size_t len = strcspn(p, "|");
            snprintf(needle, sizeof needle, "%.*s", (int)len, p);
            if (!strstr(err, needle)) ok = 0;
            p += len + (p[len] == '|');
        }
        snprintf(got, sizeof got, "%s", err);
    }
    report(ok, what, got);
    test_free_sections(sections);
}

static void layer_values(void)
{
    char err[256];
    int half = -1;
    amp_status st;
    expect_layer("", AMP_OK, 1, NULL);
    expect_layer("amp=1", AMP_OK, 1, NULL);
    expect_layer("amp=0", AMP_OK, 0, NULL);
    expect_layer("amp=2", AMP_ERR_INVALID, 1, "amp=2: expected 0 or 1");
    expect_layer("amp=abc", AMP_ERR_INVALID, 1, "amp=abc: expected 0 or 1");
    expect_layer("amp=-1", AMP_ERR_INVALID, 1, "amp=-1: expected 0 or 1");
    expect_layer("amp=0.5", AMP_ERR_INVALID, 1, "amp=0.5: expected 0 or 1");
    expect_layer("amp=0\namp=1", AMP_ERR_INVALID, 1, "amp=1|given twice|amp=0");
    expect_layer("amp_dtype=float16", AMP_ERR_INVALID, 1, "amp_dtype=float16|belongs in [net]");
    expect_layer("loss_scale=8", AMP_ERR_INVALID, 1, "loss_scale=8|belongs in [net]");
    expect_layer("amp_of=1", AMP_ERR_INVALID, 1, "amp_of=1|unknown AMP key|amp=0");
    /* Empty values, which read_cfg drops: refused for AMP keys (the cfg file
     * is read again), left to darknet for its own keys. */
    expect_layer("amp=", AMP_ERR_INVALID, 1, "amp=: no value after '='|expected 0 or 1");
    expect_layer("amp=0\namp = ", AMP_ERR_INVALID, 1, "amp=: no value after '='");
    expect_layer("amp_dtype=", AMP_ERR_INVALID, 1, "amp_dtype=|belongs in [net]");
    expect_layer("amp_of=", AMP_ERR_INVALID, 1, "amp_of=|unknown AMP key");
    expect_layer("groups=\namp=0", AMP_OK, 0, NULL);
    {
        /* An empty value belongs to its own section: [net] is fine. */
        char path[512], msg[512];
        list *sections = read_sections(path, sizeof path, "amp=1", "amp=");
        amp_options o;
        int on = -1;
        st = amp_options_parse_net(section_at(sections, 0)->options, path, AMP_DTYPE_FLOAT16, &on,
                                   &o, msg, sizeof msg);
        report(st == AMP_OK && on == 1, "[net] amp=1 with [convolutional] amp=",
               msg[0] ? msg : "AMP_OK");
        test_free_sections(sections);
    }

    /* A type given without brackets gets them. */
    st = amp_options_parse_layer(NULL, "x.cfg", 7, "connected", &half, err, sizeof err);
    report(st == AMP_OK && half == 1, "(no options) layer 7 connected", "AMP_OK half_allowed=1");
    {
        list *l = make_list();
        char key[] = "amp", val[] = "3";
        option_insert(l, key, val);
        st = amp_options_parse_layer(l, "x.cfg", 7, "connected", &half, err, sizeof err);
        report(st == AMP_ERR_INVALID &&
                   strstr(err, "x.cfg: layer 7 [connected] amp=3: expected 0 or 1") != NULL,
               "(list) layer 7 connected amp=3", err);
        free_list_contents(l);
        free_list(l);
    }
}

/* ---- API edges ---- */

static void api_edges(void)
{
    char err[512], tiny[12];
    amp_options o;
    int on;
    amp_status st;
    amp_options_init(NULL, AMP_DTYPE_FLOAT16); /* must not crash */
    report(strcmp(amp_dtype_name(AMP_DTYPE_FLOAT32), "float32") == 0 &&
               strcmp(amp_dtype_name(AMP_DTYPE_FLOAT16), "float16") == 0 &&
               strcmp(amp_dtype_name(AMP_DTYPE_BFLOAT16), "bfloat16") == 0 &&
               strcmp(amp_dtype_name((amp_dtype)9), "unknown") == 0,
           "amp_dtype_name", "float32 float16 bfloat16 unknown");

    st = amp_options_parse_net(NULL, "none.cfg", AMP_DTYPE_BFLOAT16, &on, &o, err, sizeof err);
    report(st == AMP_OK && on == 0 && o.dtype == AMP_DTYPE_BFLOAT16 && !o.dynamic,
           "(NULL list)", "AMP_OK, bfloat16 defaults");
    st = amp_options_parse_net(NULL, "none.cfg", AMP_DTYPE_FLOAT16, NULL, &o, err, sizeof err);
    report(st == AMP_ERR_INVALID, "(NULL enabled)", err);
    st = amp_options_parse_net(NULL, "none.cfg", (amp_dtype)7, &on, &o, err, sizeof err);
    report(st == AMP_ERR_INVALID && strstr(err, "default dtype 7"), "(default dtype 7)", err);
    {
        list *l = make_list();
        char key[] = "amp_hysteresis", val[] = "0";
        option_insert(l, key, val);
        st = amp_options_parse_net(l, NULL, AMP_DTYPE_FLOAT16, &on, &o, NULL, 0);
        report(st == AMP_ERR_INVALID, "(no err buffer) amp_hysteresis=0", "AMP_ERR_INVALID");
        memset(tiny, 'x', sizeof tiny);
        st = amp_options_parse_net(l, NULL, AMP_DTYPE_FLOAT16, &on, &o, tiny, sizeof tiny);
        report(st == AMP_ERR_INVALID && memchr(tiny, '\0', sizeof tiny) != NULL &&
                   strncmp(tiny, "(cfg): [ne", 10) == 0,
               "(12-byte err buffer) amp_hysteresis=0", "truncated and NUL-terminated");
        /* On an error *o holds the default dtype's defaults. */
        report(o.dtype == AMP_DTYPE_FLOAT16 && o.dynamic && o.init_scale == 65536 && on == 0,
               "(after an error)", "amp=0, float16 defaults");
        free_list_contents(l);
        free_list(l);
    }
}

/* ---- amp_config: the settings by key, as a program sets them ---- */

static void config_by_key(void)
{
    char err[512] = "", what[160];
    amp_config *c = NULL;
    amp_status st = amp_config_create(AMP_DTYPE_FLOAT16, &c, err, sizeof err);
    report(st == AMP_OK && c, "amp_config_create(float16)", err[0] ? err : "AMP_OK");
    if (!c) return;
    const amp_options *o = amp_config_options(c);
    report(o->dtype == AMP_DTYPE_FLOAT16 && o->dynamic && o->init_scale == 65536.0f &&
               o->growth_interval == 2000,
           "amp_config_create(float16)", "float16's defaults: dynamic, 65536, 2000");
    st = amp_config_set(c, "amp_growth_interval", "1000", err, sizeof err);
    report(st == AMP_OK && o->growth_interval == 1000, "set amp_growth_interval=1000",
           st == AMP_OK ? "1000" : err);
    st = amp_config_set(c, "amp_growth_interval", "500", err, sizeof err);
    report(st == AMP_OK && o->growth_interval == 500, "set amp_growth_interval=500 again",
           "replaced, not refused as given twice");
    /* the cfg's message, and c as it was */
    st = amp_config_set(c, "amp_growth_factor", "1", err, sizeof err);
    report(st == AMP_ERR_INVALID && strstr(err, "amp_config: amp_growth_factor=1") &&
               strstr(err, "expected a number > 1") && o->growth_factor == 2.0f &&
               o->growth_interval == 500,
           "set amp_growth_factor=1", err);
    st = amp_config_set(c, "amp_growth_intervall", "7", err, sizeof err);
    report(st == AMP_ERR_INVALID && strstr(err, "did you mean amp_growth_interval"),
           "set amp_growth_intervall=7", err);
    st = amp_config_set(c, "batch", "64", err, sizeof err);
    report(st == AMP_ERR_INVALID && strstr(err, "not an AMP key"), "set batch=64", err);
    st = amp_config_set(c, "amp", "1", err, sizeof err);
    report(st == AMP_ERR_INVALID && strstr(err, "on/off switch"), "set amp=1", err);
    /* the rules between keys, against the keys set before */
    st = amp_config_set(c, "loss_scale", "128", err, sizeof err);
    report(st == AMP_ERR_INVALID && strstr(err, "loss_scale=128 and amp_growth_interval=500"),
           "set loss_scale=128 after amp_growth_interval", err);
    st = amp_config_set(c, "amp_min_scale", "1e6", err, sizeof err);
    report(st == AMP_ERR_INVALID && strstr(err, "amp_min_scale") && o->min_scale == 1.0f,
           "set amp_min_scale=1e6 (above the 65536 start)", err);
    st = amp_config_set(c, "amp_dtype", "bf16", err, sizeof err);
    report(st == AMP_OK && o->dtype == AMP_DTYPE_BFLOAT16 && o->dynamic &&
               o->growth_interval == 500,
           "set amp_dtype=bf16 with a dynamic-only key set",
           "bfloat16, made dynamic by amp_growth_interval, 500 kept");
    amp_scaler *s = NULL;
    st = amp_scaler_create(c, &s, err, sizeof err);
    snprintf(what, sizeof what, "scale %g", (double)amp_scaler_get_scale(s));
    report(st == AMP_OK && amp_scaler_get_scale(s) == 65536.0f, "amp_scaler_create(config)",
           what);
    amp_scaler_free(s);
    amp_config_free(c);
    st = amp_config_create((amp_dtype)9, &c, err, sizeof err);
    report(st == AMP_ERR_INVALID && !c && strstr(err, "9 is not an amp_dtype"),
           "amp_config_create(9)", err);
    st = amp_scaler_create(NULL, &s, err, sizeof err);
    report(st == AMP_OK && amp_scaler_get_scale(s) == 65536.0f, "amp_scaler_create(NULL)",
           "float32's defaults");
    amp_scaler_free(s);
    amp_config_free(NULL); /* must not crash */
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 1;
    }
    scratch = argv[1];
    good_values();
    bad_net_values();
    hand_made_values();
    layer_values();
    api_edges();
    config_by_key();
    printf("%s: %d checks, %d failed\n", failures ? "FAIL" : "PASS", checks, failures);
    return failures ? 1 : 0;
}
