/* The activation plan's device kernels against the CPU plan's code they
 * share their arithmetic with (host_ref.c calls the CPU backend):
 * - NHWC conversions (cuda/nhwc.cu against round.c): float32 NCHW into half
 *   NHWC with the channels padded, back, and added into, bit for bit (a NaN
 *   sum a NaN), over values that round to every class (subnormals, overflow
 *   to inf, NaN);
 * - the half tail (cuda/tail.cu against tail_nhwc.c, both on
 *   math/tail_math.h): batch-norm while training and with the rolling
 *   statistics, darknet's and cuDNN's formulas, the bias alone, every
 *   activation the half tails compute, float16 and bfloat16, forward and
 *   backward, channels in eights and not. Outputs and gradients per element
 *   within one half ulp plus 2^-16 of the tensor's largest value (the
 *   channel sums are added in another order, and the device's expf is its
 *   own: a value can round the other way), bit for bit where neither enters
 *   (the bias alone or the rolling statistics, with linear, leaky or relu);
 *   the statistics and parameter gradients within a relative 2-norm of
 *   1e-5; the gradient's flush counts within the elements that differ, and
 *   flushes seen where the smallest gradients must flush. A self-check
 *   moves one bias by 1e-2 and must be seen;
 * - data movement (cuda/movement.cu): max-pooling against maxpool.c (its
 *   indexes, ties, overlapping windows, padding; the gradient gathered onto
 *   the input's delta), upsampling, a route with groups and a shortcut
 *   against movement.c's loops written out here: bit for bit (a leaky
 *   shortcut within a half ulp: darknet's leaky multiplies by .1 in double);
 * - the weight gradient's im2col operand gathered from an NHWC input
 *   (wgrad.cu) against wgrad_index.h.
 * Exit 77 without a device. */
#include "amp_cuda.h"
#include "device_check.h"
#include "host_ref.h"
#include "math/act_math.h"
#include "math/half_format.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>


static unsigned long long rng = 88172645463325252ull;
static double uniform(void) /* [0, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static float normal(void)
{
    const double u = uniform() + 1e-12, v = uniform();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static uint16_t to_half(int bf, float v)
{
    return bf ? amp_f32_to_bf16(v) : amp_f32_to_f16(v);
}

static float from_half(int bf, uint16_t h)
{
    return bf ? amp_bf16_to_f32(h) : amp_f16_to_f32(h);
}

template <typename T> struct dvec {
    T *p = nullptr;
    size_t n = 0;
    explicit dvec(const std::vector<T> &h) : n(h.size())
    {
        CUDA(cudaMalloc((void **)&p, (n ? n : 1) * sizeof(T)));
        if (n) CUDA(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    }
    explicit dvec(size_t count) : n(count) { CUDA(cudaMalloc((void **)&p, (n ? n : 1) * sizeof(T))); }
    std::vector<T> get() const
    {
        std::vector<T> h(n);
        if (n) CUDA(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
    ~dvec() { cudaFree(p); }
    dvec(const dvec &) = delete;
    dvec &operator=(const dvec &) = delete;
};

/* ---- conversions ---- */

/* float32 values that round to every class of half value */
static float any_value(int i)
{
    switch (i % 11) {
    case 0: return 0.f;
    case 1: return -0.f;
    case 2: return 1e-6f * normal();   /* float16 subnormal */
    case 3: return 1e-9f * normal();   /* below float16: to zero */
    case 4: return 70000.f * (1 + (float)uniform()); /* float16 overflow */
    case 5: return i % 2 ? INFINITY : -INFINITY;
    case 6: return NAN;
    case 7: return 1e30f * normal(); /* bfloat16 only */
    default: return normal() * 4;
    }
}

