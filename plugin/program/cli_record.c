/* `detector train` in the darknet-amp program: the training record beside
 * the weights, one row an iteration, and -map's validation (cli.h). */
#include "cli.h"
#include "core.h"         /* amp_net_of, amp_net */
#include "detector_map.h" /* amp_detector_map */
#include "option_list.h"  /* kvp */
#include "state_file.h"   /* amp_weights_read */
#include "error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAP_THRESH 0.25f /* recall and precision at this score, as eval_detector's default */

static struct {
    /* -map */
    int map_failed;
    network *map_net;
    char **valid;
    int nvalid;
    double best_map;
    /* the record */
    FILE *file;
    int failed;
    double wall_offset, last;
} rec = {.best_map = -1};

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
        !(rec.file = fopen(path, "a"))) {
        fprintf(stderr, "darknet-amp: cannot write the training record %s (%s); training goes "
                        "on without it\n",
                path, strerror(errno));
        remove(tmp);
        rec.failed = 1;
        return;
    }
    rec.wall_offset = kept ? wall : 0;
    fprintf(stderr, "darknet-amp: training record %s (scripts/chart draws it)%s\n", path,
            kept ? "; continued" : "");
}

static void record_row(network *net, const darknet_train_progress *p, double t, double map50)
{
    if (!rec.file && !rec.failed) record_open(p);
    if (!rec.file) return;
    const amp_net *an = amp_net_of(net);
    const double per_iteration = p->iteration > 0 ? (double)p->images / p->iteration : 0;
    const double dt = t - rec.last;
    fprintf(rec.file, "%d\t%.9g\t%.9g\t%.9g\t", p->iteration, p->loss, p->avg_loss, p->rate);
    unsigned long long steps, skips;
    if (an && an->scaler) {
        amp_steps_counted(&an->scaler->state, an->forward_skips, an->loss_skips, &steps, &skips);
        fprintf(rec.file, "%.9g\t%llu\t", an->scaler->state.scale, skips);
    } else {
        fputs("NaN\tNaN\t", rec.file);
    }
    fprintf(rec.file, "%.2f\t%.3f\t", dt > 0 ? per_iteration / dt : 0,
            rec.wall_offset + (t - amp_cli_options_get()->start));
    if (map50 >= 0) fprintf(rec.file, "%.6f\n", map50);
    else fputs("NaN\n", rec.file);
    fflush(rec.file);
}

/* ---- -map ---- */

static void map_stop(const char *why)
{
    fprintf(stderr, "darknet-amp: -map: %s; training goes on without it\n", why);
    rec.map_failed = 1;
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
    rec.valid = amp_map_read_lines(valid, &rec.nvalid, err, sizeof err);
    if (!rec.valid || !rec.nvalid) {
        if (rec.valid) snprintf(err, sizeof err, "%s: no images", valid);
        map_stop(err);
        return 0;
    }
    fprintf(stderr, "darknet-amp: -map: validation mAP@0.5 on the %d images of %s every %d "
                    "iterations and at the end, in float32 on a batch-1 copy of %s:\n",
            rec.nvalid, valid, every, p->cfgfile);
    /* no AMP and no state files for the copy */
    const darknet_hooks *h = darknet_set_hooks(NULL);
    rec.map_net = parse_network_cfg_checked((char *)p->cfgfile, err, sizeof err);
    darknet_set_hooks(h);
    if (!rec.map_net) {
        map_stop(err);
        return 0;
    }
    set_batch_network(rec.map_net, 1);
    return 1;
}

/* The mAP@0.5 of the training network's weights now; -1 when not due or it
 * failed. The weights go through a file (darknet's format: every layer type,
 * the device's copy included); kept as <base>_best.weights when best. */
static double map_due(network *net, const darknet_train_progress *p)
{
    if (!amp_cli_options_get()->map || rec.map_failed || p->iteration < 1) return -1;
    const int per_iteration = (int)(p->images / p->iteration);
    int every = amp_cli_options_get()->map_every;
    if (!every) {
        every = per_iteration > 0 ? 4 * p->train_images / per_iteration : 100;
        if (every < 100) every = 100;
    }
    if (p->iteration % every != 0 && p->iteration < p->max_batches) return -1;
    if (!rec.map_net && !map_setup(p, every)) return -1;

    char tmp[4096], best[4096], err[AMP_MSG_LEN];
    backup_file(p, ".map.tmp", tmp, sizeof tmp);
    backup_file(p, "_best.weights", best, sizeof best);
    const double t0 = amp_clock();
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
    const int loaded = load_weights_checked(rec.map_net, tmp, 0, rec.map_net->n, err, sizeof err);
    darknet_set_hooks(h);
    amp_map_result r;
    const amp_map_options o = {MAP_THRESH, 0.5f, 0};
    if (loaded != 0 ||
        amp_detector_map(rec.map_net, rec.valid, rec.nvalid, &o, &r, err, sizeof err) != AMP_OK) {
        remove(tmp);
        map_stop(err);
        return -1;
    }
    const int improved = r.map50 > rec.best_map;
    if (improved) rec.best_map = r.map50;
    if (!improved || rename(tmp, best) != 0) remove(tmp);
    printf("map: iteration %d: mAP@0.5 %.2f%% (at score >= %.2f: recall %.2f%%, precision "
           "%.2f%%; %d images, %.1f s)%s%s\n",
           p->iteration, 100 * r.map50, MAP_THRESH, 100 * r.recall, 100 * r.precision, r.images,
           amp_clock() - t0, improved ? "; best so far: " : "", improved ? best : "");
    fflush(stdout);
    const double m = r.map50;
    amp_map_result_free(&r);
    return m;
}

void amp_cli_progress(network *net, const darknet_train_progress *p)
{
    if (!amp_cli_options_get()->program || !p) return;
    if (!rec.last) rec.last = amp_cli_options_get()->start;
    const double t = amp_clock();
    const double map50 = map_due(net, p);
    record_row(net, p, t, map50);
    rec.last = amp_clock(); /* the evaluation's time is not the next iteration's */
}
