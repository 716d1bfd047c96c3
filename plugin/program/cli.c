/* What the darknet-amp program adds to darknet's commands (cli.h): the
 * command hook, the start-up line, and the program's part of the hooks. */
#include "cli.h"
#include "core.h"         /* amp_net_of, amp_net */
#include "error.h"
#include "state_file.h" /* amp_state_file_show */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef AMP_VERSION
#define AMP_VERSION "?"
#endif
#ifndef AMP_DARKNET_VERSION
#define AMP_DARKNET_VERSION "?"
#endif
#ifndef AMP_PATCHES
#define AMP_PATCHES 0
#endif

static struct {
    int banner, conflict; /* the start-up line and -amp's override said */
} said;

static const char *build_kind(void)
{
#ifdef GPU
    return "CUDA build";
#else
    return "CPU build";
#endif
}

int amp_cli_command(int *argc, char **argv, int *status)
{
    amp_cli_started();
    if (*argc == 2 && !strcmp(argv[1], "--version")) {
        printf("darknet-amp %s (darknet %s with %d patches; %s)\n", AMP_VERSION,
               AMP_DARKNET_VERSION, AMP_PATCHES, build_kind());
        *status = 0;
        return 1;
    }
    if (*argc >= 2 && strcmp(argv[1], "amp") != 0 && amp_cli_take_options(argc, argv, status)) return 1;
    if (*argc == 3 && !strcmp(argv[1], "amp") && !strcmp(argv[2], "kinds"))
        return amp_cli_kinds(*argc, argv, status);
    if (amp_cli_check_command(*argc, argv, status)) return 1;
    if (strcmp(argv[1], "amp") != 0) {
        const int detector = !strcmp(argv[1], "detector");
        if (detector && !strcmp(argv[2], "map")) /* checks the device after its arguments */
            return amp_cli_detector_map(*argc, argv, status);
        const int needs_device = !detector || strcmp(argv[2], "calc_anchors") != 0;
        if (needs_device && amp_cli_no_device(*argc, argv, status)) return 1;
        if (!strcmp(argv[1], "detector") && !strcmp(argv[2], "calc_anchors"))
            return amp_cli_calc_anchors(*argc, argv, status);
        return 0;
    }
    if (*argc != 4 || strcmp(argv[2], "show") != 0) {
        fprintf(stderr, "usage: %s amp show FILE.weights.amp (or FILE.weights), or %s amp kinds\n",
                argv[0], argv[0]);
        *status = 2;
        return 1;
    }
    char err[AMP_MSG_LEN];
    if (amp_state_file_show(argv[3], stdout, err, sizeof err) != AMP_OK) {
        fprintf(stderr, "%s\n", err);
        *status = 1;
        return 1;
    }
    *status = 0;
    return 1;
}

/* ---- the start-up line ---- */

#ifdef CUDNN
/* The cuDNN library this process loaded, appended to where; a library older
 * than the headers darknet-amp was built with (a direction NVIDIA does not
 * support) is a warning line of its own. */
static void cudnn_versions(char *where, size_t n)
{
    const size_t rt = cudnnGetVersion(), built = CUDNN_VERSION;
    const size_t len = strlen(where);
    snprintf(where + len, n - len, ", cuDNN %zu.%zu.%zu", rt / 10000, rt % 10000 / 100, rt % 100);
    if (rt < built)
        fprintf(stderr, "darknet-amp: warning: the cuDNN library loaded, %zu.%zu.%zu, is older than "
                        "the headers darknet-amp was built with, %zu.%zu.%zu, which NVIDIA does not "
                        "support: build against the library's own headers (docs/build.md)\n",
                rt / 10000, rt % 10000 / 100, rt % 100, built / 10000, built % 10000 / 100,
                built % 100);
}
#endif

void amp_cli_net_read(const network *net, const char *cfgfile, int enabled, amp_dtype dtype,
                      int data_parallel, const char *conflict)
{
    if (!amp_cli_options_get()->program) return;
    if (conflict && conflict[0] && !said.conflict) {
        fprintf(stderr, "darknet-amp: %s overrides %s [net] %s\n", amp_cli_options_get()->amp_written, cfgfile,
                conflict);
        said.conflict = 1;
    }
    if (said.banner) return;
    said.banner = 1;
    char where[96];
#ifdef GPU
    if (net->gpu_index >= 0) {
        snprintf(where, sizeof where, "CUDA build, on GPU %d", net->gpu_index);
#ifdef CUDNN
        cudnn_versions(where, sizeof where);
#endif
    } else {
        snprintf(where, sizeof where, "CUDA build, on the CPU");
    }
#else
    (void)net;
    snprintf(where, sizeof where, "%s", build_kind());
#endif
    fprintf(stderr, "darknet-amp %s (darknet %s with %d patches; %s): ", AMP_VERSION,
            AMP_DARKNET_VERSION, AMP_PATCHES, where);
    if (enabled)
        fprintf(stderr, "AMP on, %s (%s%s)\n", amp_dtype_name(dtype),
                amp_cli_options_get()->amp.set ? amp_cli_options_get()->amp_written : cfgfile, amp_cli_options_get()->amp.set ? "" : " [net] amp=1");
    else if (amp_cli_options_get()->amp.set)
        fprintf(stderr, "AMP off (%s)%s\n", amp_cli_options_get()->amp_written,
                data_parallel ? "; float32 steps summed over the processes" : "");
    else
        fprintf(stderr, "AMP off (%s [net] has no amp=1; -amp bfloat16 or -amp float16 turns it "
                        "on)%s\n", cfgfile,
                data_parallel ? "; float32 steps summed over the processes" : "");
}

const amp_program amp_cli_program = {
    .net_override = amp_cli_override,
    .net_read = amp_cli_net_read,
    .command = amp_cli_command,
    .progress = amp_cli_progress,
};
