/* The autocast policy: which darknet layers run their GEMM/convolution in half
 * precision: the GEMM and recurrent kinds of the table of layer kinds
 * (kinds.c; docs/design.md, "Autocast policy"). */
#include "core.h"
#include "network.h" /* get_layer_string */

#include <stdio.h>
#include <string.h>

amp_precision amp_policy(const layer *l, amp_dtype dtype, int half_allowed)
{
    if (dtype == AMP_DTYPE_FLOAT32) return AMP_PRECISION_FP32;
    const amp_layer_kind *k = amp_kind_of(l->type);
    if (!k || (k->role != AMP_ROLE_GEMM && k->role != AMP_ROLE_RECURRENT))
        return AMP_PRECISION_FP32;
    if (!half_allowed) return AMP_PRECISION_OFF;
    /* binary/xnor convolutions compute on signs: nothing to gain */
    if (l->binary || l->xnor) return AMP_PRECISION_FP32;
    return AMP_PRECISION_HALF;
}

/* What a layer runs in, as the start-up table names it: the precision and,
 * for a half layer, what its backend says runs it. */
static const char *kind_name(const amp_layer *al, amp_dtype dtype, char *buf, size_t n)
{
    /* a half layer put back to float32, or a half form out of the region */
    if (al->fell_back) {
        snprintf(buf, n, "float32 (fell back%s: %s)",
                 al->fell_back_earlier ? " in an earlier run" : "",
                 al->fell_back == AMP_FELL_FORWARD    ? "forward overflow"
                 : al->fell_back == AMP_FELL_GRADIENT ? "gradient overflow"
                                                      : "amp_probe");
        return buf;
    }
    switch (al->precision) {
    case AMP_PRECISION_HALF:
        snprintf(buf, n, "%s (%s)", amp_dtype_name(dtype), al->label ? al->label : "unnamed");
        return buf;
    case AMP_PRECISION_OFF: return "float32 (amp=0)";
    case AMP_PRECISION_FALLBACK: return "float32 (no half path)";
    default: return "float32";
    }
}

/* The table's group of a layer: its precision, or "fell back" for a half
 * form out of the region too. */
static int group_of(const amp_layer *al)
{
    return al->fell_back ? AMP_PRECISION_FELL_BACK : (int)al->precision;
}

/* Whether layer k is in group p, named name. */
static int is_kind(const amp_net *an, int k, int p, const char *name)
{
    char buf[96];
    const amp_layer *al = &an->layers[k];
    return group_of(al) == p &&
           !strcmp(kind_name(al, an->scaler->opt.dtype, buf, sizeof buf), name);
}

/* One line per precision and backend label, half first, labels in the order
 * of their first layer: the layer indices, runs collapsed ("0-4,7"). */
void amp_policy_print(const amp_net *an, FILE *out)
{
    const int n = an->net->n;
    int width = 28; /* the names' column: the longest name's width */
    for (int i = 0; i < n; ++i) {
        char buf[96];
        const int len =
            (int)strlen(kind_name(&an->layers[i], an->scaler->opt.dtype, buf, sizeof buf));
        if (len > width) width = len;
    }
    for (int p = 0; p < AMP_PRECISION_COUNT; ++p)
        for (int first = 0; first < n; ++first) {
            char buf[96];
            if (group_of(&an->layers[first]) != p) continue;
            const char *name =
                kind_name(&an->layers[first], an->scaler->opt.dtype, buf, sizeof buf);
            int seen = 0; /* on an earlier layer's line */
            for (int i = 0; i < first && !seen; ++i) seen = is_kind(an, i, p, name);
            if (seen) continue;
            char line[1024] = "";
            size_t len = 0;
            int count = 0;
            for (int i = first; i < n; ++i) {
                if (!is_kind(an, i, p, name)) continue;
                int j = i;
                while (j + 1 < n && is_kind(an, j + 1, p, name)) ++j;
                if (len < sizeof line - 32)
                    len += snprintf(line + len, sizeof line - len, "%s%d%s%.0d", count ? "," : "",
                                    i, j > i ? "-" : "", j > i ? j : 0);
                count += j - i + 1;
                i = j;
            }
            fprintf(out, "amp:   %-*s %3d layers: %s\n", width, name, count, line);
        }
}
