/* The machine's GEMM peak, as oneDNN reaches it: the yardstick that
 * scripts/bench sets the half layers' achieved GFLOP/s against.
 *
 *   gemm_peak [N] [REPEATS]      (defaults 1024 and 10)
 *
 * Times C = A*B (N x N x N, 2*N^3 flops) with
 *   f32:  dnnl_sgemm (row-major, plain layouts), and oneDNN's f32 matmul;
 *   bf16: oneDNN's matmul with bfloat16 A and B and float32 C (float32
 *         accumulation, what a bfloat16 convolution does; dnnl.h of oneDNN 2.x
 *         has no bf16 gemm entry point).
 * The matmuls let oneDNN pick B's layout ("any": packed for AVX512-BF16 or
 * AMX), reordered once outside the timing, as a layer's cached weights are.
 * Each figure is the best of REPEATS runs after one warm-up run. Threads: as
 * oneDNN's OpenMP runtime is told (OMP_NUM_THREADS).
 *
 * Prints one line per kernel, `gemm_peak: <kind> ... <rate> GFLOP/s (<impl>)`,
 * then `gemm_peak: peak f32 <rate> bf16 <rate>` for scripts to read. Exits 1
 * with a message on any oneDNN error; a CPU without bfloat16 support still
 * prints the (slow or refused) bf16 line.
 *
 * Build: cc -O2 scripts/gemm_peak.c -o gemm_peak -ldnnl
 */
#include <oneapi/dnnl/dnnl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        dnnl_status_t st_ = (call);                                                  \
        if (st_ != dnnl_success) {                                                   \
            fprintf(stderr, "gemm_peak: %s failed (%s:%d): oneDNN status %d\n", #call, \
                    __FILE__, __LINE__, (int)st_);                                    \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void fill(float *v, long n, unsigned seed)
{
    for (long i = 0; i < n; ++i) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
}

static double sgemm_rate(long n, int repeats)
{
    float *a = malloc(n * n * sizeof *a), *b = malloc(n * n * sizeof *b),
          *c = malloc(n * n * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "gemm_peak: out of memory\n");
        exit(1);
    }
    fill(a, n * n, 1), fill(b, n * n, 2);
    double best = 1e30;
    for (int r = 0; r <= repeats; ++r) {
        double t = now();
        CHECK(dnnl_sgemm('N', 'N', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n));
        t = now() - t;
        if (r && t < best) best = t; /* run 0 warms up */
    }
    free(a), free(b), free(c);
    return 2.0 * n * n * n / best * 1e-9;
}

static dnnl_memory_t memory(dnnl_engine_t eng, const dnnl_memory_desc_t *md)
{
    dnnl_memory_t m;
    CHECK(dnnl_memory_create(&m, md, eng, DNNL_MEMORY_ALLOCATE));
    return m;
}

/* Writes float32 values into memory of type dt (f32 or bf16, plain layout):
 * through a reorder, so the rounding is oneDNN's. */
static void upload(dnnl_engine_t eng, dnnl_stream_t s, dnnl_memory_t dst, const float *v,
                   dnnl_dim_t rows, dnnl_dim_t cols)
{
    dnnl_memory_desc_t fmd;
    dnnl_dims_t dims = {rows, cols};
    CHECK(dnnl_memory_desc_init_by_tag(&fmd, 2, dims, dnnl_f32, dnnl_ab));
    dnnl_memory_t src;
    CHECK(dnnl_memory_create(&src, &fmd, eng, (void *)v));
    const dnnl_memory_desc_t *dmd;
    CHECK(dnnl_memory_get_memory_desc(dst, &dmd));
    dnnl_primitive_desc_t pd;
    CHECK(dnnl_reorder_primitive_desc_create(&pd, &fmd, eng, dmd, eng, NULL));
    dnnl_primitive_t p;
    CHECK(dnnl_primitive_create(&p, pd));
    dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    CHECK(dnnl_primitive_execute(p, s, 2, args));
    CHECK(dnnl_stream_wait(s));
    dnnl_primitive_destroy(p), dnnl_primitive_desc_destroy(pd), dnnl_memory_destroy(src);
}

