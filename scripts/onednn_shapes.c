/* onednn_shapes: times oneDNN's bfloat16 training convolutions for the 13
 * convolutional layers of darknet's yolov3-tiny (batch 8), one primitive per
 * pass (forward_training, backward_data, backward_weights), as a library
 * benchmark: no reorders are timed, every tensor's layout is the one oneDNN
 * picks (format `any`), the scratchpad is the caller's (user mode).
 *
 * Builds against oneDNN 2.x (op descriptors) and 3.x (primitive descriptors
 * made directly, opaque memory descriptors):
 *   gcc -std=c11 -O2 -fopenmp scripts/onednn_shapes.c -ldnnl
 *
 * Usage: onednn_shapes [160|320] [runs]   (runs: timed runs per pass, >= 10)
 *
 * Output (one record a line, space-separated key=value fields; '#' lines are
 * the header):
 *   # onednn version=X.Y.Z hash=H runtime=R isa=I
 *   # config size=S batch=8 runs=N warmup=2 threads=T dtype=bf16
 *   conv size=S layer=L ic=C oc=K hw=H k=KS pass=P ms=M gflops=G src=LAYOUT dst=LAYOUT wei=LAYOUT impl=NAME
 *   total size=S pass=P ms=M gflops=G
 *   total size=S pass=all ms=M gflops=G
 * pass: fwd, bwd_data, bwd_weights. ms: median wall time of one run.
 * src/dst: the layout of the pass's activations as oneDNN chose them (fwd:
 * src, dst; bwd_data: diff_src, diff_dst; bwd_weights: src, diff_dst), wei:
 * weights (fwd, bwd_data) or diff_weights (bwd_weights), written as oneDNN's
 * format tags are (dimensions a, b, c, d = N, C, H, W for activations and O,
 * I, H, W for weights, outermost first, a blocked dimension in capitals,
 * then the inner blocks): abcd = nchw, acdb = nhwc, aBcd16b = nChw16c.
 * A pass oneDNN cannot make prints ms=NA impl=none and makes its totals
 * incomplete=1. */
#define _POSIX_C_SOURCE 200809L

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define WARMUP 2
#define BATCH 8
#define DEFAULT_RUNS 11

/* ---- the 2.x / 3.x difference in memory descriptors ---- */
#if DNNL_VERSION_MAJOR >= 3
typedef dnnl_memory_desc_t md_t;        /* a handle */
typedef const_dnnl_memory_desc_t cmd_t; /* what the API takes */
#define MD(m) (m)
#else
typedef dnnl_memory_desc_t md_t;        /* a struct */
typedef const dnnl_memory_desc_t *cmd_t;
#define MD(m) (&(m))
#endif

static void die(const char *what, dnnl_status_t st)
{
    fprintf(stderr, "onednn_shapes: %s failed: %s\n", what, dnnl_status2str(st));
    exit(2);
}

