/* [net] ema_alpha (patches/0035-weights-ema.patch), against values computed
 * here:
 * - before max_batches / 2 nothing is allocated and no hook is asked;
 * - at max_batches / 2 the average is the weights, biases and batch-norm
 *   scales of every convolutional layer, bit for bit;
 * - after each later step ema = alpha ema + (1 - alpha) w (within 2 ulp of
 *   this test's float arithmetic), once a step, not once a micro-batch,
 *   through train_network itself;
 * - a step the hooks call skipped leaves the average as it was, bit for bit;
 * - at max_batches - 1000 the average replaces the weights (bit for bit),
 *   weights_changed is said once, the rolling statistics and the connected
 *   layer are untouched, and the average moves no more;
 * - save_weights_ema writes save_weights' layout, the averages in place of
 *   the weights, the live rolling statistics, nothing before the start;
 * - a resume continues it, bit for bit, from the average saved with the
 *   weights it resumes, and starts it again from one of another iteration;
 * - ema_alpha outside [0, 1) is refused, naming the key; without the key
 *   nothing is allocated.
 *   weights_ema_test SCRATCH
 */
#include "darknet.h"
#include "weights_ema.h"

#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *scratch;
static const float alpha = 0.75f;

static const char *cfg_text =
    "[net]\nbatch=2\nsubdivisions=2\nwidth=4\nheight=4\nchannels=1\nmax_batches=2010\n"
    "learning_rate=0.1\nmomentum=0.9\ndecay=0\n%s\n"
    "[convolutional]\nbatch_normalize=1\nfilters=2\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[convolutional]\nfilters=3\nsize=1\nstride=1\npad=1\nactivation=linear\n"
    "[connected]\noutput=2\nactivation=linear\n"
    "[cost]\ntype=sse\n";

static struct {
    int skip, asked, changed;
} hook_state;

static int on_skipped(void *ctx, network *net)
{
    (void)ctx, (void)net;
    hook_state.asked++;
    return hook_state.skip;
}

static void on_changed(void *ctx, network *net)
{
    (void)ctx, (void)net;
    hook_state.changed++;
}

static const darknet_hooks hooks = {.step_skipped = on_skipped, .weights_changed = on_changed};

static network *parse(const char *name, const char *net_line, char *err, size_t errlen)
{
    char path[512], text[2048];
    snprintf(path, sizeof path, "%s/%s.cfg", scratch, name);
    snprintf(text, sizeof text, cfg_text, net_line);
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    return parse_network_cfg_checked(path, err, errlen);
}

/* The averaged arrays of layer l: 0 weights, 1 biases, 2 scales. */
static float *live(layer *l, int k, int *n)
{
    *n = k == 0 ? l->nweights : l->n;
    return k == 0 ? l->weights : k == 1 ? l->biases : l->batch_normalize ? l->scales : NULL;
}

static float *avg(layer *l, int k)
{
    return k == 0 ? l->weights_ema : k == 1 ? l->biases_ema : l->scales_ema;
}

static void at_iteration(network *net, int it)
{
    *net->seen = (size_t)it * net->batch * net->subdivisions;
}

/* Every averaged value moved by a different amount (as a step would). */
static void perturb(network *net, float by)
{
    for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 3; ++k) {
            int n;
            float *w = live(&net->layers[i], k, &n);
            for (int j = 0; w && j < n; ++j) w[j] += by * (float)(j + 1 + 7 * k + 13 * i);
        }
}

/* Copies of the averages (or the weights) of both convolutions. */
typedef struct {
    float v[2][3][64];
} snap;

static void take(network *net, snap *s, int averages)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 3; ++k) {
            int n;
            float *w = live(&net->layers[i], k, &n);
            float *src = averages ? avg(&net->layers[i], k) : w;
            if (w && src) memcpy(s->v[i][k], src, (size_t)n * sizeof(float));
        }
}

/* Largest distance, in units of the expected value's float spacing, of the
 * averages from alpha prev + (1 - alpha) w (w: the weights now). */
static double ulps_from_rule(network *net, const snap *prev)
{
    double worst = 0;
    for (int i = 0; i < 2; ++i)
        for (int k = 0; k < 3; ++k) {
            int n;
            float *w = live(&net->layers[i], k, &n);
            float *e = avg(&net->layers[i], k);
            for (int j = 0; w && j < n; ++j) {
                const float want = alpha * prev->v[i][k][j] + (1 - alpha) * w[j];
                const double ulp = nextafterf(fabsf(want), INFINITY) - fabsf(want);
                const double d = fabs((double)e[j] - want) / ulp;
                if (d > worst) worst = d;
            }
        }
    return worst;
}

static int same_as(network *net, const snap *s, int averages)
{
    snap now;
    take(net, &now, averages);
    return !memcmp(&now, s, sizeof now);
}

static long file_size(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fclose(f);
    return n;
}

/* save_weights_ema's file: header, then per convolution biases, [scales,
 * mean, variance], weights; then the connected layer. */
