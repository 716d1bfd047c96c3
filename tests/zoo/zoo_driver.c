/* The cfg zoo driver: one darknet cfg, made small, run once in one precision.
 *
 *   zoo_driver CFG SIZE MODE OUT [BN]
 *
 * Built twice from this file, like tests/regression/train_driver.c: against
 * Debian's stock libdarknet.so (MODE fp32 only: the oracle, and the judge of
 * whether darknet itself can run the cfg here) and against the fork with the
 * AMP plugin (MODE fp32, float16 or bfloat16). One process per cfg and mode,
 * so that a crash in one (darknet's own exit() on a bad cfg, a signal) is
 * reported by the caller and takes nothing else down.
 *
 * 1. Writes OUT.cfg: CFG with the [net] input at most SIZE x SIZE (smaller
 *    inputs kept; crop layers scaled alike), batch=2, subdivisions=1,
 *    learning_rate=0.001 and burn_in=0 (both steps move the weights, and
 *    none blows up: the cfgs' own rates, meant for large batches of real
 *    images after a burn-in, take several classifiers to an infinite FP32
 *    loss within two steps on one random batch), random=0 in every layer,
 *    and for the half modes amp=1 amp_dtype=MODE.
 * 2. srand(seed), parse (darknet draws the initial weights from rand(), so
 *    every mode gets the same network: a hash of all weights is printed and
 *    compared by zoo_compare).
 * 3. srand(seed + 1); inputs uniform in [0, 1), a synthetic truth of the
 *    shape the loss layer reads.
 * 4. One training forward of this batch (every run: recurrent layers keep
 *    state). Batch-norm statistics for inference: read from the file BN when
 *    given (the FP32 run's), else taken from that forward and written to
 *    OUT.bn. A fresh network's rolling statistics are 0 (its
 *    inference path would divide by sqrt(0) + 1e-6 per layer); the AMP runs
 *    use FP32's, so that all runs normalise with the same constants.
 *    Then a forward in inference mode (train=0: no dropout, no random crop);
 *    the inputs of every head (yolo, region, detection, softmax, logistic:
 *    the logits, since a squashing function saturates on a random network
 *    and would hide differences), or else darknet's output layer (the last
 *    that is not a cost layer), go to OUT.bin as floats.
 * 5. srand(seed + 2), two iterations of train_network on that batch.
 * 6. OUT.txt: key value lines (mode, hashes, sizes, losses in exact hex, the
 *    AMP scale and skipped steps, the layer types that fell back to float32).
 *
 * Exit 0 when it ran (a non-finite loss is data for zoo_compare to judge),
 * 2 on usage or I/O errors.
 */
#include "darknet.h"
#ifdef DARKNET_AMP
#include "core.h" /* per-layer precision: which layers fell back to float32 */
#include "cpu.h"  /* amp_cpu_layer_runner: which of them run oneDNN */
#include "network.h"      /* get_layer_string */
#endif

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SEED = 7, BATCH = 2, ITERS = 2 };

/* darknet's read_cfg drops every whitespace character and skips comments. */
static void strip_spaces(char *s)
{
    char *d = s;
    for (; *s; ++s)
        if (!isspace((unsigned char)*s)) *d++ = *s;
    *d = 0;
}

static int key_is(const char *line, const char *key)
{
    size_t n = strlen(key);
    return !strncmp(line, key, n) && line[n] == '=';
}

