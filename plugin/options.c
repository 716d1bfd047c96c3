/* The AMP cfg keys: defaults, parsing and validation (docs/cfg.md).
 *
 * darknet itself reads numbers with atoi/atof, which turn "2x" into 2 and
 * "abc" into 0 without a word. These keys decide whether training diverges,
 * so they are read strictly instead: plain decimal only, the whole value
 * consumed, finite, representable as a float, in range, not empty, and each
 * key at most once. Values are checked as the float (or int) they will be
 * stored as, so amp_growth_factor=1.00000000001 (1.0f) is refused like 1
 * would be.
 */
#include "options.h"
#include "core.h" /* amp_errorf, amp_options_invalid, amp_env */

#include "option_list.h" /* kvp: darknet's cfg key/value node */

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>


void amp_options_init(amp_options *o, amp_dtype dtype)
{
    if (!o) return;
    o->dtype = dtype;
    /* PyTorch GradScaler's dynamic-scaling defaults. */
    o->dynamic = 1;
    o->init_scale = 65536.0f;
    o->growth_factor = 2.0f;
    o->backoff_factor = 0.5f;
    o->growth_interval = 2000;
    o->hysteresis = 1;
    /* A scale below 1 would shrink small gradients further, the opposite of
     * its purpose; above 2^24 the scaled loss of an ordinary batch already
     * nears fp16's maximum (65504) times the activations' magnitudes. */
    o->min_scale = 1.0f;
    o->max_scale = 16777216.0f;
    o->max_skips = 0;
    o->half_activations = 1;
    o->fallback = 1;
    o->fallback_after = 3;
    o->probe = 0;
    if (dtype == AMP_DTYPE_BFLOAT16) {
        /* bfloat16 has float32's exponent range: gradients do not underflow,
         * so no scaling is needed (non-finite steps are still skipped). */
        o->dynamic = 0;
        o->init_scale = 1.0f;
    }
}

/* ---- The keys ---- */

typedef enum key_kind {
    KIND_INTEGER,
    KIND_NUMBER,
    KIND_DTYPE,
    KIND_LOSS_SCALE,
    KIND_ACTIVATIONS
} key_kind;

enum {
    K_AMP,
    K_DTYPE,
    K_LOSS_SCALE,
    K_INIT_SCALE,
    K_GROWTH_FACTOR,
    K_BACKOFF_FACTOR,
    K_GROWTH_INTERVAL,
    K_HYSTERESIS,
    K_MIN_SCALE,
    K_MAX_SCALE,
    K_MAX_SKIPS,
    K_ACTIVATIONS,
    K_FALLBACK,
    K_FALLBACK_AFTER,
    K_PROBE,
    K_COUNT
};

typedef struct key_spec {
    const char *name;
    key_kind kind;
    double lo, hi;    /* KIND_NUMBER: lo < x < hi */
    long ilo, ihi;    /* KIND_INTEGER: ilo <= x <= ihi */
    int dynamic_only; /* only means something with a dynamic scale */
    const char *expect;
} key_spec;

static const key_spec keys[K_COUNT] = {
    [K_AMP] = {"amp", KIND_INTEGER, 0, 0, 0, 1, 0, "expected 0 or 1"},
    [K_DTYPE] = {"amp_dtype", KIND_DTYPE, 0, 0, 0, 0, 0,
                 "expected float16, bfloat16 or float32 (aliases fp16, half, bf16, fp32)"},
    [K_LOSS_SCALE] = {"loss_scale", KIND_LOSS_SCALE, 0, INFINITY, 0, 0, 0,
                      "expected dynamic or a number > 0"},
    [K_INIT_SCALE] = {"amp_init_scale", KIND_NUMBER, 0, INFINITY, 0, 0, 1,
                      "expected a number > 0"},
    [K_GROWTH_FACTOR] = {"amp_growth_factor", KIND_NUMBER, 1, INFINITY, 0, 0, 1,
                         "expected a number > 1"},
    [K_BACKOFF_FACTOR] = {"amp_backoff_factor", KIND_NUMBER, 0, 1, 0, 0, 1,
                          "expected a number in (0, 1)"},
    [K_GROWTH_INTERVAL] = {"amp_growth_interval", KIND_INTEGER, 0, 0, 1, LONG_MAX, 1,
                           "expected an integer >= 1"},
    [K_HYSTERESIS] = {"amp_hysteresis", KIND_INTEGER, 0, 0, 1, INT_MAX, 1,
                      "expected an integer >= 1"},
    [K_MIN_SCALE] = {"amp_min_scale", KIND_NUMBER, 0, INFINITY, 0, 0, 0, "expected a number > 0"},
    [K_MAX_SCALE] = {"amp_max_scale", KIND_NUMBER, 0, INFINITY, 0, 0, 0, "expected a number > 0"},
    [K_MAX_SKIPS] = {"amp_max_skips", KIND_INTEGER, 0, 0, 0, LONG_MAX, 0,
                     "expected an integer >= 0 (0: no limit)"},
    [K_ACTIVATIONS] = {"amp_activations", KIND_ACTIVATIONS, 0, 0, 0, 0, 0,
                       "expected half or float32"},
    [K_FALLBACK] = {"amp_fallback", KIND_INTEGER, 0, 0, 0, 1, 0, "expected 0 or 1"},
    [K_FALLBACK_AFTER] = {"amp_fallback_after", KIND_INTEGER, 0, 0, 1, LONG_MAX, 0,
                          "expected an integer >= 1"},
    [K_PROBE] = {"amp_probe", KIND_INTEGER, 0, 0, 0, 1, 0, "expected 0 or 1"},
};