static void conversions(void)
{
    /* every channel tile (4, 8, 16, 32), channels over several tiles, the
     * image's 3 channels stored as 3, 4 and 8; hw not a multiple of a tile */
    const int shapes[][4] = {{3, 5, 8, 37 * 29}, {2, 3, 3, 41 * 13}, {2, 3, 4, 19 * 23},
                             {1, 16, 16, 300}, {1, 40, 40, 77}, {2, 70, 72, 45}};
    for (int sh = 0; sh < (int)(sizeof shapes / sizeof shapes[0]); ++sh) {
        for (int bf = 0; bf < 2; ++bf) {
            const int batch = shapes[sh][0], c = shapes[sh][1], cs = shapes[sh][2];
            const int hw = shapes[sh][3];
            const size_t n = (size_t)batch * c * hw, ns = (size_t)batch * cs * hw;
            const amp_dtype dt = bf ? AMP_DTYPE_BFLOAT16 : AMP_DTYPE_FLOAT16;
            const char *name = bf ? "bfloat16" : "float16";
            std::vector<float> x(n);
            for (size_t i = 0; i < n; ++i) x[i] = any_value((int)i);
            /* to half, padded to cs channels: the CPU's of c channels, spread */
            std::vector<uint16_t> ref(n);
            host_to_half_nhwc(bf, x.data(), ref.data(), batch, c, hw);
            dvec<float> dx(x);
            std::vector<uint16_t> junk(ns, 0x1234);
            dvec<uint16_t> dh(junk);
            LAUNCH(amp_cuda_to_half_nhwc(dx.p, dh.p, batch, c, cs, hw, dt, 0, ERR));
            std::vector<uint16_t> got = dh.get();
            size_t bad = 0, pad_bad = 0;
            for (size_t p = 0; p < (size_t)batch * hw; ++p)
                for (int ch = 0; ch < cs; ++ch) {
                    const uint16_t g = got[p * cs + ch];
                    if (ch < c) bad += g != ref[p * c + ch];
                    else pad_bad += g != 0;
                }
            CHECK(bad == 0 && pad_bad == 0,
                  "%s: NCHW float32 into NHWC half, %d images of %d channels stored as %d by %d "
                  "positions: %zu of %zu values differ from round.c's, %zu padding values not zero",
                  name, batch, c, cs, hw, bad, n, pad_bad);
            /* back to float32, every 16-bit pattern among the values */
            std::vector<uint16_t> hs(ns);
            for (size_t i = 0; i < ns; ++i) hs[i] = (uint16_t)(i * 40503u);
            std::vector<uint16_t> packed(n); /* the first c channels, for the CPU's */
            for (size_t p = 0; p < (size_t)batch * hw; ++p)
                for (int ch = 0; ch < c; ++ch) packed[p * c + ch] = hs[p * cs + ch];
            std::vector<float> fref(n);
            host_from_half_nhwc(bf, packed.data(), fref.data(), batch, c, hw);
            dvec<uint16_t> dhs(hs);
            dvec<float> df(n);
            LAUNCH(amp_cuda_from_half_nhwc(dhs.p, df.p, batch, c, cs, hw, dt, 0, ERR));
            std::vector<float> fgot = df.get();
            bad = (size_t)0;
            for (size_t i = 0; i < n; ++i) bad += memcmp(&fgot[i], &fref[i], 4) != 0;
            CHECK(bad == 0, "%s: NHWC half (%d stored channels) into NCHW float32: %zu of %zu values "
                            "differ from round.c's, bit for bit", name, cs, bad, n);
            /* added into half */
            std::vector<float> add(n);
            for (size_t i = 0; i < n; ++i) add[i] = i % 7 ? normal() : any_value((int)i);
            host_add_half_nhwc(bf, packed.data(), add.data(), batch, c, hw);
            dvec<float> dadd(add);
            LAUNCH(amp_cuda_add_into_half_nhwc(dhs.p, dadd.p, batch, c, cs, hw, dt, 0, ERR));
            got = dhs.get();
            bad = 0, pad_bad = 0;
            for (size_t p = 0; p < (size_t)batch * hw; ++p)
                for (int ch = 0; ch < cs; ++ch) {
                    const uint16_t g = got[p * cs + ch];
                    /* a NaN sum's payload is the hardware's (the GPU's is canonical) */
                    const int both_nan = isnan(from_half(bf, g)) && isnan(from_half(bf, packed[p * c + ch]));
                    if (ch < c) bad += g != packed[p * c + ch] && !both_nan;
                    else pad_bad += g != hs[p * cs + ch];
                }
            CHECK(bad == 0 && pad_bad == 0,
                  "%s: NCHW float32 added into NHWC half: %zu of %zu values differ from round.c's, "
                  "%zu padding values changed", name, bad, n, pad_bad);
        }
    }
}

/* ---- the tail ---- */

typedef struct tail_case {
    int batch, c, hw, act, bn, train, bf16, cudnn, x_apart;
} tail_case;

/* Per-element comparison of half tensors: |got - ref| <= ulp(ref) + 2^-16 max|ref|. */
typedef struct half_cmp {
    size_t n, equal, beyond;
    double worst; /* |diff| / bound */
    size_t worst_at;
} half_cmp;

