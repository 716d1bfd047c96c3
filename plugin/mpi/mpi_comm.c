/* The MPI module of darknet-amp's data-parallel training (plugin/dist.h):
 * a shared library linked with libmpi, loaded with dlopen only when darknet
 * runs as one of several processes, so that a single process never needs
 * libmpi. MPI_COMM_WORLD, in place; buffers larger than INT_MAX elements go
 * in pieces. */
#include "dist.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>

#define PIECE ((size_t)1 << 30)

/* A sum to rank 0, then rank 0's result to all: every process gets the
 * same bits (an all-reduce may round differently on different ranks, and
 * the processes' weights must stay identical). */
static int sum(void *buf, size_t n, size_t elt, MPI_Datatype t)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (size_t done = 0; done < n; done += PIECE) {
        const size_t k = n - done < PIECE ? n - done : PIECE;
        char *p = (char *)buf + done * elt;
        if (MPI_Reduce(rank ? p : MPI_IN_PLACE, rank ? NULL : p, (int)k, t, MPI_SUM, 0,
                       MPI_COMM_WORLD) != MPI_SUCCESS ||
            MPI_Bcast(p, (int)k, t, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
            return 1;
    }
    return 0;
}

static int sum_f32(float *buf, size_t n) { return sum(buf, n, sizeof *buf, MPI_FLOAT); }
static int sum_f64(double *buf, size_t n) { return sum(buf, n, sizeof *buf, MPI_DOUBLE); }

static int minmax_u64(const unsigned long long *v, unsigned long long *lo, unsigned long long *hi,
                      int n)
{
    return MPI_Allreduce(v, lo, n, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD) !=
               MPI_SUCCESS ||
           MPI_Allreduce(v, hi, n, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS;
}

static int bcast(void *buf, size_t bytes, int root)
{
    for (size_t done = 0; done < bytes; done += PIECE) {
        const size_t k = bytes - done < PIECE ? bytes - done : PIECE;
        if (MPI_Bcast((char *)buf + done, (int)k, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS)
            return 1;
    }
    return 0;
}

static void finalize(void)
{
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

__attribute__((visibility("default"))) int amp_mpi_open(amp_comm *c, char *err, size_t errlen)
{
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        snprintf(err, errlen, "MPI_Init_thread failed");
        return 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    c->sum_f32 = sum_f32;
    c->sum_f64 = sum_f64;
    c->minmax_u64 = minmax_u64;
    c->bcast = bcast;
    c->finalize = finalize;
    return 0;
}
