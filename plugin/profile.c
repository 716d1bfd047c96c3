/* DARKNET_AMP_PROFILE=1: where a half layer's time goes. Each half layer adds
 * the wall time of its forward and backward, the part of it spent in the
 * GEMM/convolution with its conversions, and the work done (2 flops per
 * multiply-add); amp_profile_print sums them at the end of training. */
#include "amp_internal.h"

#include <time.h>

double amp_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void amp_profile_print(const amp_net *an, FILE *out)
{
    amp_layer_profile sum = {0};
    for (int i = 0; i < an->net->n; ++i) {
        const amp_layer_profile *p = &an->layers[i].prof;
        if (!p->calls) continue;
        const layer *l = &an->net->layers[i];
        fprintf(out,
                "amp: profile: layer %3d %-5s %4d x%4d x%4d -> %4d: forward %8.3f s, backward "
                "%8.3f s, GEMM %8.3f s, %7.1f GFLOP/s\n",
                i, an->layers[i].backend == AMP_BACKEND_ONEDNN ? "dnnl" : "emul", l->w, l->h, l->c,
                l->out_c, p->fwd_s, p->bwd_s, p->gemm_s, p->gemm_s > 0 ? p->gflop / p->gemm_s : 0);
        sum.fwd_s += p->fwd_s;
        sum.bwd_s += p->bwd_s;
        sum.gemm_s += p->gemm_s;
        sum.gflop += p->gflop;
        sum.calls += p->calls;
    }
    if (!sum.calls) return;
    fprintf(out,
            "amp: profile: half layers: %lu calls, %.3f s, %.3f GFLOP, %.1f GFLOP/s "
            "(GEMM/convolution %.3f s at %.1f GFLOP/s; the rest is batch-norm, bias, activation)\n",
            sum.calls, sum.fwd_s + sum.bwd_s, sum.gflop,
            sum.fwd_s + sum.bwd_s > 0 ? sum.gflop / (sum.fwd_s + sum.bwd_s) : 0, sum.gemm_s,
            sum.gemm_s > 0 ? sum.gflop / sum.gemm_s : 0);
}
