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

#include <stddef.h>

/* Reads the [net] section's AMP keys. *enabled: the value of amp (0 when
 * absent). *o: amp_options_init(dtype) with the cfg's keys applied, where
 * dtype is amp_dtype's value or default_dtype when absent (the caller passes
 * bfloat16 on CPU builds, float16 on GPU builds). On an error *enabled is 0,
 * *o is amp_options_init(default_dtype) and err holds the message.
 * net_options NULL reads as an empty section. */
amp_status amp_options_parse_net(list *net_options, const char *cfgfile, amp_dtype default_dtype,
                                 int *enabled, amp_options *o, char *err, size_t errlen);

/* Reads a layer section's amp key: *half_allowed is 1 when it is absent or
 * amp=1, 0 when amp=0. index is the layer's index and type its section name
 * as written ("[convolutional]"; brackets are added when missing). Other AMP
 * keys (amp_dtype, loss_scale, amp_*) in a layer section are errors: they
 * belong in [net]. */
amp_status amp_options_parse_layer(list *layer_options, const char *cfgfile, int index,
                                   const char *type, int *half_allowed, char *err, size_t errlen);

#endif
