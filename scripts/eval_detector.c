/* Validation figures for a darknet detector: mAP@0.5 and recall.
 *
 *   eval_detector CFG WEIGHTS LIST [--names FILE] [--thresh 0.25]
 *
 * Runs the network (CPU) on every image of LIST, keeps detections after
 * darknet's own NMS (0.45), reads the ground truth from darknet's labels/ path,
 * and reports per class the average precision at IoU 0.5 (all-point
 * interpolated precision/recall area, as PASCAL VOC 2010+), their mean (mAP),
 * and recall, precision and mean IoU of the detections scoring >= --thresh.
 * The last line is machine-readable: "eval: map50=... recall=... precision=...".
 */
#include "darknet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CLASSES 64
#define NMS 0.45f
#define MIN_SCORE 0.005f /* detections kept for the precision/recall curve */

typedef struct {
    float score;
    int image, cls, truth; /* truth: index of the matched ground truth or -1 */
} scored;

typedef struct {
    box b;
    int cls, used;
} truth_box;

static char **read_lines(const char *path, int *count)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    char **v = NULL;
    int n = 0;
    if (!f) return NULL;
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = 0;
        if (!len) continue;
        v = realloc(v, (n + 2) * sizeof *v);
        if (!v || !(v[n] = strdup(line))) abort();
        v[++n] = NULL;
    }
    fclose(f);
    *count = n;
    return v;
}

static int read_truth(const char *image, truth_box *out, int max)
{
    char path[4096];
    const char *dir = strstr(image, "/images/"), *dot = strrchr(image, '.');
    int n = 0, cls;
    float x, y, w, h;
    if (!dir || !dot || dot < dir) return -1;
    snprintf(path, sizeof path, "%.*s/labels/%.*s.txt", (int)(dir - image), image,
             (int)(dot - dir - 8), dir + 8);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    while (n < max && fscanf(f, "%d %f %f %f %f", &cls, &x, &y, &w, &h) == 5) {
        out[n].b.x = x, out[n].b.y = y, out[n].b.w = w, out[n].b.h = h;
        out[n].cls = cls, out[n].used = 0;
        ++n;
    }
    fclose(f);
    return n;
}

static int by_score(const void *a, const void *b)
{
    float x = ((const scored *)a)->score, y = ((const scored *)b)->score;
    return (x < y) - (x > y);
}