static const struct {
    const char *name;
    amp_dtype dtype;
} dtype_names[] = {
    {"float16", AMP_DTYPE_FLOAT16}, {"fp16", AMP_DTYPE_FLOAT16},  {"half", AMP_DTYPE_FLOAT16},
    {"bfloat16", AMP_DTYPE_BFLOAT16}, {"bf16", AMP_DTYPE_BFLOAT16}, {"float32", AMP_DTYPE_FLOAT32},
    {"fp32", AMP_DTYPE_FLOAT32},
};

amp_status amp_dtype_parse(const char *name, amp_dtype *dtype)
{
    for (size_t i = 0; name && i < sizeof dtype_names / sizeof dtype_names[0]; ++i)
        if (!strcmp(name, dtype_names[i].name)) {
            *dtype = dtype_names[i].dtype;
            return AMP_OK;
        }
    return AMP_ERR_INVALID;
}

/* What was read from one section, before defaults are applied. */
typedef struct parsed {
    const kvp *kv[K_COUNT]; /* NULL: absent */
    double num[K_COUNT];
    long integer[K_COUNT];
    amp_dtype dtype;
    int loss_scale_dynamic;
} parsed;

/* ---- Messages ---- */

typedef struct text {
    char s[128];
} text;

/* A key or value from the cfg as written, with anything unprintable escaped
 * and long text cut, so that the message stays one readable line. */
#define SHOW_MAX 72 /* characters of a key or value shown; then "..." */
static const char *show(text *t, const char *s)
{
    return amp_show(t->s, sizeof t->s, s, SHOW_MAX);
}

/* "key=value" as written, or "key=<default> (default)" when absent. */
static const char *describe(text *t, const parsed *v, int id, double value)
{
    text val;
    if (v->kv[id])
        snprintf(t->s, sizeof t->s, "%s=%s", keys[id].name, show(&val, v->kv[id]->val));
    else
        snprintf(t->s, sizeof t->s, "%s=%.9g (default)", keys[id].name, value);
    return t->s;
}

static void known_keys(char *buf, size_t n)
{
    size_t used = 0;
    int i;
    buf[0] = '\0';
    for (i = 0; i < K_COUNT && used < n; ++i) {
        int w = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", keys[i].name);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* Levenshtein distance ignoring case; large for keys too long to be typos. */
#define KEY_MAX 48
static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), i, j;
    int row[2][KEY_MAX + 1];
    if (la > KEY_MAX || lb > KEY_MAX) return INT_MAX;
    for (j = 0; j <= lb; ++j) row[0][j] = (int)j;
    for (i = 1; i <= la; ++i) {
        int *prev = row[(i - 1) & 1], *cur = row[i & 1];
        cur[0] = (int)i;
        for (j = 1; j <= lb; ++j) {
            int best = prev[j - 1] + (tolower((unsigned char)a[i - 1]) !=
                                      tolower((unsigned char)b[j - 1]));
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            cur[j] = best;
        }
    }
    return row[la & 1][lb];
}

