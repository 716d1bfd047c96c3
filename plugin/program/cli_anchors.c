/* `darknet-amp detector calc_anchors DATA -num_of_clusters N -width W
 * -height H`: anchors for a cfg's [yolo] sections from the training labels.
 *
 * Every box of DATA's train= list's label files, its size in network pixels
 * (w W, h H), is clustered by k-means with 1 - IoU as the distance (boxes
 * compared as if centred on one point: only their shapes count). The first
 * centres are k-means++'s, drawn from a fixed seed (-seed, default 1), so a
 * label set gives the same anchors on every run and machine; a cluster left
 * empty takes the box its centre fits worst. The anchors are printed by area,
 * rounded to whole pixels, with the mean IoU of the boxes with their anchor.
 * Exit status 0, 1 when the labels cannot be read (named), 2 on a malformed
 * command line. */
#include "cli.h"
#include "detector_map.h" /* amp_map_read_lines, amp_map_read_labels */
#include "error.h"
#include "option_list.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ITERATIONS 1000

typedef struct {
    double w, h;
} shape;

static double shape_iou(shape a, shape b)
{
    const double i = (a.w < b.w ? a.w : b.w) * (a.h < b.h ? a.h : b.h);
    const double u = a.w * a.h + b.w * b.h - i;
    return u > 0 ? i / u : 0;
}

