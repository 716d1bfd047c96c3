/* The darknet-amp program's help, and its answer to a command line darknet
 * would not run: no command, an unknown command, a family's unknown
 * subcommand, or a family's subcommand without its arguments. darknet itself
 * prints a one-line usage or "Not an option" for each and exits 0, which a
 * script takes for success; here each is refused with exit status 2 and the
 * list of what exists. The lists are darknet's own dispatch
 * (examples/darknet.c, and each family's run_* function), plus the program's
 * `detector map`, `detector calc_anchors`, `amp show` and `amp kinds`. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name, *subs, *args;
} family;

/* Commands that take a subcommand (argv[2]), and what follows it. */
static const family families[] = {
    {"detector", "train test valid valid2 recall demo map calc_anchors", "DATA CFG [WEIGHTS]"},
    {"classifier",
     "predict fout try train demo gun threat test csv label valid validmulti valid10 validcrop "
     "validfull",
     "DATA CFG [WEIGHTS]"},
    {"yolo", "test train valid recall demo", "CFG [WEIGHTS]"},
    {"coco", "test train valid recall demo", "CFG [WEIGHTS]"},
    {"cifar", "train extract distill test multi csv csvtrain eval", "CFG [WEIGHTS]"},
    {"go", "train valid self test engine", "CFG [WEIGHTS]"},
    {"rnn", "train valid validtactic vec generate generatetactic", "CFG [WEIGHTS]"},
    {"regressor", "test train demo", "DATA CFG [WEIGHTS]"},
    {"segmenter", "test train demo", "DATA CFG [WEIGHTS]"},
    {"isegmenter", "test train demo", "DATA CFG [WEIGHTS]"},
    {"tag", "train test", "CFG [WEIGHTS]"},
    {"super", "train test valid", "CFG [WEIGHTS]"},
    {"lsd", "traingan trainprog traincolor gan inter test color valid", "CFG [WEIGHTS]"},
    {"amp", "show kinds", "FILE.weights.amp"},
};

/* darknet's commands without a subcommand. */
static const char *const singles =
    "average detect classify art 3d test nightmare rgbgr reset denormalize statistics normalize "
    "rescale ops speed oneoff oneoff2 print partial visualize mkimg imtest";

int amp_cli_refuse(int *status, int code, const char *prog, const char *command,
                   const char *usage, const char *fmt, const char *arg)
{
    fprintf(stderr, "%s: %s: ", prog, command);
    fprintf(stderr, fmt, arg ? arg : "");
    fputc('\n', stderr);
    if (usage) fprintf(stderr, "usage: %s %s\n", prog, usage);
    *status = code;
    return 1;
}

/* Whether word is one of the space-separated words of words. */
static int listed(const char *words, const char *word)
{
    const size_t n = strlen(word);
    for (const char *p = words; n && (p = strstr(p, word)); p += n)
        if ((p == words || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return 1;
    return 0;
}

static void help(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s COMMAND ...: darknet's commands, with automatic mixed precision\n"
            "\n"
            "Train and check a detector (docs/training.md):\n"
            "  %s detector train DATA CFG [WEIGHTS] [-amp DTYPE] [-map] [-map_every N] [-bad_max 0.1]\n"
            "                 [-gpus 0] [-nogpu] [-clear]\n"
            "  %s detector map DATA CFG WEIGHTS [-thresh 0.25] [-iou_thresh 0.5] [-points 0|11|101]\n"
            "  %s detector calc_anchors DATA -num_of_clusters N -width W -height H\n"
            "  %s detector test DATA CFG WEIGHTS [IMAGE] [-thresh 0.5]\n"
            "  %s detector valid|valid2|recall|demo DATA CFG WEIGHTS\n"
            "  %s partial CFG WEIGHTS OUTPUT N     the first N layers' weights, to start from\n"
            "  %s amp show FILE.weights.amp         a saved loss-scaler state\n"
            "  %s amp kinds                         the layer kinds that run in half in this build\n"
            "\n"
            "AMP options, with any command that reads a cfg (docs/cfg.md):\n"
            "  -amp bfloat16|float16|float32|1|0  overrides the cfg's [net] amp= and amp_dtype=\n"
            "                                     (1: the device's default; 0: AMP off)\n"
            "  -map, -map_every N                 detector train: validation mAP@0.5 as it trains\n"
            "  -bad_max FRACTION                  detector train: the largest share of bad boxes, and of\n"
            "                                     bad images, before the run stops (training.md)\n"
            "  -dont_show, -show_imgs, -mjpeg_port N: accepted; this darknet opens no windows\n"
            "\n"
            "darknet's other commands, unchanged:\n"
            "  ",
            prog, prog, prog, prog, prog, prog, prog, prog, prog);
    for (size_t i = 1; i + 1 < sizeof families / sizeof *families; ++i)
        fprintf(f, "%s ", families[i].name);
    fprintf(f, "(each: `%s NAME` lists its subcommands)\n  %s\n\n"
               "%s -h | --help: this; %s --version: the version.\n"
               "Docs: README.md and docs/ in the darknet-amp sources.\n",
            prog, singles, prog, prog);
}

int amp_cli_check_command(int argc, char **argv, int *status)
{
    const char *prog = argv[0];
    if (argc < 2) {
        help(stderr, prog);
        *status = 2;
        return 1;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        help(stdout, prog);
        *status = 0;
        return 1;
    }
    if (listed(singles, cmd)) return 0;
    for (size_t i = 0; i < sizeof families / sizeof *families; ++i) {
        const family *fam = &families[i];
        if (strcmp(cmd, fam->name) != 0) continue;
        if (argc < 3 || !listed(fam->subs, argv[2])) {
            if (argc < 3)
                fprintf(stderr, "%s: %s needs a subcommand: %s\n", prog, cmd, fam->subs);
            else
                fprintf(stderr, "%s: %s: unknown subcommand '%s'; the subcommands: %s\n", prog,
                        cmd, argv[2], fam->subs);
            fprintf(stderr, "usage: %s %s SUBCOMMAND %s (%s --help)\n", prog, cmd, fam->args,
                    prog);
        } else if (argc < 4) {
            fprintf(stderr, "%s: %s %s needs its arguments\nusage: %s %s %s %s (%s --help)\n",
                    prog, cmd, argv[2], prog, cmd, argv[2], fam->args, prog);
        } else {
            return 0;
        }
        *status = 2;
        return 1;
    }
    fprintf(stderr, "%s: unknown command '%s'\nthe commands:", prog, cmd);
    for (size_t i = 0; i < sizeof families / sizeof *families; ++i)
        fprintf(stderr, " %s", families[i].name);
    fprintf(stderr, " %s\n(%s --help)\n", singles, prog);
    *status = 2;
    return 1;
}
