/* Validation figures of a darknet detector: mAP@0.5, recall and precision
 * over a list of images, for scripts/eval_detector and `darknet-amp detector
 * train -map` (one evaluation, so that both report the same figure).
 *
 * The network runs as it is (batch 1, its own device); detections are kept
 * after darknet's NMS (0.45) from a score of 0.005; the ground truth is read
 * from the label file darknet's training reads for the image (its path's
 * "images" -> "labels", extension -> .txt). Per class: the area under the
 * all-point interpolated precision/recall curve (PASCAL VOC 2010 and later),
 * detections matched greedily by score within each image at IoU >= 0.5;
 * recall, precision and mean IoU are those of the detections scoring at
 * least thresh. */
#ifndef DARKNET_AMP_DETECTOR_MAP_H
#define DARKNET_AMP_DETECTOR_MAP_H

#include "darknet.h"
#include "darknet_amp.h" /* amp_status */

#include <stddef.h>

typedef struct amp_map_result {
    int images, objects, classes;
    double map50, recall, precision, mean_iou;
    double *ap;     /* classes entries: each class's AP@0.5 */
    int *positives; /* classes entries: each class's objects */
} amp_map_result;

/* Reads a list file (one path per line, empty lines skipped) into a NULL-
 * terminated array of *count strings; NULL with err when it cannot. Free with
 * amp_map_free_lines. */
char **amp_map_read_lines(const char *path, int *count, char *err, size_t errlen);
void amp_map_free_lines(char **lines);

/* Evaluates net (set to batch 1 by the caller) on images; r's arrays are
 * allocated here (amp_map_result_free). An image that cannot be read or has
 * no label file is an error naming it; nothing exits. */
amp_status amp_detector_map(network *net, char **images, int nimages, float thresh,
                            amp_map_result *r, char *err, size_t errlen);
void amp_map_result_free(amp_map_result *r);

#endif
