/* The process group of a data-parallel launch (dist.h): detected from the
 * launcher's environment, MPI loaded only then. */
#include "dist.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h> /* readlink, access */

/* The launcher's process count: Open MPI's mpirun, or a PMI launcher
 * (MPICH's, Slurm's). */
static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};

int amp_dist_launched_size(void)
{
    for (size_t i = 0; i < sizeof size_vars / sizeof size_vars[0]; ++i) {
        const char *v = getenv(size_vars[i]);
        char *end;
        long n = v ? strtol(v, &end, 10) : 0;
        if (v && *v && !*end && n > 0 && n < 1 << 20) return (int)n;
    }
    return 1;
}

static amp_comm comm;
static int state; /* 0: not tried, 1: alone, 2: a group, -1: failed */
static char failure[AMP_MSG_LEN];

#ifdef AMP_HAVE_MPI
static void finalize_at_exit(void)
{
    if (state == 2 && comm.finalize) comm.finalize();
}

/* The module in <program's directory>/../lib/darknet-amp/ (an installed
 * prefix, or the build tree), else where it was built. */
static const char *module_beside_program(char *buf, size_t n)
{
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        const char *base = strrchr(AMP_MPI_MODULE, '/');
        if (slash && base) {
            *slash = '\0';
            const int w = snprintf(buf, n, "%s/../lib/darknet-amp%s", exe, base);
            if (w > 0 && (size_t)w < n && access(buf, R_OK) == 0) return buf;
        }
    }
    return AMP_MPI_MODULE;
}
#endif

static amp_status open_group(int n, char *err, size_t errlen)
{
#ifndef AMP_HAVE_MPI
    AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                     "amp: launched as one of %d processes, but this darknet-amp was built "
                     "without MPI (DARKNET_AMP_MPI=OFF, or no MPI found when configured: "
                     "apt-get install libopenmpi-dev and rebuild)",
                     n);
#else
    const char *path = getenv("DARKNET_AMP_MPI_MODULE");
    char beside[4096];
    if (!path || !*path) path = module_beside_program(beside, sizeof beside);
    void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    AMP_RETURN_ERROR_IF(!lib, AMP_ERR_INVALID, err, errlen,
                        "amp: launched as one of %d processes, but the MPI module cannot be "
                        "loaded: %s (is Open MPI's library installed? apt-get install "
                        "libopenmpi3)",
                        n, dlerror());
    amp_mpi_open_fn open_fn = (amp_mpi_open_fn)dlsym(lib, AMP_MPI_OPEN_SYMBOL);
    AMP_RETURN_ERROR_IF(!open_fn, AMP_ERR_INVALID, err, errlen,
                        "amp: %s has no %s: not darknet-amp's MPI module", path,
                        AMP_MPI_OPEN_SYMBOL);
    char why[AMP_MSG_LEN] = "";
    AMP_RETURN_ERROR_IF(open_fn(&comm, why, sizeof why) != 0, AMP_ERR_INVALID, err, errlen,
                        "amp: launched as one of %d processes: %s", n, why);
    AMP_RETURN_ERROR_IF(comm.size != n, AMP_ERR_INVALID, err, errlen,
                        "amp: the launcher says %d processes, MPI says %d", n, comm.size);
    atexit(finalize_at_exit);
    /* Every process must draw the same batches: without DARKNET_SEED, rank
     * 0's clock seeds them all (darknet seeds with time(0)). */
    if (!getenv("DARKNET_SEED")) {
        unsigned int seed = (unsigned int)time(NULL);
        char v[16];
        AMP_RETURN_ERROR_IF(comm.bcast(&seed, sizeof seed, 0) != 0, AMP_ERR_INVALID, err, errlen,
                            "amp: the processes could not agree on a seed (MPI failed)");
        snprintf(v, sizeof v, "%u", seed);
        setenv("DARKNET_SEED", v, 1);
    }
    return AMP_OK;
