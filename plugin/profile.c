/* DARKNET_AMP_PROFILE=1: where a half layer's time goes. Each half layer adds
 * the wall time of its forward and backward, the part of it spent in the
 * GEMM/convolution with its conversions, and the work done (2 flops per
 * multiply-add); amp_profile_print sums them at the end of training.
 *
 * On a backend whose work runs asynchronously (the GPU: backend.h's
 * prof_begin), every interval is timed on the device's clock instead (CUDA
 * events): each layer's forward, backward and update, and inside a half
 * layer its conversions and its library kernels; the backend collects them
 * once per batch, and the print is a per-layer table in milliseconds per
 * step. Without the profile nothing of this runs. */
#include "backend.h"
#include "network.h" /* get_layer_string */

#include <time.h>

void amp_prof_add(amp_net *an, amp_layer *al, amp_prof_what what, double seconds)
{
    if (!al) {
        an->prof_scaling_s += seconds;
        return;
    }
    amp_layer_profile *p = &al->prof;
    switch (what) {
    case AMP_PROF_FORWARD: p->all_fwd_s += seconds; break;
    case AMP_PROF_BACKWARD: p->all_bwd_s += seconds; break;
    case AMP_PROF_UPDATE: p->all_upd_s += seconds; break;
    case AMP_PROF_CONVERT: p->convert_s += seconds; break;
    case AMP_PROF_KERNEL: p->kernel_s += seconds; break;
    case AMP_PROF_SCALING: an->prof_scaling_s += seconds; break;
    }
}

amp_prof_mark amp_prof_start(amp_net *an, amp_layer *al, amp_prof_what what)
{
    amp_prof_mark m = {0, -1};
    if (an->ops->prof_begin) m.handle = an->ops->prof_begin(an, al, what);
    else m.t0 = amp_clock();
    return m;
}

void amp_prof_stop(amp_net *an, amp_layer *al, amp_prof_what what, amp_prof_mark m)
{
    if (an->ops->prof_begin) {
        if (m.handle >= 0) an->ops->prof_end(an, m.handle);
    } else {
        amp_prof_add(an, al, what, amp_clock() - m.t0);
    }
}

static void timed_forward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    amp_net *an = al->owner;
    /* a device's intervals of the last batch, before this one's begin */
    if (al->index == 0 && an->ops->prof_collect) an->ops->prof_collect(an);
    const amp_prof_mark m = amp_prof_start(an, al, AMP_PROF_FORWARD);
    al->prof.next_forward(l, net);
    amp_prof_stop(an, al, AMP_PROF_FORWARD, m);
}

static void timed_backward(layer l, network net)
{
    amp_layer *al = l.hook_data;
    const amp_prof_mark m = amp_prof_start(al->owner, al, AMP_PROF_BACKWARD);
    al->prof.next_backward(l, net);
    amp_prof_stop(al->owner, al, AMP_PROF_BACKWARD, m);
}

static void timed_update(layer l, update_args a)
{
    amp_layer *al = l.hook_data;
    const amp_prof_mark m = amp_prof_start(al->owner, al, AMP_PROF_UPDATE);
    al->prof.next_update(l, a);
    amp_prof_stop(al->owner, al, AMP_PROF_UPDATE, m);
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

/* The process's resident memory now and at its peak, and of it now what is
 * mapped from files (code, libraries) and what is anonymous (data), in MiB
 * (Linux's /proc/self/status); -1 where unknown. */
static void resident(double *now, double *peak, double *file, double *anon)
{
    *now = *peak = *file = *anon = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        double kb;
        if (sscanf(line, "VmRSS: %lf", &kb) == 1) *now = kb / 1024;
        if (sscanf(line, "VmHWM: %lf", &kb) == 1) *peak = kb / 1024;
        if (sscanf(line, "RssFile: %lf", &kb) == 1) *file = kb / 1024;
        if (sscanf(line, "RssAnon: %lf", &kb) == 1) *anon = kb / 1024;
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
    double now, peak, file, anon;
    resident(&now, &peak, &file, &anon);
    if (now < 0) return;
    fprintf(out, "amp: profile: memory: the process holds %.1f MiB (at most %.1f so far)", now,
            peak);
    /* on a host backend the figures above are in it: the rest of its data */
    const double counted = (params + copies + planned + darknet_ws + backend_ws) / mib;
    if (!an->ops->prof_collect && file >= 0 && anon >= 0)
        fprintf(out, ": %.1f MiB code and libraries, %.1f MiB data, of which the above %.1f and "
                     "%.1f else (the data loader's images, the kernels' caches, the threads' "
                     "stacks, what the allocator keeps)",
                file, anon, counted, anon - counted);
    fprintf(out, "\n");
}

/* A device backend's table: every layer's forward, backward and update, a
 * half layer's conversions and library kernels, in ms per step; the label
 * says what runs the layer (the algorithms of each pass, the workspace). */
static void print_device(const amp_net *an, FILE *out)
{
    const double steps = an->prof_steps ? (double)an->prof_steps : 1, ms = 1e3 / steps;
    amp_layer_profile sum = {0};
    fprintf(out, "amp: profile: GPU time per layer, ms per step over %lu steps after the first "
                 "(device clock; convert: AMP's conversions to and from half; kernel: cuDNN or "
                 "cuBLAS):\n",
            an->prof_steps);
    for (int i = 0; i < an->net->n; ++i) {
        const amp_layer *al = &an->layers[i];
        const amp_layer_profile *p = &al->prof;
        const layer *l = &an->net->layers[i];
        const char *type = l->type == CONVOLUTIONAL ? "conv"
                           : l->type == UPSAMPLE   ? "upsample"
                                                   : get_layer_string(l->type);
        fprintf(out,
                "amp: profile: gpu layer %3d %-8s fwd %8.3f bwd %8.3f upd %8.3f convert %8.3f "
                "kernel %8.3f ms/step  %s\n",
                i, type, p->all_fwd_s * ms, p->all_bwd_s * ms, p->all_upd_s * ms,
                p->convert_s * ms, p->kernel_s * ms,
                al->detail  ? al->detail
                : al->label ? al->label
                            : "darknet's float32");
        sum.all_fwd_s += p->all_fwd_s, sum.all_bwd_s += p->all_bwd_s;
        sum.all_upd_s += p->all_upd_s, sum.convert_s += p->convert_s;
        sum.kernel_s += p->kernel_s;
    }
    fprintf(out,
            "amp: profile: gpu total fwd %8.3f bwd %8.3f upd %8.3f convert %8.3f kernel %8.3f "
            "scaling %8.3f ms/step over %lu steps\n",
            sum.all_fwd_s * ms, sum.all_bwd_s * ms, sum.all_upd_s * ms, sum.convert_s * ms,
            sum.kernel_s * ms, an->prof_scaling_s * ms, an->prof_steps);
}

void amp_profile_print(amp_net *an, FILE *out)
{
    if (an->ops->prof_collect) {
        an->ops->prof_collect(an);
        print_device(an, out);
    }
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