/* The known key an unknown one was probably meant to be, or NULL: within two
 * edits (amp_growth_intervall, AMP_DTYPE, amp_loss_scale), or the start of
 * exactly one key name (amp_backoff). */
static const char *suggest(const char *key)
{
    const char *best = NULL, *prefix_of = NULL;
    int best_d = 3, prefixes = 0, i;
    size_t len = strlen(key);
    for (i = 0; i < K_COUNT; ++i) {
        char with_prefix[KEY_MAX + 8];
        int d = edit_distance(key, keys[i].name);
        if (strncmp(keys[i].name, "amp", 3) != 0) {
            snprintf(with_prefix, sizeof with_prefix, "amp_%s", keys[i].name);
            int d2 = edit_distance(key, with_prefix);
            if (d2 < d) d = d2;
        }
        if (d < best_d) {
            best_d = d;
            best = keys[i].name;
        }
        if (len >= 6 && strncasecmp(key, keys[i].name, len) == 0) {
            prefix_of = keys[i].name;
            ++prefixes;
        }
    }
    if (best) return best;
    return prefixes == 1 ? prefix_of : NULL;
}

static int find_key(const char *key)
{
    int i;
    for (i = 0; i < K_COUNT; ++i)
        if (strcmp(key, keys[i].name) == 0) return i;
    return -1;
}

/* Keys the AMP parser owns: everything starting with "amp" in any case (no
 * darknet key does), and the known names in another case (LOSS_SCALE). */
static int looks_like_amp_key(const char *key)
{
    int i;
    if (strncasecmp(key, "amp", 3) == 0) return 1;
    for (i = 0; i < K_COUNT; ++i)
        if (strcasecmp(key, keys[i].name) == 0) return 1;
    return 0;
}

/* ---- Values ---- */

/* Plain decimal: optional sign, digits with an optional point and exponent.
 * strtod alone would also take hex, "inf", "nan" and leading whitespace. */
static int parse_decimal(const char *s, double *out)
{
    const char *p = s + (*s == '+' || *s == '-');
    char *end;
    if (!isdigit((unsigned char)*p) && *p != '.') return 0;
    if (strpbrk(s, "xX")) return 0;
    *out = strtod(s, &end);
    return end != s && *end == '\0';
}

/* Plain decimal integer; *overflow when it does not fit a long. */
static int parse_integer(const char *s, long *out, int *overflow)
{
    const char *p = s + (*s == '+' || *s == '-');
    char *end;
    if (!isdigit((unsigned char)*p)) return 0;
    errno = 0;
    *out = strtol(s, &end, 10);
    *overflow = errno == ERANGE;
    return *end == '\0';
}

static amp_status check_number(int id, const char *s, parsed *v, const char *where, char *err,
                               size_t errlen)
{
    const key_spec *k = &keys[id];
    text key, val;
    double x;
    float f;
    show(&key, k->name);
    show(&val, s);
    if (!parse_decimal(s, &x) || !(x > k->lo && x < k->hi))
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s %s=%s: %s", where, key.s, val.s, k->expect);
    if (x > FLT_MAX)
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s %s=%s: %s; this is beyond the float range (max %g)", where,
                         key.s, val.s, k->expect, (double)FLT_MAX);
    f = (float)x;
    if (!(f > k->lo && f < k->hi))
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s %s=%s: %s; as a float this is %.9g", where, key.s, val.s,
                         k->expect, (double)f);
    v->num[id] = f;
    return AMP_OK;
}

/* Checks one value against its key's rule and stores it in v. where: the
 * message's "<cfgfile>: [net]" or "<cfgfile>: layer 3 [convolutional]". */
