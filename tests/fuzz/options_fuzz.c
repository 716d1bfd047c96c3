/* fuzz.options: the AMP cfg keys (plugin/options.c) on mutated sections.
 *
 * Each input is a [net] section and a layer section of key/value pairs:
 * the AMP keys, near misses of them (typos, another case), darknet's own
 * keys and random bytes, with values from each key's corpus (good values,
 * limits, nan, inf, -0, 1e999, overflowing integers, hex, ""), then mutated
 * (mutate.h): random and non-ASCII bytes, thousands of characters,
 * duplicated keys, a line with no '=' (value NULL). Three inputs in four go
 * to amp_options_parse_net and amp_options_parse_layer as darknet lists
 * built in memory; one in four is written to a cfg file and read with
 * darknet's read_cfg first (which drops "key=" lines: the plugin reads the
 * file again for those), every section parsed.
 *
 * The contract, on every input (any breach ends the run with the input):
 * - AMP_OK: amp_options_invalid finds nothing wrong with the options;
 *   enabled is 0 or 1; the options are what docs/cfg.md says the keys make
 *   of the dtype's defaults (an oracle written from the doc, not from
 *   options.c); every value taken is a plain decimal (integer keys: an
 *   integer), as the doc requires; every AMP key is marked used, no other;
 *   a layer section holds at most one amp key, 0 or 1, and no other AMP key;
 *   err is "".
 * - An error: enabled is 0 and the options are the default dtype's
 *   defaults; a status of darknet_amp.h and a message that fits the buffer,
 *   NUL-terminated, printable, naming the cfg file and section (fuzz.h).
 * - Refused without fail: an AMP key with no value or an empty one (in a
 *   cfg file also the "key=" lines darknet dropped), an unknown AMP key, a
 *   key given twice, a value that is not a plain decimal.
 * - Nothing reads or writes out of bounds (the sanitized build).
 *
 *   options_fuzz SCRATCH_DIR      N and seed: DARKNET_AMP_FUZZ_N, DARKNET_AMP_FUZZ_SEED
 */
#include "fuzz.h"
#include "core.h"    /* amp_options_invalid */
#include "options.h"

#include "list.h"
#include "option_list.h"
#include "cfg_sections.h"

#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <strings.h>
#include <unistd.h>


#define DEFAULT_N 150000
#define DEFAULT_SEED 20240612u
#define MAX_PAIRS 10
#define KEY_MAX 1024
#define VAL_MAX 6000

/* ---- The keys, as docs/cfg.md describes them ---- */

typedef enum kind { INTEGER, NUMBER, DTYPE, LOSS_SCALE } kind;

