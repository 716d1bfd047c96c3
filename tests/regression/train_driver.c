/* Deterministic darknet training driver: the regression harness.
 *
 * Built twice from this one file: against Debian's stock libdarknet.so (the
 * FP32 oracle) and against the fork. It uses only darknet API that both share
 * (darknet.h of 2018), so the two builds run the same calls on the same data:
 *
 *   train_driver --cfg FILE --list FILE [--iters N] [--seed S]
 *                [--weights FILE] [--save FILE] [--offset K] [--grad-zeros] [--time]
 *
 * srand(S) precedes everything (darknet draws its initial weights from rand()).
 * Iteration i trains on images i*B .. i*B+B-1 of the list (B = batch *
 * subdivisions, wrapping around), loaded at the network's size with no random
 * augmentation, labels read from darknet's labels/ path. Each iteration prints
 * its loss in decimal and in hex (%a, exact); at the end the trained weights
 * are saved in darknet's format and an FNV-1a 64-bit checksum of that file is
 * printed, so two runs can be compared bit for bit. Built against the fork
 * (DARKNET_AMP defined) it registers the AMP plugin, so a cfg with amp=1 trains
 * with AMP, and each iteration line ends with the scale and skipped steps.
 * --grad-zeros (cfg with momentum=0, decay=0, so that weight_updates holds just
 * the batch's gradient before the update) adds to each line the fraction of
 * convolution weight-gradient elements that are exactly zero and, with AMP,
 * of the gradient elements entering half layers that rounding flushed to zero.
 * --time (benchmarks, scripts/gpu-check) adds a line per iteration,
 * "time ITER SECONDS CALLS MIB": the seconds train_network took, data loading
 * excluded (on a GPU network, until the device finished the step: the driver
 * then synchronises once, after reading the count); the blocking CUDA calls it
 * made, when the counting shim tests/cuda/sync_count_shim.c is preloaded
 * (else -1); the device memory in use (cudaMemGetInfo, the whole device; -1
 * on the CPU); and at the end "peak_rss_mib MIB": the process's peak resident
 * memory (getrusage), the whole run's. The other lines are unchanged.
 */
#include "darknet.h"
#ifdef DARKNET_AMP
#include "darknet_amp.h" /* the fork's build: cfgs with [net] amp=1 train with AMP */
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef GPU
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#endif

static void usage(void)
{
    fprintf(stderr,
            "usage: train_driver --cfg FILE --list FILE [--iters N] [--seed S]\n"
            "                    [--weights FILE] [--save FILE] [--offset K] [--grad-zeros]\n"
            "                    [--time]\n");
}

/* Reads the non-empty lines of a file into a NULL-terminated array. */
static char **read_lines(const char *path, int *count)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    char **v = NULL;
    int n = 0, cap = 0;
    if (!f) {
        fprintf(stderr, "train_driver: cannot open %s\n", path);
        return NULL;
    }
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = 0;
        if (!len) continue;
        if (n + 1 >= cap) {
            cap = cap ? 2 * cap : 64;
            v = realloc(v, cap * sizeof *v);
            if (!v) abort();
        }
        v[n] = strdup(line);
        if (!v[n]) abort();
        ++n;
    }
    fclose(f);
    if (v) v[n] = NULL;
    *count = n;
    return v;
}

/* darknet's convention: .../images/x.png -> .../labels/x.txt */
static int label_path(const char *image, char *out, size_t size)
{
    const char *dir = strstr(image, "/images/");
    const char *dot = strrchr(image, '.');
    if (!dir || !dot || dot < dir) return -1;
    int n = snprintf(out, size, "%.*s/labels/%.*s.txt", (int)(dir - image), image,
                     (int)(dot - dir - 8), dir + 8);
    return n > 0 && (size_t)n < size ? 0 : -1;
}

/* Truth rows as darknet's yolo layer reads them: x, y, w, h, class per box. */
static int read_truth(const char *image, float *truth, int max_boxes)
{
    char path[4096];
    float x, y, w, h;
    int id, k = 0;
    if (label_path(image, path, sizeof path)) {
        fprintf(stderr, "train_driver: no labels/ path for %s\n", image);
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "train_driver: cannot open %s\n", path);
        return -1;
    }
    while (k < max_boxes && fscanf(f, "%d %f %f %f %f", &id, &x, &y, &w, &h) == 5) {
        float *t = truth + 5 * k++;
        t[0] = x, t[1] = y, t[2] = w, t[3] = h, t[4] = (float)id;
    }
    fclose(f);
    return 0;
}

static uint64_t fnv1a_file(const char *path, long *bytes)
{
    uint64_t hash = 0xcbf29ce484222325ull;
    unsigned char buf[1 << 16];
    size_t got;
    FILE *f = fopen(path, "rb");
    *bytes = -1;
    if (!f) return 0;
    *bytes = 0;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        for (size_t i = 0; i < got; ++i) hash = (hash ^ buf[i]) * 0x100000001b3ull;
        *bytes += (long)got;
    }
    fclose(f);
    return hash;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Blocking CUDA calls so far, from the counting shim when it is preloaded. */
static long sync_calls(void)
{
#ifdef GPU
    static long (*count)(void);
    static int looked;
    if (!looked++) *(void **)&count = dlsym(RTLD_DEFAULT, "sync_count_total");
    if (count) return count();
#endif
    return -1;
}

/* --time: the device's share of the step (a GPU network's kernels may still
 * run when train_network returns), and the device memory in use. */
static double device_used_mib(const network *net)
{
#ifdef GPU
    size_t free_b = 0, total_b = 0;
    if (net->gpu_index >= 0) {
        cudaDeviceSynchronize();
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
            return (double)(total_b - free_b) / (1 << 20);
    }
#else
    (void)net;
#endif
    return -1;
}

