/* cfg keys of other darknet formats (patches/0017-cfg-keys-refused-or-listed.patch):
 * - a key that would change the network or its loss is refused, the message
 *   naming the cfg file, the layer, the section, the key and what it would
 *   change; so are a section type darknet has no layer for, an unknown
 *   activation, mish on a layer other than [convolutional], a [shortcut]
 *   from= with several layers, route groups that do not divide the channels,
 *   and a bad iou_loss;
 * - keys darknet ignores (augmentation, inference, unknown) give one line
 *   after the layer table, listing them all, and no "Unused field" line;
 * - a cfg of darknet's own keys gives no such line;
 * - the project's cfgs of the yolov4 family (cfg/zoo, cfg/shapes-v4*) parse,
 *   with no unknown key among those listed.
 *   cfg_keys_test SCRATCH EMBEDDED_CFG [FAMILY_CFG...]
 */
#include "darknet.h"

#include "check.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *scratch;

static const char *base_net = "[net]\nbatch=1\nwidth=16\nheight=16\nchannels=3\n";
static const char *conv = "[convolutional]\nfilters=6\nsize=3\nstride=1\npad=1\nactivation=leaky\n";
static const char *yolo_head =
    "[convolutional]\nfilters=21\nsize=1\nstride=1\npad=1\nactivation=linear\n"
    "[yolo]\nmask=0,1,2\nanchors=4,4, 8,8, 12,12\nclasses=2\nnum=3\n";

/* Parses text as a cfg file; returns the network (NULL: refused, message in
 * err) and what it wrote on stderr in log. */
