/* Validation figures for a darknet detector: mAP@0.5 and recall.
 *
 *   eval_detector CFG WEIGHTS LIST [--names FILE] [--thresh 0.25]
 *
 * Runs the network (CPU, float32) on every image of LIST and reports per class
 * the average precision at IoU 0.5, their mean (mAP), and recall, precision
 * and mean IoU of the detections scoring >= --thresh: the evaluation of
 * plugin/detector_map.c, which `darknet-amp detector train -map` runs too.
 * The last line is machine-readable: "eval: map50=... recall=... precision=...".
 */
#include "darknet.h"
#include "detector_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    char err[1024];
    int nimages = 0, nnames = 0;
    char **images = amp_map_read_lines(argv[3], &nimages, err, sizeof err);
    char **names = names_file ? amp_map_read_lines(names_file, &nnames, err, sizeof err) : NULL;
    if (!images || !nimages || (names_file && !names)) {
        fprintf(stderr, "eval_detector: %s\n", !images || !nimages ? (images ? "no images" : err) : err);
        return 1;
    }

    gpu_index = -1;
    network *net = parse_network_cfg(argv[1]);
    load_weights(net, argv[2]);
    set_batch_network(net, 1);
    amp_map_result r;
    const amp_map_options o = {thresh, 0.5f, 0};
    if (amp_detector_map(net, images, nimages, &o, &r, err, sizeof err) != AMP_OK) {
        fprintf(stderr, "eval_detector: %s\n", err);
        return 1;
    }
    printf("eval: %d images, %d objects, %d classes\n", r.images, r.objects, r.classes);
    for (int c = 0; c < r.classes; ++c)
        printf("  class %-12s AP@0.5 %6.2f%%  (%d objects)\n", c < nnames ? names[c] : "?",
               100 * r.ap[c], r.positives[c]);
    printf("  mAP@0.5 %.2f%%; at score >= %.2f: recall %.2f%%, precision %.2f%%, mean IoU %.3f\n",
           100 * r.map50, thresh, 100 * r.recall, 100 * r.precision, r.mean_iou);
    printf("eval: map50=%.4f recall=%.4f precision=%.4f\n", r.map50, r.recall, r.precision);
    amp_map_result_free(&r);
    amp_map_free_lines(images);
    amp_map_free_lines(names);
    free_network(net);
    return 0;
}