/* The resized cfg. Returns 0, or -1 with a message. */
static int write_cfg(const char *in, const char *out, int size, const char *dtype)
{
    FILE *f = fopen(in, "r");
    if (!f) {
        fprintf(stderr, "zoo_driver: cannot open %s\n", in);
        return -1;
    }
    /* first pass: the [net] input size, so that crop layers scale with it */
    char line[4096];
    int w = 0, h = 0, section = 0;
    while (fgets(line, sizeof line, f)) {
        strip_spaces(line);
        if (line[0] == '[') ++section;
        else if (section == 1 && key_is(line, "width")) w = atoi(line + 6);
        else if (section == 1 && key_is(line, "height")) h = atoi(line + 7);
    }
    int nw = w > size ? size : w, nh = h > size ? size : h;
    rewind(f);
    FILE *o = fopen(out, "w");
    if (!o) {
        fprintf(stderr, "zoo_driver: cannot write %s\n", out);
        fclose(f);
        return -1;
    }
    section = 0;
    while (fgets(line, sizeof line, f)) {
        strip_spaces(line);
        if (!line[0] || line[0] == '#' || line[0] == ';') continue;
        if (line[0] == '[') {
            fprintf(o, "%s\n", line);
            if (++section == 1) {
                fprintf(o, "batch=%d\nsubdivisions=1\nlearning_rate=0.001\nburn_in=0\n", BATCH);
                if (w) fprintf(o, "width=%d\nheight=%d\n", nw, nh);
                if (dtype) fprintf(o, "amp=1\namp_dtype=%s\n", dtype);
            }
            continue;
        }
        if (section == 1 && (key_is(line, "batch") || key_is(line, "subdivisions") ||
                             key_is(line, "burn_in") || key_is(line, "learning_rate") ||
                             key_is(line, "width") ||
                             key_is(line, "height") || key_is(line, "amp") ||
                             key_is(line, "amp_dtype")))
            continue;
        if (key_is(line, "random")) fprintf(o, "random=0\n");
        else if (key_is(line, "crop_width") && w)
            fprintf(o, "crop_width=%d\n", atoi(line + 11) * nw / w);
        else if (key_is(line, "crop_height") && h)
            fprintf(o, "crop_height=%d\n", atoi(line + 12) * nh / h);
        else fprintf(o, "%s\n", line);
    }
    fclose(f);
    if (fclose(o)) {
        fprintf(stderr, "zoo_driver: cannot write %s\n", out);
        return -1;
    }
    return 0;
}

static uint64_t hash_floats(uint64_t h, const float *v, size_t n)
{
    for (size_t i = 0; v && i < n; ++i) {
        uint32_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        h = (h ^ bits) * 0x100000001b3ull;
    }
    return h;
}

static size_t weight_count(const layer *l)
{
    switch (l->type) {
    case CONVOLUTIONAL:
    case DECONVOLUTIONAL: return (size_t)l->nweights;
    case CONNECTED: return (size_t)l->inputs * l->outputs;
    case LOCAL: return (size_t)l->size * l->size * l->c * l->n * l->out_w * l->out_h;
    default: return 0;
    }
}

/* The recurrent layers' sub-layers, NULL-terminated. */
static void sub_layers(const layer *l, layer **sub)
{
    int k = 0;
    if (l->type == GRU) {
        layer *g[] = {l->uz, l->wz, l->ur, l->wr, l->uh, l->wh};
        for (int i = 0; i < 6; ++i) sub[k++] = g[i];
    } else if (l->type == RNN || l->type == CRNN) {
        sub[k++] = l->input_layer, sub[k++] = l->self_layer, sub[k++] = l->output_layer;
    } else if (l->type == LSTM) {
        layer *g[] = {l->uf, l->ui, l->ug, l->uo, l->wf, l->wi, l->wg, l->wo};
        for (int i = 0; i < 8; ++i) sub[k++] = g[i];
    }
    sub[k] = NULL;
}

static uint64_t hash_layer(uint64_t h, const layer *l)
{
    h = hash_floats(h, l->weights, weight_count(l));
    if (weight_count(l)) h = hash_floats(h, l->biases, (size_t)l->out_c);
    if (l->batch_normalize) h = hash_floats(h, l->scales, (size_t)l->out_c);
    layer *sub[10];
    sub_layers(l, sub);
    for (int i = 0; sub[i]; ++i) h = hash_layer(h, sub[i]);
    return h;
}

