/* The CUDA backend's tables of device arrays, built at attach (backend.c's
 * net_init): every parameter gradient beside its batch-start copy, the
 * parameters and Adam moments beside the copy a skipped step restores, the
 * forward states beside theirs, and a data-parallel launch's batch-norm
 * statistics packed for one NCCL sum; each a multi-tensor table one kernel
 * walks (mt_table.c). */
#include "half_gpu.h"
#include "cuda_check.h"

#include <stdlib.h>

float *amp_cuda_state_array(const amp_fwd_state *f)
{
    const layer *l = f->src;
    switch (f->kind) {
    case AMP_STATE_ROLLING_MEAN: return l->rolling_mean_gpu;
    case AMP_STATE_ROLLING_VARIANCE: return l->rolling_variance_gpu;
    case AMP_STATE_HIDDEN: return l->type == LSTM ? l->h_gpu : l->state_gpu;
    case AMP_STATE_CELL: return l->c_gpu;
    }
    return NULL;
}

/* The device arrays behind one of the core's tensors: its layer's, by kind. */
static void device_arrays(const amp_tensor *t, float **grad, float **param, float **m, float **v)
{
    const layer *l = t->src;
    switch (t->kind) {
    case AMP_TENSOR_WEIGHTS:
        *grad = l->weight_updates_gpu, *param = l->weights_gpu, *m = l->m_gpu, *v = l->v_gpu;
        break;
    case AMP_TENSOR_BIASES:
        *grad = l->bias_updates_gpu, *param = l->biases_gpu, *m = l->bias_m_gpu,
        *v = l->bias_v_gpu;
        break;
    case AMP_TENSOR_SCALES:
        *grad = l->scale_updates_gpu, *param = l->scales_gpu, *m = l->scale_m_gpu,
        *v = l->scale_v_gpu;
        break;
    }
}

/* The forward states' table: each device array and its batch-start copy. */
static amp_status build_state_table(amp_net *an, char *err, size_t errlen)
{
    amp_gpu_net *g = gpu_of(an);
    if (!an->nstates) return AMP_OK;
    amp_span *spans = calloc((size_t)an->nstates, sizeof *spans);
    AMP_RETURN_ERROR_IF(!spans, AMP_ERR_NOMEM, err, errlen, "amp: out of memory attaching to %s",
                        an->cfgfile);
    amp_status st =
        AMP_CUDA_CHECK(cudaMalloc((void **)&g->states_saved, an->nstate_elems * sizeof(float)),
                       err, errlen);
    for (int k = 0; st == AMP_OK && k < an->nstates; ++k) {
        const amp_fwd_state *f = &an->states[k];
        float *x = amp_cuda_state_array(f);
        if (!x) {
            st = AMP_ERR_DEVICE;
            amp_errorf(err, errlen, "amp: layer %d has no device array for its %s", f->layer,
                       f->name);
            break;
        }
        spans[k] = (amp_span){x, g->states_saved + f->offset, f->n};
    }
    if (st == AMP_OK)
        st = amp_mt_table_create(&g->states, spans, (unsigned int)an->nstates, err, errlen);
    /* data-parallel: the statistics side by side in one packed buffer */
    for (int k = 0; an->comm && k < an->nstates; ++k)
        if (amp_state_is_statistic(&an->states[k])) g->npacked += an->states[k].n;
    if (st == AMP_OK && g->npacked)
        st = AMP_CUDA_CHECK(cudaMalloc((void **)&g->packed, g->npacked * sizeof(float)), err,
                            errlen);
    if (st == AMP_OK && g->npacked) {
        unsigned int ns = 0;
        size_t at = 0;
        for (int k = 0; k < an->nstates; ++k) /* spans[k] done with: ns <= k */
            if (amp_state_is_statistic(&an->states[k])) {
                spans[ns++] = (amp_span){spans[k].x, g->packed + at, an->states[k].n};
                at += an->states[k].n;
            }
        st = amp_mt_table_create(&g->stats, spans, ns, err, errlen);
    }
    free(spans);
    return st;
}

amp_status amp_cuda_build_tables(amp_net *an, char *err, size_t errlen)
{
    amp_gpu_net *g = gpu_of(an);
    size_t n = an->nparams ? an->nparams : 1;
    int adam = an->net->adam;
    amp_span *hist = calloc(an->ntensors ? an->ntensors : 1, sizeof *hist);
    amp_span *par = calloc(an->ntensors ? 3 * an->ntensors : 1, sizeof *par);
    g->grads = calloc(an->ntensors ? an->ntensors : 1, sizeof *g->grads);
    amp_status st = AMP_OK;
    if (!hist || !par || !g->grads) {
        st = AMP_ERR_NOMEM;
        amp_errorf(err, errlen, "amp: out of memory attaching to %s", an->cfgfile);
    }
    if (st == AMP_OK)
        st = AMP_CUDA_CHECK(cudaMalloc((void **)&g->saved, n * sizeof(float)), err, errlen);
    if (st == AMP_OK)
        st = AMP_CUDA_CHECK(
            cudaMalloc((void **)&g->param_saved, (adam ? 3 : 1) * n * sizeof(float)), err, errlen);
    unsigned int np = 0;
    for (int k = 0; st == AMP_OK && k < an->ntensors; ++k) {
        const amp_tensor *t = &an->tensors[k];
        float *grad = NULL, *param = NULL, *m = NULL, *v = NULL;
        device_arrays(t, &grad, &param, &m, &v);
        if (!grad || !param) {
            st = AMP_ERR_DEVICE;
            amp_errorf(err, errlen, "amp: layer %d has no device array for its %s gradient",
                       t->layer, t->name);
            break;
        }
        g->grads[k] = grad;
        hist[k] = (amp_span){grad, g->saved + t->offset, t->n};
        par[np++] = (amp_span){param, g->param_saved + t->offset, t->n};
        if (adam && m && v) {
            par[np++] = (amp_span){m, g->param_saved + n + t->offset, t->n};
            par[np++] = (amp_span){v, g->param_saved + 2 * n + t->offset, t->n};
        }
    }
    if (st == AMP_OK)
        st = amp_mt_table_create(&g->hist, hist, (unsigned int)an->ntensors, err, errlen);
    if (st == AMP_OK) st = amp_mt_table_create(&g->params, par, np, err, errlen);
    free(hist);
    free(par);
    return st == AMP_OK ? build_state_table(an, err, errlen) : st;
}
