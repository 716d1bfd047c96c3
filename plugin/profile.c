/* DARKNET_AMP_PROFILE=1: where a half layer's time goes. Each half layer adds
 * the wall time of its forward and backward, the part of it spent in the
 * GEMM/convolution with its conversions, and the work done (2 flops per
 * multiply-add); amp_profile_print sums them at the end of training. */
#include "backend.h"
#include "network.h" /* get_layer_string */

#include <time.h>

double amp_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void timed_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    double t = amp_clock();
    al->prof.next_forward(l, net);
    al->prof.all_fwd_s += amp_clock() - t;
}

static void timed_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    double t = amp_clock();
    al->prof.next_backward(l, net);
    al->prof.all_bwd_s += amp_clock() - t;
}

static void timed_update(layer l, update_args a)
{
    amp_layer *al = l.hook_data;
    double t = amp_clock();
    al->prof.next_update(l, a);
    al->prof.all_upd_s += amp_clock() - t;
}

void amp_profile_install(amp_net *an)
{
    for (int i = 0; i < an->net->n; ++i) {
        layer *l = &an->net->layers[i];
        amp_layer *al = &an->layers[i];
        const amp_slots sl = an->ops->slots(l);
        al->prof.next_forward = *sl.forward;
        al->prof.next_backward = *sl.backward;
        al->prof.next_update = *sl.update;
        if (*sl.forward) *sl.forward = timed_forward;
        if (*sl.backward) *sl.backward = timed_backward;
        if (*sl.update) *sl.update = timed_update;
        l->hook_data = al;
        al->wrapped = 1; /* detach puts darknet's pointers back */
    }
    an->prof_installed = 1;
}

/* Time per layer type, every layer: where a training step goes. */
static void print_by_type(const amp_net *an, FILE *out)
{
    double total = an->prof_scaling_s;
    for (int i = 0; i < an->net->n; ++i) {
        const amp_layer_profile *p = &an->layers[i].prof;
        total += p->all_fwd_s + p->all_bwd_s + p->all_upd_s;
    }
    if (total <= 0) return;
    fprintf(out, "amp: profile: time in layers, %.3f s in all:\n", total);
    for (int t = 0; t <= BLANK; ++t) {
        double f = 0, b = 0, u = 0;
        int n = 0;
        for (int i = 0; i < an->net->n; ++i) {
            if ((int)an->net->layers[i].type != t) continue;
            const amp_layer_profile *p = &an->layers[i].prof;
            f += p->all_fwd_s, b += p->all_bwd_s, u += p->all_upd_s, ++n;
        }
        if (!n || f + b + u <= 0) continue;
        /* darknet's get_layer_string predates upsample */
        const char *name = t == UPSAMPLE ? "upsample" : get_layer_string((LAYER_TYPE)t);
        fprintf(out, "amp: profile:   %-15s %3d layers: forward %8.3f s, backward %8.3f s, "
                     "update %8.3f s (%4.1f%%)\n",
                name, n, f, b, u, 100 * (f + b + u) / total);
    }
    fprintf(out, "amp: profile:   %-15s            save, scale, unscale and check the gradients "
                 "%8.3f s (%4.1f%%)\n",
            "loss scaling", an->prof_scaling_s, 100 * an->prof_scaling_s / total);
}

/* A half layer's own times and work, with its sub-layers' for a recurrent
 * layer (each sub-layer keeps its own record). */
static amp_layer_profile half_profile(const amp_layer *al)
{
    amp_layer_profile sum = al->prof;
    for (int k = 0; k < al->nsubs; ++k) {
        const amp_layer_profile *p = &al->subs[k].prof;
        sum.fwd_s += p->fwd_s;
        sum.bwd_s += p->bwd_s;
        sum.gemm_s += p->gemm_s;
        sum.gflop += p->gflop;
        sum.calls += p->calls;
    }
    return sum;
}

/* The process's resident memory now and at its peak, in MiB (Linux's
 * /proc/self/status); -1 where unknown. */
static void resident(double *now, double *peak)
{
    *now = *peak = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        double kb;
        if (sscanf(line, "VmRSS: %lf", &kb) == 1) *now = kb / 1024;
        if (sscanf(line, "VmHWM: %lf", &kb) == 1) *peak = kb / 1024;
    }
    fclose(f);
}

/* Where the memory is: darknet's parameters with their gradients, the
 * backend's copies of them, the activations (the plan's, and what float32
 * would hold), the workspaces (darknet's im2col buffer, the backend's). */
static void print_memory(const amp_net *an, FILE *out)
{
    const double mib = 1048576.0;
    double params = 2.0 * sizeof(float) * (double)an->nparams, copies = 0, backend_ws = 0;
    double fp32, planned, darknet_ws = 0;
    for (int i = 0; i < an->net->n; ++i)
        if ((double)an->net->layers[i].workspace_size > darknet_ws)
            darknet_ws = (double)an->net->layers[i].workspace_size;
    amp_plan_bytes(an, &fp32, &planned);
    if (an->ops->memory) an->ops->memory(an, &copies, &backend_ws);
    fprintf(out, "amp: profile: memory: parameters and gradients %.1f MiB, AMP's copies of them "
                 "%.1f MiB, activations %.1f MiB (%.1f MiB in float32), workspaces %.1f MiB "
                 "(darknet's %.1f, the %s backend's %.1f)\n",
            params / mib, copies / mib, planned / mib, fp32 / mib, (darknet_ws + backend_ws) / mib,
            darknet_ws / mib, an->ops->name, backend_ws / mib);
    double now, peak;
    resident(&now, &peak);
    if (now >= 0)
        fprintf(out, "amp: profile: memory: the process holds %.1f MiB (at most %.1f so far)\n",
                now, peak);
}

void amp_profile_print(const amp_net *an, FILE *out)
{
    print_by_type(an, out);
    print_memory(an, out);
    amp_layer_profile sum = {0};
    for (int i = 0; i < an->net->n; ++i) {
        const amp_layer_profile own = half_profile(&an->layers[i]), *p = &own;
        if (!p->calls) continue;
        const layer *l = &an->net->layers[i];
        fprintf(out,
                "amp: profile: layer %3d %4d x%4d x%4d -> %4d: forward %8.3f s, backward "
                "%8.3f s, GEMM %8.3f s, %7.1f GFLOP/s, %s\n",
                i, l->w, l->h, l->c, l->out_c, p->fwd_s, p->bwd_s, p->gemm_s,
                p->gemm_s > 0 ? p->gflop / p->gemm_s : 0,
                an->layers[i].label ? an->layers[i].label : "unnamed");
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
