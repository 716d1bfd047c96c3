/* Validation figures of a darknet detector (detector_map.h). */
#include "detector_map.h"
#include "error.h"
#include "labels.h" /* darknet-amp's patched darknet: label_find, labels_read_file */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NMS 0.45f
#define MIN_SCORE 0.005f /* detections kept for the precision/recall curve */
#define MAX_TRUTH 256    /* objects read per image, as darknet's max_boxes order */

typedef struct {
    float score;
    int image, cls, truth; /* truth: index of the matched ground truth or -1 */
} scored;

typedef struct {
    box b;
    int cls, used;
} truth_box;

void amp_map_free_lines(char **lines)
{
    for (char **p = lines; p && *p; ++p) free(*p);
    free(lines);
}

char **amp_map_read_lines(const char *path, int *count, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    char **v = calloc(1, sizeof *v);
    int n = 0;
    *count = 0;
    if (!f || !v) {
        free(v);
        if (f) fclose(f);
        amp_errorf(err, errlen, "%s: cannot read the list", path);
        return NULL;
    }
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = 0;
        if (!len) continue;
        char **w = realloc(v, (n + 2) * sizeof *v);
        if (!w || !(w[n] = strdup(line))) {
            if (w) v = w;
            v[n] = NULL;
            amp_map_free_lines(v);
            fclose(f);
            amp_errorf(err, errlen, "%s: out of memory", path);
            return NULL;
        }
        v = w;
        v[++n] = NULL;
    }
    fclose(f);
    *count = n;
    return v;
}

/* A bad line of a label file: said, and not a box (labels.h). */
static void say_label_problem(void *ctx, int line, const char *what)
{
    fprintf(stderr, "%s:%d: %s; box skipped\n", (const char *)ctx, line, what);
}

int amp_map_read_labels(const char *img, int classes, box_label **boxes, char *err, size_t errlen)
{
    char label[LABEL_PATH_MAX], why[256];
    label_read lr;
    *boxes = NULL;
    if (label_find(img, label) < 0) {
        if (label[0])
            amp_errorf(err, errlen, "%s: no label file %s (nor beside the image)", img, label);
        else
            amp_errorf(err, errlen, "%s: not an image name darknet makes a label path of", img);
        return -1;
    }
    if (labels_read_file(label, classes, say_label_problem, label, &lr, why, sizeof why)) {
        amp_errorf(err, errlen, "%s: its label file %s %s", img, label, why);
        return -1;
    }
    *boxes = lr.boxes;
    return lr.n;
}

static int read_truth(const char *img, int classes, truth_box *out, int max, char *err,
                      size_t errlen)
{
    box_label *b;
    int n = amp_map_read_labels(img, classes, &b, err, errlen);
    if (n > max) n = max;
    for (int i = 0; i < n; ++i) {
        out[i].b.x = b[i].x, out[i].b.y = b[i].y, out[i].b.w = b[i].w, out[i].b.h = b[i].h;
        out[i].cls = b[i].id, out[i].used = 0;
    }
    free(b);
    return n;
}

static int by_score(const void *a, const void *b)
{
    float x = ((const scored *)a)->score, y = ((const scored *)b)->score;
    return (x < y) - (x > y);
}

/* Precision made monotone from the right, then the area under the
 * precision/recall curve, or the mean over points recalls (0, 1/(points-1),
 * ..., 1) of the precision at that recall or beyond; -1 when out of memory. */
double amp_map_ap(const unsigned char *matched, int n, int positives, int points)
{
    double *prec = malloc((n + 1) * sizeof *prec), *rec = malloc((n + 1) * sizeof *rec);
    int tp = 0;
    double ap = 0;
    if (!prec || !rec) {
        free(prec);
        free(rec);
        return -1;
    }
    for (int i = 0; i < n; ++i) {
        tp += matched[i] != 0;
        prec[i] = (double)tp / (i + 1);
        rec[i] = positives ? (double)tp / positives : 0;
    }
    for (int i = n - 2; i >= 0; --i)
        if (prec[i] < prec[i + 1]) prec[i] = prec[i + 1];
    if (points > 1) {
        int i = 0;
        for (int k = 0; k < points; ++k) {
            const double r = (double)k / (points - 1);
            while (i < n && rec[i] < r - 1e-12) ++i; /* the first point at recall >= r */
            ap += i < n ? prec[i] : 0;
        }
        ap /= points;
    } else {
        for (int i = 0; i < n; ++i) ap += (rec[i] - (i ? rec[i - 1] : 0)) * prec[i];
    }
    free(prec);
    free(rec);
    return ap;
}

/* One class's AP over the detections d (sorted by score); -1: out of memory. */
static double class_ap(const scored *d, int n, int cls, int positives, int points)
{
    unsigned char *m = malloc(n + 1);
    int k = 0;
    if (!m) return -1;
    for (int i = 0; i < n; ++i)
        if (d[i].cls == cls) m[k++] = d[i].truth >= 0;
    const double ap = amp_map_ap(m, k, positives, points);
    free(m);
    return ap;
}

void amp_map_result_free(amp_map_result *r)
{
    free(r->ap);
    free(r->positives);
    free(r->tp_class);
    free(r->fp_class);
    r->ap = NULL;
    r->positives = r->tp_class = r->fp_class = NULL;
}

