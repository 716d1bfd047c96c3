/* conv_layouts CFG BATCH: which tensor layout and algorithms cuDNN's fastest
 * convolutions want, for every convolution of a darknet network, measured.
 *
 * The network is read with darknet's own parser on the CPU (gpu_index -1, the
 * cfg's batch; scripts/gpu-check hands it a batch-1 copy), only for its
 * convolutions' shapes; identical shapes are measured once and counted.
 * Each shape is run at BATCH images in four configurations:
 *
 *   f32-nchw   float32 NCHW, FMA math (TF32 off): darknet's FP32 layers
 *   f16-nchw   float16 NCHW, float32 accumulation: AMP's half layers today
 *   f16-nhwc   float16 NHWC, float32 accumulation
 *   bf16-nhwc  bfloat16 NHWC, float32 accumulation
 *
 * and for each pass (forward, backward-data, backward-filter) cudnnFind*
 * times every algorithm; the table shows the fastest, and for the two
 * float16 layouts also the algorithm the heuristics (cudnnGet*_v7, what the
 * backend takes today) put first and its time in the same search. The totals
 * weigh each shape by its count: the convolution time of one step if every
 * convolution ran the fastest algorithm of that configuration. */
#include "darknet.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                    \
    do {                                                                                         \
        cudnnStatus_t s_ = (x);                                                                  \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                        \
            fprintf(stderr, "conv_layouts: %s: %s (line %d)\n", #x, cudnnGetErrorString(s_),    \
                    __LINE__);                                                                   \
            return -1;                                                                           \
        }                                                                                        \
    } while (0)

typedef struct {
    int c, h, w, n, size, stride, pad, groups, count, first;
} shape;

typedef struct {
    const char *name;
    cudnnDataType_t type;
    cudnnTensorFormat_t format;
    cudnnMathType_t math;
} config;

static const config configs[] = {
    {"f32-nchw", CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH},
    {"f16-nchw", CUDNN_DATA_HALF, CUDNN_TENSOR_NCHW, CUDNN_TENSOR_OP_MATH},
    {"f16-nhwc", CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, CUDNN_TENSOR_OP_MATH},
    {"bf16-nhwc", CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, CUDNN_TENSOR_OP_MATH},
};
enum { NCONF = sizeof configs / sizeof configs[0], NPASS = 3 };
static const char *pass_names[NPASS] = {"forward", "backward-data", "backward-filter"};

typedef struct {
    float best_ms, heur_ms; /* heur_ms < 0: not in the search */
    int best_algo, heur_algo;
    int failed;
} result;