static const struct {
    const char *name;
    kind k;
    int dynamic_only;
} keys[] = {
    {"amp", INTEGER, 0},
    {"amp_dtype", DTYPE, 0},
    {"loss_scale", LOSS_SCALE, 0},
    {"amp_init_scale", NUMBER, 1},
    {"amp_growth_factor", NUMBER, 1},
    {"amp_backoff_factor", NUMBER, 1},
    {"amp_growth_interval", INTEGER, 1},
    {"amp_hysteresis", INTEGER, 1},
    {"amp_min_scale", NUMBER, 0},
    {"amp_max_scale", NUMBER, 0},
    {"amp_max_skips", INTEGER, 0},
    {"amp_fallback", INTEGER, 0},
    {"amp_fallback_after", INTEGER, 0},
    {"amp_probe", INTEGER, 0},
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

static const char *const darknet_keys[] = {"batch", "subdivisions", "learning_rate", "momentum",
                                           "filters", "size", "activation", "groups", "ampl"};

static const char *const integers[] = {
    "0", "1", "2", "-1", "+1", "-0", "00", "01", "1.0", "1e3", "7", "2000", "2147483647",
    "2147483648", "4294967296", "9223372036854775807", "9223372036854775808",
    "-9223372036854775809", "99999999999999999999", " 1", "1 ", "0x10", "1\r"};
static const char *const numbers[] = {
    "0.5", "2", "1e-3", ".5", "5.", "+4", "-0", "0", "1", "1e38", "3.4028235e38",
    "3.4028236e38", "1e39", "1e999", "-1e999", "1e-45", "1e-50", "nan", "NaN", "-nan", "inf",
    "-inf", "infinity", "0x10", "0x1p3", "1.00000001", "0.999999999", "65536", "16777216",
    "65536.0f", "1e", "1e+", ".", "-", "+", "..5", "1.5.5", "2x", "4096", "0.125", "8"};
static const char *const dtypes[] = {"float16", "fp16", "half", "bfloat16", "bf16", "float32",
                                     "fp32", "FLOAT16", "BFloat16", "float8", "fp64", "16",
                                     "float16 ", "bfloat", "float"};
static const char *const scales[] = {"dynamic", "Dynamic", "DYNAMIC", "dynamically", "dyn",
                                     "128", "0.5", "1e8", "1024"};
static const char *const junk[] = {"", " ", "abc", "\xff", "\x80\x7f", "=", "1=2", "#", ";",
                                   "[net]", "\t", "\xc3\xa9", "amp"};

/* Every token above, for splicing into keys and values. */
static const char *dict[256];
static size_t ndict;

static void dict_add(const char *const *t, size_t n)
{
    size_t i;
    for (i = 0; i < n && ndict < sizeof dict / sizeof dict[0]; ++i) dict[ndict++] = t[i];
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define PICK(r, a) ((a)[fz_below((r), COUNT(a))])

static void dict_init(void)
{
    int i;
    for (i = 0; i < NKEYS; ++i) dict[ndict++] = keys[i].name;
    dict_add(darknet_keys, COUNT(darknet_keys));
    dict_add(integers, COUNT(integers));
    dict_add(numbers, COUNT(numbers));
    dict_add(dtypes, COUNT(dtypes));
    dict_add(scales, COUNT(scales));
    dict_add(junk, COUNT(junk));
}

static int find_key(const char *k)
{
    int i;
    for (i = 0; i < NKEYS; ++i)
        if (strcmp(k, keys[i].name) == 0) return i;
    return -1;
}

/* docs/cfg.md: a key that starts with "amp" in any case, or a known one in
 * another case, is the plugin's. */
static int amp_looking(const char *k)
{
    int i;
    if (strncasecmp(k, "amp", 3) == 0) return 1;
    for (i = 0; i < NKEYS; ++i)
        if (strcasecmp(k, keys[i].name) == 0) return 1;
    return 0;
}

/* docs/cfg.md: "plain decimals (2, 0.5, .5, 1e-3, +4), the whole value". */
static int plain_decimal(const char *s)
{
    int digits = 0;
    if (*s == '+' || *s == '-') ++s;
    while (isdigit((unsigned char)*s)) ++s, ++digits;
    if (*s == '.') {
        ++s;
        while (isdigit((unsigned char)*s)) ++s, ++digits;
    }
    if (!digits) return 0;
    if (*s == 'e' || *s == 'E') {
        ++s;
        if (*s == '+' || *s == '-') ++s;
        if (!isdigit((unsigned char)*s)) return 0;
        while (isdigit((unsigned char)*s)) ++s;
    }
    return *s == '\0';
}

static int plain_integer(const char *s)
{
    if (*s == '+' || *s == '-') ++s;
    if (!isdigit((unsigned char)*s)) return 0;
    while (isdigit((unsigned char)*s)) ++s;
    return *s == '\0';
}

static int dtype_of(const char *s, amp_dtype *d)
{
    static const struct {
        const char *name;
        amp_dtype d;
    } names[] = {{"float16", AMP_DTYPE_FLOAT16},   {"fp16", AMP_DTYPE_FLOAT16},
                 {"half", AMP_DTYPE_FLOAT16},      {"bfloat16", AMP_DTYPE_BFLOAT16},
                 {"bf16", AMP_DTYPE_BFLOAT16},     {"float32", AMP_DTYPE_FLOAT32},
                 {"fp32", AMP_DTYPE_FLOAT32}};
    size_t i;
    for (i = 0; i < COUNT(names); ++i)
        if (strcasecmp(s, names[i].name) == 0) {
            *d = names[i].d;
            return 1;
        }
    return 0;
}

/* ---- One input ---- */

typedef struct pair {
    fz_buf key, val;
    int has_val; /* 0: a line with no '=' (val NULL) */
} pair;

typedef struct input {
    pair net[MAX_PAIRS], layer[MAX_PAIRS];
    int nnet, nlayer;
    amp_dtype def;
    int index;           /* the layer's index (list mode) */
    const char *type;    /* the layer's section name (list mode) */
    int via_file;
} input;

static void print_pairs(FILE *out, const pair *p, int n)
{
    int i;
    for (i = 0; i < n; ++i) {
        fprintf(out, "\n    ");
        fz_print_str(out, fz_str(&p[i].key)); /* as the reader sees it: to a 0 byte */
        if (p[i].has_val) {
            fputs(" = ", out);
            fz_print_str(out, fz_str(&p[i].val));
        } else {
            fputs(" (no '=')", out);
        }
    }
}

static void print_input(void *ctx, FILE *out)
{
    const input *in = ctx;
    fprintf(out, "%s, default dtype %s, layer %d ", in->via_file ? "cfg file" : "list",
            amp_dtype_name(in->def), in->index);
    fz_print_str(out, in->type);
    fprintf(out, "\n  [net]:");
    print_pairs(out, in->net, in->nnet);
    fprintf(out, "\n  layer section:");
    print_pairs(out, in->layer, in->nlayer);
}

/* A near miss of a key name: one or two edits (a letter dropped, doubled,
 * swapped or changed, another case, '-' for '_'). */
static void typo(fz_buf *b, fz_rng *r)
{
    int k, n = 1 + (int)fz_below(r, 2);
    for (k = 0; k < n && b->len; ++k) {
        size_t i = fz_below(r, b->len);
        switch (fz_below(r, 6)) {
        case 0: fz_cut(b, i, 1); break;
        case 1:
            if (b->len < b->max) {
                fz_gap(b, i, 1);
                b->p[i] = b->p[i + 1];
            }
            break;
        case 2:
            if (i + 1 < b->len) {
                unsigned char c = b->p[i];
                b->p[i] = b->p[i + 1];
                b->p[i + 1] = c;
            }
            break;
        case 3: b->p[i] = (unsigned char)('a' + fz_below(r, 26)); break;
        case 4: b->p[i] = (unsigned char)toupper(b->p[i]); break;
        default:
            if (b->p[i] == '_') b->p[i] = '-';
            break;
        }
    }
}

static void make_key(fz_buf *b, fz_rng *r, int layer_section, const input *in, int self)
{
    unsigned roll = (unsigned)fz_below(r, 100);
    const pair *mine = layer_section ? in->layer : in->net;
    if (self > 0 && roll < 10) { /* a key given twice */
        const pair *other = &mine[fz_below(r, (size_t)self)];
        fz_buf_set(b, other->key.p, other->key.len);
        return;
    }
    if (layer_section && roll < 50)
        fz_buf_set_str(b, "amp");
    else if (roll < 70)
        fz_buf_set_str(b, keys[fz_below(r, NKEYS)].name);
    else if (roll < 80) {
        fz_buf_set_str(b, keys[fz_below(r, NKEYS)].name);
        typo(b, r);
    } else if (roll < 88)
        fz_buf_set_str(b, PICK(r, darknet_keys));
    else {
        fz_buf_set_str(b, fz_chance(r, 50) ? "amp" : keys[fz_below(r, NKEYS)].name);
        fz_mutate(b, r, dict, ndict, 3);
    }
}

static void make_value(fz_buf *b, fz_rng *r, const char *key)
{
    int id = find_key(key);
    unsigned roll = (unsigned)fz_below(r, 100);
    kind k = id >= 0 ? keys[id].k : (kind)fz_below(r, 4);
    if (roll >= 50 && roll < 80) k = (kind)fz_below(r, 4); /* another key's values */
    if (roll >= 80)
        fz_buf_set_str(b, PICK(r, junk));
    else if (k == INTEGER)
        fz_buf_set_str(b, PICK(r, integers));
    else if (k == NUMBER)
        fz_buf_set_str(b, PICK(r, numbers));
    else if (k == DTYPE)
        fz_buf_set_str(b, PICK(r, dtypes));
    else
        fz_buf_set_str(b, fz_chance(r, 50) ? PICK(r, scales) : PICK(r, numbers));
    if (fz_chance(r, 45)) fz_mutate(b, r, dict, ndict, 4);
}

static void make_pairs(input *in, fz_rng *r, int layer_section)
{
    pair *p = layer_section ? in->layer : in->net;
    int i, n = (int)fz_below(r, layer_section ? 5 : MAX_PAIRS + 1);
    for (i = 0; i < n; ++i) {
        make_key(&p[i].key, r, layer_section, in, i);
        p[i].has_val = !fz_chance(r, 3);
        make_value(&p[i].val, r, fz_str(&p[i].key));
    }
    if (layer_section)
        in->nlayer = n;
    else
        in->nnet = n;
}

static void make_input(input *in, fz_rng *r)
{
    static const char *const types[] = {"[convolutional]", "[connected]", "convolutional",
                                        "[gru]", "", "[\xff\n]"};
    static const amp_dtype dts[] = {AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16, AMP_DTYPE_FLOAT32};
    in->def = PICK(r, dts);
    in->via_file = fz_chance(r, 25);
    in->index = fz_chance(r, 90) ? (int)fz_below(r, 200) : fz_chance(r, 50) ? -1 : INT_MAX;
    in->type = fz_chance(r, 90) ? types[0] : PICK(r, types);
    make_pairs(in, r, 0);
    make_pairs(in, r, 1);
}

/* ---- The oracle ---- */

/* Field by field: the struct has padding, which memcmp would compare. */
static int same_options(const amp_options *a, const amp_options *b)
{
    return a->dtype == b->dtype && a->dynamic == b->dynamic && a->init_scale == b->init_scale &&
           a->growth_factor == b->growth_factor && a->backoff_factor == b->backoff_factor &&
           a->growth_interval == b->growth_interval && a->hysteresis == b->hysteresis &&
           a->min_scale == b->min_scale && a->max_scale == b->max_scale &&
           a->max_skips == b->max_skips;
}

/* What docs/cfg.md says the keys of a section make of the defaults, for a
 * section the parser accepted. NULL, or why the options differ. */
static const char *expected_options(list *l, amp_dtype def, const amp_options *got,
                                    int enabled)
{
    const char *val[16] = {0};
    node *n;
    amp_options want;
    int id, dynamic_key = 0, want_enabled = 0;
    amp_dtype dt = def;
    for (n = l ? l->front : NULL; n; n = n->next) {
        kvp *p = n->val;
        if ((id = find_key(p->key)) >= 0) val[id] = p->val;
    }
    for (id = 0; id < NKEYS; ++id) {
        if (!val[id]) continue;
        if (keys[id].k == INTEGER && !plain_integer(val[id]))
            return "accepted an integer key whose value is not a plain integer";
        if (keys[id].k == NUMBER && !plain_decimal(val[id]))
            return "accepted a number key whose value is not a plain decimal";
        if (keys[id].k == LOSS_SCALE && strcasecmp(val[id], "dynamic") != 0 &&
            !plain_decimal(val[id]))
            return "accepted loss_scale that is neither dynamic nor a plain decimal";
        if (keys[id].k == DTYPE && !dtype_of(val[id], &dt))
            return "accepted an amp_dtype that is not a dtype's name";
        dynamic_key |= keys[id].dynamic_only;
    }
    amp_options_init(&want, dt);
    if (val[2] && strcasecmp(val[2], "dynamic") != 0) {
        if (dynamic_key) return "accepted a static loss_scale with a dynamic-only key";
        want.dynamic = 0;
        want.init_scale = (float)strtod(val[2], NULL);
    } else if ((val[2] || dynamic_key) && !want.dynamic) {
        want.dynamic = 1;
        want.init_scale = 65536.0f;
    }
#define NUM(i, f) if (val[i]) want.f = (float)strtod(val[i], NULL)
#define INT(i, f) if (val[i]) want.f = strtol(val[i], NULL, 10)
    NUM(3, init_scale);
    NUM(4, growth_factor);
    NUM(5, backoff_factor);
    INT(6, growth_interval);
    INT(7, hysteresis);
    NUM(8, min_scale);
    NUM(9, max_scale);
    INT(10, max_skips);
#undef NUM
#undef INT
    if (val[0]) want_enabled = (int)strtol(val[0], NULL, 10);
    if (enabled != want_enabled) return "enabled is not the amp key's value";
    if (!same_options(&want, got))
        return "the options are not what docs/cfg.md says these keys make";
    return NULL;
}

/* Why a section must be refused (docs/cfg.md), or NULL when it may pass.
 * dropped: an AMP key darknet dropped for its empty value ("key="). */
static const char *must_refuse(list *l, int layer_section, int dropped)
{
    node *n, *m;
    if (dropped) return "an AMP key with an empty value (dropped by read_cfg) was not refused";
    for (n = l ? l->front : NULL; n; n = n->next) {
        kvp *p = n->val;
        int id = find_key(p->key);
        if (!amp_looking(p->key)) continue;
        if (id < 0) return "an unknown AMP key was not refused";
        if (layer_section && id != 0) return "an AMP key other than amp in a layer section passed";
        if (!p->val || !*p->val) return "an AMP key without a value was not refused";
        for (m = n->next; m; m = m->next)
            if (strcmp(((kvp *)m->val)->key, p->key) == 0) return "a key given twice passed";
        if (keys[id].k == INTEGER && !plain_integer(p->val))
            return "a value that is not a plain integer passed";
        if (keys[id].k == NUMBER && !plain_decimal(p->val))
            return "a value that is not a plain decimal passed";
    }
    return NULL;
}

/* The used flags after AMP_OK: every AMP key marked, no other. */
static const char *check_used(list *l, int layer_section)
{
    node *n;
    for (n = l ? l->front : NULL; n; n = n->next) {
        kvp *p = n->val;
        int mine = layer_section ? strcmp(p->key, "amp") == 0 : find_key(p->key) >= 0;
        if (p->used != mine)
            return mine ? "an AMP key was not marked used" : "another key was marked used";
    }
    return NULL;
}

static fz_count *net_count, *layer_count;

static void check_net(fz_run *run, fz_rng *r, list *l, const char *cfg, amp_dtype def,
                      int dropped)
{
    fz_err e;
    char prefix[AMP_MSG_LEN];
    amp_options o, defaults;
    int enabled = -1;
    const char *why;
    char *err = fz_err_reset(&e, r); /* before e.len is read */
    amp_status st = amp_options_parse_net(l, cfg, def, &enabled, &o, err, e.len);
    snprintf(prefix, sizeof prefix, "%s: [net] ", cfg);
    if ((why = fz_check_message(st, &e, prefix, 1))) fz_violation(run, why, e.buf);
    if (st == AMP_OK) {
        amp_option_field field;
        ++net_count->n_yes;
        if ((why = amp_options_invalid(&o, &field)))
            fz_violation(run, "AMP_OK with options amp_options_invalid refuses", why);
        if (enabled != 0 && enabled != 1) fz_violation(run, "enabled is neither 0 nor 1", NULL);
        if ((why = must_refuse(l, 0, dropped))) fz_violation(run, why, NULL);
        if ((why = expected_options(l, def, &o, enabled))) fz_violation(run, why, NULL);
        if ((why = check_used(l, 0))) fz_violation(run, why, NULL);
    } else {
        ++net_count->n_no;
        amp_options_init(&defaults, def);
        if (enabled != 0) fz_violation(run, "an error left enabled set", e.buf);
        if (!same_options(&o, &defaults))
            fz_violation(run, "an error left options other than the default dtype's", e.buf);
    }
}

static void check_layer(fz_run *run, fz_rng *r, list *l, const char *cfg, int index,
                        const char *type, int dropped)
{
    fz_err e;
    char prefix[AMP_MSG_LEN];
    int half = -1;
    const char *why;
    char *err = fz_err_reset(&e, r); /* before e.len is read */
    amp_status st = amp_options_parse_layer(l, cfg, index, type, &half, err, e.len);
    snprintf(prefix, sizeof prefix, "%s: layer %d ", cfg, index);
    if ((why = fz_check_message(st, &e, prefix, 1))) fz_violation(run, why, e.buf);
    if (st != AMP_OK) {
        ++layer_count->n_no;
        return;
    }
    ++layer_count->n_yes;
    if ((why = must_refuse(l, 1, dropped))) fz_violation(run, why, NULL);
    if ((why = check_used(l, 1))) fz_violation(run, why, NULL);
    {
        const char *amp = NULL;
        node *n;
        for (n = l ? l->front : NULL; n; n = n->next)
            if (strcmp(((kvp *)n->val)->key, "amp") == 0) amp = ((kvp *)n->val)->val;
        if (half != (amp ? (int)strtol(amp, NULL, 10) : 1))
            fz_violation(run, "half_allowed is not the amp key's value (1 when absent)", NULL);
    }
}

/* ---- List mode ---- */

static list *to_list(pair *p, int n)
{
    list *l = make_list();
    int i;
    for (i = 0; i < n; ++i)
        option_insert(l, (char *)p[i].key.p, p[i].has_val ? (char *)p[i].val.p : NULL);
    return l;
}

static void free_options(list *l)
{
    free_list_contents(l); /* the kvps; keys and values are the input's */
    free_list(l);
}

/* A cfg path no list-mode input can have a file at: the plugin reads the
 * cfg file again only when it exists. */
#define LIST_CFG "/nonexistent-fuzz-dir/fuzz.cfg"

static void run_list(fz_run *run, fz_rng *r, input *in)
{
    list *net = to_list(in->net, in->nnet), *lay = to_list(in->layer, in->nlayer);
    check_net(run, r, net, LIST_CFG, in->def, 0);
    check_layer(run, r, lay, LIST_CFG, in->index, in->type, 0);
    free_options(net);
    free_options(lay);
}

/* ---- File mode ---- */

static char cfg_path[4096];

/* darknet's read_cfg, line by line, as written in parser.c and
 * option_list.c: spaces, tabs and '\n' stripped; '[' opens a section; '#',
 * ';' and empty lines skipped; a line whose first '=' is its last character
 * is dropped. Marks in dropped[s] whether section s lost an AMP key so. */
static void dropped_amp_keys(const char *text, int *dropped, int nsections)
{
    int at = -1;
    while (*text) {
        size_t len = strcspn(text, "\n"), i, k = 0;
        char *line = malloc(len + 1), *eq;
        if (!line) abort();
        for (i = 0; i < len; ++i)
            if (text[i] != ' ' && text[i] != '\t') line[k++] = text[i];
        line[k] = '\0';
        text += len + (text[len] == '\n');
        if (line[0] == '[') {
            ++at;
        } else if (at >= 0 && at < nsections && line[0] && line[0] != '#' && line[0] != ';' &&
                   (eq = strchr(line, '=')) && eq[1] == '\0') {
            *eq = '\0';
            if (amp_looking(line)) dropped[at] = 1;
        }
        free(line);
    }
}

static void append_pairs(char **text, size_t *len, size_t *cap, const pair *p, int n)
{
    int i;
    for (i = 0; i < n; ++i) {
        size_t need = p[i].key.len + p[i].val.len + 3;
        if (*len + need + 1 > *cap) {
            *cap = (*len + need + 1) * 2;
            if (!(*text = realloc(*text, *cap))) abort();
        }
        /* key and value as C strings: a 0 byte ends them, as in a list */
        *len += (size_t)sprintf(*text + *len, "%s%s%s\n", fz_str(&p[i].key),
                                p[i].has_val ? "=" : "", p[i].has_val ? fz_str(&p[i].val) : "");
    }
}

static void run_file(fz_run *run, fz_rng *r, input *in)
{
    size_t len = 0, cap = 256;
    char *text = malloc(cap);
    int dropped[64] = {0}, stderr_fd, devnull, index;
    list *sections;
    node *n;
    FILE *f;
    if (!text) abort();
    len = (size_t)sprintf(text, "[net]\nbatch=2\n");
    append_pairs(&text, &len, &cap, in->net, in->nnet);
    if (len + 32 > cap && !(text = realloc(text, cap = len + 32))) abort();
    len += (size_t)sprintf(text + len, "\n[convolutional]\nfilters=4\n");
    append_pairs(&text, &len, &cap, in->layer, in->nlayer);
    dropped_amp_keys(text, dropped, 64);
    /* A new file each time: truncating one that has data makes ext4 write
     * it out on close (auto_da_alloc), a hundred times slower. */
    unlink(cfg_path);
    if (!(f = fopen(cfg_path, "w")) || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
        perror(cfg_path);
        exit(2);
    }
    /* read_cfg warns on stderr for every line it drops: quiet, for this
     * call only (a sanitizer's report must still reach stderr). */
    fflush(stderr);
    stderr_fd = dup(2);
    devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    sections = read_cfg(cfg_path);
    dup2(stderr_fd, 2);
    close(devnull);
    close(stderr_fd);
    for (n = sections->front, index = -1; n; n = n->next, ++index) {
        cfg_section *s = n->val;
        int d = index + 1 < 64 && dropped[index + 1];
        if (index < 0)
            check_net(run, r, s->options, cfg_path, in->def, d);
        else
            check_layer(run, r, s->options, cfg_path, index, s->type, d);
    }
    test_free_sections(sections);
    free(text);
}

static void input_init(input *in)
{
    int i;
    for (i = 0; i < MAX_PAIRS; ++i) {
        fz_buf_init(&in->net[i].key, KEY_MAX);
        fz_buf_init(&in->net[i].val, VAL_MAX);
        fz_buf_init(&in->layer[i].key, KEY_MAX);
        fz_buf_init(&in->layer[i].val, VAL_MAX);
    }
}

static void input_free(input *in)
{
    int i;
    for (i = 0; i < MAX_PAIRS; ++i) {
        fz_buf_free(&in->net[i].key);
        fz_buf_free(&in->net[i].val);
        fz_buf_free(&in->layer[i].key);
        fz_buf_free(&in->layer[i].val);
    }
}

static void counters(fz_run *run)
{
    net_count = fz_counter(run, "amp_options_parse_net", "accepted", "refused");
    layer_count = fz_counter(run, "amp_options_parse_layer", "accepted", "refused");
}

#ifndef FUZZ_LIBFUZZER
int main(int argc, char **argv)
{
    fz_run run;
    static input in;
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    snprintf(cfg_path, sizeof cfg_path, "%s/fuzz.cfg", argv[1]);
    dict_init();
    input_init(&in);
    fz_begin(&run, "fuzz.options", DEFAULT_N, DEFAULT_SEED);
    counters(&run);
    run.print_input = print_input;
    run.ctx = &in;
    for (run.index = 0; run.index < run.n; ++run.index) {
        fz_rng r = fz_rng_at(run.seed, run.index);
        make_input(&in, &r);
        if (in.via_file)
            run_file(&run, &r, &in);
        else
            run_list(&run, &r, &in);
    }
    input_free(&in);
    return fz_end(&run);
}
#else
static void remove_cfg(void)
{
    unlink(cfg_path);
}

/* libFuzzer: byte 0 picks the default dtype and the mode, byte 1 seeds the
 * buffer sizes; then lines "key=value" ("key" alone: no '='), a line "["
 * starting the layer section. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fz_run run;
    static input in;
    static int ready;
    size_t pos = 2;
    int layer_section = 0;
    fz_rng r;
    if (!ready) {
        const char *tmp = getenv("TMPDIR");
        snprintf(cfg_path, sizeof cfg_path, "%s/darknet_amp_fuzz_%d.cfg", tmp ? tmp : "/tmp",
                 (int)getpid());
        atexit(remove_cfg);
        dict_init();
        input_init(&in);
        fz_begin(&run, "fuzz.options (libFuzzer)", 0, 0);
        counters(&run);
        run.print_input = print_input;
        run.ctx = &in;
        ready = 1;
    }
    if (size < 2) return 0;
    in.def = (amp_dtype)(data[0] % 3);
    in.via_file = (data[0] >> 2) & 1;
    in.index = data[0] >> 3;
    in.type = "[convolutional]";
    in.nnet = in.nlayer = 0;
    r.s = data[1];
    while (pos < size) {
        const uint8_t *end = memchr(data + pos, '\n', size - pos), *eq;
        size_t len = end ? (size_t)(end - (data + pos)) : size - pos;
        pair *p;
        if (len == 1 && data[pos] == '[') {
            layer_section = 1;
        } else if (layer_section ? in.nlayer < MAX_PAIRS : in.nnet < MAX_PAIRS) {
            p = layer_section ? &in.layer[in.nlayer++] : &in.net[in.nnet++];
            eq = memchr(data + pos, '=', len);
            p->has_val = eq != NULL;
            fz_buf_set(&p->key, data + pos, eq ? (size_t)(eq - (data + pos)) : len);
            fz_buf_set(&p->val, eq ? eq + 1 : data, eq ? len - (size_t)(eq - (data + pos)) - 1 : 0);
        }
        pos += len + 1;
    }
    ++run.index;
    if (in.via_file)
        run_file(&run, &r, &in);
    else
        run_list(&run, &r, &in);
    return 0;
}
#endif