#define CHECK(call)                                 \
    do {                                            \
        dnnl_status_t st_ = (call);                 \
        if (st_ != dnnl_success) die(#call, st_);   \
    } while (0)

static md_t md_make(int nd, const dnnl_dims_t dims, dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
    md_t md;
#if DNNL_VERSION_MAJOR >= 3
    CHECK(dnnl_memory_desc_create_with_tag(&md, nd, dims, dt, tag));
#else
    CHECK(dnnl_memory_desc_init_by_tag(&md, nd, dims, dt, tag));
#endif
    return md;
}

static void md_free(md_t md)
{
#if DNNL_VERSION_MAJOR >= 3
    dnnl_memory_desc_destroy(md);
#else
    (void)md;
#endif
}

/* A memory descriptor's blocking, whichever the version. Returns 0 where
 * the format is not a blocked one. */
typedef struct {
    int ndims, nblks;
    dnnl_dim_t dims[DNNL_MAX_NDIMS], strides[DNNL_MAX_NDIMS];
    dnnl_dim_t blks[DNNL_MAX_NDIMS], idxs[DNNL_MAX_NDIMS];
} blocking;

static int blocking_of(cmd_t md, blocking *b)
{
    memset(b, 0, sizeof *b);
#if DNNL_VERSION_MAJOR >= 3
    dnnl_format_kind_t fk;
    const dnnl_dims_t *dims, *strides, *blks, *idxs;
    if (dnnl_memory_desc_query(md, dnnl_query_format_kind, &fk) != dnnl_success ||
        fk != dnnl_blocked)
        return 0;
    CHECK(dnnl_memory_desc_query(md, dnnl_query_ndims_s32, &b->ndims));
    CHECK(dnnl_memory_desc_query(md, dnnl_query_padded_dims, &dims));
    CHECK(dnnl_memory_desc_query(md, dnnl_query_strides, &strides));
    CHECK(dnnl_memory_desc_query(md, dnnl_query_inner_nblks_s32, &b->nblks));
    CHECK(dnnl_memory_desc_query(md, dnnl_query_inner_blks, &blks));
    CHECK(dnnl_memory_desc_query(md, dnnl_query_inner_idxs, &idxs));
    for (int i = 0; i < b->ndims; i++) {
        b->dims[i] = (*dims)[i];
        b->strides[i] = (*strides)[i];
    }
    for (int i = 0; i < b->nblks; i++) {
        b->blks[i] = (*blks)[i];
        b->idxs[i] = (*idxs)[i];
    }
#else
    if (md->format_kind != dnnl_blocked) return 0;
    const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
    b->ndims = md->ndims;
    b->nblks = bd->inner_nblks;
    for (int i = 0; i < b->ndims; i++) {
        b->dims[i] = md->padded_dims[i];
        b->strides[i] = bd->strides[i];
    }
    for (int i = 0; i < b->nblks; i++) {
        b->blks[i] = bd->inner_blks[i];
        b->idxs[i] = bd->inner_idxs[i];
    }
#endif
    return 1;
}

/* The layout as a format tag string (see the top), e.g. "acdb". Dimensions
 * go outermost first: by outer stride, larger first; a tie (a dimension of
 * padded size 1) keeps the logical order. */
static void layout_str(cmd_t md, char *out, size_t outlen)
{
    blocking b;
    if (!blocking_of(md, &b)) {
        snprintf(out, outlen, "non-blocked");
        return;
    }
    int order[DNNL_MAX_NDIMS];
    for (int i = 0; i < b.ndims; i++) order[i] = i;
    for (int i = 1; i < b.ndims; i++) /* insertion sort: stable */
        for (int j = i; j > 0 && b.strides[order[j - 1]] < b.strides[order[j]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    size_t n = 0;
    for (int i = 0; i < b.ndims && n + 1 < outlen; i++) {
        int d = order[i], blocked = 0;
        for (int k = 0; k < b.nblks; k++)
            if (b.idxs[k] == d) blocked = 1;
        out[n++] = (char)((blocked ? 'A' : 'a') + d);
    }
    out[n] = '\0';
    for (int k = 0; k < b.nblks && n + 1 < outlen; k++) {
        int w = snprintf(out + n, outlen - n, "%lld%c", (long long)b.blks[k],
                         (char)('a' + (int)b.idxs[k]));
        if (w < 0) break;
        n += (size_t)w;
        if (n >= outlen) {
            n = outlen - 1;
            break;
        }
    }
}

/* ---- the shapes: yolov3-tiny's convolutions at 320 px ---- */
typedef struct {
    int ic, oc, hw, k;
} shape;

static const shape yolov3_tiny_320[] = {
    {3, 16, 320, 3},    {16, 32, 160, 3},  {32, 64, 80, 3},    {64, 128, 40, 3},
    {128, 256, 20, 3},  {256, 512, 10, 3}, {512, 1024, 10, 3}, {1024, 256, 10, 1},
    {256, 512, 10, 3},  {512, 255, 10, 1}, {256, 128, 10, 1},  {384, 256, 20, 3},
    {256, 255, 20, 1},
};
#define NSHAPES ((int)(sizeof yolov3_tiny_320 / sizeof yolov3_tiny_320[0]))

enum { FWD, BWD_DATA, BWD_WEIGHTS, NPASSES };
static const char *const pass_name[NPASSES] = {"fwd", "bwd_data", "bwd_weights"};

typedef struct {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_primitive_attr_t attr;
    int runs;
} ctx;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static unsigned long long rng_state = 0x9e3779b97f4a7c15ull;
static float rnd_small(void) /* uniform in [-0.5, 0.5) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) - 0.5f;
}

/* A memory of md with small random values: float32 in plain layout (abcd)
 * reordered into md, which zeroes any padding the layout has. */
static dnnl_memory_t mem_random(ctx *c, cmd_t md, const dnnl_dims_t dims)
{
    md_t plain = md_make(4, dims, dnnl_f32, dnnl_abcd);
    dnnl_memory_t src, dst;
    CHECK(dnnl_memory_create(&src, MD(plain), c->eng, DNNL_MEMORY_ALLOCATE));
    CHECK(dnnl_memory_create(&dst, md, c->eng, DNNL_MEMORY_ALLOCATE));
    float *p;
    CHECK(dnnl_memory_get_data_handle(src, (void **)&p));
    size_t n = dnnl_memory_desc_get_size(MD(plain)) / sizeof(float);
    for (size_t i = 0; i < n; i++) p[i] = rnd_small();
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t r;
    CHECK(dnnl_reorder_primitive_desc_create(&rpd, MD(plain), c->eng, md, c->eng, NULL));
    CHECK(dnnl_primitive_create(&r, rpd));
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    CHECK(dnnl_primitive_execute(r, c->strm, 2, args));
    CHECK(dnnl_stream_wait(c->strm));
    dnnl_primitive_destroy(r);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(src);
    md_free(plain);
    return dst;
}

static dnnl_memory_t mem_zero(ctx *c, cmd_t md)
{
    dnnl_memory_t m;
    void *p;
    CHECK(dnnl_memory_create(&m, md, c->eng, DNNL_MEMORY_ALLOCATE));
    CHECK(dnnl_memory_get_data_handle(m, &p));
    if (p) memset(p, 0, dnnl_memory_desc_get_size(md));
    return m;
}

/* The three primitive descriptors of one shape (any may be NULL: oneDNN
 * has no implementation). */
static void make_pds(ctx *c, const shape *s, int hw, dnnl_primitive_desc_t pd[NPASSES])
{
    const int pad = (s->k - 1) / 2;
    const dnnl_dims_t xd = {BATCH, s->ic, hw, hw}, yd = {BATCH, s->oc, hw, hw};
    const dnnl_dims_t wd = {s->oc, s->ic, s->k, s->k};
    const dnnl_dims_t strides = {1, 1}, dil = {0, 0}, pl = {pad, pad}, pr = {pad, pad};
    md_t x = md_make(4, xd, dnnl_bf16, dnnl_format_tag_any);
    md_t y = md_make(4, yd, dnnl_bf16, dnnl_format_tag_any);
    md_t w = md_make(4, wd, dnnl_bf16, dnnl_format_tag_any);
    pd[FWD] = pd[BWD_DATA] = pd[BWD_WEIGHTS] = NULL;
#if DNNL_VERSION_MAJOR >= 3
    if (dnnl_convolution_forward_primitive_desc_create(
            &pd[FWD], c->eng, dnnl_forward_training, dnnl_convolution_direct, x, w, NULL, y,
            strides, dil, pl, pr, c->attr) != dnnl_success)
        pd[FWD] = NULL;
    if (pd[FWD]) {
        if (dnnl_convolution_backward_data_primitive_desc_create(
                &pd[BWD_DATA], c->eng, dnnl_convolution_direct, x, w, y, strides, dil, pl, pr,
                pd[FWD], c->attr) != dnnl_success)
            pd[BWD_DATA] = NULL;
        if (dnnl_convolution_backward_weights_primitive_desc_create(
                &pd[BWD_WEIGHTS], c->eng, dnnl_convolution_direct, x, w, NULL, y, strides, dil,
                pl, pr, pd[FWD], c->attr) != dnnl_success)
            pd[BWD_WEIGHTS] = NULL;
    }
#else
    dnnl_convolution_desc_t fd, dd, bd;
    CHECK(dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training,
                                                     dnnl_convolution_direct, &x, &w, NULL, &y,
                                                     strides, dil, pl, pr));
    CHECK(dnnl_dilated_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &x, &w,
                                                           &y, strides, dil, pl, pr));
    CHECK(dnnl_dilated_convolution_backward_weights_desc_init(
        &bd, dnnl_convolution_direct, &x, &w, NULL, &y, strides, dil, pl, pr));
    if (dnnl_primitive_desc_create(&pd[FWD], &fd, c->attr, c->eng, NULL) != dnnl_success)
        pd[FWD] = NULL;
    if (pd[FWD]) {
        if (dnnl_primitive_desc_create(&pd[BWD_DATA], &dd, c->attr, c->eng, pd[FWD]) !=
            dnnl_success)
            pd[BWD_DATA] = NULL;
        if (dnnl_primitive_desc_create(&pd[BWD_WEIGHTS], &bd, c->attr, c->eng, pd[FWD]) !=
            dnnl_success)
            pd[BWD_WEIGHTS] = NULL;
    }
#endif
    md_free(x);
    md_free(y);
    md_free(w);
}

/* Median milliseconds of one run of pass on pd; layouts and impl filled. */
static double time_pass(ctx *c, const shape *s, int hw, int pass, const_dnnl_primitive_desc_t pd,
                        char *src_l, char *dst_l, char *wei_l, size_t llen, const char **impl)
{
    const dnnl_dims_t xd = {BATCH, s->ic, hw, hw}, yd = {BATCH, s->oc, hw, hw};
    const dnnl_dims_t wd = {s->oc, s->ic, s->k, s->k};
#define Q(q) dnnl_primitive_desc_query_md(pd, q, 0)
    dnnl_exec_arg_t args[4];
    dnnl_memory_t mems[4];
    int n = 0;
    switch (pass) {
    case FWD:
        mems[n] = mem_random(c, Q(dnnl_query_src_md), xd);
        args[n].arg = DNNL_ARG_SRC, args[n].memory = mems[n], n++;
        mems[n] = mem_random(c, Q(dnnl_query_weights_md), wd);
        args[n].arg = DNNL_ARG_WEIGHTS, args[n].memory = mems[n], n++;
        mems[n] = mem_zero(c, Q(dnnl_query_dst_md));
        args[n].arg = DNNL_ARG_DST, args[n].memory = mems[n], n++;
        layout_str(Q(dnnl_query_src_md), src_l, llen);
        layout_str(Q(dnnl_query_dst_md), dst_l, llen);
        layout_str(Q(dnnl_query_weights_md), wei_l, llen);
        break;
    case BWD_DATA:
        mems[n] = mem_random(c, Q(dnnl_query_diff_dst_md), yd);
        args[n].arg = DNNL_ARG_DIFF_DST, args[n].memory = mems[n], n++;
        mems[n] = mem_random(c, Q(dnnl_query_weights_md), wd);
        args[n].arg = DNNL_ARG_WEIGHTS, args[n].memory = mems[n], n++;
        mems[n] = mem_zero(c, Q(dnnl_query_diff_src_md));
        args[n].arg = DNNL_ARG_DIFF_SRC, args[n].memory = mems[n], n++;
        layout_str(Q(dnnl_query_diff_src_md), src_l, llen);
        layout_str(Q(dnnl_query_diff_dst_md), dst_l, llen);
        layout_str(Q(dnnl_query_weights_md), wei_l, llen);
        break;
    default:
        mems[n] = mem_random(c, Q(dnnl_query_src_md), xd);
        args[n].arg = DNNL_ARG_SRC, args[n].memory = mems[n], n++;
        mems[n] = mem_random(c, Q(dnnl_query_diff_dst_md), yd);
        args[n].arg = DNNL_ARG_DIFF_DST, args[n].memory = mems[n], n++;
        mems[n] = mem_zero(c, Q(dnnl_query_diff_weights_md));
        args[n].arg = DNNL_ARG_DIFF_WEIGHTS, args[n].memory = mems[n], n++;
        layout_str(Q(dnnl_query_src_md), src_l, llen);
        layout_str(Q(dnnl_query_diff_dst_md), dst_l, llen);
        layout_str(Q(dnnl_query_diff_weights_md), wei_l, llen);
        break;
    }
    /* the user scratchpad (its size may be 0) */
    mems[n] = mem_zero(c, Q(dnnl_query_scratchpad_md));
    args[n].arg = DNNL_ARG_SCRATCHPAD, args[n].memory = mems[n], n++;
#undef Q
    CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, (void *)impl));

    dnnl_primitive_t p;
    CHECK(dnnl_primitive_create(&p, pd));
    double *t = malloc(sizeof *t * (size_t)c->runs);
    if (!t) {
        fprintf(stderr, "onednn_shapes: out of memory\n");
        exit(2);
    }
    for (int i = 0; i < WARMUP + c->runs; i++) {
        double t0 = now_ms();
        CHECK(dnnl_primitive_execute(p, c->strm, n, args));
        CHECK(dnnl_stream_wait(c->strm));
        if (i >= WARMUP) t[i - WARMUP] = now_ms() - t0;
    }
    qsort(t, (size_t)c->runs, sizeof *t, cmp_double);
    double med = c->runs % 2 ? t[c->runs / 2] : 0.5 * (t[c->runs / 2 - 1] + t[c->runs / 2]);
    free(t);
    dnnl_primitive_destroy(p);
    for (int i = 0; i < n; i++) dnnl_memory_destroy(mems[i]);
    return med;
}