static void check_file(network *net, const char *path, const char *weights_path)
{
    CHECK(file_size(path) > 0 && file_size(path) == file_size(weights_path),
          "the average's file has save_weights' size (%ld and %ld bytes)", file_size(path),
          file_size(weights_path));
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, 3 * sizeof(int) + sizeof(size_t), SEEK_SET);
    int bad = 0, stats_bad = 0;
    float buf[64];
    for (int i = 0; i < 2; ++i) {
        layer *l = &net->layers[i];
        bad += fread(buf, sizeof(float), l->n, f) != (size_t)l->n ||
               memcmp(buf, l->biases_ema, l->n * sizeof(float));
        if (l->batch_normalize) {
            bad += fread(buf, sizeof(float), l->n, f) != (size_t)l->n ||
                   memcmp(buf, l->scales_ema, l->n * sizeof(float));
            stats_bad += fread(buf, sizeof(float), l->n, f) != (size_t)l->n ||
                         memcmp(buf, l->rolling_mean, l->n * sizeof(float));
            stats_bad += fread(buf, sizeof(float), l->n, f) != (size_t)l->n ||
                         memcmp(buf, l->rolling_variance, l->n * sizeof(float));
        }
        bad += fread(buf, sizeof(float), l->nweights, f) != (size_t)l->nweights ||
               memcmp(buf, l->weights_ema, l->nweights * sizeof(float));
    }
    layer *c = &net->layers[2];
    bad += fread(buf, sizeof(float), c->outputs, f) != (size_t)c->outputs ||
           memcmp(buf, c->biases, c->outputs * sizeof(float));
    fclose(f);
    CHECK(bad == 0, "the file's convolution biases, scales and weights are the averages, the "
                    "connected layer its own (%d arrays differ)", bad);
    CHECK(stats_bad == 0, "the file's rolling statistics are the live ones (%d differ)", stats_bad);
}

static void schedule(void)
{
    char err[1024];
    network *net = parse("ema", "ema_alpha=0.75", err, sizeof err);
    CHECK(net != NULL, "a cfg with ema_alpha=0.75 builds (%s)", net ? "" : err);
    if (!net) return;
    CHECK(net->ema_alpha == alpha, "ema_alpha read: %g", net->ema_alpha);
    layer *c0 = &net->layers[0], *fc = &net->layers[2];
    /* rolling statistics of their own, to see that nothing averages them */
    for (int j = 0; j < c0->n; ++j) c0->rolling_mean[j] = 0.5f + j, c0->rolling_variance[j] = 2.f + j;
    char wpath[512], epath[512];
    snprintf(wpath, sizeof wpath, "%s/net.weights", scratch);
    snprintf(epath, sizeof epath, "%s/net_ema.weights", scratch);
    remove(epath);

    at_iteration(net, 1004); /* start: 1005, applied at 1010 */
    network_ema_step(net);
    save_weights_ema(net, epath);
    CHECK(!c0->weights_ema && !net->ema_ready && hook_state.asked == 0 && file_size(epath) < 0,
          "iteration 1004 (before max_batches / 2): no average, no hook asked, no file "
          "(asked %d times)", hook_state.asked);

    snap w0, e;
    perturb(net, 0.01f);
    take(net, &w0, 0);
    at_iteration(net, 1005);
    network_ema_step(net);
    CHECK(net->ema_ready && c0->scales_ema && !net->layers[1].scales_ema && same_as(net, &w0, 1),
          "iteration 1005: the averages are the weights, biases and scales, bit for bit");

    double worst = 0;
    for (int it = 1006; it <= 1008; ++it) {
        take(net, &e, 1);
        perturb(net, 0.03f * (float)(it - 1004));
        at_iteration(net, it);
        network_ema_step(net);
        const double d = ulps_from_rule(net, &e);
        if (d > worst) worst = d;
    }
    CHECK(worst <= 2, "iterations 1006-1008: ema = 0.75 ema + 0.25 w, within %.0f ulp (at most 2)",
          worst);

    take(net, &e, 1);
    perturb(net, 0.5f);
    hook_state.skip = 1;
    at_iteration(net, 1009);
    network_ema_step(net);
    hook_state.skip = 0;
    CHECK(same_as(net, &e, 1), "iteration 1009, a skipped step: the averages as they were, bit "
                               "for bit");
    save_weights(net, wpath);
    save_weights_ema(net, epath);
    check_file(net, epath, wpath);

    snap before_apply;
    take(net, &before_apply, 1);
    float mean0 = c0->rolling_mean[1], fcw = fc->weights[3];
    at_iteration(net, 1010);
    network_ema_step(net);
    CHECK(same_as(net, &before_apply, 0) && same_as(net, &before_apply, 1),
          "iteration 1010 (max_batches - 1000): the weights are the averages, which did not "
          "move, bit for bit");
    CHECK(hook_state.changed == 1, "weights_changed said once (%d)", hook_state.changed);
    CHECK(c0->rolling_mean[1] == mean0 && fc->weights[3] == fcw,
          "the rolling statistics and the connected layer are untouched");

    perturb(net, 0.25f);
    take(net, &w0, 0);
    const int asked = hook_state.asked;
    at_iteration(net, 1011);
    network_ema_step(net);
    CHECK(same_as(net, &before_apply, 1) && same_as(net, &w0, 0) && hook_state.asked == asked,
          "iteration 1011: neither the averages nor the weights move, no hook asked");
    free_network(net);
}