/* Every batch-norm's statistics, the recurrent sub-layers' included, in
 * layer order: what = 0 sets the rolling ones from the last training
 * forward, 1 writes the rolling ones to f, 2 reads them from f. Returns the
 * number of floats moved, or -1 on a short file.
 * The rolling mean is the batch mean per channel; the rolling variance is
 * the layer's batch variance averaged over its channels, the same for every
 * channel: deep in a network, two noise images give a channel nearly the same
 * value (at 1x1 pixels, the variance of two numbers), and dividing by the
 * square root of such a variance would magnify any rounding difference
 * without bound (darknet.cfg: 1e5 eps in bfloat16 with per-channel ones). */
static long bn_stats(layer *l, int what, FILE *f)
{
    long n = 0;
    if (l->batch_normalize && l->rolling_mean && l->rolling_variance) {
        size_t c = (size_t)l->out_c;
        if (what == 0) {
            double v = 0;
            for (size_t i = 0; i < c; ++i) v += l->variance[i];
            memcpy(l->rolling_mean, l->mean, c * sizeof(float));
            for (size_t i = 0; i < c; ++i) l->rolling_variance[i] = (float)(v / (double)c);
        } else if (what == 1) {
            if (fwrite(l->rolling_mean, sizeof(float), c, f) != c ||
                fwrite(l->rolling_variance, sizeof(float), c, f) != c)
                return -1;
        } else if (fread(l->rolling_mean, sizeof(float), c, f) != c ||
                   fread(l->rolling_variance, sizeof(float), c, f) != c) {
            return -1;
        }
        n += 2 * (long)c;
    }
    layer *sub[10];
    sub_layers(l, sub);
    for (int i = 0; sub[i]; ++i) {
        long m = bn_stats(sub[i], what, f);
        if (m < 0) return -1;
        n += m;
    }
    return n;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float uniform(float lo, float hi)
{
    return lo + (hi - lo) * ((float)rand() / (float)RAND_MAX);
}

/* A truth of the shape the network's loss reads. */
static const char *make_truth(network *net)
{
    int head = net->n - 1;
    while (head > 0 && net->layers[head].type == COST) --head;
    const layer *l = &net->layers[head];
    for (int b = 0; b < net->batch; ++b) {
        float *t = net->truth + (size_t)b * net->truths;
        memset(t, 0, sizeof(float) * net->truths);
        if (l->type == YOLO || l->type == REGION) {
            /* two boxes: x, y, w, h, class (region: coords, then class) */
            int stride = l->type == YOLO ? 5 : l->coords + 1;
            for (int k = 0; k < 2 && (k + 1) * stride <= net->truths; ++k) {
                float *bx = t + k * stride;
                bx[0] = uniform(.25f, .75f), bx[1] = uniform(.25f, .75f);
                bx[2] = uniform(.1f, .4f), bx[3] = uniform(.1f, .4f);
                bx[stride - 1] = (float)(rand() % l->classes);
            }
        } else if (l->type == DETECTION) {
            /* per grid cell: objectness, one-hot classes, x, y, w, h */
            int cell = 1 + l->coords + l->classes, cells = l->side * l->side;
            for (int k = 0; k < 2; ++k) {
                float *c = t + (rand() % cells) * cell;
                c[0] = 1;
                c[1 + rand() % l->classes] = 1;
                c[1 + l->classes] = uniform(.2f, .8f), c[2 + l->classes] = uniform(.2f, .8f);
                c[3 + l->classes] = uniform(.1f, .4f), c[4 + l->classes] = uniform(.1f, .4f);
            }
        } else if (l->type == SOFTMAX) {
            t[rand() % net->truths] = 1;
        } else if (net->layers[net->n - 1].type == COST) {
            for (int i = 0; i < net->truths; ++i) t[i] = uniform(0, 1);
        }
    }
    if (l->type == YOLO || l->type == REGION || l->type == DETECTION) return "boxes";
    if (l->type == SOFTMAX) return "one-hot";
    return net->layers[net->n - 1].type == COST ? "uniform" : "none";
}

/* Layers that squash their input (softmax, logistic) or read a truth. */
static int is_head(LAYER_TYPE t)
{
    return t == YOLO || t == REGION || t == DETECTION || t == SOFTMAX || t == LOGXENT;
}

/* The compared outputs: the input of every head (the logits: a softmax or a
 * logistic saturates on a randomly initialised network and would hide any
 * difference), or else darknet's output layer. */
static float *gather_outputs(network *net, size_t *count)
{
    size_t n = 0;
    int heads = 0;
    for (int i = 1; i < net->n; ++i)
        if (is_head(net->layers[i].type)) n += (size_t)net->layers[i].inputs * net->batch, ++heads;
    if (!heads) n = (size_t)net->outputs * net->batch;
    float *v = malloc(n * sizeof *v);
    if (!v) return NULL;
    if (!heads) memcpy(v, net->output, n * sizeof *v);
    size_t at = 0;
    for (int i = 1; heads && i < net->n; ++i) {
        const layer *l = &net->layers[i];
        if (!is_head(l->type)) continue;
        /* darknet feeds layer i the output of layer i - 1 */
        memcpy(v + at, net->layers[i - 1].output, (size_t)l->inputs * net->batch * sizeof *v);
        at += (size_t)l->inputs * net->batch;
    }
    *count = n;
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: zoo_driver CFG SIZE fp32|float16|bfloat16 OUT [BN]\n");
        return 2;
    }
    const char *cfg = argv[1], *mode = argv[3], *out = argv[4];
    int size = atoi(argv[2]);
    const char *dtype = NULL;
    if (!strcmp(mode, "float16") || !strcmp(mode, "bfloat16")) dtype = mode;
    else if (strcmp(mode, "fp32")) {
        fprintf(stderr, "zoo_driver: unknown mode %s\n", mode);
        return 2;
    }
#ifndef DARKNET_AMP
    if (dtype) {
        fprintf(stderr, "zoo_driver: stock darknet runs fp32 only\n");
        return 2;
    }
#endif
    char path[4096];
    FILE *f;
    snprintf(path, sizeof path, "%s.cfg", out);
    if (size < 1 || write_cfg(cfg, path, size, dtype)) return 2;

    gpu_index = -1; /* the CPU path, also in a CUDA build */
#ifdef DARKNET_AMP
    if (amp_register() != AMP_OK) return 2;
#endif
    double t0 = now();
    srand(SEED);
    network *net = parse_network_cfg(path);
    uint64_t init = 0xcbf29ce484222325ull;
    for (int i = 0; i < net->n; ++i) init = hash_layer(init, &net->layers[i]);

    srand(SEED + 1);
    for (size_t i = 0; i < (size_t)net->inputs * net->batch; ++i) net->input[i] = uniform(0, 1);
    const char *truth = make_truth(net);
    float *input = malloc(sizeof(float) * net->inputs * net->batch);
    float *truths = malloc(sizeof(float) * net->truths * net->batch);
    if (!input || !truths) return 2;
    memcpy(input, net->input, sizeof(float) * net->inputs * net->batch);
    memcpy(truths, net->truth, sizeof(float) * net->truths * net->batch);

    double t1 = now();
    /* Batch-norm statistics: from BN when given, else from one training
     * forward of this batch (saved to OUT.bn for the other runs). */
    long nbn = 0;
    /* every run makes this training forward: recurrent layers keep state */
    net->train = 1;
    forward_network(net);
    if (argc == 6) {
        f = fopen(argv[5], "rb");
        for (int i = 0; f && nbn >= 0 && i < net->n; ++i) {
            long m = bn_stats(&net->layers[i], 2, f);
            nbn = m < 0 ? -1 : nbn + m;
        }
        if (!f || nbn < 0 || fgetc(f) != EOF) {
            fprintf(stderr, "zoo_driver: %s does not hold this network's batch-norm statistics\n",
                    argv[5]);
            return 2;
        }
        fclose(f);
    } else {
        snprintf(path, sizeof path, "%s.bn", out);
        f = fopen(path, "wb");
        for (int i = 0; f && nbn >= 0 && i < net->n; ++i) {
            long m = bn_stats(&net->layers[i], 0, NULL) < 0 ? -1 : bn_stats(&net->layers[i], 1, f);
            nbn = m < 0 ? -1 : nbn + m;
        }
        if (!f || nbn < 0 || fclose(f)) {
            fprintf(stderr, "zoo_driver: cannot write %s\n", path);
            return 2;
        }
    }
    net->train = 0;
    forward_network(net);
    double t2 = now();
    size_t nout = 0;
    float *outputs = gather_outputs(net, &nout);
    if (!outputs) return 2;
    snprintf(path, sizeof path, "%s.bin", out);
    f = fopen(path, "wb");
    if (!f || fwrite(outputs, sizeof *outputs, nout, f) != nout || fclose(f)) {
        fprintf(stderr, "zoo_driver: cannot write %s\n", path);
        return 2;
    }

    srand(SEED + 2);
    float loss[ITERS];
    char status[512] = "";
    for (int it = 0; it < ITERS; ++it) {
        data d = {0};
        d.X = make_matrix(net->batch, net->inputs);
        d.y = make_matrix(net->batch, net->truths);
        for (int b = 0; b < net->batch; ++b) {
            memcpy(d.X.vals[b], input + (size_t)b * net->inputs, sizeof(float) * net->inputs);
            memcpy(d.y.vals[b], truths + (size_t)b * net->truths, sizeof(float) * net->truths);
        }
        loss[it] = train_network(net, d);
        free_data(d);
#ifdef DARKNET_AMP
        darknet_train_iteration(net, status, sizeof status); /* the scale and skips suffix */
#endif
        printf("%s %s: iteration %d loss %.9g %s\n", cfg, mode, it + 1, loss[it], status);
    }

    double t3 = now();
    snprintf(path, sizeof path, "%s.txt", out);
    f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "zoo_driver: cannot write %s\n", path);
        return 2;
    }
    fprintf(f, "mode %s\ninput %dx%dx%d\ninputs %d\nlayers %d\ntruth %s\n", mode, net->w, net->h,
            net->c, net->inputs, net->n, truth);
    fprintf(f, "init_hash %016llx\n", (unsigned long long)init);
    fprintf(f, "bn_stats %ld\noutputs %zu\noutput_hash %016llx\n", nbn, nout,
            (unsigned long long)hash_floats(0xcbf29ce484222325ull, outputs, nout));
    for (int it = 0; it < ITERS; ++it) fprintf(f, "loss%d %a\n", it + 1, loss[it]);
    fprintf(f, "seconds %.2f parse, %.2f forward, %.2f training\n", t1 - t0, t2 - t1, t3 - t2);
