/* The activation plan (plugin/plan.c, carried out by plugin/cpu/storage.c)
 * on a network of every layer kind it stores in half (convolutions, a
 * shortcut, a route, and a last layer that must stay float32):
 *
 *   plan_test CFG
 *
 * 1. what the plan decides, against its rules checked here from the layers
 *    themselves: the last layer's output is float32; a half tensor is read
 *    only by layers that run on half storage; a data-movement layer runs in
 *    half only with every input and its output half; darknet's float32
 *    arrays of a half tensor (its delta, the batch-norm input) are freed;
 *    the plan's activation bytes are below float32's;
 * 2. the half deltas' shared pool: no two deltas alive at the same time in
 *    the backward (each from its last reader to its writer) overlap;
 * 3. training (three steps: forward, a fixed gradient at the last layer,
 *    backward, update) with the deltas sharing the pool gives the weights
 *    of training with each delta in storage of its own, bit for bit, for
 *    float16 and bfloat16: the pool changes where deltas live, not a value
 *    (run with DARKNET_AMP_CONV=direct, so that both networks run the same
 *    forms: auto's timing could tip a close call on a loaded machine);
 * 4. amp_activations=float32 (half_activations 0) stores nothing in half.
 *
 *   plan_test CFG resize W
 *
 * darknet's resize (random=1) to W x W px, where a route's inputs no longer
 * have one size (darknet then concatenates them flat): the plan is made
 * again at that size, the route's half form and what only it kept in half
 * leaving the region (its division by the spatial size, 0 there, would stop
 * the program); the rules above hold at each size; back at the cfg's size
 * the plan is the first one again, and training goes on, its weights
 * finite. No step at W: darknet's own float32 shortcut after the route
 * divides by the size that darknet's resize zeroed.
 */
#include "cpu.h"
#include "check.h"
#include "nets.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static network *build(const char *cfg, amp_dtype dt, int half_activations, int own_deltas)
{
    network *net = test_net(cfg, 0);
    amp_options o;
    amp_options_init(&o, dt);
    o.dynamic = 0;
    o.init_scale = 1;
    o.half_activations = half_activations;
    test_attach(net, &o, "auto");
    amp_net *an = amp_net_of(net);
    if (own_deltas && an->plan_on) {
        char err[AMP_MSG_LEN];
        cpu_net_of(an)->own_deltas = 1;
        if (amp_cpu_activations(an, err, sizeof err) != AMP_OK) {
            printf("FAIL: %s\n", err);
            exit(1);
        }
    }
    return net;
}

static int reads(const network *net, int j, int i)
{
    int src[32];
    const int n = amp_plan_inputs(net, j, src, 32);
    for (int k = 0; k < n; ++k)
        if (src[k] == i) return 1;
    return 0;
}

static void check_rules(network *net, const char *dt)
{
    const amp_net *an = amp_net_of(net);
    int half = 0, broken = 0, freed = 1;
    for (int i = 0; i < net->n; ++i) {
        const amp_layer *al = &an->layers[i];
        half += al->out_half;
        if (al->out_half)
            for (int j = i + 1; j < net->n; ++j)
                if (reads(net, j, i) && an->layers[j].io == AMP_IO_FLOAT32) {
                    printf("layer %d (float32 only) reads half layer %d\n", j, i);
                    ++broken;
                }
        if (al->region) {
            int src[32];
            const int n = amp_plan_inputs(net, i, src, 32);
            for (int k = 0; k < n; ++k) broken += src[k] < 0 || !an->layers[src[k]].out_half;
            broken += !al->out_half;
        }
        if (al->out_half && net->layers[i].delta) freed = 0;
        if (al->x_half && (net->layers[i].x || net->layers[i].x_norm)) freed = 0;
    }
    CHECK(half > 0, "%s: the plan stores %d of %d layers' outputs in half", dt, half, net->n);
    CHECK(!an->layers[net->n - 1].out_half, "%s: the last layer's output is float32", dt);
    CHECK(broken == 0, "%s: %d half tensors read by a float32-only layer, or data movement "
                       "with a float32 side", dt, broken);
    CHECK(freed, "%s: darknet's float32 delta, x and x_norm of the half tensors freed", dt);
    double fp32, planned;
    amp_plan_bytes(an, &fp32, &planned);
    CHECK(planned < 0.75 * fp32, "%s: activation bytes %.0f under the plan, %.0f in float32 "
                                 "(%.2fx, bound 0.75)", dt, planned, fp32, planned / fp32);
}

/* Deltas alive at the same time (closed intervals [writer, last reader]) must
 * not overlap in the pool. */
static void check_pool_aligned(network *net, const char *dt, size_t align)
{
    const amp_net *an = amp_net_of(net);
    size_t *off = calloc((size_t)net->n, sizeof *off), sum = 0;
    const size_t total = amp_plan_delta_pool_aligned(an, off, align);
    int clashes = 0, pairs = 0, misplaced = 0, odd = 0;
    for (int i = 0; i < net->n; ++i) {
        misplaced += an->layers[i].out_half && off[i] % align != 0;
        odd += an->layers[i].out_half &&
               (size_t)net->layers[i].outputs * net->layers[i].batch % align != 0;
    }
    CHECK(misplaced == 0, "%s: every delta at a multiple of %zu elements (%d not; %d of the deltas' "
                          "sizes are no multiple)", dt, align, misplaced, odd);
    for (int i = 0; i < net->n; ++i) {
        const amp_layer *a = &an->layers[i];
        if (!a->out_half) continue;
        const size_t ni = (size_t)net->layers[i].outputs * net->layers[i].batch;
        sum += ni;
        for (int k = i + 1; k < net->n; ++k) {
            const amp_layer *b = &an->layers[k];
            if (!b->out_half || k > a->delta_from) continue; /* not alive together */
            const size_t nk = (size_t)net->layers[k].outputs * net->layers[k].batch;
            ++pairs;
            clashes += off[i] < off[k] + nk && off[k] < off[i] + ni;
        }
    }
    free(off);
    CHECK(clashes == 0, "%s: of %d pairs of deltas alive at the same time, %d share storage "
                        "(pool %zu elements placed at multiples of %zu, %zu without sharing)",
          dt, pairs, clashes, total, align, sum);
    CHECK(total < sum, "%s: the pool (%zu elements) is smaller than the deltas (%zu)", dt, total,
          sum);
}