static double zero_fraction, flushed_fraction = -1;

/* train_network's loop, with the zero count taken between the last backward
 * and the update (what train_network_datum does, in the same order). */
static float train_counting_zeros(network *net, data d)
{
    float sum = 0;
    int n = d.X.rows / net->batch;
    for (int i = 0; i < n; ++i) {
        get_next_batch(d, net->batch, i * net->batch, net->input, net->truth);
        *net->seen += net->batch;
        net->train = 1;
        forward_network(net);
        backward_network(net);
        sum += *net->cost;
        if (i + 1 < n) continue;
        size_t zeros = 0, total = 0;
        for (int l = 0; l < net->n; ++l) {
            const layer *L = &net->layers[l];
            if (L->type != CONVOLUTIONAL) continue;
            for (int k = 0; k < L->nweights; ++k) zeros += L->weight_updates[k] == 0.0f;
            total += (size_t)L->nweights;
        }
        zero_fraction = total ? (double)zeros / total : 0;
#ifdef DARKNET_AMP
        flushed_fraction = amp_network_flushed(net);
#endif
        update_network(net);
    }
    return sum / (n * net->batch);
}

int main(int argc, char **argv)
{
    const char *cfg = NULL, *list = NULL, *weights = NULL;
    const char *save = "train_driver.weights";
    int iters = 20, offset = 0, grad_zeros = 0, timing = 0;
    unsigned seed = 1;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--grad-zeros") || !strcmp(a, "--time")) {
            *(a[2] == 'g' ? &grad_zeros : &timing) = 1;
            continue;
        }
        if (!v) { usage(); return 2; }
        if (!strcmp(a, "--cfg")) cfg = v;
        else if (!strcmp(a, "--list")) list = v;
        else if (!strcmp(a, "--iters")) iters = atoi(v);
        else if (!strcmp(a, "--seed")) seed = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--weights")) weights = v;
        else if (!strcmp(a, "--save")) save = v;
        else if (!strcmp(a, "--offset")) offset = atoi(v);
        else { usage(); return 2; }
        ++i;
    }
    if (!cfg || !list || iters < 1 || offset < 0) { usage(); return 2; }

    int npaths = 0;
    char **paths = read_lines(list, &npaths);
    if (!paths || !npaths) {
        fprintf(stderr, "train_driver: no images in %s\n", list);
        return 1;
    }

    /* darknet's -nogpu: the CPU path, also in a CUDA build; TRAIN_DRIVER_GPU=<n>
     * trains on GPU n instead (a CUDA build's gpu tests). */
    const char *gpu = getenv("TRAIN_DRIVER_GPU");
    gpu_index = gpu && *gpu ? atoi(gpu) : -1;
#ifdef DARKNET_AMP
    if (amp_register() != AMP_OK) return 1;
#endif
    srand(seed);
    network *net = parse_network_cfg((char *)cfg);
    if (weights) load_weights(net, (char *)weights);
    int imgs = net->batch * net->subdivisions;
    int max_boxes = net->truths / 5;
    printf("train_driver: %s, %dx%dx%d, batch %d x %d subdivisions, %d iterations, seed %u\n",
           cfg, net->w, net->h, net->c, net->batch, net->subdivisions, iters, seed);

    for (int it = 0; it < iters; ++it) {
        data d = {0};
        d.X = make_matrix(imgs, net->w * net->h * net->c);
        d.y = make_matrix(imgs, net->truths);
        for (int b = 0; b < imgs; ++b) {
            char *path = paths[((long)offset + (long)it * imgs + b) % npaths];
            image im = load_image_color(path, net->w, net->h);
            memcpy(d.X.vals[b], im.data, sizeof(float) * d.X.cols);
            free_image(im);
            if (read_truth(path, d.y.vals[b], max_boxes)) return 1;
        }
        const double t0 = timing ? now_s() : 0;
        const long c0 = timing ? sync_calls() : 0;
        float loss = grad_zeros ? train_counting_zeros(net, d) : train_network(net, d);
        if (timing) {
            const long calls = c0 < 0 ? -1 : sync_calls() - c0;
            const double mib = device_used_mib(net); /* waits for the device first */
            printf("time %d %.6f %ld %.0f\n", it + 1, now_s() - t0, calls, mib);
        }
        free_data(d);
        char status[512] = "";
#ifdef DARKNET_AMP
        /* the progress suffix (scale, skipped steps), or why training must stop */
        if (darknet_train_iteration(net, status, sizeof status)) {
            fprintf(stderr, "%s\n", status);
            return 1;
        }
#endif
        if (grad_zeros) printf("iter %d loss %.9g %a zero_grad %.6f flushed %.6f %s\n", it + 1,
                               loss, loss, zero_fraction, flushed_fraction, status);
        else printf("iter %d loss %.9g %a %s\n", it + 1, loss, loss, status);
        fflush(stdout);
    }

    save_weights(net, (char *)save);
    long bytes;
    uint64_t sum = fnv1a_file(save, &bytes);
    if (bytes < 0) {
        fprintf(stderr, "train_driver: cannot read back %s\n", save);
        return 1;
    }
    printf("weights %s %ld bytes fnv1a64 %016llx\n", save, bytes, (unsigned long long)sum);
    struct rusage ru;
    if (timing && getrusage(RUSAGE_SELF, &ru) == 0)
        printf("peak_rss_mib %.1f\n", ru.ru_maxrss / 1024.0); /* Linux: kilobytes */
    free_network(net);
    for (int i = 0; i < npaths; ++i) free(paths[i]);
    free(paths);
    return 0;
}