/* splitmix64: a small, portable generator for the first centres */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s)
{
    return (double)(next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* The closest centre of b (the highest IoU) and that IoU. */
static int nearest(const shape *c, int k, shape b, double *iou)
{
    int best = 0;
    *iou = -1;
    for (int j = 0; j < k; ++j) {
        const double v = shape_iou(b, c[j]);
        if (v > *iou) *iou = v, best = j;
    }
    return best;
}

/* k-means++ centres, then Lloyd's iterations; returns the mean IoU. */
static double cluster(const shape *b, int n, shape *c, int k, uint64_t seed, int *iterations)
{
    int *of = malloc(n * sizeof *of);
    double *d = malloc(n * sizeof *d);
    double mean = 0;
    if (!of || !d) {
        free(of);
        free(d);
        return -1;
    }
    c[0] = b[next(&seed) % (uint64_t)n];
    for (int j = 1; j < k; ++j) {
        double total = 0, iou;
        for (int i = 0; i < n; ++i) {
            nearest(c, j, b[i], &iou);
            d[i] = (1 - iou) * (1 - iou);
            total += d[i];
        }
        double r = uniform(&seed) * total;
        int pick = n - 1;
        for (int i = 0; i < n; ++i)
            if ((r -= d[i]) <= 0) {
                pick = i;
                break;
            }
        c[j] = b[pick];
    }
    for (int i = 0; i < n; ++i) of[i] = -1;
    int it = 0, changed = 1;
    for (; it < MAX_ITERATIONS && changed; ++it) {
        changed = 0;
        for (int i = 0; i < n; ++i) {
            double iou;
            const int j = nearest(c, k, b[i], &iou);
            changed += j != of[i];
            of[i] = j;
            d[i] = iou;
        }
        for (int j = 0; j < k; ++j) {
            double w = 0, h = 0;
            int m = 0;
            for (int i = 0; i < n; ++i)
                if (of[i] == j) w += b[i].w, h += b[i].h, ++m;
            if (m) {
                c[j].w = w / m, c[j].h = h / m;
                continue;
            }
            int worst = 0; /* an empty cluster: the box fitted worst */
            for (int i = 1; i < n; ++i)
                if (d[i] < d[worst]) worst = i;
            c[j] = b[worst];
            d[worst] = 2;
            changed = 1;
        }
    }
    for (int i = 0; i < n; ++i) mean += shape_iou(b[i], c[nearest(c, k, b[i], &d[i])]);
    free(of);
    free(d);
    *iterations = it;
    return mean / n;
}

static int by_area(const void *x, const void *y)
{
    const double a = ((const shape *)x)->w * ((const shape *)x)->h;
    const double b = ((const shape *)y)->w * ((const shape *)y)->h;
    return (a > b) - (a < b);
}

static int usage(const char *prog, const char *why, const char *arg, int *status)
{
    return amp_cli_refuse(status, 2, prog, "detector calc_anchors",
                          "detector calc_anchors DATA -num_of_clusters N -width W -height H "
                          "[-seed 1]",
                          why, arg);
}

static int fail(const char *prog, const char *what, int *status)
{
    return amp_cli_refuse(status, 1, prog, "detector calc_anchors", NULL, "%s", what);
}

/* Every label box of the images' label files, in network pixels. */
static shape *label_boxes(char **images, int nimages, int width, int height, int *n, char *err,
                         size_t errlen)
{
    int cap = 1024;
    shape *b = malloc(cap * sizeof *b);
    *n = 0;
    for (int i = 0; b && i < nimages; ++i) {
        box_label *lb;
        int nl = amp_map_read_labels(images[i], 0, &lb, err, errlen);
        if (nl < 0) {
            free(b);
            return NULL;
        }
        for (int j = 0; j < nl; ++j) {
            if (*n == cap) {
                shape *g = realloc(b, 2 * cap * sizeof *b);
                if (!g) {
                    free(lb);
                    free(b);
                    amp_errorf(err, errlen, "out of memory");
                    return NULL;
                }
                b = g, cap *= 2;
            }
            b[(*n)++] = (shape){lb[j].w * width, lb[j].h * height};
        }
        free(lb);
    }
    if (!b) amp_errorf(err, errlen, "out of memory");
    return b;
}

int amp_cli_calc_anchors(int argc, char **argv, int *status)
{
    const char *prog = argv[0], *datacfg = NULL;
    long k = 0, width = 0, height = 0, seed = 1;
    for (int i = 3; i < argc; ++i) {
        const char *a = argv[i];
        long *v = !strcmp(a, "-num_of_clusters") ? &k
                  : !strcmp(a, "-width")         ? &width
                  : !strcmp(a, "-height")        ? &height
                  : !strcmp(a, "-seed")          ? &seed
                                                 : NULL;
        if (v) {
            char *end = NULL;
            const char *s = i + 1 < argc ? argv[++i] : "";
            *v = strtol(s, &end, 10);
            if (!*s || *end || *v < (v == &seed ? 0 : 1) || *v > 100000)
                return usage(prog, "%s needs a whole number (>= 1; -seed: >= 0)", a, status);
        } else if (a[0] == '-' && a[1]) {
            return usage(prog, "unknown option %s", a, status);
        } else if (!datacfg) {
            datacfg = a;
        } else {
            return usage(prog, "one argument too many: %s", a, status);
        }
    }
    if (!datacfg || !k || !width || !height)
        return usage(prog, "needs DATA, -num_of_clusters, -width and -height%s", "", status);

    char err[AMP_MSG_LEN], what[AMP_MSG_LEN + 64];
    FILE *probe = fopen(datacfg, "r"); /* darknet's reader exits on a missing file */
    if (!probe) {
        snprintf(what, sizeof what, "%s: cannot read the data file", datacfg);
        return fail(prog, what, status);
    }
    fclose(probe);
    list *opts = read_data_cfg((char *)datacfg);
    const char *train = option_find_str(opts, "train", NULL);
    if (!train) {
        snprintf(what, sizeof what, "%s has no train= list of training images", datacfg);
        return fail(prog, what, status);
    }
    int nimages = 0, n = 0;
    char **images = amp_map_read_lines(train, &nimages, err, sizeof err);
    shape *boxes = images ? label_boxes(images, nimages, (int)width, (int)height, &n, err,
                                       sizeof err)
                          : NULL;
    amp_map_free_lines(images);
    if (!boxes) return fail(prog, err, status);
    if (n < k) {
        free(boxes);
        snprintf(what, sizeof what, "%d boxes in the labels of %s, fewer than %ld clusters", n,
                 train, k);
        return fail(prog, what, status);
    }
    shape *c = malloc(k * sizeof *c);
    int iterations = 0;
    const double mean = c ? cluster(boxes, n, c, (int)k, (uint64_t)seed, &iterations) : -1;
    free(boxes);
    if (mean < 0) {
        free(c);
        return fail(prog, "out of memory", status);
    }
    qsort(c, k, sizeof *c, by_area);
    printf("calc_anchors: %d boxes in the labels of %d images of %s, %ld clusters at %ld x %ld "
           "(k-means on 1 - IoU, seed %ld, %d iterations)\n",
           n, nimages, train, k, width, height, seed, iterations);
    printf("anchors = ");
    for (long j = 0; j < k; ++j)
        printf("%s%.0f,%.0f", j ? ", " : "", c[j].w, c[j].h);
    printf("\navg IoU = %.2f %%\n", 100 * mean);
    printf("Paste the anchors line into every [yolo] section of the cfg (num=%ld); each "
           "section's mask= picks its anchors, the largest for the coarsest [yolo] layer.\n", k);
    free(c);
    *status = 0;
    return 1;
}
