/* Validation figures of a darknet detector: mAP@0.5, recall and precision
 * over a list of images, for scripts/eval_detector and `darknet-amp detector
 * train -map` (one evaluation, so that both report the same figure).
 *
 * The network runs as it is (batch 1, its own device); detections are kept
 * after darknet's NMS (0.45) from a score of 0.005; the ground truth is read
 * from the label file darknet's training reads for the image (its path's
 * "images" -> "labels", extension -> .txt). Per class: the area under the
 * all-point interpolated precision/recall curve (PASCAL VOC 2010 and later;
 * or interpolated at 11 or 101 recalls: VOC 2007, COCO), detections matched
 * greedily by score within each image at IoU >= iou_thresh (0.5); recall,
 * precision, TP/FP/FN and mean IoU are those of the detections scoring at
 * least thresh. */
#ifndef DARKNET_AMP_DETECTOR_MAP_H
#define DARKNET_AMP_DETECTOR_MAP_H

#include "darknet.h"
#include "darknet_amp.h" /* amp_status */

#include <stddef.h>

typedef struct amp_map_options {
    float thresh;     /* the score of recall, precision, TP/FP/FN and mean IoU */
    float iou_thresh; /* a detection matches an object at IoU >= this */
    int points;       /* 0: the area under the curve; 11 or 101: at that many recalls */
} amp_map_options;

typedef struct amp_map_result {
    int images, objects, classes;
    double map50, recall, precision, mean_iou; /* map50: the mean AP at iou_thresh */
    int tp, fp, fn;       /* at thresh */
    double *ap;     /* classes entries: each class's AP */
    int *positives; /* classes entries: each class's objects */
    int *tp_class, *fp_class; /* classes entries: each class's TP and FP at thresh */
} amp_map_result;

/* The average precision of one class's n detections, sorted by score from
 * the highest: matched[i] says whether detection i matched an object; of
 * positives objects. points as amp_map_options's. */
double amp_map_ap(const unsigned char *matched, int n, int positives, int points);

/* Reads a list file (one path per line, empty lines skipped) into a NULL-
 * terminated array of *count strings; NULL with err when it cannot. Free with
 * amp_map_free_lines. */
char **amp_map_read_lines(const char *path, int *count, char *err, size_t errlen);
void amp_map_free_lines(char **lines);

/* The boxes of the image img's label file, found and read as training finds
 * and reads them (either rule, each bad line said on stderr and skipped;
 * labels.h): their count with *boxes (free it), or -1 with err when there is
 * no label file or it cannot be read. classes 0: any class. */
int amp_map_read_labels(const char *img, int classes, box_label **boxes, char *err,
                        size_t errlen);

/* Evaluates net (set to batch 1 by the caller) on images; r's arrays are
 * allocated here (amp_map_result_free). An image that cannot be read or has
 * no label file is an error naming it; nothing exits. */
amp_status amp_detector_map(network *net, char **images, int nimages, const amp_map_options *o,
                            amp_map_result *r, char *err, size_t errlen);
void amp_map_result_free(amp_map_result *r);

#endif
