/* The AMP cfg keys (cfg_keys.h): the table of keys and the values each
 * takes, read strictly (see options.c), the messages that name a key and
 * value as written with a guess at a misspelt key, and the keys darknet's
 * reader drops. */
#include "cfg_keys.h"
#include "options.h" /* amp_dtype_parse */

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

/* ---- The keys ---- */

const key_spec cfg_keys[K_COUNT] = {
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

/* ---- Messages ---- */

/* A key or value from the cfg as written, with anything unprintable escaped
 * and long text cut, so that the message stays one readable line. */
#define SHOW_MAX 72 /* characters of a key or value shown; then "..." */
const char *cfg_show(text *t, const char *s)
{
    return amp_show(t->s, sizeof t->s, s, SHOW_MAX);
}

/* "key=value" as written, or "key=<default> (default)" when absent. */
const char *cfg_describe(text *t, const parsed *v, int id, double value)
{
    text val;
    if (v->kv[id])
        snprintf(t->s, sizeof t->s, "%s=%s", cfg_keys[id].name, cfg_show(&val, v->kv[id]->val));
    else
        snprintf(t->s, sizeof t->s, "%s=%.9g (default)", cfg_keys[id].name, value);
    return t->s;
}

void cfg_known_keys(char *buf, size_t n)
{
    size_t used = 0;
    int i;
    buf[0] = '\0';
    for (i = 0; i < K_COUNT && used < n; ++i) {
        int w = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", cfg_keys[i].name);
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
const char *cfg_suggest(const char *key)
{
    const char *best = NULL, *prefix_of = NULL;
    int best_d = 3, prefixes = 0, i;
    size_t len = strlen(key);
    for (i = 0; i < K_COUNT; ++i) {
        char with_prefix[KEY_MAX + 8];
        int d = edit_distance(key, cfg_keys[i].name);
        if (strncmp(cfg_keys[i].name, "amp", 3) != 0) {
            snprintf(with_prefix, sizeof with_prefix, "amp_%s", cfg_keys[i].name);
            int d2 = edit_distance(key, with_prefix);
            if (d2 < d) d = d2;
        }
        if (d < best_d) {
            best_d = d;
            best = cfg_keys[i].name;
        }
        if (len >= 6 && strncasecmp(key, cfg_keys[i].name, len) == 0) {
            prefix_of = cfg_keys[i].name;
            ++prefixes;
        }
    }
    if (best) return best;
    return prefixes == 1 ? prefix_of : NULL;
}

int cfg_find_key(const char *key)
{
    int i;
    for (i = 0; i < K_COUNT; ++i)
        if (strcmp(key, cfg_keys[i].name) == 0) return i;
    return -1;
}

/* Keys the AMP parser owns: everything starting with "amp" in any case (no
 * darknet key does), and the known names in another case (LOSS_SCALE). */
int cfg_looks_like_amp_key(const char *key)
{
    int i;
    if (strncasecmp(key, "amp", 3) == 0) return 1;
    for (i = 0; i < K_COUNT; ++i)
        if (strcasecmp(key, cfg_keys[i].name) == 0) return 1;
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
    const key_spec *k = &cfg_keys[id];
    text key, val;
    double x;
    float f;
    cfg_show(&key, k->name);
    cfg_show(&val, s);
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
amp_status cfg_check_value(int id, const kvp *p, parsed *v, const char *where, char *err,
                              size_t errlen)
{
    const key_spec *k = &cfg_keys[id];
    const char *s = p->val;
    text key, val;
    cfg_show(&key, p->key);
    cfg_show(&val, s);
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

amp_status cfg_dropped_keys(const char *cfgfile, int section, key_fn check, void *ctx,
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
