/* Data-parallel training over processes (docs/distributed.md): one network
 * per process, launched by MPI (mpirun), gradients summed across processes
 * before every step.
 *
 * The core knows no MPI: when this process is one of N > 1 launched by
 * mpirun (Open MPI's OMPI_COMM_WORLD_SIZE, or PMI_SIZE), amp_dist_get loads
 * the MPI module (libdarknet_amp_mpi.so, plugin/mpi/, linked with libmpi)
 * with dlopen and fills amp_comm from it. Run alone, nothing is loaded and
 * darknet trains as it always did; a darknet-amp built without MPI, or whose
 * module or libmpi cannot be loaded, refuses a multi-process launch with a
 * message instead of training N copies side by side. */
#ifndef AMP_DIST_H
#define AMP_DIST_H

#include "error.h"

#include <stddef.h>

typedef struct amp_comm {
    int rank, size;
    /* In place over every process; 0 on success. */
    int (*sum_f32)(float *buf, size_t n);
    int (*sum_f64)(double *buf, size_t n);
    /* v[i] = the minimum and maximum of v[i] over the processes (lo, hi). */
    int (*minmax_u64)(const unsigned long long *v, unsigned long long *lo,
                      unsigned long long *hi, int n);
    /* Process root's bytes to every process. */
    int (*bcast)(void *buf, size_t bytes, int root);
    void (*finalize)(void);
} amp_comm;

/* The module's entry point (plugin/mpi/mpi_comm.c): MPI initialised, c
 * filled; nonzero with a message in err on failure. */
typedef int (*amp_mpi_open_fn)(amp_comm *c, char *err, size_t errlen);
#define AMP_MPI_OPEN_SYMBOL "amp_mpi_open"

/* The launch this process is part of: *out NULL when it runs alone (no
 * launcher, or one process), else the process group, initialised on the
 * first call. AMP_ERR_INVALID with a message when launched as one of N
 * processes but MPI cannot be used (built without it, module or libmpi not
 * loadable, MPI_Init failed). */
amp_status amp_dist_get(const amp_comm **out, char *err, size_t errlen);

/* How many processes the launcher says there are (1 when none): from the
 * environment, before and without MPI. */
int amp_dist_launched_size(void);

struct amp_net;
/* Before the step's check (step.c): a non-finite loss on any process marks
 * every process's batch, and the backend sums the gradients. A failed
 * exchange stops training (amp_net_fail). */
void amp_dist_reduce(struct amp_net *an);
/* After the step's updates: batch-norm rolling statistics averaged over the
 * processes, and every DARKNET_AMP_DIST_CHECK steps (default 10) the
 * parameters and histories compared across processes; the first layer that
 * differs stops training with a message. */
void amp_dist_after_step(struct amp_net *an);
/* After a load: rank 0's parameters, batch-norm statistics and scaler state
 * broadcast to every process. */
amp_status amp_dist_share(struct amp_net *an, char *err, size_t errlen);
/* DARKNET_AMP_DIST_CHECK (unset or empty: 10); AMP_ERR_INVALID naming the
 * variable on anything but a number 0 or more. */
amp_status amp_dist_check_parse(const char *value, long *every, char *err, size_t errlen);
/* At attach: the processes' cfgs compared (a hash of the cfg file's bytes);
 * AMP_ERR_INVALID naming the file when they differ. */
amp_status amp_dist_same_cfg(struct amp_net *an, char *err, size_t errlen);

#endif