#endif
}

amp_status amp_dist_get(const amp_comm **out, char *err, size_t errlen)
{
    *out = NULL;
    if (state == 0) {
        const int n = amp_dist_launched_size();
        /* DARKNET_AMP_DIST=1: a group even of one process, the data-parallel
         * step's code path on one device (docs/distributed.md) */
        const char *force = getenv("DARKNET_AMP_DIST");
        char shown[64];
        AMP_RETURN_ERROR_IF(force && *force && strcmp(force, "0") && strcmp(force, "1"),
                            AMP_ERR_INVALID, err, errlen,
                            "DARKNET_AMP_DIST=%s: expected 1 (a data-parallel group even of one "
                            "process) or 0",
                            amp_show(shown, sizeof shown, force, 32));
        if (n <= 1 && !(force && !strcmp(force, "1"))) {
            state = 1;
        } else if (open_group(n, failure, sizeof failure) == AMP_OK) {
            state = 2;
        } else {
            state = -1;
        }
    }
    AMP_RETURN_ERROR_IF(state < 0, AMP_ERR_INVALID, err, errlen, "%s", failure);
    if (state == 2) *out = &comm;
    return AMP_OK;
}

/* ---- the step of a data-parallel network ---- */

#include "backend.h"

void amp_dist_reduce(amp_net *an)
{
    const amp_comm *c = an->comm;
    const double t0 = amp_clock();
    /* a non-finite loss anywhere skips the step everywhere; a half layer's
     * forward overflow anywhere (the lowest such layer) is every process's,
     * so that all of them put the same layer back to float32 at this step */
    const unsigned long long v[2] = {an->loss_bad != 0,
                                     an->origin_overflow ? (unsigned long long)an->origin_layer
                                                         : ~0ULL};
    unsigned long long lo[2] = {0, 0}, hi[2] = {0, 0};
    if (c->minmax_u64(v, lo, hi, 2) != 0 || an->ops->reduce(an) != 0) {
        amp_net_fail(an, AMP_ERR_DEVICE,
                     "amp: %s: rank %d of %d: the gradients could not be summed over the "
                     "processes (MPI failed)", an->cfgfile, c->rank, c->size);
        return;
    }
    if (hi[0] && !an->loss_bad) { /* another process's loss: named as the last layer's */
        an->loss_bad = an->net->n;
        snprintf(an->loss_where, sizeof an->loss_where, "another process's batch");
        an->loss_cause[0] = 0;
    }
    if (lo[1] != ~0ULL && (!an->origin_overflow || an->origin_layer != (int)lo[1])) {
        an->origin_layer = (int)lo[1]; /* found by another process: its scan is not here */
        an->origin_overflow = 1;
        an->origin_scan = (amp_overflow_scan){0, 0};
    }
    an->dist_reduce_s += amp_clock() - t0;
}