/* One image's detections into *dets, matched against its truth. */
static amp_status eval_image(network *net, const char *path, int index, int classes,
                             const amp_map_options *o, scored **dets, int *ndets, int *cap,
                             amp_map_result *r, double *iou_sum, char *err, size_t errlen)
{
    truth_box truth[MAX_TRUTH];
    int ntruth = read_truth(path, classes, truth, MAX_TRUTH, err, errlen);
    if (ntruth < 0) return AMP_ERR_IO;
    FILE *probe = fopen(path, "rb"); /* darknet's image loader exits on a missing file */
    AMP_RETURN_ERROR_IF(!probe, AMP_ERR_IO, err, errlen, "%s: cannot read the image", path);
    fclose(probe);
    for (int t = 0; t < ntruth; ++t)
        if (truth[t].cls >= 0 && truth[t].cls < classes) ++r->positives[truth[t].cls];
    r->objects += ntruth;

    image im = load_image_color((char *)path, 0, 0);
    image sized = letterbox_image(im, net->w, net->h);
    network_predict(net, sized.data);
    int nboxes = 0;
    detection *d = get_network_boxes(net, im.w, im.h, MIN_SCORE, .5f, 0, 1, &nboxes);
    do_nms_sort(d, nboxes, classes, NMS);
    const int first = *ndets;
    amp_status st = AMP_OK;
    for (int j = 0; j < nboxes && st == AMP_OK; ++j) {
        for (int c = 0; c < classes; ++c) {
            if (d[j].prob[c] < MIN_SCORE) continue;
            if (*ndets == *cap) {
                const int grown = *cap ? 2 * *cap : 1024;
                scored *w = realloc(*dets, grown * sizeof **dets);
                if (!w) {
                    amp_errorf(err, errlen, "%s: out of memory", path);
                    st = AMP_ERR_NOMEM;
                    break;
                }
                *dets = w, *cap = grown;
            }
            scored *s = &(*dets)[(*ndets)++];
            s->score = d[j].prob[c];
            s->image = index;
            s->cls = c;
            s->truth = j; /* the box index until matching, below */
        }
    }
    if (st == AMP_OK) {
        /* Greedy matching within this image, highest score first. */
        scored *v = *dets;
        if (*ndets > first) qsort(v + first, *ndets - first, sizeof *v, by_score); /* v may be NULL */
        for (int k = first; k < *ndets; ++k) {
            box b = d[v[k].truth].bbox; /* relative=1: already in 0..1 */
            int best = -1;
            float best_iou = o->iou_thresh;
            for (int t = 0; t < ntruth; ++t) {
                if (truth[t].used || truth[t].cls != v[k].cls) continue;
                float iou = box_iou(b, truth[t].b);
                if (iou >= best_iou) best_iou = iou, best = t;
            }
            v[k].truth = best;
            if (best >= 0) truth[best].used = 1;
            if (v[k].score >= o->thresh) {
                if (best >= 0) {
                    ++r->tp, ++r->tp_class[v[k].cls];
                    *iou_sum += best_iou;
                } else {
                    ++r->fp, ++r->fp_class[v[k].cls];
                }
            }
        }
    }
    free_detections(d, nboxes);
    free_image(sized);
    free_image(im);
    return st;
}

amp_status amp_detector_map(network *net, char **images, int nimages, const amp_map_options *o,
                            amp_map_result *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    AMP_RETURN_ERROR_IF(!net || net->n < 1, AMP_ERR_INVALID, err, errlen,
                        "amp_detector_map: no network");
    const int classes = net->layers[net->n - 1].classes;
    AMP_RETURN_ERROR_IF(classes < 1, AMP_ERR_INVALID, err, errlen,
                        "the network's last layer has %d classes: not a detector", classes);
    AMP_RETURN_ERROR_IF(nimages < 1, AMP_ERR_INVALID, err, errlen, "no images to evaluate");
    r->classes = classes;
    r->images = nimages;
    r->ap = calloc(classes, sizeof *r->ap);
    r->positives = calloc(classes, sizeof *r->positives);
    r->tp_class = calloc(classes, sizeof *r->tp_class);
    r->fp_class = calloc(classes, sizeof *r->fp_class);
    if (!r->ap || !r->positives || !r->tp_class || !r->fp_class) {
        amp_map_result_free(r);
        AMP_RETURN_ERROR(AMP_ERR_NOMEM, err, errlen, "amp_detector_map: out of memory");
    }
    scored *dets = NULL;
    int ndets = 0, cap = 0;
    double iou_sum = 0;
    amp_status st = AMP_OK;
    for (int i = 0; i < nimages && st == AMP_OK; ++i)
        st = eval_image(net, images[i], i, classes, o, &dets, &ndets, &cap, r, &iou_sum, err,
                        errlen);
    if (st == AMP_OK) {
        if (ndets) qsort(dets, ndets, sizeof *dets, by_score); /* dets NULL without any */
        for (int c = 0; c < classes && st == AMP_OK; ++c) {
            r->ap[c] = class_ap(dets, ndets, c, r->positives[c], o->points);
            if (r->ap[c] < 0) {
                amp_errorf(err, errlen, "amp_detector_map: out of memory");
                st = AMP_ERR_NOMEM;
            }
            r->map50 += r->ap[c];
        }
        r->map50 /= classes;
        r->fn = r->objects - r->tp;
        r->recall = r->objects ? (double)r->tp / r->objects : 0;
        r->precision = r->tp + r->fp ? (double)r->tp / (r->tp + r->fp) : 0;
        r->mean_iou = r->tp ? iou_sum / r->tp : 0;
    }
    free(dets);
    if (st != AMP_OK) amp_map_result_free(r);
    return st;
}
