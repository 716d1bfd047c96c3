/* What the darknet-amp program adds to darknet's commands (cli.h). */
#include "cli.h"
#include "core.h"         /* amp_net_of, amp_net */
#include "option_list.h"  /* kvp */
#include "detector_map.h" /* amp_detector_map */
#include "error.h"
#include "state_file.h" /* amp_state_file_show */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#ifndef AMP_VERSION
#define AMP_VERSION "?"
#endif
#ifndef AMP_DARKNET_VERSION
#define AMP_DARKNET_VERSION "?"
#endif
#ifndef AMP_PATCHES
#define AMP_PATCHES 0
#endif

#define MAP_THRESH 0.25f /* recall and precision at this score, as eval_detector's default */

static struct {
    int program; /* the command hook ran: this is the darknet-amp program */
    amp_net_override amp;
    char amp_written[64];
    int banner_said, conflict_said;
    int ignored_said[3]; /* -dont_show, -show_imgs, -mjpeg_port said */
    double start; /* when the program started */
    /* -map */
    int map, map_every, map_failed;
    network *map_net;
    char **valid;
    int nvalid;
    double best_map;
    /* the record */
    FILE *record;
    int record_failed;
    double wall_offset, last;
} cli = {.best_map = -1};

static double now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

const amp_net_override *amp_cli_override(void)
{
    return &cli.amp;
}

/* ---- options ---- */

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

static int take_options(int *argc, char **argv, int *status)
{
    int map_seen = 0;
    for (int i = 2; i < *argc;) {
        if (!strcmp(argv[i], "-amp")) {
            const char *v = i + 1 < *argc ? argv[i + 1] : NULL;
            amp_net_override *o = &cli.amp;
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
            snprintf(cli.amp_written, sizeof cli.amp_written, "-amp %s", v);
            o->as_written = cli.amp_written;
            take(argc, argv, i, 2);
        } else if (!strcmp(argv[i], "-map")) {
            cli.map = map_seen = 1;
            take(argc, argv, i, 1);
        } else if (!strcmp(argv[i], "-map_every")) {
            char *end = NULL;
            const char *v = i + 1 < *argc ? argv[i + 1] : "";
            const long n = strtol(v, &end, 10);
            if (!*v || *end || n < 1 || n > 1000000000)
                return bad_option(status, argv[0], "-map_every %s: expected a number of "
                                  "iterations >= 1", v);
            cli.map = map_seen = 1;
            cli.map_every = (int)n;
            take(argc, argv, i, 2);
        } else if (!strcmp(argv[i], "-dont_show") || !strcmp(argv[i], "-show_imgs") ||
                   !strcmp(argv[i], "-mjpeg_port")) {
            /* the forks' display options: nothing here to turn off */
            const int port = argv[i][1] == 'm';
            if (port && i + 1 >= *argc)
                return bad_option(status, argv[0], "-mjpeg_port needs a port number%s", NULL);
            if (!cli.ignored_said[port ? 2 : argv[i][1] == 'd' ? 0 : 1]++)
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
    cli.program = 1;
    cli.start = cli.last = now();
    if (*argc == 2 && !strcmp(argv[1], "--version")) {
        printf("darknet-amp %s (darknet %s with %d patches; %s)\n", AMP_VERSION,
               AMP_DARKNET_VERSION, AMP_PATCHES, build_kind());
        *status = 0;
        return 1;
    }
    if (*argc >= 2 && strcmp(argv[1], "amp") != 0 && take_options(argc, argv, status)) return 1;
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
        fprintf(stderr, "usage: %s amp show FILE.weights.amp (or FILE.weights)\n", argv[0]);
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
    if (!cli.program) return;
    if (conflict && conflict[0] && !cli.conflict_said) {
        fprintf(stderr, "darknet-amp: %s overrides %s [net] %s\n", cli.amp_written, cfgfile,
                conflict);
        cli.conflict_said = 1;
    }
    if (cli.banner_said) return;
    cli.banner_said = 1;
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
                cli.amp.set ? cli.amp_written : cfgfile, cli.amp.set ? "" : " [net] amp=1");
    else if (cli.amp.set)
        fprintf(stderr, "AMP off (%s)%s\n", cli.amp_written,
                data_parallel ? "; float32 steps summed over the processes" : "");
    else
        fprintf(stderr, "AMP off (%s [net] has no amp=1; -amp bfloat16 or -amp float16 turns it "
                        "on)%s\n", cfgfile,
                data_parallel ? "; float32 steps summed over the processes" : "");
}

/* ---- the record ---- */

/* <backup>/<base><suffix>, one slash between (darknet's default backup
 * directory, and many a .data file, end with one). */
static void backup_file(const darknet_train_progress *p, const char *suffix, char *path, size_t n)
{
    const size_t len = strlen(p->backup_directory);
    const int slash = len > 0 && p->backup_directory[len - 1] == '/';
    snprintf(path, n, "%s%s%s%s", p->backup_directory, slash ? "" : "/", p->base, suffix);
}

/* Keeps an earlier run's comments and rows before iteration from, in tmp;
 * returns the wall time of the last row kept (0 when none), -1 when tmp
 * cannot be written. */
static double keep_earlier(const char *path, FILE *tmp, int from, int *kept)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    double wall = 0;
    *kept = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            if (fputs(line, tmp) == EOF) wall = -1;
            continue;
        }
        int it;
        double w;
        char *end;
        it = (int)strtol(line, &end, 10);
        if (end == line || it >= from) continue;
        /* wall_s is the 8th column */
        const char *c = line;
        for (int col = 1; col < 8 && c; ++col) {
            c = strchr(c, '\t');
            if (c) ++c;
        }
        if (!c || sscanf(c, "%lf", &w) != 1) continue;
        if (fputs(line, tmp) == EOF) wall = -1;
        if (wall >= 0) wall = w;
        ++*kept;
    }
    fclose(f);
    return wall;
}

