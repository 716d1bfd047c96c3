/* `darknet-amp detector map DATA CFG WEIGHTS`: the validation figures of
 * `detector train -map` (detector_map.c: one evaluation, so that both give
 * the same number on the same weights) on DATA's valid= list, laid out as the
 * darknet forks most users learned from print them.
 *
 *   -thresh T       the score of TP/FP/FN, precision, recall and IoU (0.25)
 *   -iou_thresh I   a detection matches an object at IoU >= I (0.5)
 *   -points N       0: the area under the curve (default); 11 (VOC 2007)
 *                   or 101 (COCO): interpolated at that many recalls
 *   -nogpu, -i N    the device, as darknet's commands take them
 *
 * Float32, like -map; with -amp (taken by cli.c), the network runs as AMP
 * would train it. Exit status 0, 1 when the evaluation fails (said), 2 on a
 * malformed command line. */
#include "cli.h"
#include "detector_map.h"
#include "error.h"
#include "option_list.h" /* read_data_cfg, option_find_str */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE "detector map DATA CFG WEIGHTS [-thresh 0.25] [-iou_thresh 0.5] " \
              "[-points 0|11|101] [-amp DTYPE] [-nogpu]"

static int usage(const char *prog, const char *why, const char *arg, int *status)
{
    return amp_cli_refuse(status, 2, prog, "detector map", USAGE, why, arg);
}

static int number(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    const double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || !(v >= lo && v <= hi)) return 0;
    *out = v;
    return 1;
}

static int fail(const char *prog, const char *what, int *status)
{
    return amp_cli_refuse(status, 1, prog, "detector map", NULL, "%s", what);
}

static void print_result(const amp_map_result *r, const amp_map_options *o, char **names, int nnames)
{
    for (int c = 0; c < r->classes; ++c)
        printf("class_id = %d, name = %s, ap = %.2f%%   \t (TP = %d, FP = %d; %d objects)\n", c,
               c < nnames ? names[c] : "?", 100 * r->ap[c], r->tp_class[c], r->fp_class[c],
               r->positives[c]);
    const double f1 = r->precision + r->recall > 0
                          ? 2 * r->precision * r->recall / (r->precision + r->recall)
                          : 0;
    printf("\n for conf_thresh = %.2f, precision = %.2f, recall = %.2f, F1-score = %.2f \n",
           o->thresh, r->precision, r->recall, f1);
    printf(" for conf_thresh = %.2f, TP = %d, FP = %d, FN = %d, average IoU = %.2f %% \n\n",
           o->thresh, r->tp, r->fp, r->fn, 100 * r->mean_iou);
    if (o->points > 1)
        printf(" IoU threshold = %.0f %%, used %d Recall-points \n", 100 * o->iou_thresh,
               o->points);
    else
        printf(" IoU threshold = %.0f %%, used Area-Under-Curve for each unique Recall \n",
               100 * o->iou_thresh);
    printf(" mean average precision (mAP@%.2f) = %f, or %.2f %% \n", o->iou_thresh, r->map50,
           100 * r->map50);
}

int amp_cli_detector_map(int argc, char **argv, int *status)
{
    const char *prog = argv[0], *pos[3] = {NULL, NULL, NULL};
    amp_map_options o = {0.25f, 0.5f, 0};
    int npos = 0, gpu = 0, nogpu = 0;
    for (int i = 3; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        if (!strcmp(a, "-thresh") || !strcmp(a, "-iou_thresh")) {
            if (!number(v, 0, 1, &x)) return usage(prog, "%s needs a number from 0 to 1", a, status);
            if (a[1] == 't') o.thresh = (float)x;
            else o.iou_thresh = (float)x;
            ++i;
        } else if (!strcmp(a, "-points")) {
            if (!number(v, 0, 1000, &x) || (x != 0 && x != 11 && x != 101))
                return usage(prog, "-points %s: expected 0 (area under the curve), 11 or 101",
                             v ? v : "", status);
            o.points = (int)x;
            ++i;
        } else if (!strcmp(a, "-i")) {
            if (!number(v, 0, 1024, &x)) return usage(prog, "-i needs a device number", NULL, status);
            gpu = (int)x;
            ++i;
        } else if (!strcmp(a, "-nogpu")) {
            nogpu = 1;
        } else if (a[0] == '-' && a[1]) {
            return usage(prog, "unknown option %s", a, status);
        } else if (npos < 3) {
            pos[npos++] = a;
        } else {
            return usage(prog, "one argument too many: %s", a, status);
        }
    }
    if (npos < 3) return usage(prog, "needs DATA, CFG and WEIGHTS%s", "", status);
    if (amp_cli_no_device(argc, argv, status)) return 1;

    char err[AMP_MSG_LEN], what[AMP_MSG_LEN + 64];
    FILE *probe = fopen(pos[0], "r"); /* darknet's reader exits on a missing file */
    if (!probe) {
        snprintf(what, sizeof what, "%s: cannot read the data file", pos[0]);
        return fail(prog, what, status);
    }
    fclose(probe);
    list *opts = read_data_cfg((char *)pos[0]);
    const char *valid = opts ? option_find_str(opts, "valid", NULL) : NULL;
    const char *names_file = opts ? option_find_str(opts, "names", NULL) : NULL;
    if (!valid) {
        snprintf(what, sizeof what, "%s has no valid= list of validation images", pos[0]);
        return fail(prog, what, status);
    }
    int nimages = 0, nnames = 0;
    char **images = amp_map_read_lines(valid, &nimages, err, sizeof err);
    if (!images || !nimages) {
        amp_map_free_lines(images);
        snprintf(what, sizeof what, "%s (valid= of %s): %s", valid, pos[0],
                 images ? "no images" : err);
        return fail(prog, what, status);
    }
    char **names = names_file ? amp_map_read_lines(names_file, &nnames, err, sizeof err) : NULL;

#ifdef GPU
    gpu_index = nogpu ? -1 : gpu;
    if (gpu_index >= 0) cuda_set_device(gpu_index);
#else
    (void)gpu, (void)nogpu;
    gpu_index = -1;
#endif
    /* float32 unless -amp turned AMP on: darknet's hooks off, as -map's copy */
    const amp_net_override *ov = amp_cli_override();
    const int amp = ov->set && ov->enabled;
    const darknet_hooks *h = amp ? NULL : darknet_set_hooks(NULL);
    network *net = parse_network_cfg_checked((char *)pos[1], err, sizeof err);
    int st = net ? load_weights_checked(net, (char *)pos[2], 0, net->n, err, sizeof err) : -1;
    if (!amp) darknet_set_hooks(h);
    amp_map_result r;
    memset(&r, 0, sizeof r);
    if (st == 0) {
        set_batch_network(net, 1);
        printf("detector map: %d images of %s, %s with %s, %s%s%s; detections from a score "
               "of 0.005 after NMS 0.45\n",
               nimages, valid, pos[1], pos[2], amp ? "with AMP (" : "in float32",
               amp && ov->as_written ? ov->as_written : "", amp ? ")" : "");
        fflush(stdout);
        st = amp_detector_map(net, images, nimages, &o, &r, err, sizeof err) == AMP_OK ? 0 : -1;
    }
    if (st == 0) print_result(&r, &o, names, nnames);
    amp_map_result_free(&r);
    amp_map_free_lines(images);
    amp_map_free_lines(names);
    if (net) free_network(net);
    if (st != 0) return fail(prog, err, status);
    *status = 0;
    return 1;
}