static double matmul_rate(dnnl_engine_t eng, dnnl_stream_t s, dnnl_data_type_t in, long n,
                          int repeats, char *impl, size_t impl_len)
{
    dnnl_dims_t dims = {n, n};
    dnnl_memory_desc_t a_md, b_any, c_md;
    CHECK(dnnl_memory_desc_init_by_tag(&a_md, 2, dims, in, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&b_any, 2, dims, in, dnnl_format_tag_any));
    CHECK(dnnl_memory_desc_init_by_tag(&c_md, 2, dims, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t md;
    CHECK(dnnl_matmul_desc_init(&md, &a_md, &b_any, NULL, &c_md));
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL);
    if (st != dnnl_success) {
        snprintf(impl, impl_len, "no implementation: oneDNN status %d", (int)st);
        return 0;
    }
    const char *name = NULL;
    CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name));
    snprintf(impl, impl_len, "%s", name ? name : "?");
    const dnnl_memory_desc_t *b_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_memory_desc_t b_plain;
    CHECK(dnnl_memory_desc_init_by_tag(&b_plain, 2, dims, in, dnnl_ab));
    dnnl_memory_t a = memory(eng, &a_md), b_in = memory(eng, &b_plain), b = memory(eng, b_md),
                  c = memory(eng, &c_md);
    float *tmp = malloc(n * n * sizeof *tmp);
    if (!tmp) {
        fprintf(stderr, "gemm_peak: out of memory\n");
        exit(1);
    }
    fill(tmp, n * n, 1);
    upload(eng, s, a, tmp, n, n);
    fill(tmp, n * n, 2);
    upload(eng, s, b_in, tmp, n, n);
    free(tmp);
    { /* B into the matmul's chosen layout, once */
        dnnl_primitive_desc_t rpd;
        CHECK(dnnl_reorder_primitive_desc_create(&rpd, &b_plain, eng, b_md, eng, NULL));
        dnnl_primitive_t r;
        CHECK(dnnl_primitive_create(&r, rpd));
        dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, b_in}, {DNNL_ARG_TO, b}};
        CHECK(dnnl_primitive_execute(r, s, 2, args));
        CHECK(dnnl_stream_wait(s));
        dnnl_primitive_destroy(r), dnnl_primitive_desc_destroy(rpd);
    }
    dnnl_primitive_t p;
    CHECK(dnnl_primitive_create(&p, pd));
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    double best = 1e30;
    for (int r = 0; r <= repeats; ++r) {
        double t = now();
        CHECK(dnnl_primitive_execute(p, s, 3, args));
        CHECK(dnnl_stream_wait(s));
        t = now() - t;
        if (r && t < best) best = t; /* run 0 warms up */
    }
    dnnl_primitive_destroy(p), dnnl_primitive_desc_destroy(pd);
    dnnl_memory_destroy(a), dnnl_memory_destroy(b_in), dnnl_memory_destroy(b),
        dnnl_memory_destroy(c);
    return 2.0 * n * n * n / best * 1e-9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1024;
    int repeats = argc > 2 ? atoi(argv[2]) : 10;
    if (n < 16 || n > 16384 || repeats < 1 || argc > 3) {
        fprintf(stderr, "usage: gemm_peak [N (16..16384, default 1024)] [REPEATS (>= 1, default 10)]\n");
        return 1;
    }
    dnnl_engine_t eng;
    dnnl_stream_t s;
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&s, eng, dnnl_stream_default_flags));
    char impl32[128], impl16[128];
    double sg = sgemm_rate(n, repeats);
    double m32 = matmul_rate(eng, s, dnnl_f32, n, repeats, impl32, sizeof impl32);
    double m16 = matmul_rate(eng, s, dnnl_bf16, n, repeats, impl16, sizeof impl16);
    printf("gemm_peak: f32  dnnl_sgemm %ld^3: %.1f GFLOP/s\n", n, sg);
    printf("gemm_peak: f32  matmul     %ld^3: %.1f GFLOP/s (%s)\n", n, m32, impl32);
    printf("gemm_peak: bf16 matmul     %ld^3: %.1f GFLOP/s (%s; f32 accumulation)\n", n, m16, impl16);
    printf("gemm_peak: peak f32 %.1f bf16 %.1f\n", sg > m32 ? sg : m32, m16);
    dnnl_stream_destroy(s);
    dnnl_engine_destroy(eng);
    return 0;
}