static amp_status check_value(int id, const kvp *p, parsed *v, const char *where, char *err,
                              size_t errlen)
{
    const key_spec *k = &keys[id];
    const char *s = p->val;
    text key, val;
    show(&key, p->key);
    show(&val, s);
    if (!s)
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s %s: no value (the line has no '='): %s", where, key.s,
                         k->expect);
    if (!*s)
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen, "%s %s=: no value after '=': %s", where,
                         key.s, k->expect);
    switch (k->kind) {
    case KIND_INTEGER: {
        long x;
        int overflow;
        if (!parse_integer(s, &x, &overflow) || (x < k->ilo && !overflow))
            AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                             "%s %s=%s: %s", where, key.s, val.s, k->expect);
        if (x > k->ihi || overflow) {
            if (k->ihi == 1 || x < k->ilo)
                AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                                 "%s %s=%s: %s", where, key.s, val.s, k->expect);
            AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                             "%s %s=%s: %s, at most %ld", where, key.s, val.s, k->expect,
                             k->ihi);
        }
        v->integer[id] = x;
        return AMP_OK;
    }
    case KIND_DTYPE: {
        size_t i;
        for (i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; ++i) {
            if (strcasecmp(s, dtype_names[i].name) == 0) {
                v->dtype = dtype_names[i].dtype;
                return AMP_OK;
            }
        }
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s %s=%s: %s", where, key.s, val.s, k->expect);
    }
    case KIND_ACTIVATIONS:
        if (strcasecmp(s, "half") && strcasecmp(s, "float32"))
            AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen, "%s %s=%s: %s", where, key.s, val.s,
                             k->expect);
        v->integer[id] = strcasecmp(s, "half") == 0;
        return AMP_OK;
    case KIND_LOSS_SCALE:
        if (strcasecmp(s, "dynamic") == 0) {
            v->loss_scale_dynamic = 1;
            return AMP_OK;
        }
        return check_number(id, s, v, where, err, errlen);
    case KIND_NUMBER:
        return check_number(id, s, v, where, err, errlen);
    }
    AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                     "%s %s=%s: internal error: unhandled key kind", where, key.s, val.s);
}

/* ---- Keys darknet drops ---- */

/* darknet's read_option (option_list.c) drops a line whose value is empty,
 * "amp_dtype=" after read_cfg has stripped its spaces, with only "Config
 * file error line N, could parse: amp_dtype" on stderr: the key never
 * reaches the section's list, and its default would apply in silence. So
 * the cfg file is read again, line by line as read_cfg reads it (spaces,
 * tabs stripped; '[' opens a section; '#', ';' and empty lines skipped), and
 * each such line of one section (0: [net], i + 1: layer i, as darknet counts
 * them) goes through check with an empty value, like a key of the list. A
 * file that cannot be opened (a list built in code, not read from cfgfile)
 * or that is not a regular file (a pipe: already read) is not read again. */
typedef amp_status (*key_fn)(kvp *p, void *ctx, const char *where, char *err, size_t errlen);

static amp_status dropped_keys(const char *cfgfile, int section, key_fn check, void *ctx,
                               const char *where, char *err, size_t errlen)
{
    struct stat sb;
    FILE *f = cfgfile ? fopen(cfgfile, "r") : NULL;
    char *line = NULL;
    size_t cap = 0;
    int at = -1;
    amp_status st = AMP_OK;
    if (!f) return AMP_OK;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return AMP_OK;
    }
    while (st == AMP_OK && getline(&line, &cap, f) >= 0) {
        char *r = line, *w = line, *eq;
        for (; *r; ++r) /* darknet's strip() */
            if (*r != ' ' && *r != '\t' && *r != '\n') *w++ = *r;
        *w = '\0';
        if (line[0] == '[') {
            if (++at > section) break;
            continue;
        }
        if (at != section || !line[0] || line[0] == '#' || line[0] == ';') continue;
        eq = strchr(line, '=');
        if (!eq || eq[1]) continue; /* read_option kept it */
        *eq = '\0';
        {
            kvp p = {line, eq + 1, 0};
            st = check(&p, ctx, where, err, errlen);
        }
    }
    free(line);
    fclose(f);
    return st;
}

/* ---- [net] ---- */

/* One key of [net]: an AMP key is checked and stored in v (others are
 * darknet's: ignored). */
static amp_status net_key(kvp *p, void *ctx, const char *where, char *err, size_t errlen)
{
    parsed *v = ctx;
    int id;
    if (!p || !p->key) return AMP_OK;
    id = find_key(p->key);
    if (id < 0) {
        char known[AMP_MSG_LEN / 2];
        const char *guess;
        text key, val;
        if (!looks_like_amp_key(p->key)) return AMP_OK;
        guess = suggest(p->key);
        known_keys(known, sizeof known);
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s %s=%s: unknown AMP key%s%s%s; known keys: %s", where,
                         show(&key, p->key), show(&val, p->val),
                         guess ? " (did you mean " : "", guess ? guess : "",
                         guess ? "?)" : "", known);
    }
    p->used = 1;
    /* A missing value is that, whether or not the key came before. */
    if (!p->val || !*p->val) return check_value(id, p, v, where, err, errlen);
    if (v->kv[id]) {
        text now, first;
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s %s=%s: %s is given twice (first as %s=%s); keep one",
                         where, keys[id].name, show(&now, p->val), keys[id].name, keys[id].name,
                         show(&first, v->kv[id]->val));
    }
    v->kv[id] = p;
    return check_value(id, p, v, where, err, errlen);
}

