/* The AMP cfg keys as options.c and config.c read them (cfg_keys.c): the
 * table of keys, the values each takes, the messages naming them as written,
 * and the keys darknet's reader drops. Private to those files. */
#ifndef AMP_CFG_KEYS_H
#define AMP_CFG_KEYS_H

#include "core.h"
#include "option_list.h" /* kvp */

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

extern const key_spec cfg_keys[K_COUNT];

/* What was read from one section, before defaults are applied. */
typedef struct parsed {
    const kvp *kv[K_COUNT]; /* NULL: absent */
    double num[K_COUNT];
    long integer[K_COUNT];
    amp_dtype dtype;
    int loss_scale_dynamic;
} parsed;

/* A key or value as written, for a message: unprintable bytes escaped,
 * long text cut (SHOW_MAX characters, then "..."). */
typedef struct text {
    char s[128];
} text;
const char *cfg_show(text *t, const char *s);
/* "key=value" as written, or "key=<default> (default)" when absent. */
const char *cfg_describe(text *t, const parsed *v, int id, double value);
/* Every key's name, comma-separated, into buf. */
void cfg_known_keys(char *buf, size_t n);
/* The known key an unknown one was probably meant to be, or NULL. */
const char *cfg_suggest(const char *key);
/* A key's id (K_*), or -1. */
int cfg_find_key(const char *key);
/* Whether a key is the AMP reader's to judge (amp*, or a known name in another case). */
int cfg_looks_like_amp_key(const char *key);
/* One value checked against its key's rule and stored in v; where: the
 * message's "<cfgfile>: [net]". */
amp_status cfg_check_value(int id, const kvp *p, parsed *v, const char *where, char *err,
                           size_t errlen);
/* The lines of one section (0: [net], i + 1: layer i) that darknet's reader
 * dropped for an empty value, each through check (see cfg_keys.c). */
typedef amp_status (*key_fn)(kvp *p, void *ctx, const char *where, char *err, size_t errlen);
amp_status cfg_dropped_keys(const char *cfgfile, int section, key_fn check, void *ctx,
                            const char *where, char *err, size_t errlen);

#endif
