/* What the C tests of networks share: a network built from a cfg with a fixed
 * seed (the same initial weights every time), AMP attached with a scaler of
 * the given options, random inputs with one-hot labels, bitwise comparison. */
#ifndef DARKNET_AMP_TEST_NETS_H
#define DARKNET_AMP_TEST_NETS_H

#include "darknet.h"
#include "darknet_amp.h"
#include "core.h" /* amp_options: the tests set the resolved settings directly */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef GPU
#include <cuda_runtime_api.h>
#endif

/* CFG's network with srand(11) before it is built; on GPU 0 (gpu) or the CPU
 * (also in a CUDA build). */
static inline network *test_net(const char *cfg, int gpu)
{
#ifdef GPU
    gpu_index = gpu ? 0 : -1;
#else
    (void)gpu;
#endif
    srand(11);
    return parse_network_cfg((char *)cfg);
}

/* AMP on net with a scaler of options o: an explicit one on the CPU (the
 * scale is updated by amp_update, and a static scale never is); on the GPU,
 * which refuses explicit scalers, one of its own (amp_attach_options). */
static inline amp_status test_attach_options(network *net, const amp_options *o, char *err,
                                             size_t errlen)
{
#ifdef GPU
    if (net->gpu_index >= 0) return amp_attach_options(net, o, err, errlen);
#endif
    amp_scaler *s = NULL;
    amp_status st = amp_scaler_create_options(o, &s, err, errlen);
    return st == AMP_OK ? amp_attach(net, s, err, errlen) : st;
}

/* Attaches AMP with a scaler of options o; DARKNET_AMP_CPU=cpu_path when not
 * NULL. A failure ends the test. */
static inline network *test_attach(network *net, const amp_options *o, const char *cpu_path)
{
    if (cpu_path) setenv("DARKNET_AMP_CPU", cpu_path, 1);
    char err[512] = "";
    if (test_attach_options(net, o, err, sizeof err) != AMP_OK) {
        printf("FAIL: attach (%s): %s\n", amp_dtype_name(o->dtype), err);
        exit(1);
    }
    return net;
}

/* Inputs uniform in [-1, 1] from srand(seed); with labels, one random class
 * per image (softmax and cost layers). */
/* cfg's network (CPU) with AMP in dtype at a static loss scale of 1, on the
 * CPU path cpu_path: the rounding tests' setting (no scaling to undo). Every
 * tensor between layers in float32 (amp_activations=float32): the tests read
 * and write layers' arrays one layer at a time. */
static inline network *test_half_static(const char *cfg, amp_dtype dtype, const char *cpu_path)
{
    network *net = test_net(cfg, 0);
    amp_options o;
    amp_options_init(&o, dtype);
    o.dynamic = 0;
    o.init_scale = 1;
    o.half_activations = 0;
    return test_attach(net, &o, cpu_path);
}

static inline void test_inputs(network *net, unsigned seed, int labels)
{
    srand(seed);
    for (int i = 0; i < net->inputs * net->batch; ++i)
        net->input[i] = (float)rand() / RAND_MAX * 2 - 1;
    if (!labels) return;
    memset(net->truth, 0, (size_t)net->truths * net->batch * sizeof(float));
    for (int b = 0; b < net->batch; ++b)
        net->truth[(size_t)b * net->truths + (size_t)rand() % net->truths] = 1;
}

/* 1 where GPU 0 can run a test (a CUDA build with a device, selected), else
 * 0 after printing why the test is skipped. */
/* Layer i of net alone, forward, on input x, in training mode (its delta
 * zeroed first, as darknet's forward_network does). */
static inline void test_forward_layer(network *net, int i, float *x)
{
    network n = *net;
    layer *l = &net->layers[i];
    n.index = i;
    n.input = x;
    n.train = 1;
    if (l->delta) memset(l->delta, 0, (size_t)l->outputs * l->batch * sizeof(float));
    l->forward(*l, n);
}

/* Layer i of net alone, backward, on input x, into the delta of the layer
 * before. */
static inline void test_backward_layer(network *net, int i, float *x)
{
    network n = *net;
    layer *l = &net->layers[i];
    n.index = i;
    n.input = x;
    n.delta = i > 0 ? net->layers[i - 1].delta : NULL;
    n.train = 1;
    l->backward(*l, n);
}

static inline int test_gpu_available(void)
{
#ifndef GPU
    printf("SKIP: a CPU build\n");
    return 0;
#else
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("SKIP: no CUDA device\n");
        return 0;
    }
    cuda_set_device(0);
    return 1;
#endif
}

/* Elements of x and y that are not the same bits. */
static inline size_t test_ndiff(const float *x, const float *y, size_t n)
{
    size_t d = 0;
    for (size_t i = 0; i < n; ++i) d += memcmp(&x[i], &y[i], sizeof(float)) != 0;
    return d;
}

/* The network's weights saved (under /tmp, named after the process) and read
 * back: how many values are inf or NaN, of *values. -1 if unreadable. */
static inline long test_saved_nonfinite(network *net, long *values)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/amp_test.%ld.weights", (long)getpid());
    save_weights(net, path);
    FILE *f = fopen(path, "rb");
    long bad = -1;
    *values = 0;
    if (f && fseek(f, 3 * sizeof(int) + sizeof(size_t), SEEK_SET) == 0) {
        uint32_t bits;
        bad = 0;
        while (fread(&bits, sizeof bits, 1, f) == 1) {
            bad += (bits & 0x7f800000u) == 0x7f800000u;
            *values += 1;
        }
    }
    if (f) fclose(f);
    remove(path);
    return bad;
}

#endif