/* FNV-1a over n bytes, continuing h. */
static unsigned long long fnv(unsigned long long h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

#define HASH(h, a, n) ((a) ? fnv((h), (a), (size_t)(n) * sizeof *(a)) : (h))

static unsigned long long layer_hash(const layer *l)
{
    unsigned long long h = 14695981039346656037ULL;
    h = HASH(h, l->weights, l->nweights);
    h = HASH(h, l->weight_updates, l->nweights);
    h = HASH(h, l->biases, l->nbiases);
    h = HASH(h, l->bias_updates, l->nbiases);
    if (l->batch_normalize) {
        h = HASH(h, l->scales, l->out_c);
        h = HASH(h, l->scale_updates, l->out_c);
    }
    return h;
}

amp_status amp_dist_check_parse(const char *value, long *every, char *err, size_t errlen)
{
    long n = 10;
    int bad = 0;
    if (value && *value) {
        char *end = NULL;
        n = strtol(value, &end, 10);
        bad = *end != 0 || n < 0;
    }
    char shown[256];
    AMP_RETURN_ERROR_IF(bad, AMP_ERR_INVALID, err, errlen,
                        "DARKNET_AMP_DIST_CHECK=%s: expected a number of steps, 0 or more",
                        amp_show(shown, sizeof shown, value, 64));
    *every = n;
    return AMP_OK;
}

/* The backend's arrays to darknet's host arrays (pull) or back (push), where
 * they live on a device; nonzero on failure. */
static int pull(amp_net *an, int stats_only)
{
    return an->ops->pull ? an->ops->pull(an, stats_only) : 0;
}

static int push(amp_net *an, int stats_only)
{
    return an->ops->push ? an->ops->push(an, stats_only) : 0;
}

/* Every batch-norm statistic replaced by its mean over the processes: on
 * the backend's side where it has the means to (a device), else packed into
 * one host buffer, summed in one call and unpacked; 0, or -1 said. */
static int average_statistics(amp_net *an)
{
    const amp_comm *c = an->comm;
    if (an->ops->average_statistics) {
        if (an->ops->average_statistics(an) == 0) return 0;
        amp_net_fail(an, AMP_ERR_DEVICE, "amp: %s: rank %d: batch-norm statistics could not be "
                     "averaged on the device", an->cfgfile, c->rank);
        return -1;
    }
    if (pull(an, 1) != 0) {
        amp_net_fail(an, AMP_ERR_DEVICE, "amp: %s: rank %d: batch-norm statistics could not be "
                     "read from the device", an->cfgfile, c->rank);
        return -1;
    }
    size_t n = 0;
    for (int k = 0; k < an->nstates; ++k)
        if (amp_state_is_statistic(&an->states[k])) n += an->states[k].n;
    if (!n) return 0;
    if (!an->dist_pack && !(an->dist_pack = malloc(n * sizeof *an->dist_pack))) {
        amp_net_fail(an, AMP_ERR_NOMEM, "amp: %s: rank %d: out of memory averaging the "
                     "batch-norm statistics", an->cfgfile, c->rank);
        return -1;
    }
    float *p = an->dist_pack;
    for (int k = 0; k < an->nstates; ++k) {
        const amp_fwd_state *f = &an->states[k];
        if (amp_state_is_statistic(f)) memcpy(p, f->host, f->n * sizeof *p), p += f->n;
    }
    if (c->sum_f32(an->dist_pack, n) != 0) {
        amp_net_fail(an, AMP_ERR_DEVICE, "amp: %s: rank %d: batch-norm statistics could not "
                     "be averaged (MPI failed)", an->cfgfile, c->rank);
        return -1;
    }
    const float inv = 1.0f / (float)c->size;
    p = an->dist_pack;
    for (int k = 0; k < an->nstates; ++k) {
        const amp_fwd_state *f = &an->states[k];
        if (!amp_state_is_statistic(f)) continue;
        for (size_t i = 0; i < f->n; ++i) f->host[i] = p[i] * inv;
        p += f->n;
    }
    if (push(an, 1) != 0) {
        amp_net_fail(an, AMP_ERR_DEVICE, "amp: %s: rank %d: batch-norm statistics could not be "
                     "written to the device", an->cfgfile, c->rank);
        return -1;
    }
    return 0;
}

void amp_dist_after_step(amp_net *an)
{
    const amp_comm *c = an->comm;
    network *net = an->net;
    /* batch-norm statistics follow each process's own images: averaged, so
     * that every process keeps the same (and rank 0 saves the mean). Not after
     * a skipped step, which put back the batch start's, the same everywhere
     * already: an average of equal values need not be exact. (A device
     * decides on the device: its skipped step puts the batch start's back
     * after this, in step_end.) */
    if (!an->skip_updates && average_statistics(an) != 0) return;
    const long every = an->dist_check_every;
    if (!every || an->step_index - an->dist_checked < (unsigned long)every) return;
    an->dist_checked = an->step_index;
    unsigned long long *h = malloc(3 * (size_t)net->n * sizeof *h);
    if (!h) return;
    if (pull(an, 0) != 0) {
        free(h);
        amp_net_fail(an, AMP_ERR_DEVICE, "amp: %s: rank %d: the consistency check could not read "
                     "the device", an->cfgfile, c->rank);
        return;
    }
    for (int i = 0; i < net->n; ++i) h[i] = layer_hash(&net->layers[i]);
    for (int k = 0; k < an->nstates; ++k) {
        const amp_fwd_state *f = &an->states[k];
        if (amp_state_is_statistic(f)) h[f->layer] = HASH(h[f->layer], f->host, f->n);
    }
    if (c->minmax_u64(h, h + net->n, h + 2 * (size_t)net->n, net->n) != 0) {
        amp_net_fail(an, AMP_ERR_DEVICE, "amp: %s: rank %d: the consistency check could not run "
                     "(MPI failed)", an->cfgfile, c->rank);
    } else {
        for (int i = 0; i < net->n; ++i)
            if (h[net->n + i] != h[2 * (size_t)net->n + i]) {
                amp_net_fail(an, AMP_ERR_STATE,
                             "amp: %s: after step %lu the processes' layer %d differs (weights, "
                             "histories or batch-norm statistics): training diverged across "
                             "processes; a bug, please report it",
                             an->cfgfile, an->step_index, i);
                break;
            }
    }
    free(h);
}

#define BCAST(c, a, n) ((a) ? (c)->bcast((a), (size_t)(n) * sizeof *(a), 0) : 0)

amp_status amp_dist_share(amp_net *an, char *err, size_t errlen)
{
    const amp_comm *c = an->comm;
    network *net = an->net;
    int bad = 0;
    for (int i = 0; i < net->n && !bad; ++i) {
        layer *l = &net->layers[i];
        bad |= BCAST(c, l->weights, l->nweights) | BCAST(c, l->biases, l->nbiases);
        if (l->batch_normalize) bad |= BCAST(c, l->scales, l->out_c);
    }
    for (int k = 0; k < an->nstates && !bad; ++k)
        if (amp_state_is_statistic(&an->states[k]))
            bad |= BCAST(c, an->states[k].host, an->states[k].n);
    bad |= c->bcast(&an->scaler->state, sizeof an->scaler->state, 0);
    bad |= c->bcast(net->seen, sizeof *net->seen, 0);
    bad |= push(an, 0); /* darknet pushed what this process loaded */
    if (!bad && an->ops->push_state) an->ops->push_state(an);
    AMP_RETURN_ERROR_IF(bad, AMP_ERR_INVALID, err, errlen,
                        "amp: %s: rank %d: the loaded weights could not be shared from rank 0 "
                        "(MPI failed)", an->cfgfile, c->rank);
    an->weights_version += 1;
    return AMP_OK;
}

amp_status amp_dist_same_cfg(amp_net *an, char *err, size_t errlen)
{
    const amp_comm *c = an->comm;
    unsigned long long h = 14695981039346656037ULL, lo = 0, hi = 0;
    FILE *f = fopen(an->cfgfile, "rb");
    if (f) {
        unsigned char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) h = fnv(h, buf, n);
        fclose(f);
    }
    AMP_RETURN_ERROR_IF(c->minmax_u64(&h, &lo, &hi, 1) != 0, AMP_ERR_INVALID, err, errlen,
                        "amp: %s: rank %d: the cfgs could not be compared (MPI failed)",
                        an->cfgfile, c->rank);
    AMP_RETURN_ERROR_IF(lo != hi, AMP_ERR_INVALID, err, errlen,
                        "amp: %s: the processes of this launch were given different cfgs "
                        "(rank %d's differs from another's): every process must train the "
                        "same network", an->cfgfile, c->rank);
    return AMP_OK;
}
