/* Multi-tensor tables: the spans a fused kernel visits, cut into chunks of
 * AMP_MT_CHUNK elements (one block each), uploaded once at attach. */
#include "amp_cuda.h"
#include "cuda_check.h"

#include <stdlib.h>
#include <string.h>

amp_status amp_mt_table_create(amp_mt_table *t, const amp_span *spans, unsigned int nspans,
                               char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    size_t nchunks = 0;
    for (unsigned int i = 0; i < nspans; ++i) nchunks += (spans[i].n + AMP_MT_CHUNK - 1) / AMP_MT_CHUNK;
    if (!nspans || !nchunks) return AMP_OK;
    if (nchunks > 0x7fffffffu) {
        snprintf(err, errlen, "amp: %zu chunks exceed one launch's grid", nchunks);
        return AMP_ERR_DEVICE;
    }
    amp_chunk *chunks = malloc(nchunks * sizeof *chunks);
    if (!chunks) {
        snprintf(err, errlen, "amp: out of host memory for a tensor table");
        return AMP_ERR_NOMEM;
    }
    size_t k = 0;
    for (unsigned int i = 0; i < nspans; ++i)
        for (size_t start = 0; start < spans[i].n; start += AMP_MT_CHUNK) {
            chunks[k].span = i;
            chunks[k].start = (unsigned int)start;
            ++k;
        }
    amp_status st = AMP_CUDA_CHECK(cudaMalloc((void **)&t->spans, nspans * sizeof *t->spans),
                                   err, errlen);
    if (st == AMP_OK)
        st = AMP_CUDA_CHECK(cudaMalloc((void **)&t->chunks, nchunks * sizeof *t->chunks), err,
                            errlen);
    if (st == AMP_OK)
        st = AMP_CUDA_CHECK(
            cudaMemcpy(t->spans, spans, nspans * sizeof *spans, cudaMemcpyHostToDevice), err,
            errlen);
    if (st == AMP_OK)
        st = AMP_CUDA_CHECK(
            cudaMemcpy(t->chunks, chunks, nchunks * sizeof *chunks, cudaMemcpyHostToDevice), err,
            errlen);
    free(chunks);
    if (st != AMP_OK) {
        amp_mt_table_free(t);
        return st;
    }
    t->nspans = nspans;
    t->nchunks = (unsigned int)nchunks;
    return AMP_OK;
}

void amp_mt_table_free(amp_mt_table *t)
{
    if (!t) return;
    cudaFree(t->spans);
    cudaFree(t->chunks);
    memset(t, 0, sizeof *t);
}