static void record_open(const darknet_train_progress *p)
{
    char path[4096], tmp[4200];
    backup_file(p, ".record.tsv", path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *t = fopen(tmp, "w");
    int kept = 0;
    double wall = t ? keep_earlier(path, t, p->iteration, &kept) : -1;
    if (t && wall >= 0 && !kept) {
        /* a new run: a fresh header */
        fclose(t);
        t = fopen(tmp, "w");
    }
    time_t clock = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", localtime(&clock));
    if (t && wall >= 0) {
        if (!kept)
            fprintf(t, "# darknet-amp detector train %s %s: started %s\n"
                       "# iteration\tloss\tavg_loss\trate\tscale\tskipped\timages_per_s\twall_s"
                       "\tmap50\n",
                    p->datacfg, p->cfgfile, date);
        else
            fprintf(t, "# resumed at iteration %d: %s\n", p->iteration, date);
    }
    if (!t || wall < 0 || fclose(t) != 0 || rename(tmp, path) != 0 ||
        !(cli.record = fopen(path, "a"))) {
        fprintf(stderr, "darknet-amp: cannot write the training record %s (%s); training goes "
                        "on without it\n",
                path, strerror(errno));
        remove(tmp);
        cli.record_failed = 1;
        return;
    }
    cli.wall_offset = kept ? wall : 0;
    fprintf(stderr, "darknet-amp: training record %s (scripts/chart draws it)%s\n", path,
            kept ? "; continued" : "");
}

static void record_row(network *net, const darknet_train_progress *p, double t, double map50)
{
    if (!cli.record && !cli.record_failed) record_open(p);
    if (!cli.record) return;
    const amp_net *an = amp_net_of(net);
    const double per_iteration = p->iteration > 0 ? (double)p->images / p->iteration : 0;
    const double dt = t - cli.last;
    fprintf(cli.record, "%d\t%.9g\t%.9g\t%.9g\t", p->iteration, p->loss, p->avg_loss, p->rate);
    unsigned long long steps, skips;
    if (an && an->scaler) {
        amp_steps_counted(&an->scaler->state, an->forward_skips, an->loss_skips, &steps, &skips);
        fprintf(cli.record, "%.9g\t%llu\t", an->scaler->state.scale, skips);
    } else {
        fputs("NaN\tNaN\t", cli.record);
    }
    fprintf(cli.record, "%.2f\t%.3f\t", dt > 0 ? per_iteration / dt : 0,
            cli.wall_offset + (t - cli.start));
    if (map50 >= 0) fprintf(cli.record, "%.6f\n", map50);
    else fputs("NaN\n", cli.record);
    fflush(cli.record);
}

/* ---- -map ---- */

static void map_stop(const char *why)
{
    fprintf(stderr, "darknet-amp: -map: %s; training goes on without it\n", why);
    cli.map_failed = 1;
}

/* The batch-1 network -map evaluates, and the validation list; 0 when
 * -map cannot run (said). */
static int map_setup(const darknet_train_progress *p, int every)
{
    char err[AMP_MSG_LEN];
    list *opts = read_data_cfg((char *)p->datacfg);
    const char *valid = NULL;
    for (node *n = opts ? opts->front : NULL; n; n = n->next) {
        kvp *kv = n->val;
        if (!strcmp(kv->key, "valid")) valid = kv->val, kv->used = 1;
    }
    if (!valid) {
        snprintf(err, sizeof err, "%s has no valid= list of validation images", p->datacfg);
        map_stop(err);
        return 0;
    }
    cli.valid = amp_map_read_lines(valid, &cli.nvalid, err, sizeof err);
    if (!cli.valid || !cli.nvalid) {
        if (cli.valid) snprintf(err, sizeof err, "%s: no images", valid);
        map_stop(err);
        return 0;
    }
    fprintf(stderr, "darknet-amp: -map: validation mAP@0.5 on the %d images of %s every %d "
                    "iterations and at the end, in float32 on a batch-1 copy of %s:\n",
            cli.nvalid, valid, every, p->cfgfile);
    /* no AMP and no state files for the copy */
    const darknet_hooks *h = darknet_set_hooks(NULL);
    cli.map_net = parse_network_cfg_checked((char *)p->cfgfile, err, sizeof err);
    darknet_set_hooks(h);
    if (!cli.map_net) {
        map_stop(err);
        return 0;
    }
    set_batch_network(cli.map_net, 1);
    return 1;
}

/* The mAP@0.5 of the training network's weights now; -1 when not due or it
 * failed. The weights go through a file (darknet's format: every layer type,
 * the device's copy included); kept as <base>_best.weights when best. */
static double map_due(network *net, const darknet_train_progress *p)
{
    if (!cli.map || cli.map_failed || p->iteration < 1) return -1;
    const int per_iteration = (int)(p->images / p->iteration);
    int every = cli.map_every;
    if (!every) {
        every = per_iteration > 0 ? 4 * p->train_images / per_iteration : 100;
        if (every < 100) every = 100;
    }
    if (p->iteration % every != 0 && p->iteration < p->max_batches) return -1;
    if (!cli.map_net && !map_setup(p, every)) return -1;

    char tmp[4096], best[4096], err[AMP_MSG_LEN];
    backup_file(p, ".map.tmp", tmp, sizeof tmp);
    backup_file(p, "_best.weights", best, sizeof best);
    const double t0 = now();
    const darknet_hooks *h = darknet_set_hooks(NULL);
    save_weights(net, tmp);
    darknet_set_hooks(h);
    /* Weights with an inf or a NaN predict nothing: not evaluated, and never
     * kept as the best (nor over an earlier run's best). */
    amp_weights_id id;
    amp_weights_values v;
    if (amp_weights_read(tmp, &id, &v, err, sizeof err) == AMP_OK && v.nonfinite) {
        char where[AMP_MSG_LEN];
        amp_nonfinite_where(net, &v, where, sizeof where);
        remove(tmp);
        printf("map: iteration %d: not evaluated: the weights hold %llu non-finite values (%s); "
               "%s is not replaced\n",
               p->iteration, v.nonfinite, where, best);
        fflush(stdout);
        return -1;
    }
    darknet_set_hooks(NULL);
    const int loaded = load_weights_checked(cli.map_net, tmp, 0, cli.map_net->n, err, sizeof err);
    darknet_set_hooks(h);
    amp_map_result r;
    const amp_map_options o = {MAP_THRESH, 0.5f, 0};
    if (loaded != 0 ||
        amp_detector_map(cli.map_net, cli.valid, cli.nvalid, &o, &r, err, sizeof err) != AMP_OK) {
        remove(tmp);
        map_stop(err);
        return -1;
    }
    const int improved = r.map50 > cli.best_map;
    if (improved) cli.best_map = r.map50;
    if (!improved || rename(tmp, best) != 0) remove(tmp);
    printf("map: iteration %d: mAP@0.5 %.2f%% (at score >= %.2f: recall %.2f%%, precision "
           "%.2f%%; %d images, %.1f s)%s%s\n",
           p->iteration, 100 * r.map50, MAP_THRESH, 100 * r.recall, 100 * r.precision, r.images,
           now() - t0, improved ? "; best so far: " : "", improved ? best : "");
    fflush(stdout);
    const double m = r.map50;
    amp_map_result_free(&r);
    return m;
}

void amp_cli_progress(network *net, const darknet_train_progress *p)
{
    if (!cli.program || !p) return;
    const double t = now();
    const double map50 = map_due(net, p);
    record_row(net, p, t, map50);
    cli.last = now(); /* the evaluation's time is not the next iteration's */
}
