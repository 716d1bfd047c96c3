/* The AMP cfg keys (docs/cfg.md): the [net] section's into amp_options, a
 * layer section's amp=0/1. Private to the plugin; the cfg hooks call these.
 *
 * Every AMP key is validated whether or not amp=1, so a typo never goes
 * unnoticed. A bad value is AMP_ERR_INVALID with one message naming the cfg
 * file, the section, key=value as written and what would be valid, e.g.
 *   "yolo.cfg: [net] amp_growth_factor=abc: expected a number > 1"
 * Keys that were read are marked used, so darknet does not report them.
 *
 * An empty value ("amp_dtype=") is an error too. darknet's read_cfg drops
 * such a line before the list is made, so when cfgfile names a regular
 * file it is read again for the AMP keys dropped from the section parsed.
 */
#ifndef AMP_OPTIONS_H
#define AMP_OPTIONS_H

#include "darknet.h"
#include "darknet_amp.h"
#include "core.h" /* amp_options */
#include "option_list.h" /* kvp */

#include <stddef.h>

/* Reads the [net] section's AMP keys. *enabled: the value of amp (0 when
 * absent). *o: amp_options_init(dtype) with the cfg's keys applied, where
 * dtype is amp_dtype's value or default_dtype when absent (the caller passes
 * bfloat16 on CPU builds, float16 on GPU builds). On an error *enabled is 0,
 * *o is amp_options_init(default_dtype) and err holds the message.
 * net_options NULL reads as an empty section. */
amp_status amp_options_parse_net(list *net_options, const char *cfgfile, amp_dtype default_dtype,
                                 int *enabled, amp_options *o, char *err, size_t errlen);

/* The [net] keys pairs[0..n) (a key at most once; amp is not one) onto the
 * defaults of dtype, checked as a cfg's: AMP_OK with *o, or why, the keys
 * named as written ("amp_config: amp_growth_factor=1: expected a number > 1"). */
amp_status amp_options_from_keys(kvp *pairs, int n, amp_dtype dtype, amp_options *o, char *err,
                                 size_t errlen);

/* A command line's choice over the cfg's [net] amp and amp_dtype (the
 * darknet-amp program's -amp): set 0 leaves the cfg's; enabled 0 is amp=0,
 * enabled 1 amp=1 with amp_dtype=dtype. as_written is the switch as the user
 * typed it ("-amp float16"), for messages. */
typedef struct amp_net_override {
    int set, enabled;
    int device_default; /* -amp 1: the caller puts the device's default in dtype */
    amp_dtype dtype;
    const char *as_written;
} amp_net_override;

/* A dtype by the names amp_dtype= takes (float16, fp16, half, bfloat16,
 * bf16, float32, fp32); AMP_ERR_INVALID for any other. */
amp_status amp_dtype_parse(const char *name, amp_dtype *dtype);

/* amp_options_parse_net with ov applied: every key is still validated as
 * written; the dtype's defaults are ov's dtype's. conflict gets the cfg's
 * values that ov overrides ("amp=0", "amp_dtype=bfloat16", or both), "" when
 * none (ov NULL or unset: always ""). */
amp_status amp_options_parse_net_override(list *net_options, const char *cfgfile,
                                          amp_dtype default_dtype, const amp_net_override *ov,
                                          int *enabled, amp_options *o, char *conflict,
                                          size_t conflictlen, char *err, size_t errlen);

/* Reads a layer section's amp key: *half_allowed is 1 when it is absent or
 * amp=1, 0 when amp=0. index is the layer's index and type its section name
 * as written ("[convolutional]"; brackets are added when missing). Other AMP
 * keys (amp_dtype, loss_scale, amp_*) in a layer section are errors: they
 * belong in [net]. */
amp_status amp_options_parse_layer(list *layer_options, const char *cfgfile, int index,
                                   const char *type, int *half_allowed, char *err, size_t errlen);

#endif
