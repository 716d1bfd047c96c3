/* The AMP cfg keys (docs/cfg.md): defaults, and the sections read into them
 * ([net], layers, a program's amp_config); the keys' table, their values and
 * messages are cfg_keys.c's.
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
#include "cfg_keys.h"
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

/* ---- [net] ---- */

/* One key of [net]: an AMP key is checked and stored in v (others are
 * darknet's: ignored). */
static amp_status net_key(kvp *p, void *ctx, const char *where, char *err, size_t errlen)
{
    parsed *v = ctx;
    int id;
    if (!p || !p->key) return AMP_OK;
    id = cfg_find_key(p->key);
    if (id < 0) {
        char known[AMP_MSG_LEN / 2];
        const char *guess;
        text key, val;
        if (!cfg_looks_like_amp_key(p->key)) return AMP_OK;
        guess = cfg_suggest(p->key);
        cfg_known_keys(known, sizeof known);
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s %s=%s: unknown AMP key%s%s%s; known keys: %s", where,
                         cfg_show(&key, p->key), cfg_show(&val, p->val),
                         guess ? " (did you mean " : "", guess ? guess : "",
                         guess ? "?)" : "", known);
    }
    p->used = 1;
    /* A missing value is that, whether or not the key came before. */
    if (!p->val || !*p->val) return cfg_check_value(id, p, v, where, err, errlen);
    if (v->kv[id]) {
        text now, first;
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s %s=%s: %s is given twice (first as %s=%s); keep one",
                         where, cfg_keys[id].name, cfg_show(&now, p->val), cfg_keys[id].name, cfg_keys[id].name,
                         cfg_show(&first, v->kv[id]->val));
    }
    v->kv[id] = p;
    return cfg_check_value(id, p, v, where, err, errlen);
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
    return cfg_dropped_keys(cfgfile, 0, net_key, v, where, err, errlen);
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
        if (cfg_keys[id].dynamic_only && v->kv[id]) dynamic_key = id;

    if (v->kv[K_LOSS_SCALE] && !v->loss_scale_dynamic) {
        text a, b;
        if (dynamic_key >= 0)
            AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                             "%s loss_scale=%s and %s=%s: a number for loss_scale sets a static "
                             "scale, and %s only applies to a dynamic one; expected either "
                             "loss_scale=dynamic or no %s",
                             where, cfg_show(&a, v->kv[K_LOSS_SCALE]->val), cfg_keys[dynamic_key].name,
                             cfg_show(&b, v->kv[dynamic_key]->val), cfg_keys[dynamic_key].name,
                             cfg_keys[dynamic_key].name);
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
                        cfg_describe(&hi, v, K_MAX_SCALE, o->max_scale),
                        cfg_describe(&lo, v, K_MIN_SCALE, o->min_scale));
    AMP_RETURN_ERROR_IF(why && field == AMP_FIELD_INIT_IN_BOUNDS, AMP_ERR_INVALID, err, errlen,
                        "%s %s with %s and %s: expected amp_min_scale <= amp_init_scale <= "
                        "amp_max_scale",
                        where, cfg_describe(&init, v, K_INIT_SCALE, o->init_scale),
                        cfg_describe(&lo, v, K_MIN_SCALE, o->min_scale),
                        cfg_describe(&hi, v, K_MAX_SCALE, o->max_scale));
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
    if (v->kv[K_AMP] && v->integer[K_AMP] != ov->enabled) cfg_show(&a, v->kv[K_AMP]->val);
    if (ov->enabled && v->kv[K_DTYPE] && v->dtype != ov->dtype) cfg_show(&b, v->kv[K_DTYPE]->val);
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
        AMP_RETURN_ERROR_IF(cfg_find_key(pairs[i].key) == K_AMP, AMP_ERR_INVALID, err, errlen,
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
        if (!cfg_looks_like_amp_key(p->key)) return AMP_OK;
        cfg_show(&key, p->key);
        cfg_show(&val, p->val);
        if (cfg_find_key(p->key) >= 0)
            AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                             "%s %s=%s: this key belongs in [net]; a layer section takes only "
                             "amp=0 (stay float32) or amp=1",
                             where, key.s, val.s);
        guess = cfg_suggest(p->key);
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s %s=%s: unknown AMP key%s%s%s; a layer section takes only amp=0 "
                         "(stay float32) or amp=1",
                         where, key.s, val.s, guess ? " (did you mean " : "",
                         guess ? guess : "", guess ? "?)" : "");
    }
    p->used = 1;
    if (!p->val || !*p->val) return cfg_check_value(K_AMP, p, &lk->v, where, err, errlen);
    if (lk->amp)
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s amp=%s: amp is given twice (first as amp=%s); keep one",
                         where, cfg_show(&val, p->val), cfg_show(&first, lk->amp->val));
    lk->amp = p;
    return cfg_check_value(K_AMP, p, &lk->v, where, err, errlen);
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
             bracketed ? "" : "[", type ? cfg_show(&t, type) : "?", bracketed ? "" : "]");
    if (!half_allowed)
        AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                         "%s: amp_options_parse_layer: half_allowed must not be NULL",
                         where);
    *half_allowed = 1;
    memset(&lk, 0, sizeof lk);
    for (n = layer_options ? layer_options->front : NULL; n; n = n->next)
        AMP_FORWARD_IF_ERROR(layer_key((kvp *)n->val, &lk, where, err, errlen));
    if (index >= 0 && index < INT_MAX)
        AMP_FORWARD_IF_ERROR(cfg_dropped_keys(cfgfile, index + 1, layer_key, &lk, where, err, errlen));
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
