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
 * convolution ran the fastest algorithm of that configuration.
 *
 * Then the activation plan's half tail (cuda/tail.cu) on each shape's
 * output, float16 NHWC, batch-norm while training and the layer's
 * activation: forward and backward timed with CUDA events (the median of 5
 * after 2), and the bytes they move per millisecond, against the device's
 * copy speed measured alike. */
#include "darknet.h"

#include "amp_cuda.h" /* the half tail: amp_cuda_tail_* */
#include "activations.h" /* get_activation_string */

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
    int c, h, w, n, size, stride, pad, groups, count, first, act, bn;
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

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The median of 5 timed runs (after 2) of what(arg), in ms. */
static float timed(void (*what)(void *), void *arg)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float ms[5];
    for (int r = -2; r < 5; ++r) {
        cudaEventRecord(e0, 0);
        what(arg);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        if (r >= 0) cudaEventElapsedTime(&ms[r], e0, e1);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, 5, sizeof ms[0], cmp_float);
    return ms[2];
}

typedef struct {
    amp_cuda_tail t;
    int bad;
    void *src, *dst;
    size_t bytes;
} tail_run;

static void run_forward(void *p)
{
    tail_run *r = p;
    char err[256];
    r->bad |= amp_cuda_tail_forward(&r->t, 0, err, sizeof err) != AMP_OK;
}

static void run_backward(void *p)
{
    tail_run *r = p;
    char err[256];
    r->bad |= amp_cuda_tail_backward(&r->t, 0, err, sizeof err) != AMP_OK;
}

static void run_copy(void *p)
{
    tail_run *r = p;
    r->bad |= cudaMemcpyAsync(r->dst, r->src, r->bytes, cudaMemcpyDeviceToDevice, 0) != cudaSuccess;
}

/* The half tail on every shape's output; 0, or 1 when a run failed. */
static int tails(const shape *sh, int ns, int batch)
{
    long most = 0;
    for (int j = 0; j < ns; ++j) {
        const shape *s = &sh[j];
        const long oh = (s->h + 2 * s->pad - s->size) / s->stride + 1;
        const long ow = (s->w + 2 * s->pad - s->size) / s->stride + 1;
        if (oh * ow * s->n > most) most = oh * ow * s->n;
    }
    const size_t n = (size_t)most * batch;
    uint16_t *x, *y, *dh;
    float *pc, *work;
    const size_t work_n = amp_cuda_tail_work_floats((long)n, 4096); /* any c up to 4096 */
    if (cudaMalloc((void **)&x, n * 2) || cudaMalloc((void **)&y, n * 2) || cudaMalloc((void **)&dh, n * 2) ||
        cudaMalloc((void **)&pc, 12 * 4096 * sizeof(float)) ||
        cudaMalloc((void **)&work, work_n * sizeof(float))) {
        fprintf(stderr, "conv_layouts: no memory for the tails\n");
        return 1;
    }
    cudaMemset(x, 0x3c, n * 2); /* 1.0 in float16 (0x3c3c: about 1.06) */
    cudaMemset(y, 0x3c, n * 2);
    cudaMemset(dh, 0x1c, n * 2);
    cudaMemset(pc, 0, 12 * 4096 * sizeof(float));
    tail_run r = {0};
    r.src = x, r.dst = y, r.bytes = n * 2;
    const float copy_ms = timed(run_copy, &r);
    const double copy_gbs = 2.0 * n * 2 / (copy_ms * 1e6);
    printf("### the half tail (float16 NHWC, tail.cu), batch %d\n\n"
           "device copy of %.0f MB: %.3f ms, %.0f GB/s (read + write)\n\n"
           "| layer | output | count | activation | forward ms | GB/s | backward ms | GB/s |\n"
           "| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: |\n",
           batch, n * 2 / 1e6, copy_ms, copy_gbs);
    double tf = 0, tb = 0;
    for (int j = 0; j < ns; ++j) {
        const shape *s = &sh[j];
        const long oh = (s->h + 2 * s->pad - s->size) / s->stride + 1;
        const long ow = (s->w + 2 * s->pad - s->size) / s->stride + 1;
        if (s->n > 4096 || !amp_cuda_tail_supports(s->act)) {
            printf("| %d | %ldx%ldx%d | %d | %s | not run | | | |\n", s->first, oh, ow, s->n, s->count,
                   get_activation_string((ACTIVATION)s->act));
            continue;
        }
        memset(&r.t, 0, sizeof r.t);
        r.t.positions = oh * ow * batch, r.t.c = s->n, r.t.act = s->act;
        r.t.batch_normalize = s->bn, r.t.cudnn = 1, r.t.train = 1;
        r.t.x = x, r.t.y = y, r.t.dh = dh;
        float *c = pc;
        r.t.scales = c, r.t.biases = c + 4096, r.t.mean = c + 2 * 4096, r.t.variance = c + 3 * 4096;
        r.t.rolling_mean = c + 4 * 4096, r.t.rolling_variance = c + 5 * 4096;
        r.t.bias_updates = c + 6 * 4096, r.t.scale_updates = c + 7 * 4096;
        r.t.mean_delta = c + 8 * 4096, r.t.variance_delta = c + 9 * 4096;
        r.t.work = work;
        const float f = timed(run_forward, &r), b = timed(run_backward, &r);
        /* bytes: forward reads x twice for the statistics, once to normalise,
         * writes y; backward reads x, y, dh twice (sums, data gradient),
         * writes dh */
        const double vals = (double)r.t.positions * s->n * 2;
        const double fb = vals * (s->bn ? 4 : 2), bb = vals * (s->bn ? 7 : 5);
        printf("| %d | %ldx%ldx%d | %d | %s%s | %.3f | %.0f | %.3f | %.0f |\n", s->first, oh, ow, s->n,
               s->count, get_activation_string((ACTIVATION)s->act), s->bn ? ", batch-norm" : "", f,
               fb / (f * 1e6), b, bb / (b * 1e6));
        tf += f * s->count, tb += b * s->count;
    }
    printf("\nhalf tails per step: forward %.2f ms, backward %.2f ms (each shape times its count)%s\n\n",
           tf, tb, r.bad ? "; SOME RUNS FAILED" : "");
    cudaFree(x), cudaFree(y), cudaFree(dh), cudaFree(pc), cudaFree(work);
    return r.bad;
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
        shape s = {l->c, l->h, l->w, l->n, l->size, l->stride, l->pad, l->groups > 0 ? l->groups : 1, 1, i,
                   (int)l->activation, l->batch_normalize};
        int j = 0;
        while (j < ns && !(sh[j].c == s.c && sh[j].h == s.h && sh[j].w == s.w && sh[j].n == s.n &&
                           sh[j].size == s.size && sh[j].stride == s.stride && sh[j].pad == s.pad &&
                           sh[j].groups == s.groups && sh[j].act == s.act && sh[j].bn == s.bn))
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
    printf("\n");
    bad |= tails(sh, ns, batch);
    cudnnDestroy(h);
    free(res);
    free(sh);
    free_network(net);
    return bad;
}
