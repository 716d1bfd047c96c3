/* A 1x1 convolution's data gradient where its input has another reader
 * (patches/0036-conv-1x1-delta-adds.patch): darknet's CPU backward wrote it
 * over its input's delta, so the other reader's share, added there first
 * (backward runs from the last layer), was lost.
 *
 * Three small linear networks with an sse cost, so that the loss is
 * quadratic in each weight and a central difference is its exact derivative
 * up to rounding: a 3x3 convolution (layer 0) read by a 1x1 convolution and
 *   route     also by a [route] of both,
 *   shortcut  also by a [shortcut] from it,
 *   alone     by nothing else (the control: right before and after the fix).
 * darknet's gradient of layer 0's weights (weight_updates, -1/2 dC/dw for
 * sse) is compared with -1/2 the central difference of the cost, element by
 * element, relative to the largest: at most 1e-3.
 *
 *   conv_1x1_delta_test SCRATCH fixed|stock
 * fixed: every case within the bound (the fork). stock: built against
 * Debian's unmodified darknet, where the route and shortcut cases must
 * exceed it (the lost gradient shown) and alone stay within it.
 */
#include "darknet.h"

#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *scratch;

static const char *net_head =
    "[net]\nbatch=1\nsubdivisions=1\nwidth=4\nheight=4\nchannels=2\n"
    "[convolutional]\nfilters=3\nsize=3\nstride=1\npad=1\nactivation=linear\n";

static const struct {
    const char *name, *tail;
    int shared; /* the 1x1 convolution's input has another reader */
} cases[] = {
    {"route", "[convolutional]\nfilters=2\nsize=1\nstride=1\npad=1\nactivation=linear\n"
              "[route]\nlayers=-2,-1\n[cost]\ntype=sse\n", 1},
    {"shortcut", "[convolutional]\nfilters=3\nsize=1\nstride=1\npad=1\nactivation=linear\n"
                 "[shortcut]\nfrom=-2\nactivation=linear\n[cost]\ntype=sse\n", 1},
    {"alone", "[convolutional]\nfilters=2\nsize=1\nstride=1\npad=1\nactivation=linear\n"
              "[cost]\ntype=sse\n", 0},
};

static double cost(network *net)
{
    net->train = 1;
    forward_network(net);
    return *net->cost;
}

/* max |darknet - finite difference| / max |finite difference| over layer
 * 0's weights; -1 when the network cannot be built. */
static double gradient_error(const char *name, const char *tail)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.cfg", scratch, name);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "%s%s", net_head, tail);
    fclose(f);
    srand(3);
    network *net = parse_network_cfg(path);
    if (!net) return -1;
    for (int i = 0; i < net->inputs; ++i) net->input[i] = (float)((i * 37) % 11) / 11.f - 0.5f;
    for (int i = 0; i < net->truths; ++i) net->truth[i] = (float)((i * 13) % 7) / 7.f;
    layer *l0 = &net->layers[0];
    /* darknet's gradient: one forward and backward from zeroed updates */
    for (int n = 0; n < net->n; ++n)
        if (net->layers[n].weight_updates)
            memset(net->layers[n].weight_updates, 0, net->layers[n].nweights * sizeof(float));
    cost(net);
    backward_network(net);
    double worst = 0, largest = 0;
    const float h = 1.f / 64; /* exact in float: w +- h moves w by h */
    for (int j = 0; j < l0->nweights; ++j) {
        const float w = l0->weights[j];
        l0->weights[j] = w + h;
        const double up = cost(net);
        l0->weights[j] = w - h;
        const double down = cost(net);
        l0->weights[j] = w;
        const double fd = -0.5 * (up - down) / (2 * h);
        const double d = fabs(l0->weight_updates[j] - fd);
        if (d > worst) worst = d;
        if (fabs(fd) > largest) largest = fabs(fd);
    }
    printf("%s: layer 0's %d weight gradients, largest %.4g, worst difference from the "
           "central difference %.3g\n", name, l0->nweights, largest, worst);
    free_network(net);
    return largest > 0 ? worst / largest : -1;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[2], "fixed") && strcmp(argv[2], "stock"))) {
        fprintf(stderr, "usage: %s SCRATCH fixed|stock\n", argv[0]);
        return 2;
    }
    scratch = argv[1];
    gpu_index = -1; /* CPU networks, also in a CUDA build */
    mkdir(scratch, 0755); /* may exist */
    const int stock = !strcmp(argv[2], "stock");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        const double e = gradient_error(cases[c].name, cases[c].tail);
        if (e < 0) {
            CHECK(0, "%s: the network builds and has a gradient", cases[c].name);
            continue;
        }
        if (stock && cases[c].shared)
            CHECK(e > 0.1, "%s, stock darknet: the other reader's share is lost (relative "
                           "error %.3g, above 0.1)", cases[c].name, e);
        else
            CHECK(e <= 1e-3, "%s: layer 0's gradient is the loss's derivative (relative error "
                             "%.3g, at most 1e-3)", cases[c].name, e);
    }
    return check_report();
}
