/* DARKNET_AMP_PROFILE on the GPU (backend.h's prof_begin, prof_end,
 * prof_collect): each interval is a pair of CUDA events recorded in
 * darknet's stream, so it times the device's work, not the host's launches.
 * The events are made once and reused every batch; collect waits for the
 * last of them (the profile's one host synchronisation per batch: without
 * DARKNET_AMP_PROFILE none of this runs) and adds every interval into its
 * layer's record. The first batch's intervals are dropped: it allocates the
 * scratch and warms cuBLAS and cuDNN up.
 */
#include "half_gpu.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct amp_gpu_mark {
    amp_layer *al; /* NULL: the network's (loss scaling) */
    amp_prof_what what;
    cudaEvent_t start, end;
} amp_gpu_mark;

struct amp_gpu_prof {
    amp_gpu_mark *marks;
    int n, cap;       /* marks used this batch, made */
    unsigned long batches;
    int failed;       /* said once */
};

amp_gpu_prof *amp_gpu_prof_new(void)
{
    return calloc(1, sizeof(amp_gpu_prof));
}

void amp_gpu_prof_free(amp_gpu_prof *p)
{
    if (!p) return;
    for (int i = 0; i < p->cap; ++i) {
        cudaEventDestroy(p->marks[i].start);
        cudaEventDestroy(p->marks[i].end);
    }
    free(p->marks);
    free(p);
}

static void say(amp_gpu_prof *p, const char *what, cudaError_t e)
{
    if (!p->failed)
        fprintf(stderr, "amp: profile: GPU timing stopped: %s: %s\n", what,
                cudaGetErrorString(e));
    p->failed = 1;
}

int amp_gpu_prof_begin(amp_gpu_prof *p, amp_layer *al, amp_prof_what what)
{
    if (!p || p->failed) return -1;
    if (p->n == p->cap) {
        const int cap = p->cap ? 2 * p->cap : 512;
        amp_gpu_mark *m = realloc(p->marks, (size_t)cap * sizeof *m);
        if (!m) return -1;
        p->marks = m;
        for (; p->cap < cap; ++p->cap) {
            cudaError_t e = cudaEventCreate(&m[p->cap].start);
            if (e == cudaSuccess) e = cudaEventCreate(&m[p->cap].end);
            if (e != cudaSuccess) {
                say(p, "cudaEventCreate", e);
                return -1;
            }
        }
    }
    amp_gpu_mark *m = &p->marks[p->n];
    m->al = al;
    m->what = what;
    cudaError_t e = cudaEventRecord(m->start, 0);
    if (e != cudaSuccess) {
        say(p, "cudaEventRecord", e);
        return -1;
    }
    return p->n++;
}

void amp_gpu_prof_end(amp_gpu_prof *p, int handle)
{
    if (!p || p->failed || handle < 0 || handle >= p->n) return;
    cudaError_t e = cudaEventRecord(p->marks[handle].end, 0);
    if (e != cudaSuccess) say(p, "cudaEventRecord", e);
}

void amp_gpu_prof_collect(amp_gpu_prof *p, amp_net *an)
{
    if (!p || !p->n) return;
    const int n = p->n;
    p->n = 0;
    if (p->failed) return;
    cudaError_t e = cudaEventSynchronize(p->marks[n - 1].end);
    if (e != cudaSuccess) {
        say(p, "cudaEventSynchronize", e);
        return;
    }
    if (p->batches++ == 0) return; /* the first batch: allocation and warm-up */
    for (int i = 0; i < n; ++i) {
        float ms = 0;
        e = cudaEventElapsedTime(&ms, p->marks[i].start, p->marks[i].end);
        if (e != cudaSuccess) {
            say(p, "cudaEventElapsedTime", e);
            return;
        }
        amp_prof_add(an, p->marks[i].al, p->marks[i].what, 1e-3 * ms);
    }
    an->prof_steps++;
}
