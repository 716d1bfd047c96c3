/* amp_config (darknet_amp.h): the scaler's settings as a program sets them,
 * by the [net] keys' names. It keeps the keys as a cfg section would hold
 * them and resolves them with the cfg's own reader (options.c) at every set,
 * so a program gets a cfg's values, checks and messages, and a key added in a
 * later version changes no layout a program was built with. */
#include "options.h"

#include <stdlib.h>
#include <string.h>

#define CONFIG_KEYS 32 /* more than there are [net] keys */

struct amp_config {
    amp_dtype dtype;
    int n;
    kvp pairs[CONFIG_KEYS]; /* key and value owned here */
    amp_options resolved;
};

amp_status amp_config_create(amp_dtype dtype, amp_config **out, char *err, size_t errlen)
{
    AMP_RETURN_ERROR_IF(!out, AMP_ERR_INVALID, err, errlen, "amp_config_create: NULL out");
    *out = NULL;
    AMP_RETURN_ERROR_IF(dtype != AMP_DTYPE_FLOAT32 && dtype != AMP_DTYPE_FLOAT16 &&
                            dtype != AMP_DTYPE_BFLOAT16,
                        AMP_ERR_INVALID, err, errlen, "amp_config_create: %d is not an amp_dtype",
                        (int)dtype);
    amp_config *c = calloc(1, sizeof *c);
    AMP_RETURN_ERROR_IF(!c, AMP_ERR_NOMEM, err, errlen, "amp_config_create: out of memory");
    c->dtype = dtype;
    amp_options_init(&c->resolved, dtype);
    *out = c;
    return AMP_OK;
}

void amp_config_free(amp_config *c)
{
    if (!c) return;
    for (int i = 0; i < c->n; ++i) {
        free(c->pairs[i].key);
        free(c->pairs[i].val);
    }
    free(c);
}

amp_status amp_config_set(amp_config *c, const char *key, const char *value, char *err,
                          size_t errlen)
{
    AMP_RETURN_ERROR_IF(!c || !key || !value, AMP_ERR_INVALID, err, errlen,
                        "amp_config_set: NULL argument");
    int at = 0;
    while (at < c->n && strcmp(c->pairs[at].key, key) != 0) ++at;
    AMP_RETURN_ERROR_IF(at == CONFIG_KEYS, AMP_ERR_INVALID, err, errlen,
                        "amp_config_set: %s: more keys than AMP has", key);
    /* the keys as they would be with this one, resolved from the dtype's
     * defaults; kept only when the reader takes them */
    kvp pairs[CONFIG_KEYS];
    const int n = at == c->n ? c->n + 1 : c->n;
    for (int i = 0; i < n; ++i) {
        pairs[i] = i == at ? (kvp){(char *)key, (char *)value, 0} : c->pairs[i];
        pairs[i].used = 0;
    }
    amp_options o;
    AMP_FORWARD_IF_ERROR(amp_options_from_keys(pairs, n, c->dtype, &o, err, errlen));
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        AMP_RETURN_ERROR(AMP_ERR_NOMEM, err, errlen, "amp_config_set: out of memory");
    }
    if (at < c->n) {
        free(c->pairs[at].key);
        free(c->pairs[at].val);
    }
    c->pairs[at] = (kvp){k, v, 0};
    c->n = n;
    c->resolved = o;
    return AMP_OK;
}

const amp_options *amp_config_options(const amp_config *c)
{
    return &c->resolved;
}

amp_status amp_scaler_create(const amp_config *c, amp_scaler **out, char *err, size_t errlen)
{
    amp_options f32;
    amp_options_init(&f32, AMP_DTYPE_FLOAT32);
    return amp_scaler_create_options(c ? &c->resolved : &f32, out, err, errlen);
}