static amp_status read_net_keys(list *l, const char *cfgfile, const char *where, parsed *v,
                                char *err, size_t errlen)
{
    node *n;
    memset(v, 0, sizeof *v);
    for (n = l ? l->front : NULL; n; n = n->next)
        AMP_FORWARD_IF_ERROR(net_key((kvp *)n->val, v, where, err, errlen));
    /* net_key refuses an empty value before storing the key in v: no
     * pointer to a dropped line's kvp stays there. */
    return dropped_keys(cfgfile, 0, net_key, v, where, err, errlen);
}

static void make_dynamic(amp_options *o)
{
    amp_options d;
    if (o->dynamic) return;
    amp_options_init(&d, AMP_DTYPE_FLOAT16);
    o->dynamic = 1;
    o->init_scale = d.init_scale;
}

/* Applies the keys read onto the defaults of the dtype, then checks the
 * keys against each other. */
static amp_status combine(const parsed *v, const char *where, amp_dtype default_dtype,
                          amp_options *o, char *err, size_t errlen)
{
    int id, dynamic_key = -1;
    text init, lo, hi;
    amp_options_init(o, v->kv[K_DTYPE] ? v->dtype : default_dtype);
    for (id = 0; id < K_COUNT && dynamic_key < 0; ++id)
        if (keys[id].dynamic_only && v->kv[id]) dynamic_key = id;

    if (v->kv[K_LOSS_SCALE] && !v->loss_scale_dynamic) {
        text a, b;
        if (dynamic_key >= 0)
            AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                             "%s loss_scale=%s and %s=%s: a number for loss_scale sets a static "
                             "scale, and %s only applies to a dynamic one; expected either "
                             "loss_scale=dynamic or no %s",
                             where, show(&a, v->kv[K_LOSS_SCALE]->val), keys[dynamic_key].name,
                             show(&b, v->kv[dynamic_key]->val), keys[dynamic_key].name,
                             keys[dynamic_key].name);
        o->dynamic = 0;
        o->init_scale = (float)v->num[K_LOSS_SCALE];
    } else if (v->loss_scale_dynamic || dynamic_key >= 0) {
        /* A dynamic-only key switches a static default (bfloat16) to dynamic
         * scaling rather than being silently ignored. */
        make_dynamic(o);
    }

    if (v->kv[K_INIT_SCALE]) o->init_scale = (float)v->num[K_INIT_SCALE];
    if (v->kv[K_GROWTH_FACTOR]) o->growth_factor = (float)v->num[K_GROWTH_FACTOR];
    if (v->kv[K_BACKOFF_FACTOR]) o->backoff_factor = (float)v->num[K_BACKOFF_FACTOR];
    if (v->kv[K_GROWTH_INTERVAL]) o->growth_interval = v->integer[K_GROWTH_INTERVAL];
    if (v->kv[K_HYSTERESIS]) o->hysteresis = (int)v->integer[K_HYSTERESIS];
    if (v->kv[K_MIN_SCALE]) o->min_scale = (float)v->num[K_MIN_SCALE];
    if (v->kv[K_MAX_SCALE]) o->max_scale = (float)v->num[K_MAX_SCALE];
    if (v->kv[K_MAX_SKIPS]) o->max_skips = v->integer[K_MAX_SKIPS];
    if (v->kv[K_ACTIVATIONS]) o->half_activations = (int)v->integer[K_ACTIVATIONS];
    if (v->kv[K_FALLBACK]) o->fallback = (int)v->integer[K_FALLBACK];
    if (v->kv[K_FALLBACK_AFTER]) o->fallback_after = v->integer[K_FALLBACK_AFTER];
    if (v->kv[K_PROBE]) o->probe = (int)v->integer[K_PROBE];

    /* The rules between keys are the scaler's (scaler.c); here they are told
     * in the cfg's words. */
    amp_option_field field;
    const char *why = amp_options_invalid(o, &field);
    AMP_RETURN_ERROR_IF(why && field == AMP_FIELD_SCALE_BOUNDS, AMP_ERR_INVALID, err, errlen,
                        "%s %s and %s: expected amp_max_scale >= amp_min_scale", where,
                        describe(&hi, v, K_MAX_SCALE, o->max_scale),
                        describe(&lo, v, K_MIN_SCALE, o->min_scale));
    AMP_RETURN_ERROR_IF(why && field == AMP_FIELD_INIT_IN_BOUNDS, AMP_ERR_INVALID, err, errlen,
                        "%s %s with %s and %s: expected amp_min_scale <= amp_init_scale <= "
                        "amp_max_scale",
                        where, describe(&init, v, K_INIT_SCALE, o->init_scale),
                        describe(&lo, v, K_MIN_SCALE, o->min_scale),
                        describe(&hi, v, K_MAX_SCALE, o->max_scale));
    AMP_RETURN_ERROR_IF(why, AMP_ERR_INVALID, err, errlen, "%s: %s", where, why);
    return AMP_OK;
}