static network *parse(const char *name, const char *text, char *err, size_t errlen, char *log,
                      size_t loglen)
{
    char path[512], lpath[512];
    snprintf(path, sizeof path, "%s/%s.cfg", scratch, name);
    snprintf(lpath, sizeof lpath, "%s/%s.stderr", scratch, name);
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
    fflush(stderr);
    const int saved = dup(2), fd = open(lpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    network *net = parse_network_cfg_checked(path, err, errlen);
    fflush(stderr);
    dup2(saved, 2);
    close(fd), close(saved);
    log[0] = 0;
    f = fopen(lpath, "r");
    if (f) {
        size_t n = fread(log, 1, loglen - 1, f);
        log[n] = 0;
        fclose(f);
    }
    return net;
}

/* every one of the NULL-terminated words is in s */
static int has_all(const char *s, const char *const *words)
{
    for (; *words; ++words)
        if (!strstr(s, *words)) return 0;
    return 1;
}

static void refused(const char *name, const char *text, const char *const *words)
{
    char err[1024] = "", log[8192];
    network *net = parse(name, text, err, sizeof err, log, sizeof log);
    CHECK(!net && has_all(err, words), "%s: refused, naming what: %s", name,
          net ? "(accepted)" : err);
    if (net) free_network(net);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: cfg_keys_test SCRATCH EMBEDDED_CFG\n");
        return 2;
    }
    gpu_index = -1; /* CPU networks, also in a CUDA build */
    scratch = argv[1];
    char cmd[600], text[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", scratch);
    if (system(cmd) != 0) return 2;

    snprintf(text, sizeof text, "%s%s%sdilation=2\n", base_net, conv, conv);
    refused("dilation", text,
            (const char *[]){"dilation.cfg", "layer 1", "[convolutional]", "dilation=2",
                             "it means a dilated convolution", NULL});
    snprintf(text, sizeof text, "%s%s%sfocal_loss=1\n", base_net, conv, yolo_head);
    refused("focal_loss", text,
            (const char *[]){"focal_loss.cfg", "layer 2", "[yolo]", "focal_loss=1", "focal loss",
                             NULL});
    snprintf(text, sizeof text, "%s%s%snew_coords=2\n", base_net, conv, yolo_head);
    refused("new_coords", text,
            (const char *[]){"new_coords.cfg", "layer 2", "[yolo]", "new_coords=2",
                             "must be 0 or 1", NULL});
    snprintf(text, sizeof text, "%s%s%sobjectness_smooth=-1\n", base_net, conv, yolo_head);
    refused("objectness_smooth", text,
            (const char *[]){"objectness_smooth.cfg", "layer 2", "[yolo]",
                             "objectness_smooth=-1", "must be 0 or 1", NULL});
    snprintf(text, sizeof text, "%s%s[sam]\nfrom=-1\n", base_net, conv);
    refused("section", text,
            (const char *[]){"section.cfg", "layer 1", "[sam]", "no layer of this type", NULL});
    snprintf(text, sizeof text, "%s[convolutional]\nfilters=4\nsize=1\nactivation=gelu\n",
             base_net);
    refused("activation", text,
            (const char *[]){"activation.cfg", "layer 0", "activation=gelu", NULL});
    snprintf(text, sizeof text, "%s[connected]\noutput=4\nactivation=mish\n", base_net);
    refused("mish_connected", text,
            (const char *[]){"mish_connected.cfg", "layer 0", "[connected]", "activation=mish",
                             "[convolutional] layers only", NULL});
    snprintf(text, sizeof text, "%s%s%s%s[shortcut]\nfrom=-2,-3\n", base_net, conv, conv, conv);
    refused("shortcut", text,
            (const char *[]){"shortcut.cfg", "layer 3", "[shortcut]", "from=-2,-3", NULL});
    snprintf(text, sizeof text, "%s%s[route]\nlayers=-1\ngroups=4\ngroup_id=1\n", base_net, conv);
    refused("route_groups", text,
            (const char *[]){"route_groups.cfg", "layer 1", "[route]", "groups=4",
                             "6 channels", NULL});
    snprintf(text, sizeof text, "%s%s[route]\nlayers=-1\ngroups=2\ngroup_id=2\n", base_net, conv);
    refused("route_group_id", text,
            (const char *[]){"route_group_id.cfg", "layer 1", "group_id=2", NULL});
    snprintf(text, sizeof text, "%s%s%siou_loss=eiou\n", base_net, conv, yolo_head);
    refused("iou_loss", text,
            (const char *[]){"iou_loss.cfg", "layer 2", "[yolo]", "iou_loss=eiou", NULL});

    /* ignored: listed once, no "Unused field" */
    char err[1024] = "", log[8192];
    snprintf(text, sizeof text,
             "%smosaic=1\nletter_box=1\n%sfilterz=3\n%snms_kind=greedynms\nbeta_nms=0.6\n"
             "scale_x_y=1.05\niou_loss=ciou\niou_normalizer=0.07\nnew_coords=1\n"
             "objectness_smooth=0\n",
             base_net, conv, yolo_head);
    network *net = parse("ignored", text, err, sizeof err, log, sizeof log);
    const char *line = strstr(log, "ignored, not used by this darknet");
    int lines = 0;
    for (const char *p = log; (p = strstr(p, "not used by this darknet")); ++p) ++lines;
    CHECK(net && line && lines == 1 &&
              has_all(log, (const char *[]){"ignored.cfg: ignored", "mosaic [net]",
                                            "letter_box [net]",
                                            "filterz [convolutional] layer 0 (unknown)",
                                            "nms_kind [yolo] layer 2",
                                            "beta_nms [yolo] layer 2", NULL}) &&
              !strstr(log, "Unused field") && !strstr(log, "scale_x_y") &&
              !strstr(log, "new_coords") && !strstr(log, "objectness_smooth"),
          "ignored keys: accepted, one line naming the 5 (not the yolov4 keys implemented): "
          "%.*s",
          line ? (int)strcspn(line, "\n") : 6, line ? line : "(none)");
    if (net) free_network(net);

    /* darknet's own keys: nothing listed */
    net = parse_network_cfg_checked(argv[2], err, sizeof err);
    CHECK(net != NULL, "the embedded cfg parses");
    if (net) free_network(net);
    FILE *f = fopen(argv[2], "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = 0;
    if (f) fclose(f);
    net = parse("embedded", text, err, sizeof err, log, sizeof log);
    CHECK(net && !strstr(log, "not used by this darknet") && !strstr(log, "Unused field"),
          "a cfg of darknet's own keys (the embedded detector): no ignored-keys line");
    if (net) free_network(net);

    for (int i = 3; i < argc; ++i) {
        char name[64];
        snprintf(name, sizeof name, "family%d", i);
        f = fopen(argv[i], "r");
        n = f ? fread(text, 1, sizeof text - 1, f) : 0;
        text[n] = 0;
        if (f) fclose(f);
        if (n == sizeof text - 1) { /* too long for text: parse it in place */
            const int saved = dup(2), fd = open("/dev/null", O_WRONLY);
            dup2(fd, 2);
            net = parse_network_cfg_checked(argv[i], err, sizeof err);
            dup2(saved, 2);
            close(fd), close(saved);
            log[0] = 0;
        } else {
            net = parse(name, text, err, sizeof err, log, sizeof log);
        }
        CHECK(net && !strstr(log, "(unknown)"), "%s: builds (%d layers), no unknown key%s%s",
              argv[i], net ? net->n : 0, net ? "" : ": ", net ? "" : err);
        if (net) free_network(net);
    }
    return check_report();
}