/* One shape, one configuration: the three searches. */
static int measure(cudnnHandle_t h, const shape *s, int batch, const config *cf, result r[NPASS])
{
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t conv;
    CK(cudnnCreateTensorDescriptor(&x));
    CK(cudnnCreateTensorDescriptor(&y));
    CK(cudnnCreateFilterDescriptor(&wd));
    CK(cudnnCreateConvolutionDescriptor(&conv));
    int oh = (s->h + 2 * s->pad - s->size) / s->stride + 1, ow = (s->w + 2 * s->pad - s->size) / s->stride + 1;
    CK(cudnnSetTensor4dDescriptor(x, cf->format, cf->type, batch, s->c, s->h, s->w));
    CK(cudnnSetTensor4dDescriptor(y, cf->format, cf->type, batch, s->n, oh, ow));
    CK(cudnnSetFilter4dDescriptor(wd, cf->type, cf->format, s->n, s->c / s->groups, s->size, s->size));
    CK(cudnnSetConvolution2dDescriptor(conv, s->pad, s->pad, s->stride, s->stride, 1, 1,
                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CK(cudnnSetConvolutionGroupCount(conv, s->groups));
    CK(cudnnSetConvolutionMathType(conv, cf->math));
    for (int p = 0; p < NPASS; ++p) r[p] = (result){.best_ms = -1, .heur_ms = -1, .best_algo = -1, .heur_algo = -1};

    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t fp[16], fh[16];
    if (cudnnFindConvolutionForwardAlgorithm(h, x, wd, conv, y, 16, &n, fp) != CUDNN_STATUS_SUCCESS) r[0].failed = 1;
    for (int i = 0; i < n && !r[0].failed; ++i)
        if (fp[i].status == CUDNN_STATUS_SUCCESS && (cf->math != CUDNN_FMA_MATH || fp[i].mathType == CUDNN_FMA_MATH) &&
            (r[0].best_ms < 0 || fp[i].time < r[0].best_ms))
            r[0].best_ms = fp[i].time, r[0].best_algo = fp[i].algo;
    int m = 0;
    if (cudnnGetConvolutionForwardAlgorithm_v7(h, x, wd, conv, y, 16, &m, fh) == CUDNN_STATUS_SUCCESS && m > 0) {
        r[0].heur_algo = fh[0].algo;
        for (int i = 0; i < n; ++i)
            if (fp[i].algo == fh[0].algo && fp[i].status == CUDNN_STATUS_SUCCESS &&
                (r[0].heur_ms < 0 || fp[i].time < r[0].heur_ms))
                r[0].heur_ms = fp[i].time;
    }

    cudnnConvolutionBwdDataAlgoPerf_t dp[16], dh[16];
    if (cudnnFindConvolutionBackwardDataAlgorithm(h, wd, y, conv, x, 16, &n, dp) != CUDNN_STATUS_SUCCESS) r[1].failed = 1;
    for (int i = 0; i < n && !r[1].failed; ++i)
        if (dp[i].status == CUDNN_STATUS_SUCCESS && (cf->math != CUDNN_FMA_MATH || dp[i].mathType == CUDNN_FMA_MATH) &&
            (r[1].best_ms < 0 || dp[i].time < r[1].best_ms))
            r[1].best_ms = dp[i].time, r[1].best_algo = dp[i].algo;
    if (cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, y, conv, x, 16, &m, dh) == CUDNN_STATUS_SUCCESS && m > 0) {
        r[1].heur_algo = dh[0].algo;
        for (int i = 0; i < n; ++i)
            if (dp[i].algo == dh[0].algo && dp[i].status == CUDNN_STATUS_SUCCESS &&
                (r[1].heur_ms < 0 || dp[i].time < r[1].heur_ms))
                r[1].heur_ms = dp[i].time;
    }

    cudnnConvolutionBwdFilterAlgoPerf_t wp[16], wh[16];
    if (cudnnFindConvolutionBackwardFilterAlgorithm(h, x, y, conv, wd, 16, &n, wp) != CUDNN_STATUS_SUCCESS) r[2].failed = 1;
    for (int i = 0; i < n && !r[2].failed; ++i)
        if (wp[i].status == CUDNN_STATUS_SUCCESS && (cf->math != CUDNN_FMA_MATH || wp[i].mathType == CUDNN_FMA_MATH) &&
            (r[2].best_ms < 0 || wp[i].time < r[2].best_ms))
            r[2].best_ms = wp[i].time, r[2].best_algo = wp[i].algo;
    if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, y, conv, wd, 16, &m, wh) == CUDNN_STATUS_SUCCESS && m > 0) {
        r[2].heur_algo = wh[0].algo;
        for (int i = 0; i < n; ++i)
            if (wp[i].algo == wh[0].algo && wp[i].status == CUDNN_STATUS_SUCCESS &&
                (r[2].heur_ms < 0 || wp[i].time < r[2].heur_ms))
                r[2].heur_ms = wp[i].time;
    }
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(conv);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 || atoi(argv[2]) < 1) {
        fprintf(stderr, "usage: conv_layouts CFG BATCH\n");
        return 2;
    }
    int batch = atoi(argv[2]);
    gpu_index = -1; /* the shapes only: a CPU network */
    network *net = parse_network_cfg(argv[1]);
    if (!net) return 1;
    shape *sh = calloc((size_t)net->n, sizeof *sh);
    int ns = 0, nconv = 0;
    for (int i = 0; i < net->n; ++i) {
        layer *l = &net->layers[i];
        if (l->type != CONVOLUTIONAL) continue;
        ++nconv;
        shape s = {l->c, l->h, l->w, l->n, l->size, l->stride, l->pad, l->groups > 0 ? l->groups : 1, 1, i};
        int j = 0;
        while (j < ns && !(sh[j].c == s.c && sh[j].h == s.h && sh[j].w == s.w && sh[j].n == s.n &&
                           sh[j].size == s.size && sh[j].stride == s.stride && sh[j].pad == s.pad &&
                           sh[j].groups == s.groups))
            ++j;
        if (j < ns) ++sh[j].count;
        else sh[ns++] = s;
    }
    if (cudaSetDevice(0) != cudaSuccess) {
        fprintf(stderr, "conv_layouts: no usable CUDA device\n");
        return 77;
    }
    cudnnHandle_t h;
    if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "conv_layouts: cudnnCreate failed\n");
        return 1;
    }
    printf("%s at batch %d: %d convolutions, %d shapes; cuDNN %zu; ms per call, the fastest algorithm "
           "(its number) of cudnnFind*; [h: the heuristics' first and its time]\n\n",
           argv[1], batch, nconv, ns, cudnnGetVersion());
    double total[NCONF][NPASS] = {{0}}, heur[NCONF][NPASS] = {{0}};
    int heur_missing[NCONF][NPASS] = {{0}};
    result (*res)[NCONF][NPASS] = calloc((size_t)ns, sizeof *res);
    int bad = 0;
    for (int j = 0; j < ns; ++j)
        for (int k = 0; k < NCONF; ++k)
            if (measure(h, &sh[j], batch, &configs[k], res[j][k]) != 0) {
                for (int p = 0; p < NPASS; ++p) res[j][k][p].failed = 1;
                bad = 1;
            }
    for (int p = 0; p < NPASS; ++p) {
        printf("### %s\n\n| layer | shape | count |", pass_names[p]);
        for (int k = 0; k < NCONF; ++k) printf(" %s |", configs[k].name);
        printf("\n| ---: | --- | ---: |");
        for (int k = 0; k < NCONF; ++k) printf(" ---: |");
        printf("\n");
        for (int j = 0; j < ns; ++j) {
            const shape *s = &sh[j];
            printf("| %d | %dx%dx%d -> %d, %dx%d/%d", s->first, s->c, s->h, s->w, s->n, s->size, s->size, s->stride);
            if (s->groups > 1) printf(" groups %d", s->groups);
            printf(" | %d |", s->count);
            for (int k = 0; k < NCONF; ++k) {
                const result *r = &res[j][k][p];
                if (r->failed || r->best_ms < 0) {
                    printf(" failed |");
                    bad = 1;
                    continue;
                }
                total[k][p] += r->best_ms * s->count;
                if (r->heur_ms >= 0) heur[k][p] += r->heur_ms * s->count;
                else ++heur_missing[k][p];
                if (configs[k].type == CUDNN_DATA_HALF)
                    printf(" %.3f (%d) [h %d: %.3f] |", r->best_ms, r->best_algo, r->heur_algo, r->heur_ms);
                else printf(" %.3f (%d) |", r->best_ms, r->best_algo);
            }
            printf("\n");
        }
        printf("\n");
    }
    printf("### totals over the network (ms per step, each shape times its count)\n\n| pass |");
    for (int k = 0; k < NCONF; ++k) printf(" %s fastest | %s heuristics |", configs[k].name, configs[k].name);
    printf("\n| --- |");
    for (int k = 0; k < NCONF; ++k) printf(" ---: | ---: |");
    printf("\n");
    for (int p = 0; p < NPASS; ++p) {
        printf("| %s |", pass_names[p]);
        for (int k = 0; k < NCONF; ++k)
            printf(" %.2f | %.2f%s |", total[k][p], heur[k][p], heur_missing[k][p] ? " (some missing)" : "");
        printf("\n");
    }
    cudnnDestroy(h);
    free(res);
    free(sh);
    free_network(net);
    return bad;
}