amp_status amp_options_parse_net(list *net_options, const char *cfgfile, amp_dtype default_dtype,
                                 int *enabled, amp_options *o, char *err, size_t errlen)
{
    return amp_options_parse_net_override(net_options, cfgfile, default_dtype, NULL, enabled, o,
                                          NULL, 0, err, errlen);
}

/* The cfg's values ov overrides, into conflict; then v as if the cfg had
 * said what ov says. */
static void apply_override(parsed *v, const amp_net_override *ov, char *conflict, size_t len)
{
    static kvp written = {"amp_dtype", NULL, 1};
    text a, b;
    a.s[0] = b.s[0] = '\0';
    if (v->kv[K_AMP] && v->integer[K_AMP] != ov->enabled) show(&a, v->kv[K_AMP]->val);
    if (ov->enabled && v->kv[K_DTYPE] && v->dtype != ov->dtype) show(&b, v->kv[K_DTYPE]->val);
    if (conflict && len)
        snprintf(conflict, len, "%s%s%s%s%s", a.s[0] ? "amp=" : "", a.s, a.s[0] && b.s[0] ? " " : "",
                 b.s[0] ? "amp_dtype=" : "", b.s);
    if (ov->enabled) {
        written.val = (char *)amp_dtype_name(ov->dtype);
        v->kv[K_DTYPE] = &written;
        v->dtype = ov->dtype;
    }
}

amp_status amp_options_parse_net_override(list *net_options, const char *cfgfile,
                                          amp_dtype default_dtype, const amp_net_override *ov,
                                          int *enabled, amp_options *o, char *conflict,
                                          size_t conflictlen, char *err, size_t errlen)
{
    char where[AMP_MSG_LEN];
    parsed v;
    amp_options result;
    amp_status st;
    const int override = ov && ov->set;
    if (err && errlen) err[0] = '\0';
    if (conflict && conflictlen) conflict[0] = '\0';
    snprintf(where, sizeof where, "%s: [net]%s%s%s", cfgfile ? cfgfile : "(cfg)",
             override ? " (with " : "", override && ov->as_written ? ov->as_written : "",
             override ? ")" : "");
    if (!enabled || !o)
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s: amp_options_parse_net: enabled and o must not be NULL",
                         where);
    *enabled = 0;
    if (default_dtype != AMP_DTYPE_FLOAT32 && default_dtype != AMP_DTYPE_FLOAT16 &&
        default_dtype != AMP_DTYPE_BFLOAT16) {
        amp_options_init(o, AMP_DTYPE_FLOAT32);
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s: amp_options_parse_net: default dtype %d is not an amp_dtype",
                         where, (int)default_dtype);
    }
    amp_options_init(o, default_dtype);
    st = read_net_keys(net_options, cfgfile, where, &v, err, errlen);
    if (st == AMP_OK && override) apply_override(&v, ov, conflict, conflictlen);
    if (st == AMP_OK) st = combine(&v, where, default_dtype, &result, err, errlen);
    if (st != AMP_OK) return st;
    *o = result;
    *enabled = override ? ov->enabled : v.kv[K_AMP] ? (int)v.integer[K_AMP] : 0;
    return AMP_OK;
}