int main(int argc, char **argv)
{
    int size = argc > 1 ? atoi(argv[1]) : 320;
    int runs = argc > 2 ? atoi(argv[2]) : DEFAULT_RUNS;
    if ((size != 160 && size != 320) || runs < 10 || argc > 3) {
        fprintf(stderr, "usage: %s [160|320] [runs >= 10]\n", argv[0]);
        return 1;
    }
    ctx c = {.runs = runs};
    CHECK(dnnl_engine_create(&c.eng, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&c.strm, c.eng, dnnl_stream_default_flags));
    CHECK(dnnl_primitive_attr_create(&c.attr));
    CHECK(dnnl_primitive_attr_set_scratchpad_mode(c.attr, dnnl_scratchpad_mode_user));

    const dnnl_version_t *v = dnnl_version();
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("# onednn version=%d.%d.%d hash=%s runtime=%s isa=%s\n", v->major, v->minor, v->patch,
           v->hash && *v->hash ? v->hash : "none", dnnl_runtime2str(v->cpu_runtime),
           dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa()));
    printf("# config size=%d batch=%d runs=%d warmup=%d threads=%d dtype=bf16\n", size, BATCH,
           runs, WARMUP, threads);
    fflush(stdout);

    double total[NPASSES] = {0}, flops_all = 0;
    int incomplete[NPASSES] = {0};
    for (int i = 0; i < NSHAPES; i++) {
        const shape *s = &yolov3_tiny_320[i];
        const int hw = s->hw * size / 320;
        const double flops = 2.0 * BATCH * s->oc * (double)hw * hw * s->ic * s->k * s->k;
        dnnl_primitive_desc_t pd[NPASSES];
        make_pds(&c, s, hw, pd);
        for (int p = 0; p < NPASSES; p++) {
            printf("conv size=%d layer=%d ic=%d oc=%d hw=%d k=%d pass=%s ", size, i, s->ic, s->oc,
                   hw, s->k, pass_name[p]);
            if (!pd[p]) {
                printf("ms=NA gflops=NA src=NA dst=NA wei=NA impl=none\n");
                incomplete[p] = 1;
                continue;
            }
            char sl[64], dl[64], wl[64];
            const char *impl = "?";
            double ms = time_pass(&c, s, hw, p, pd[p], sl, dl, wl, sizeof sl, &impl);
            printf("ms=%.3f gflops=%.1f src=%s dst=%s wei=%s impl=%s\n", ms, flops / (ms * 1e6),
                   sl, dl, wl, impl);
            fflush(stdout);
            total[p] += ms;
            dnnl_primitive_desc_destroy(pd[p]);
        }
        flops_all += flops;
    }
    double all = 0;
    int inc_all = 0;
    for (int p = 0; p < NPASSES; p++) {
        printf("total size=%d pass=%s ms=%.3f gflops=%.1f incomplete=%d\n", size, pass_name[p],
               total[p], flops_all / (total[p] * 1e6), incomplete[p]);
        all += total[p];
        inc_all |= incomplete[p];
    }
    printf("total size=%d pass=all ms=%.3f gflops=%.1f incomplete=%d\n", size, all,
           3 * flops_all / (all * 1e6), inc_all);

    dnnl_primitive_attr_destroy(c.attr);
    dnnl_stream_destroy(c.strm);
    dnnl_engine_destroy(c.eng);
    return 0;
}