static double half_ulp(int bf, float v)
{
    const uint16_t h = to_half(bf, fabsf(v));
    return fabs((double)from_half(bf, (uint16_t)(h + 1)) - from_half(bf, h));
}

static half_cmp compare_half(int bf, const std::vector<uint16_t> &got, const std::vector<uint16_t> &ref)
{
    half_cmp r = {got.size(), 0, 0, 0, 0};
    double big = 0;
    for (uint16_t h : ref) big = fmax(big, fabs((double)from_half(bf, h)));
    for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] == ref[i]) {
            ++r.equal;
            continue;
        }
        const double g = from_half(bf, got[i]), f = from_half(bf, ref[i]);
        const double bound = half_ulp(bf, (float)f) + big / 65536.0;
        const double e = isnan(g) || isnan(f) ? INFINITY : fabs(g - f) / bound;
        if (e > r.worst) r.worst = e, r.worst_at = i;
        r.beyond += e > 1;
    }
    return r;
}

static double rel2(const std::vector<float> &got, const std::vector<float> &ref)
{
    double d = 0, s = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        d += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        s += (double)ref[i] * ref[i];
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

static const char *act_name(int a)
{
    switch (a) {
    case AMP_ACT_LINEAR: return "linear";
    case AMP_ACT_LEAKY: return "leaky";
    case AMP_ACT_RELU: return "relu";
    case AMP_ACT_LOGISTIC: return "logistic";
    case AMP_ACT_MISH: return "mish";
    case AMP_ACT_SWISH: return "swish";
    case AMP_ACT_HARD_MISH: return "hard_mish";
    default: return "?";
    }
}

/* One case: forward, then backward on the CPU's forward output; returns the
 * number of checks beyond their bounds (the self-check's count). */
static int tail_case_run(const tail_case *k, float bias_shift, int report)
{
    const int bf = k->bf16, c = k->c;
    const size_t n = (size_t)k->batch * k->hw * c;
    std::vector<uint16_t> x(n), y(n), dh(n);
    std::vector<float> scales(c), biases(c), mean(c), variance(c), rmean(c), rvar(c), bupd(c),
        supd(c), mdelta(c), vdelta(c);
    for (int f = 0; f < c; ++f) {
        scales[f] = 0.5f + (float)uniform();
        biases[f] = 0.3f * normal();
        rmean[f] = 0.2f * normal();
        rvar[f] = 0.5f + (float)uniform();
        bupd[f] = 0.01f * normal();
        supd[f] = 0.01f * normal();
    }
    for (size_t i = 0; i < n; ++i) {
        const int f = (int)(i % c);
        x[i] = to_half(bf, (0.3f + normal()) * (1.f + f % 5) + 0.1f * f);
        y[i] = to_half(bf, normal());
    }
    /* forward on the CPU */
    host_tail h = {};
    h.batch = k->batch, h.c = c, h.hw = k->hw, h.bf16 = bf, h.act = k->act;
    h.batch_normalize = k->bn, h.cudnn = k->cudnn, h.train = k->train;
    std::vector<uint16_t> yref = y;
    std::vector<float> mref(c), vref(c), rmref = rmean, rvref = rvar;
    const int with_x = k->bn || k->x_apart;
    h.x = with_x ? x.data() : NULL; /* without: y is read, as the CPU's tail does */
    if (!with_x) yref = x;
    h.y = yref.data();
    h.scales = scales.data(), h.biases = biases.data(), h.mean = mref.data(),
    h.variance = vref.data(), h.rolling_mean = rmref.data(), h.rolling_variance = rvref.data();
    host_tail_forward(&h);
    /* on the device */
    std::vector<float> bdev = biases;
    bdev[c / 2] += bias_shift;
    dvec<uint16_t> dx(x), dy(with_x ? y : x);
    dvec<float> dsc(scales), dbi(bdev), dmean(c), dvar(c), drm(rmean), drv(rvar);
    dvec<float> dwork(amp_cuda_tail_work_floats((long)k->batch * k->hw, c));
    amp_cuda_tail t = {};
    t.positions = (long)k->batch * k->hw, t.c = c, t.bf16 = bf, t.act = k->act;
    t.batch_normalize = k->bn, t.cudnn = k->cudnn, t.train = k->train;
    t.x = with_x ? dx.p : NULL, t.y = dy.p;
    t.scales = dsc.p, t.biases = dbi.p, t.mean = dmean.p, t.variance = dvar.p;
    t.rolling_mean = drm.p, t.rolling_variance = drv.p, t.work = dwork.p;
    LAUNCH(amp_cuda_tail_forward(&t, 0, ERR));
    int beyond = 0;
    char what[160];
    snprintf(what, sizeof what, "%s %s, %s, %d images of %d channels by %d positions%s",
             bf ? "bfloat16" : "float16", act_name(k->act),
             k->bn ? (k->train ? (k->cudnn ? "batch-norm (cuDNN's formula)" : "batch-norm")
                               : "batch-norm, rolling statistics")
                   : (k->x_apart ? "bias, the input apart" : "bias"),
             k->batch, c, k->hw, bias_shift != 0 ? " [self-check: a bias moved]" : "");
    const half_cmp fy = compare_half(bf, dy.get(), yref);
    /* without channel sums (the bias alone, or the rolling statistics) and
     * an activation without a transcendental function, the device computes
     * what the host does, operation for operation: bit for bit */
    const int exact_act = k->act == AMP_ACT_LINEAR || k->act == AMP_ACT_LEAKY || k->act == AMP_ACT_RELU;
    const int exact_fwd = exact_act && (!k->bn || !k->train), exact_bwd = exact_act && !k->bn;
    const int fwd_ok = exact_fwd ? fy.equal == fy.n : fy.beyond == 0;
    beyond += !fwd_ok;
    double rs = 0;
    if (k->bn && k->train) {
        rs = fmax(fmax(rel2(dmean.get(), mref), rel2(dvar.get(), vref)),
                  fmax(rel2(drm.get(), rmref), rel2(drv.get(), rvref)));
        beyond += rs > 1e-5;
    }
    if (report)
        CHECK(fwd_ok && rs <= 1e-5,
              "tail forward, %s: %zu of %zu outputs equal (%s), %zu beyond the bound (worst %.2f "
              "of it at %zu); statistics' relative 2-norm %.1e (bound 1e-5)",
              what, fy.equal, fy.n, exact_fwd ? "all must be" : "the rest within the bound",
              fy.beyond, fy.worst, fy.worst_at, rs);
    /* backward, from the CPU's forward (y, and the statistics it made) */
    for (size_t i = 0; i < n; ++i) {
        const double u = uniform();
        /* 5% at float16's smallest subnormals, 2^-24 to 3 2^-24: times a
         * slope below 1 they flush */
        const float tiny = (float)((1 + (int)(u * 60) % 3) * (u < 0.025 ? -1 : 1)) * 5.9604645e-8f;
        dh[i] = to_half(bf, u < 0.05 ? tiny : 0.05f * normal());
    }
    std::vector<uint16_t> dhref = dh;
    std::vector<float> bref = bupd, sref = supd, mdref(c), vdref(c);
    h.dh = dhref.data(), h.bias_updates = bref.data(), h.scale_updates = sref.data();
    h.mean_delta = mdref.data(), h.variance_delta = vdref.data();
    h.nonzero = h.flushed = 0;
    host_tail_backward(&h);
    dvec<uint16_t> dy2(yref), ddh(dh);
    dvec<float> dmean2(mref), dvar2(vref), dbu(bupd), dsu(supd), dmd(c), dvd(c);
    std::vector<unsigned long long> zero(2, 0);
    dvec<unsigned long long> dcount(zero);
    t.y = dy2.p, t.dh = ddh.p, t.mean = dmean2.p, t.variance = dvar2.p;
    t.bias_updates = dbu.p, t.scale_updates = dsu.p, t.mean_delta = dmd.p, t.variance_delta = dvd.p;
    t.counts = dcount.p;
    LAUNCH(amp_cuda_tail_backward(&t, 0, ERR));
    const half_cmp fd = compare_half(bf, ddh.get(), dhref);
    double rp = rel2(dbu.get(), bref);
    if (k->bn)
        rp = fmax(rp, fmax(rel2(dsu.get(), sref), fmax(rel2(dmd.get(), mdref), rel2(dvd.get(), vdref))));
    const std::vector<unsigned long long> cnt = dcount.get();
    const size_t differ = fd.n - fd.equal;
    /* float16 without batch-norm, an activation with slopes below 1: the
     * smallest gradients flush (bfloat16 holds them; batch-norm's data
     * gradient adds terms that do not flush) */
    const int want_flush = !bf && !k->bn && k->act != AMP_ACT_LINEAR;
    const int counts_ok = cnt[0] + differ >= h.nonzero && cnt[0] <= h.nonzero + differ &&
                          cnt[1] + differ >= h.flushed && cnt[1] <= h.flushed + differ;
    const int bwd_ok = exact_bwd ? fd.equal == fd.n : fd.beyond == 0;
    beyond += !bwd_ok;
    beyond += rp > 1e-5;
    beyond += !counts_ok;
    if (report)
        CHECK(bwd_ok && rp <= 1e-5 && counts_ok && (!want_flush || (h.flushed > 0 && cnt[1] > 0)),
              "tail backward, %s: %zu of %zu gradients equal (%s), %zu beyond the bound (worst "
              "%.2f at %zu); parameter gradients' relative 2-norm %.1e (bound 1e-5); rounding "
              "counted %llu non-zero, %llu flushed (CPU %llu, %llu)",
              what, fd.equal, fd.n, exact_bwd ? "all must be" : "the rest within the bound",
              fd.beyond, fd.worst, fd.worst_at, rp, cnt[0], cnt[1], h.nonzero, h.flushed);
    return beyond;
}

static void tails(void)
{
    const tail_case cases[] = {
        {2, 24, 37, AMP_ACT_LEAKY, 1, 1, 0, 1, 0},
        {2, 24, 37, AMP_ACT_LEAKY, 1, 1, 1, 0, 0},
        {3, 64, 169, AMP_ACT_MISH, 1, 1, 1, 0, 0},
        {3, 64, 169, AMP_ACT_MISH, 1, 1, 0, 1, 0},
        {2, 33, 70, AMP_ACT_HARD_MISH, 1, 1, 1, 0, 0},
        {2, 40, 50, AMP_ACT_SWISH, 1, 1, 0, 0, 0},
        {1, 16, 64, AMP_ACT_LOGISTIC, 1, 0, 0, 0, 0},
        {2, 16, 64, AMP_ACT_LINEAR, 1, 0, 1, 1, 0},
        {2, 8, 300, AMP_ACT_LINEAR, 0, 1, 0, 0, 0},
        {2, 16, 49, AMP_ACT_RELU, 0, 1, 1, 0, 0},
        {2, 40, 50, AMP_ACT_SWISH, 0, 1, 0, 0, 1},
        {2, 24, 45, AMP_ACT_MISH, 0, 1, 1, 0, 1},
        {2, 12, 45, AMP_ACT_LEAKY, 0, 1, 0, 0, 0},
        {4, 256, 676, AMP_ACT_LEAKY, 1, 1, 0, 1, 0}, /* yolov3-tiny's 26 x 26: many chunks */
        {64, 32, 13 * 13, AMP_ACT_LEAKY, 1, 1, 1, 0, 0},
        {4, 255, 169, AMP_ACT_LINEAR, 0, 1, 0, 0, 0}, /* a yolo head: one value per thread */
        {2, 264, 30, AMP_ACT_LEAKY, 1, 1, 0, 0, 0},   /* a last tile of 8 channels */
    };
    for (const tail_case &k : cases) tail_case_run(&k, 0.f, 1);
    /* the comparison can fail */
    const tail_case k = {2, 24, 37, AMP_ACT_LEAKY, 1, 1, 0, 1, 0};
    const int seen = tail_case_run(&k, 1e-2f, 0);
    CHECK(seen > 0, "self-check: one bias moved by 1e-2 on the device is seen (%d checks beyond "
                    "their bounds)", seen);
    char err_[256] = "";
    amp_cuda_tail bad = {};
    bad.positions = 1, bad.c = 1, bad.act = AMP_ACT_LEAKY + 1; /* elu: no half tail */
    CHECK(amp_cuda_tail_forward(&bad, 0, ERR) == AMP_ERR_INVALID && strstr(err_, "activation"),
          "an activation without a half tail refused: %s", err_);
    CHECK(amp_cuda_tail_supports(AMP_ACT_MISH) && !amp_cuda_tail_supports(AMP_ACT_ELU),
          "amp_cuda_tail_supports: mish yes, elu no");
}

/* ---- data movement ---- */

static std::vector<uint16_t> random_half(int bf, size_t n, float scale)
{
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = to_half(bf, scale * normal());
    return h;
}

static size_t differ(const std::vector<uint16_t> &a, const std::vector<uint16_t> &b)
{
    size_t k = 0;
    for (size_t i = 0; i < a.size(); ++i) k += a[i] != b[i];
    return k;
}

static void maxpools(void)
{
    /* darknet's shapes: 2x2/2 (yolov3-tiny), 2x2/1 (its 13x13 one, padded),
     * 5/9/13 stride 1 (yolov4's SPP), 3x3/2 overlapping and a short edge;
     * windows that do not overlap (2x2/2, 3x3/3) take a kernel of their own,
     * an odd edge among them */
    const int shapes[][5] = {{16, 16, 2, 2, 1}, {13, 13, 2, 1, 1}, {13, 13, 5, 1, 4},
                             {13, 13, 9, 1, 8}, {15, 11, 3, 2, 2}, {7, 9, 3, 2, 0},
                             {13, 15, 2, 2, 1}, {12, 12, 3, 3, 0}};
    for (int bf = 0; bf < 2; ++bf)
        for (const auto &sh : shapes) {
            const amp_dtype dt = bf ? AMP_DTYPE_BFLOAT16 : AMP_DTYPE_FLOAT16;
            host_pool hp = {3, sh[0], sh[1], 24, 0, 0, sh[2], sh[3], sh[4]};
            hp.out_h = (hp.h + hp.pad - hp.size) / hp.stride + 1;
            hp.out_w = (hp.w + hp.pad - hp.size) / hp.stride + 1;
            const size_t ni = (size_t)hp.batch * hp.h * hp.w * hp.c;
            const size_t no = (size_t)hp.batch * hp.out_h * hp.out_w * hp.c;
            std::vector<uint16_t> in = random_half(bf, ni, 1.f);
            for (size_t i = 0; i < ni; i += 97) in[i] = in[(i + 24) % ni]; /* ties: the first wins */
            std::vector<uint16_t> out(no), dst = random_half(bf, ni, 0.1f), d = random_half(bf, no, 0.1f);
            std::vector<int> idx(no);
            host_maxpool_forward(&hp, bf, in.data(), out.data(), idx.data());
            std::vector<uint16_t> dref = dst;
            host_maxpool_backward(&hp, bf, d.data(), idx.data(), dref.data());
            amp_cuda_pool p = {hp.batch, hp.h, hp.w, hp.c, hp.out_h, hp.out_w, hp.size, hp.stride, hp.pad};
            dvec<uint16_t> din(in), dout(no), dd(d), ddst(dst);
            dvec<int> didx(no);
            LAUNCH(amp_cuda_maxpool_nhwc_forward(&p, din.p, dout.p, didx.p, dt, 0, ERR));
            LAUNCH(amp_cuda_maxpool_nhwc_backward(&p, dd.p, didx.p, ddst.p, dt, 0, ERR));
            const std::vector<int> gi = didx.get();
            size_t bad_idx = 0;
            for (size_t i = 0; i < no; ++i) bad_idx += gi[i] != idx[i];
            const size_t bo = differ(dout.get(), out), bd = differ(ddst.get(), dref);
            CHECK(bo == 0 && bad_idx == 0 && bd == 0,
                  "%s maxpool %dx%d/%d pad %d on %dx%dx%d: %zu of %zu outputs and %zu indexes "
                  "differ from maxpool.c's; the gradient added into the input's delta: %zu of %zu "
                  "differ (bit for bit)",
                  bf ? "bfloat16" : "float16", hp.size, hp.size, hp.stride, hp.pad, hp.h, hp.w, hp.c,
                  bo, no, bad_idx, bd, ni);
        }
}

/* movement.c's upsample, route and shortcut, as loops over the same half
 * values (their forms are static there: the loops say the same) */
static void upsample_route_shortcut(void)
{
    for (int bf = 0; bf < 2; ++bf) {
        const amp_dtype dt = bf ? AMP_DTYPE_BFLOAT16 : AMP_DTYPE_FLOAT16;
        const char *name = bf ? "bfloat16" : "float16";
        /* upsample 2x of 3 images 13x13x40 */
        const int B = 3, H = 13, W = 13, C = 40, S = 2;
        const size_t ni = (size_t)B * H * W * C, no = ni * S * S;
        std::vector<uint16_t> in = random_half(bf, ni, 1.f), d = random_half(bf, no, 0.1f);
        std::vector<uint16_t> dst = random_half(bf, ni, 0.1f), out(no), dref = dst;
        for (int b = 0; b < B; ++b)
            for (int Y = 0; Y < H * S; ++Y)
                for (int X = 0; X < W * S; ++X)
                    for (int c = 0; c < C; ++c)
                        out[(((size_t)b * H * S + Y) * W * S + X) * C + c] = in[(((size_t)b * H + Y / S) * W + X / S) * C + c];
        for (int b = 0; b < B; ++b)
            for (int y = 0; y < H; ++y)
                for (int x = 0; x < W; ++x)
                    for (int c = 0; c < C; ++c) {
                        const size_t e = (((size_t)b * H + y) * W + x) * C + c;
                        float acc = from_half(bf, dref[e]);
                        for (int j = 0; j < S; ++j)
                            for (int i = 0; i < S; ++i)
                                acc += from_half(bf, d[(((size_t)b * H * S + y * S + j) * W * S + x * S + i) * C + c]);
                        dref[e] = to_half(bf, acc);
                    }
        dvec<uint16_t> din(in), dout(no), dd(d), ddst(dst);
        LAUNCH(amp_cuda_upsample_nhwc_forward(din.p, dout.p, B, H, W, C, S, 0, ERR));
        LAUNCH(amp_cuda_upsample_nhwc_backward(dd.p, ddst.p, B, H, W, C, S, dt, 0, ERR));
        const size_t bo = differ(dout.get(), out), bd = differ(ddst.get(), dref);
        CHECK(bo == 0 && bd == 0, "%s upsample x%d of %dx%dx%d: %zu of %zu outputs, %zu of %zu "
                                  "gradients (a block summed rows then columns onto the delta) differ",
              name, S, H, W, C, bo, no, bd, ni);
        /* route: the second of two groups of a 64-channel tensor, after 24
         * channels of another (yolov4's route groups=2 group_id=1) */
        const long P = 2L * 26 * 26;
        const int c1 = 24, c2 = 64, g = 32, first = 32, oc = c1 + g;
        std::vector<uint16_t> t1 = random_half(bf, P * c1, 1.f), t2 = random_half(bf, P * c2, 1.f);
        std::vector<uint16_t> rout(P * oc), rd = random_half(bf, P * oc, 0.1f);
        std::vector<uint16_t> d1 = random_half(bf, P * c1, 0.1f), d2 = random_half(bf, P * c2, 0.1f);
        std::vector<uint16_t> d1ref = d1, d2ref = d2;
        for (long q = 0; q < P; ++q) {
            for (int c = 0; c < c1; ++c) {
                rout[q * oc + c] = t1[q * c1 + c];
                d1ref[q * c1 + c] = to_half(bf, from_half(bf, d1[q * c1 + c]) + from_half(bf, rd[q * oc + c]));
            }
            for (int c = 0; c < g; ++c) {
                rout[q * oc + c1 + c] = t2[q * c2 + first + c];
                d2ref[q * c2 + first + c] =
                    to_half(bf, from_half(bf, d2[q * c2 + first + c]) + from_half(bf, rd[q * oc + c1 + c]));
            }
        }
        dvec<uint16_t> dt1(t1), dt2(t2), drout(P * oc), drd(rd), dd1(d1), dd2(d2);
        LAUNCH(amp_cuda_rows_nhwc(drout.p, oc, dt1.p, c1, P, c1, 0, dt, 0, ERR));
        LAUNCH(amp_cuda_rows_nhwc(drout.p + c1, oc, dt2.p + first, c2, P, g, 0, dt, 0, ERR));
        LAUNCH(amp_cuda_rows_nhwc(dd1.p, c1, drd.p, oc, P, c1, 1, dt, 0, ERR));
        LAUNCH(amp_cuda_rows_nhwc(dd2.p + first, c2, drd.p + c1, oc, P, g, 1, dt, 0, ERR));
        const size_t br = differ(drout.get(), rout), bd1 = differ(dd1.get(), d1ref), bd2 = differ(dd2.get(), d2ref);
        CHECK(br == 0 && bd1 == 0 && bd2 == 0,
              "%s route of %d channels and the second of 2 groups of %d: %zu of %ld outputs differ; "
              "gradients added back: %zu and %zu differ (the other group untouched)",
              name, c1, c2, br, P * oc, bd1, bd2);
        /* shortcut, linear and leaky: half(act(a + b)); d act'(y) into both deltas */
        const long N = 2L * 52 * 52 * 16;
        for (int act : {AMP_ACT_LINEAR, AMP_ACT_LEAKY}) {
            std::vector<uint16_t> a = random_half(bf, N, 1.f), b2 = random_half(bf, N, 1.f), y(N);
            std::vector<uint16_t> sd = random_half(bf, N, 0.1f), prev = random_half(bf, N, 0.1f);
            std::vector<uint16_t> other = random_half(bf, N, 0.1f), pref = prev, oref = other;
            for (long i = 0; i < N; ++i) {
                const float v = from_half(bf, a[i]) + from_half(bf, b2[i]);
                /* darknet's leaky multiplies by .1 in double */
                y[i] = to_half(bf, act == AMP_ACT_LINEAR ? v : v > 0 ? v : (float)(.1 * v));
                float g = from_half(bf, sd[i]);
                if (act != AMP_ACT_LINEAR) g *= from_half(bf, y[i]) > 0 ? 1.f : .1f;
                pref[i] = to_half(bf, from_half(bf, prev[i]) + g);
                oref[i] = to_half(bf, from_half(bf, other[i]) + g);
            }
            dvec<uint16_t> da(a), db(b2), dy(N), dsd(sd), dprev(prev), doth(other);
            LAUNCH(amp_cuda_shortcut_nhwc_forward(da.p, db.p, dy.p, N, act, dt, 0, ERR));
            LAUNCH(amp_cuda_shortcut_nhwc_backward(dsd.p, dy.p, dprev.p, doth.p, N, act, dt, 0, ERR));
            const half_cmp fy = compare_half(bf, dy.get(), y);
            const size_t bp = differ(dprev.get(), pref), bo2 = differ(doth.get(), oref);
            /* linear: bit for bit; leaky: within the half ulp that .1f and
             * darknet's .1 in double can differ by */
            CHECK((act == AMP_ACT_LINEAR ? fy.equal == fy.n : fy.beyond == 0) && bp == 0 && bo2 == 0,
                  "%s shortcut, %s: %zu of %zu outputs equal darknet's form (%zu beyond a half "
                  "ulp); gradients into both deltas: %zu and %zu differ",
                  name, act == AMP_ACT_LINEAR ? "linear" : "leaky", fy.equal, fy.n, fy.beyond, bp, bo2);
        }
    }
}

/* The weight gradient's operand from an NHWC input (wgrad.cu's
 * im2col_nhwc) against wgrad_index.h's index math, which gpu_plan_test
 * checks on the host against a direct sum. */
static void im2col_nhwc(void)
{
    /* every channel tile (4, 8, 16, 32), a layer's channels over several
     * tiles, and inputs padded as the image is (3 channels stored as 4 or 8) */
    const struct {
        amp_im2col_dims d;
        int cs;
    } cases[] = {{{3, 5, 9, 7, 3, 1, 1, 9, 7}, 8},     {{2, 8, 10, 9, 3, 2, 1, 5, 5}, 8},
                 {{2, 16, 6, 6, 1, 1, 0, 6, 6}, 16},   {{2, 3, 12, 11, 3, 1, 1, 12, 11}, 4},
                 {{2, 3, 13, 13, 3, 2, 1, 7, 7}, 8},   {{2, 1, 9, 9, 3, 1, 1, 9, 9}, 1},
                 {{1, 40, 7, 6, 3, 1, 1, 7, 6}, 40},   {{1, 70, 5, 5, 3, 2, 1, 3, 3}, 72}};
    for (const auto &cse : cases) {
        const amp_im2col_dims d = cse.d;
        const int cs = cse.cs;
        const size_t nx = (size_t)d.nb * cs * d.h * d.w, ncol = amp_im2col_elems(d);
        std::vector<uint16_t> x(nx);
        for (size_t i = 0; i < nx; ++i) x[i] = (uint16_t)(i * 2654435761u >> 7);
        dvec<uint16_t> dx(x), dcol(ncol);
        LAUNCH(amp_cuda_im2col_half_nhwc(dx.p, d, cs, dcol.p, 0, ERR));
        const std::vector<uint16_t> col = dcol.get();
        const size_t cols = (size_t)d.nb * d.out_h * d.out_w;
        size_t bad = 0;
        for (size_t i = 0; i < ncol; ++i) {
            const long long src = amp_im2col_src2_nhwc(d, cs, (int)(i / cols), (int)(i % cols));
            bad += col[i] != (src < 0 ? 0 : x[(size_t)src]);
        }
        CHECK(bad == 0, "im2col from NHWC, %d images %dx%dx%d (stored %d), %dx%d/%d pad %d: %zu of "
                        "%zu elements differ from wgrad_index.h's", d.nb, d.h, d.w, d.c, cs, d.size,
              d.size, d.stride, d.pad, bad, ncol);
    }
}

int main(void)
{
    if (!device_present()) return 77;
    conversions();
    tails();
    maxpools();
    upsample_route_shortcut();
    im2col_nhwc();
    return device_report();
}
