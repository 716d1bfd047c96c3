/* The darknet-amp program's own options (cli.h), taken out of argv before
 * darknet reads it, and its check that a CUDA build has the GPU it is asked
 * for. */
#include "cli.h"
#include "options.h" /* amp_dtype_parse */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The program's options as the command line gave them. */
static amp_cli_options opts;

const amp_cli_options *amp_cli_options_get(void)
{
    return &opts;
}

void amp_cli_started(void)
{
    opts.program = 1;
    opts.start = amp_clock();
}

const amp_net_override *amp_cli_override(void)
{
    return &opts.amp;
}

/* Removes argv[i] and the n-1 arguments after it. */
static void take(int *argc, char **argv, int i, int n)
{
    for (int j = i; j + n <= *argc; ++j) argv[j] = argv[j + n];
    *argc -= n;
}

static int bad_option(int *status, const char *prog, const char *fmt, const char *arg)
{
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, arg ? arg : "");
    fputc('\n', stderr);
    *status = 2;
    return 1;
}

int amp_cli_take_options(int *argc, char **argv, int *status)
{
    int map_seen = 0;
    for (int i = 2; i < *argc;) {
        if (!strcmp(argv[i], "-amp")) {
            const char *v = i + 1 < *argc ? argv[i + 1] : NULL;
            amp_net_override *o = &opts.amp;
            memset(o, 0, sizeof *o);
            o->set = 1;
            o->enabled = 1;
            if (!v)
                return bad_option(status, argv[0], "-amp needs a value: bfloat16, float16, "
                                  "float32, 1 (the device's default) or 0 (AMP off)%s", NULL);
            if (!strcmp(v, "0")) o->enabled = 0;
            else if (!strcmp(v, "1")) o->device_default = 1;
            else if (amp_dtype_parse(v, &o->dtype) != AMP_OK)
                return bad_option(status, argv[0], "-amp %s: expected bfloat16, float16, float32, "
                                  "1 (the device's default) or 0 (AMP off)", v);
            snprintf(opts.amp_written, sizeof opts.amp_written, "-amp %s", v);
            o->as_written = opts.amp_written;
            take(argc, argv, i, 2);
        } else if (!strcmp(argv[i], "-map")) {
            opts.map = map_seen = 1;
            take(argc, argv, i, 1);
        } else if (!strcmp(argv[i], "-map_every")) {
            char *end = NULL;
            const char *v = i + 1 < *argc ? argv[i + 1] : "";
            const long n = strtol(v, &end, 10);
            if (!*v || *end || n < 1 || n > 1000000000)
                return bad_option(status, argv[0], "-map_every %s: expected a number of "
                                  "iterations >= 1", v);
            opts.map = map_seen = 1;
            opts.map_every = (int)n;
            take(argc, argv, i, 2);
        } else if (!strcmp(argv[i], "-dont_show") || !strcmp(argv[i], "-show_imgs") ||
                   !strcmp(argv[i], "-mjpeg_port")) {
            /* the forks' display options: nothing here to turn off */
            const int port = argv[i][1] == 'm';
            if (port && i + 1 >= *argc)
                return bad_option(status, argv[0], "-mjpeg_port needs a port number%s", NULL);
            if (!opts.ignored_said[port ? 2 : argv[i][1] == 'd' ? 0 : 1]++)
                fprintf(stderr, "%s: %s accepted: this darknet opens no windows and serves no "
                                "stream, so it changes nothing\n", argv[0], argv[i]);
            take(argc, argv, i, port ? 2 : 1);
        } else {
            ++i;
        }
    }
    if (map_seen && !(*argc >= 3 && !strcmp(argv[1], "detector") && !strcmp(argv[2], "train")))
        fprintf(stderr, "%s: -map applies to `detector train` only; ignored\n", argv[0]);
    return 0;
}

int amp_cli_no_device(int argc, char **argv, int *status)
{
#ifdef GPU
    int want = 0;
    for (int i = 2; i < argc; ++i) {
        if (!strcmp(argv[i], "-nogpu")) return 0;
        if (!strcmp(argv[i], "-i") && i + 1 < argc) want = atoi(argv[i + 1]);
    }
    if (want < 0) return 0;
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && want < count) return 0;
    if (e != cudaSuccess)
        fprintf(stderr, "%s: this CUDA build finds no usable GPU: CUDA reports \"%s\" (%s); "
                        "train and run on the CPU with -nogpu, or use the CPU build "
                        "(docs/gpu.md)\n",
                argv[0], cudaGetErrorString(e), cudaGetErrorName(e));
    else
        fprintf(stderr, "%s: GPU %d asked for (-i), but CUDA finds %d; -i 0 to %d, or -nogpu "
                        "for the CPU\n",
                argv[0], want, count, count - 1);
    *status = 1;
    return 1;
#else
    (void)argc, (void)argv, (void)status;
    return 0;
#endif
}