#ifdef DARKNET_AMP
    amp_net *an = dtype ? amp_net_of(net) : NULL;
    if (an && an->scaler) {
        fprintf(f, "scale %g\nskips %llu\n", amp_scaler_get_scale(an->scaler),
                amp_scaler_skips(an->scaler));
        /* layer types with no half path yet, each once, with its count */
        char fallback[1024] = "";
        int half = 0, onednn = 0;
        size_t len = 0;
        for (int i = 0; i < net->n; ++i) {
            half += an->layers[i].precision == AMP_PRECISION_HALF;
            onednn += an->layers[i].precision == AMP_PRECISION_HALF &&
                      amp_cpu_layer_runner(&an->layers[i]) == AMP_CPU_RUNS_ONEDNN;
            if (an->layers[i].precision != AMP_PRECISION_FALLBACK) continue;
            int seen = 0, count = 0;
            for (int j = 0; j < net->n; ++j) {
                if (net->layers[j].type != net->layers[i].type ||
                    an->layers[j].precision != AMP_PRECISION_FALLBACK)
                    continue;
                seen += j < i;
                ++count;
            }
            if (!seen && len < sizeof fallback - 64)
                len += snprintf(fallback + len, sizeof fallback - len, "%s%s:%d", len ? "," : "",
                                get_layer_string(net->layers[i].type), count);
        }
        fprintf(f, "half_layers %d\nonednn_layers %d\nfallback %s\n", half, onednn,
                len ? fallback : "-");
    }
#endif
    if (fclose(f)) return 2;
    free(outputs);
    free(input);
    free(truths);
    free_network(net);
    return 0;
}