/* Area under the precision/recall curve, precision made monotone from the right. */
static double average_precision(const scored *d, int n, int cls, int positives)
{
    double *prec = malloc((n + 1) * sizeof *prec), *rec = malloc((n + 1) * sizeof *rec);
    int tp = 0, fp = 0, m = 0;
    double ap = 0;
    if (!prec || !rec) abort();
    for (int i = 0; i < n; ++i) {
        if (d[i].cls != cls) continue;
        if (d[i].truth >= 0) ++tp; else ++fp;
        prec[m] = (double)tp / (tp + fp);
        rec[m] = positives ? (double)tp / positives : 0;
        ++m;
    }
    for (int i = m - 2; i >= 0; --i)
        if (prec[i] < prec[i + 1]) prec[i] = prec[i + 1];
    for (int i = 0; i < m; ++i) ap += (rec[i] - (i ? rec[i - 1] : 0)) * prec[i];
    free(prec);
    free(rec);
    return ap;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: eval_detector CFG WEIGHTS LIST [--names FILE] [--thresh 0.25]\n");
        return 2;
    }
    const char *names_file = NULL;
    float thresh = 0.25f;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--names")) names_file = argv[i + 1];
        else if (!strcmp(argv[i], "--thresh")) thresh = (float)atof(argv[i + 1]);
        else { fprintf(stderr, "eval_detector: unknown option %s\n", argv[i]); return 2; }
    }
    int nimages = 0, nnames = 0;
    char **images = read_lines(argv[3], &nimages);
    char **names = names_file ? read_lines(names_file, &nnames) : NULL;
    if (!images || !nimages) {
        fprintf(stderr, "eval_detector: no images in %s\n", argv[3]);
        return 1;
    }

    gpu_index = -1;
    network *net = parse_network_cfg(argv[1]);
    load_weights(net, argv[2]);
    set_batch_network(net, 1);
    int classes = net->layers[net->n - 1].classes;
    if (classes < 1 || classes > MAX_CLASSES) {
        fprintf(stderr, "eval_detector: %s: last layer has %d classes\n", argv[1], classes);
        return 1;
    }

    int positives[MAX_CLASSES] = {0}, found = 0, kept = 0, total_truth = 0;
    double iou_sum = 0;
    scored *dets = NULL;
    int ndets = 0, cap = 0;
    for (int i = 0; i < nimages; ++i) {
        truth_box truth[256];
        int ntruth = read_truth(images[i], truth, 256);
        if (ntruth < 0) {
            fprintf(stderr, "eval_detector: no labels for %s\n", images[i]);
            return 1;
        }
        for (int t = 0; t < ntruth; ++t)
            if (truth[t].cls >= 0 && truth[t].cls < classes) ++positives[truth[t].cls];
        total_truth += ntruth;

        image im = load_image_color(images[i], 0, 0);
        image sized = letterbox_image(im, net->w, net->h);
        network_predict(net, sized.data);
        int nboxes = 0;
        detection *d = get_network_boxes(net, im.w, im.h, MIN_SCORE, .5f, 0, 1, &nboxes);
        do_nms_sort(d, nboxes, classes, NMS);
        for (int j = 0; j < nboxes; ++j) {
            for (int c = 0; c < classes; ++c) {
                if (d[j].prob[c] < MIN_SCORE) continue;
                if (ndets == cap) {
                    cap = cap ? 2 * cap : 1024;
                    dets = realloc(dets, cap * sizeof *dets);
                    if (!dets) abort();
                }
                dets[ndets].score = d[j].prob[c];
                dets[ndets].image = i;
                dets[ndets].cls = c;
                /* stash the box index in truth until matching, below */
                dets[ndets].truth = j;
                ++ndets;
            }
        }
        /* Greedy matching within this image, highest score first. */
        int first = ndets;
        while (first > 0 && dets[first - 1].image == i) --first;
        qsort(dets + first, ndets - first, sizeof *dets, by_score);
        for (int k = first; k < ndets; ++k) {
            box b = d[dets[k].truth].bbox; /* relative=1: already in 0..1 */
            int best = -1;
            float best_iou = .5f;
            for (int t = 0; t < ntruth; ++t) {
                if (truth[t].used || truth[t].cls != dets[k].cls) continue;
                float iou = box_iou(b, truth[t].b);
                if (iou >= best_iou) best_iou = iou, best = t;
            }
            dets[k].truth = best;
            if (best >= 0) truth[best].used = 1;
            if (dets[k].score >= thresh) {
                ++kept;
                if (best >= 0) ++found, iou_sum += best_iou;
            }
        }
        free_detections(d, nboxes);
        free_image(sized);
        free_image(im);
    }

    qsort(dets, ndets, sizeof *dets, by_score);
    double map = 0;
    printf("eval: %d images, %d objects, %d classes\n", nimages, total_truth, classes);
    for (int c = 0; c < classes; ++c) {
        double ap = average_precision(dets, ndets, c, positives[c]);
        map += ap;
        printf("  class %-12s AP@0.5 %6.2f%%  (%d objects)\n",
               c < nnames ? names[c] : "?", 100 * ap, positives[c]);
    }
    map /= classes;
    double recall = total_truth ? (double)found / total_truth : 0;
    double precision = kept ? (double)found / kept : 0;
    printf("  mAP@0.5 %.2f%%; at score >= %.2f: recall %.2f%%, precision %.2f%%, mean IoU %.3f\n",
           100 * map, thresh, 100 * recall, 100 * precision, found ? iou_sum / found : 0);
    printf("eval: map50=%.4f recall=%.4f precision=%.4f\n", map, recall, precision);
    free(dets);
    free_network(net);
    return 0;
}