/* The CPU's pool, and the device's (each delta 16 bytes aligned) */
static void check_pool(network *net, const char *dt)
{
    check_pool_aligned(net, dt, 1);
    check_pool_aligned(net, dt, 8);
}

static void step(network *net, unsigned seed)
{
    test_inputs(net, seed, 0);
    net->train = 1;
    net->delta = NULL;
    forward_network(net);
    layer *last = &net->layers[net->n - 1];
    srand(seed + 100);
    for (int i = 0; i < last->outputs * last->batch; ++i)
        last->delta[i] = ((float)rand() / RAND_MAX * 2 - 1) * .1f;
    backward_network(net);
    update_network(net);
}

static uint64_t weights_hash(network *net)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < net->n; ++i) {
        const layer *l = &net->layers[i];
        if (l->type != CONVOLUTIONAL) continue;
        const unsigned char *p = (const unsigned char *)l->weights;
        for (size_t k = 0; k < (size_t)l->nweights * sizeof(float); ++k)
            h = (h ^ p[k]) * 1099511628211ull;
        p = (const unsigned char *)l->biases;
        for (size_t k = 0; k < (size_t)l->n * sizeof(float); ++k) h = (h ^ p[k]) * 1099511628211ull;
    }
    return h;
}

/* The resize scenario (plan_test CFG resize W). */
static int resized(const char *cfg, int w)
{
    network *net = build(cfg, AMP_DTYPE_FLOAT16, 1, 0);
    amp_net *an = amp_net_of(net);
    const int w0 = net->w, h0 = net->h;
    int *was = calloc((size_t)net->n, sizeof *was);
    for (int i = 0; i < net->n; ++i) was[i] = an->layers[i].region;
    step(net, 5);
    resize_network(net, w, w);
    int left = 0, unfit = 0;
    for (int i = 0; i < net->n; ++i) {
        left += was[i] && !an->layers[i].region;
        unfit += an->layers[i].region && !amp_kind_half_shape(&net->layers[i]);
        if (was[i] && !an->layers[i].region)
            printf("at %dx%d: layer %d [%s] runs darknet's float32 form\n", w, w, i,
                   amp_kind_of(net->layers[i].type)->name);
    }
    CHECK(left > 0 && unfit == 0 && !an->error[0],
          "at %dx%d: %d half forms left the region, none runs on a shape it does not take (%d)%s%s",
          w, w, left, unfit, an->error[0] ? ": " : "", an->error);
    check_rules(net, "resized");
    resize_network(net, w0, h0);
    int same = 1;
    for (int i = 0; i < net->n; ++i) same &= was[i] == an->layers[i].region;
    CHECK(same && !an->error[0], "back at %dx%d: the first plan's half forms again", w0, h0);
    check_rules(net, "back");
    for (int s = 0; s < 3; ++s) step(net, 7 + s);
    size_t bad = 0, n = 0;
    for (int i = 0; i < net->n; ++i) {
        const layer *l = &net->layers[i];
        for (int k = 0; l->type == CONVOLUTIONAL && k < l->nweights; ++k, ++n)
            bad += !(l->weights[k] == l->weights[k] && l->weights[k] - l->weights[k] == 0);
    }
    CHECK(bad == 0 && n > 0, "the convolutions' weights finite after training on (%zu of %zu)",
          bad, n);
    free(was);
    amp_detach(net), free_network(net);
    return check_report();
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[2], "resize")) return resized(argv[1], atoi(argv[3]));
    if (argc != 2) {
        fprintf(stderr, "usage: plan_test CFG [resize W]\n");
        return 2;
    }
    const amp_dtype dts[] = {AMP_DTYPE_FLOAT16, AMP_DTYPE_BFLOAT16};
    for (int t = 0; t < 2; ++t) {
        const char *dt = amp_dtype_name(dts[t]);
        network *shared = build(argv[1], dts[t], 1, 0), *own = build(argv[1], dts[t], 1, 1);
        amp_plan_print(amp_net_of(shared), stdout);
        check_rules(shared, dt);
        check_pool(shared, dt);
        for (int s = 0; s < 3; ++s) {
            step(shared, 5 + s);
            step(own, 5 + s);
        }
        const uint64_t a = weights_hash(shared), b = weights_hash(own);
        CHECK(a == b, "%s: weights after 3 steps with shared deltas %016llx, each delta its own "
                      "%016llx", dt, (unsigned long long)a, (unsigned long long)b);
        amp_detach(shared), free_network(shared);
        amp_detach(own), free_network(own);

        network *off = build(argv[1], dts[t], 0, 0);
        const amp_net *an = amp_net_of(off);
        int half = 0;
        for (int i = 0; i < off->n; ++i) half += an->layers[i].out_half + an->layers[i].x_half;
        CHECK(!an->plan_on && half == 0, "%s, amp_activations=float32: %d tensors in half", dt,
              half);
        amp_detach(off), free_network(off);
    }
    return check_report();
}