/* Through train_network: two micro-batches a step; the average starts and
 * moves once a step. */
static void training(void)
{
    char err[1024];
    network *net = parse("train", "ema_alpha=0.75", err, sizeof err);
    if (!net) {
        CHECK(0, "the training cfg builds: %s", err);
        return;
    }
    data d = {0};
    d.X = make_matrix(2, net->inputs);
    d.y = make_matrix(2, net->outputs);
    for (int i = 0; i < 2 * net->inputs; ++i) d.X.vals[i / net->inputs][i % net->inputs] = (float)((i * 7) % 5) - 2.f;
    for (int i = 0; i < 2 * net->outputs; ++i) d.y.vals[i / net->outputs][i % net->outputs] = 1.f;
    at_iteration(net, 1004);
    train_network(net, d);
    snap w, e;
    take(net, &w, 0);
    CHECK(net->ema_ready && same_as(net, &w, 1) && (int)get_current_batch(net) == 1005,
          "train_network to iteration 1005: the average is that step's weights");
    char wpath[512], epath[512], old_epath[512];
    snprintf(wpath, sizeof wpath, "%s/train.weights", scratch);
    snprintf(epath, sizeof epath, "%s/train_ema.weights", scratch);
    snprintf(old_epath, sizeof old_epath, "%s/train_ema_1005.weights", scratch);
    save_weights_ema(net, old_epath);
    take(net, &e, 1);
    train_network(net, d);
    take(net, &w, 0);
    const double d1 = ulps_from_rule(net, &e);
    CHECK(d1 <= 2 && !same_as(net, &e, 1),
          "train_network to iteration 1006 (2 micro-batches): moved once, within %.0f ulp", d1);

    /* A resume at iteration 1006: from the average saved with the weights it
     * goes on as the run that was not stopped; from one of iteration 1005 it
     * starts again. */
    save_weights(net, wpath);
    save_weights_ema(net, epath);
    network *again = parse("train", "ema_alpha=0.75", err, sizeof err);
    network *restart = parse("train", "ema_alpha=0.75", err, sizeof err);
    if (!again || !restart) {
        CHECK(0, "the resumed networks build: %s", err);
        return;
    }
    load_weights(again, wpath);
    load_weights(restart, wpath);
    network_ema_resume(again, epath);
    network_ema_resume(restart, old_epath);
    CHECK(again->ema_ready, "resumed from %s", epath);
    snap ea;
    take(net, &e, 1);
    take(again, &ea, 1);
    CHECK(!memcmp(&e, &ea, sizeof e), "the resumed average is the saved one, bit for bit");
    CHECK(!restart->ema_ready, "an average of iteration 1005 is not taken for iteration 1006");
    /* darknet's weights files hold no momentum: the resumed weights take
     * another step than the unstopped run's; the average follows them */
    snap saved = ea;
    train_network(again, d);
    train_network(restart, d);
    const double d2 = ulps_from_rule(again, &saved);
    CHECK(d2 <= 2, "iteration 1007: the resumed average moved from the saved one, within %.0f "
                   "ulp of 0.75 saved + 0.25 w", d2);
    take(restart, &w, 0);
    take(again, &ea, 1);
    CHECK(restart->ema_ready && same_as(restart, &w, 1) && memcmp(&w, &ea, sizeof w),
          "the run that could not resume started again from its weights of iteration 1007 (not "
          "the resumed average)");
    free_network(again);
    free_network(restart);
    free_matrix(d.X), free_matrix(d.y);
    free_network(net);
}

static void refusals(void)
{
    char err[1024];
    const char *bad[] = {"ema_alpha=1", "ema_alpha=-0.5", "ema_alpha=nan"};
    for (int i = 0; i < 3; ++i) {
        err[0] = 0;
        network *net = parse("bad", bad[i], err, sizeof err);
        CHECK(!net && strstr(err, "bad.cfg") && strstr(err, "[net]") && strstr(err, "ema_alpha"),
              "%s refused, naming the file, section and key: %s", bad[i], err);
        if (net) free_network(net);
    }
    network *net = parse("none", "", err, sizeof err);
    if (!net) {
        CHECK(0, "a cfg without ema_alpha builds: %s", err);
        return;
    }
    const int asked = hook_state.asked;
    at_iteration(net, 1900);
    network_ema_step(net);
    CHECK(!net->ema_ready && !net->layers[0].weights_ema && hook_state.asked == asked,
          "without ema_alpha: no average at iteration 1900, no hook asked");
    free_network(net);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH\n", argv[0]);
        return 2;
    }
    scratch = argv[1];
    gpu_index = -1; /* CPU networks, also in a CUDA build */
    mkdir(scratch, 0755); /* may exist */
    darknet_set_hooks(&hooks);
    schedule();
    training();
    refusals();
    darknet_set_hooks(NULL);
    return check_report();
}