amp_status amp_options_from_keys(kvp *pairs, int n, amp_dtype dtype, amp_options *o, char *err,
                                 size_t errlen)
{
    static const char where[] = "amp_config:";
    parsed v;
    memset(&v, 0, sizeof v);
    if (err && errlen) err[0] = '\0';
    for (int i = 0; i < n; ++i) {
        AMP_RETURN_ERROR_IF(find_key(pairs[i].key) == K_AMP, AMP_ERR_INVALID, err, errlen,
                            "%s amp=%s: amp is a cfg's on/off switch, not a setting", where,
                            pairs[i].val ? pairs[i].val : "");
        AMP_FORWARD_IF_ERROR(net_key(&pairs[i], &v, where, err, errlen));
        AMP_RETURN_ERROR_IF(!pairs[i].used, AMP_ERR_INVALID, err, errlen,
                            "%s %s: not an AMP key (docs/cfg.md)", where, pairs[i].key);
    }
    return combine(&v, where, dtype, o, err, errlen);
}

/* ---- Layer sections ---- */

typedef struct layer_keys {
    parsed v;
    const kvp *amp; /* the amp key, once seen */
} layer_keys;

/* One key of a layer section: amp is checked; another AMP key is an error. */
static amp_status layer_key(kvp *p, void *ctx, const char *where, char *err, size_t errlen)
{
    layer_keys *lk = ctx;
    text key, val, first;
    if (!p || !p->key) return AMP_OK;
    if (strcmp(p->key, "amp") != 0) {
        const char *guess;
        if (!looks_like_amp_key(p->key)) return AMP_OK;
        show(&key, p->key);
        show(&val, p->val);
        if (find_key(p->key) >= 0)
            AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                             "%s %s=%s: this key belongs in [net]; a layer section takes only "
                             "amp=0 (stay float32) or amp=1",
                             where, key.s, val.s);
        guess = suggest(p->key);
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s %s=%s: unknown AMP key%s%s%s; a layer section takes only amp=0 "
                         "(stay float32) or amp=1",
                         where, key.s, val.s, guess ? " (did you mean " : "",
                         guess ? guess : "", guess ? "?)" : "");
    }
    p->used = 1;
    if (!p->val || !*p->val) return check_value(K_AMP, p, &lk->v, where, err, errlen);
    if (lk->amp)
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s amp=%s: amp is given twice (first as amp=%s); keep one",
                         where, show(&val, p->val), show(&first, lk->amp->val));
    lk->amp = p;
    return check_value(K_AMP, p, &lk->v, where, err, errlen);
}

amp_status amp_options_parse_layer(list *layer_options, const char *cfgfile, int index,
                                   const char *type, int *half_allowed, char *err, size_t errlen)
{
    char where[AMP_MSG_LEN];
    layer_keys lk;
    node *n;
    text t;
    int bracketed = type && type[0] == '[';
    if (err && errlen) err[0] = '\0';
    snprintf(where, sizeof where, "%s: layer %d %s%s%s", cfgfile ? cfgfile : "(cfg)", index,
             bracketed ? "" : "[", type ? show(&t, type) : "?", bracketed ? "" : "]");
    if (!half_allowed)
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s: amp_options_parse_layer: half_allowed must not be NULL",
                         where);
    *half_allowed = 1;
    memset(&lk, 0, sizeof lk);
    for (n = layer_options ? layer_options->front : NULL; n; n = n->next)
        AMP_FORWARD_IF_ERROR(layer_key((kvp *)n->val, &lk, where, err, errlen));
    if (index >= 0 && index < INT_MAX)
        AMP_FORWARD_IF_ERROR(dropped_keys(cfgfile, index + 1, layer_key, &lk, where, err, errlen));
    if (lk.amp) *half_allowed = (int)lk.v.integer[K_AMP];
    return AMP_OK;
}

/* ---- The environment (docs/cfg.md, docs/testing.md) ---- */

void amp_env_read(amp_env *env)
{
    const char *prof = getenv("DARKNET_AMP_PROFILE");
    env->dist_check = getenv("DARKNET_AMP_DIST_CHECK");
    env->profile = prof && *prof && strcmp(prof, "0") != 0;
    env->inject = getenv("DARKNET_AMP_INJECT");
}

int amp_env_crash_in_save(void)
{
    const char *crash = getenv("DARKNET_AMP_TEST_CRASH_IN_SAVE");
    return crash && strcmp(crash, "1") == 0;
}
