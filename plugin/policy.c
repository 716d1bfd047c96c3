/* The autocast policy: which darknet layers run their GEMM/convolution in half
 * precision. One table, by layer type (docs/design.md, "Autocast policy"). */
#include "core.h"
#include "network.h" /* get_layer_string */

#include <stdio.h>
#include <string.h>

typedef struct {
    LAYER_TYPE type;
    amp_precision precision;
} policy_row;

/* Types not listed run unchanged in float32: losses (yolo, region, detection,
 * softmax, cost, logistic, iseg), l2norm, normalization, batchnorm,
 * activation, and the data-movement layers (maxpool, avgpool, route,
 * shortcut, upsample, reorg, crop, dropout). */
static const policy_row policy[] = {
    {CONVOLUTIONAL, AMP_PRECISION_HALF},
    {DECONVOLUTIONAL, AMP_PRECISION_HALF},
    {CONNECTED, AMP_PRECISION_HALF},
    {LOCAL, AMP_PRECISION_HALF},
    /* the GEMMs of their sub-layers (connected; convolutional in crnn) */
    {RNN, AMP_PRECISION_HALF},
    {GRU, AMP_PRECISION_HALF},
    {LSTM, AMP_PRECISION_HALF},
    {CRNN, AMP_PRECISION_HALF},
};

amp_precision amp_policy(const layer *l, amp_dtype dtype, int half_allowed)
{
    if (dtype == AMP_DTYPE_FLOAT32) return AMP_PRECISION_FP32;
    for (size_t i = 0; i < sizeof policy / sizeof policy[0]; ++i) {
        if (policy[i].type != l->type) continue;
        if (!half_allowed) return AMP_PRECISION_OFF;
        /* binary/xnor convolutions compute on signs: nothing to gain */
        if (l->binary || l->xnor) return AMP_PRECISION_FP32;
        return policy[i].precision;
    }
    return AMP_PRECISION_FP32;
}

static const char *precision_name(amp_precision p, amp_impl b, amp_dtype dtype, char *buf,
                                  size_t n)
{
    switch (p) {
    case AMP_PRECISION_HALF:
        snprintf(buf, n, "%s (%s)", amp_dtype_name(dtype),
                 b == AMP_IMPL_ONEDNN && dtype == AMP_DTYPE_FLOAT16
                     ? "oneDNN float32 kernels, float16 operands"
                 : b == AMP_IMPL_ONEDNN ? "oneDNN"
                 : b == AMP_IMPL_CUDNN  ? "cuDNN"
                 : b == AMP_IMPL_CUBLAS ? "cuBLAS"
                                        : "emulated");
        return buf;
    case AMP_PRECISION_OFF: return "float32 (amp=0)";
    case AMP_PRECISION_FALLBACK: return "float32 (no half path)";
    default: return "float32";
    }
}

/* What a layer runs in: its precision and, for half layers, what runs it. */
static int kind(const amp_layer *al)
{
    return (int)al->precision * AMP_IMPL_COUNT +
           (al->precision == AMP_PRECISION_HALF ? (int)al->impl : 0);
}

/* One line per precision and backend: the layer indices, runs collapsed
 * ("0-4,7"). */
void amp_policy_print(const amp_net *an, FILE *out)
{
    const network *net = an->net;
    const amp_dtype dtype = an->scaler->opt.dtype;
    for (int p = 0; p < AMP_PRECISION_COUNT * AMP_IMPL_COUNT; ++p) {
        char line[1024] = "", name[64];
        size_t len = 0;
        int count = 0;
        for (int i = 0; i < net->n; ++i) {
            if (kind(&an->layers[i]) != p) continue;
            int j = i;
            while (j + 1 < net->n && kind(&an->layers[j + 1]) == p) ++j;
            if (len < sizeof line - 32)
                len += snprintf(line + len, sizeof line - len, "%s%d%s%.0d", count ? "," : "", i,
                                j > i ? "-" : "", j > i ? j : 0);
            count += j - i + 1;
            i = j;
        }
        if (count)
            fprintf(out, "amp:   %-28s %3d layers: %s\n",
                    precision_name((amp_precision)(p / AMP_IMPL_COUNT),
                                   (amp_impl)(p % AMP_IMPL_COUNT), dtype, name, sizeof name),
                    count, line);
    }
}
