/* What the CUDA backend copies aside at the batch start and a skipped step
 * restores on the device: for every forward state the core lists (rolling
 * statistics, recurrent hidden states), the device array its layer holds for
 * it. On the host, no device touched: a network of layers built here, each
 * array a distinct address, and every (host array, device array) pair this
 * test expects written down as the layers are made.
 *
 * Checks: every state the core lists has the device array expected for its
 * host array (the mean's, not the variance's; a gru's state_gpu, an lstm's
 * h_gpu and c_gpu) and its size; every expected pair is listed (a
 * convolution's, a deconvolution's, a connected layer's, a [batchnorm]
 * layer's, each gru sub-layer's statistics, the hidden states), and nothing
 * else (a convolution without batch norm has none).
 */
#include "core.h"
#include "half_gpu.h" /* amp_cuda_state_array */

#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PAIRS 64
static struct {
    float *host, *dev;
    size_t n;
    int seen;
} pairs[MAX_PAIRS];
static int npairs;

/* A fresh array of n floats (host) and a distinct address for its device twin. */
static float *fresh(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

static void expect(float *host, float *dev, size_t n)
{
    pairs[npairs].host = host, pairs[npairs].dev = dev, pairs[npairs].n = n;
    ++npairs;
}

static void statistics(layer *l, size_t n)
{
    l->rolling_mean = fresh(n), l->rolling_variance = fresh(n);
    l->rolling_mean_gpu = fresh(n), l->rolling_variance_gpu = fresh(n);
    expect(l->rolling_mean, l->rolling_mean_gpu, n);
    expect(l->rolling_variance, l->rolling_variance_gpu, n);
}

static layer *connected_bn(size_t outputs)
{
    layer *l = calloc(1, sizeof *l);
    l->type = CONNECTED, l->batch_normalize = 1, l->outputs = (int)outputs, l->batch = 2;
    statistics(l, outputs);
    return l;
}

int main(void)
{
    layer ls[7];
    memset(ls, 0, sizeof ls);
    ls[0].type = CONVOLUTIONAL, ls[0].batch_normalize = 1, ls[0].n = 4;
    statistics(&ls[0], 4);
    ls[1].type = CONNECTED, ls[1].batch_normalize = 1, ls[1].outputs = 5;
    statistics(&ls[1], 5);
    ls[2].type = BATCHNORM, ls[2].c = 3; /* batch_normalize unset, as darknet makes it */
    statistics(&ls[2], 3);
    ls[3].type = GRU, ls[3].outputs = 6, ls[3].batch = 2;
    layer **gru[] = {&ls[3].uz, &ls[3].wz, &ls[3].ur, &ls[3].wr, &ls[3].uh, &ls[3].wh};
    for (size_t k = 0; k < sizeof gru / sizeof gru[0]; ++k) *gru[k] = connected_bn(6);
    ls[3].state = fresh(12), ls[3].state_gpu = fresh(12);
    ls[3].h_gpu = fresh(12); /* a gru's h_gpu is its candidate, not its state */
    expect(ls[3].state, ls[3].state_gpu, 12);
    ls[4].type = LSTM, ls[4].outputs = 3, ls[4].batch = 2;
    ls[4].h_cpu = fresh(6), ls[4].c_cpu = fresh(6), ls[4].h_gpu = fresh(6), ls[4].c_gpu = fresh(6);
    expect(ls[4].h_cpu, ls[4].h_gpu, 6);
    expect(ls[4].c_cpu, ls[4].c_gpu, 6);
    ls[5].type = DECONVOLUTIONAL, ls[5].batch_normalize = 1, ls[5].n = 7;
    statistics(&ls[5], 7);
    ls[6].type = CONVOLUTIONAL, ls[6].n = 9; /* no batch norm: nothing */
    ls[6].rolling_mean = fresh(9), ls[6].rolling_mean_gpu = fresh(9);

    network net;
    memset(&net, 0, sizeof net);
    net.n = 7;
    net.layers = ls;
    amp_net *an = amp_net_new(&net);
    char err[AMP_MSG_LEN] = "";
    if (!an || amp_collect_states(an, err, sizeof err) != AMP_OK) {
        printf("FAIL: amp_collect_states: %s\n", err);
        return 1;
    }
    int wrong = 0, unknown = 0;
    for (int k = 0; k < an->nstates; ++k) {
        const amp_fwd_state *f = &an->states[k];
        int found = -1;
        for (int i = 0; i < npairs; ++i)
            if (pairs[i].host == f->host) found = i;
        if (found < 0) {
            printf("  layer %d %s: not expected\n", f->layer, f->name);
            ++unknown;
            continue;
        }
        pairs[found].seen += 1;
        if (amp_cuda_state_array(f) != pairs[found].dev || f->n != pairs[found].n) {
            printf("  layer %d %s: device array %p (expected %p), %zu elements (expected %zu)\n",
                   f->layer, f->name, (void *)amp_cuda_state_array(f), (void *)pairs[found].dev,
                   f->n, pairs[found].n);
            ++wrong;
        }
    }
    int missing = 0;
    for (int i = 0; i < npairs; ++i) missing += pairs[i].seen != 1;
    CHECK(wrong == 0, "every listed state's device array and size as expected (%d of %d wrong)",
          wrong, an->nstates);
    CHECK(unknown == 0 && missing == 0,
          "the states listed are the %d expected: %d listed, %d not expected, %d expected ones "
          "missing or listed twice", npairs, an->nstates, unknown, missing);
    return check_report();
}
