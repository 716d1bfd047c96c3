/* The mish family (patches/0019-mish-swish-hard-mish.patch, and the CPU
 * tails' vectorisable forms in plugin/cpu/act_math.h):
 * - darknet's gradient(x, a) of mish, swish and hard_mish (taken from the
 *   input x) against central finite differences of activate(x, a), on a grid
 *   over [-30, 30] away from hard_mish's kinks;
 * - the tails' amp_mish/amp_swish/amp_hard_mish and their gradients against
 *   double precision, within a few ulps (they use one expf and rational
 *   functions where darknet uses log1pf and tanhf; darknet's error is shown);
 * - the tails' leaky (amp_leaky, amp_leaky_slope: a product with a slope
 *   made from the bits, so that their loops vectorise) on every float32
 *   sign and exponent with several significands, zeros, infinities and
 *   NaNs: the value bit for bit the select form's and within an ulp of
 *   darknet's (which multiplies by .1 in double), the slope bit for bit
 *   darknet's gradient;
 * - amp_act and amp_act_grad (math/act_math.h, which the GPU's tails share):
 *   linear, relu and logistic bit for bit darknet's activate and gradient,
 *   leaky, mish, swish and hard_mish bit for bit the functions above, on
 *   every sign and exponent with several significands (a NaN for a NaN); amp_act_known and
 *   amp_act_needs_input against darknet's names;
 * - names: get_activation and activation_is_known know them,
 *   activation_needs_input says which take the input.
 */
#include "activations.h"
#include "math/act_math.h"

#include "check.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef float (*fn)(float);

/* value, gradient and the size of the gradient's terms (and the value's),
 * in double; sizes below 1e-30 count as 1e-30: float's exponentials underflow
 * there (e^-90), to values no training step can tell from 0 */
static void reference(ACTIVATION a, double x, double *v, double *g, double *scale,
                      double *vscale)
{
    if (a == MISH) { /* n = e^x: tanh(softplus) = s2/(s2 + 2), sech^2 = 4 (s2 + 1)/(s2 + 2)^2 */
        const double n = exp(x < 40 ? x : 40), s2 = n * n + 2 * n, den = s2 + 2;
        const double t = s2 / den, rest = x * 4 * (s2 + 1) / (den * den) * n / (1 + n);
        *v = x * t, *g = t + rest, *scale = fabs(t) + fabs(rest);
    } else if (a == SWISH) {
        const double sg = 1 / (1 + exp(-x)), rest = x * sg * (1 - sg);
        *v = x * sg, *g = sg + rest, *scale = fabs(sg) + fabs(rest);
    } else {
        *v = x > 0 ? x : x > -2 ? x * x / 2 + x : 0;
        *g = x > 0 ? 1 : x > -2 ? x + 1 : 0;
        *scale = fabs(*g) + (x > -2 && x < 0 ? 1 : 0);
    }
    *vscale = a == HARD_MISH && x > -2 && x < 0 ? x * x / 2 - x : fabs(*v);
    *scale = fmax(*scale, 1e-30);
    *vscale = fmax(*vscale, 1e-30);
}

static double fd(ACTIVATION a, float x, float h)
{
    return ((double)activate(x + h, a) - activate(x - h, a)) / (2.0 * h);
}

int main(void)
{
    const ACTIVATION acts[] = {MISH, SWISH, HARD_MISH};
    const char *names[] = {"mish", "swish", "hard_mish"};
    const fn ours[] = {amp_mish, amp_swish, amp_hard_mish};
    const fn ours_g[] = {amp_mish_grad, amp_swish_grad, amp_hard_mish_grad};
    for (int k = 0; k < 3; ++k) {
        const ACTIVATION a = acts[k];
        /* finite differences of darknet's: step 1e-2 in float; error about
         * 1e-7 |f| / 1e-2 + 1e-4 f''' <= 1e-4 (1 + |x|) */
        double worst = 0;
        int bad = 0, n = 0;
        for (float x = -30.f; x <= 30.f; x += 0.0371f) {
            if (a == HARD_MISH && (fabsf(x) < .02f || fabsf(x + 2) < .02f)) continue; /* kinks */
            const double want = fd(a, x, 1e-2f), got = gradient(x, a);
            const double err = fabs(got - want) / (1 + fabs(x));
            if (err > worst) worst = err;
            bad += err > 2e-4;
            ++n;
        }
        CHECK(!bad, "%s: darknet's gradient (of the input) against finite differences at %d "
                    "points in [-30, 30]: largest |difference|/(1 + |x|) %.2e (tolerance 2e-4)",
              names[k], n, worst);
        /* darknet's and the tails' forms against double precision, each
         * within a few ulps of the scale of its terms (mish' and swish' sum
         * two terms that cancel near their zero, x = -1.19 and -1.28) */
        double wv = 0, wg = 0, wdg = 0;
        int badv = 0, badg = 0;
        for (float x = -90.f; x <= 90.f; x += 0.00937f) {
            double rv, rg, scale, vscale;
            reference(a, x, &rv, &rg, &scale, &vscale);
            const double ev = fabs(ours[k](x) - rv) / vscale;
            const double eg = fabs(ours_g[k](x) - rg) / scale;
            const double edg = fabs(gradient(x, a) - rg) / scale;
            if (ev > wv) wv = ev;
            if (eg > wg) wg = eg;
            if (edg > wdg) wdg = edg;
            badv += ev > 8 * FLT_EPSILON;
            badg += eg > 16 * FLT_EPSILON; /* swish's 1 - s from a rounded s: 8 ulp seen */
        }
        CHECK(!badv, "%s: the CPU tails' value against double precision on [-90, 90]: largest "
                     "difference relative to its terms' size %.2e (tolerance 8 ulp = %.2e)",
              names[k], wv, 8 * FLT_EPSILON);
        CHECK(!badg, "%s: the CPU tails' gradient against double precision on [-90, 90]: largest "
                     "difference relative to its terms' size %.2e (tolerance 16 ulp = %.2e); "
                     "darknet's %.2e",
              names[k], wg, 16 * FLT_EPSILON, wdg);
        CHECK(get_activation((char *)names[k]) == a && activation_is_known(names[k]) &&
                  activation_needs_input(a) && !strcmp(get_activation_string(a), names[k]),
              "%s: parsed, named back, and its gradient takes the input", names[k]);
    }
    /* leaky: every sign and exponent (NaNs and infinities among them), with
     * the significands 0, 1, the middle and the largest. The value against
     * the select form the tails had (v > 0 ? v : .1f v), bit for bit, and
     * within an ulp of darknet's, which multiplies by .1 in double; the
     * slope against darknet's gradient, bit for bit. */
    int leaky_n = 0, non_nan = 0, bad_value = 0, bad_slope = 0, off_ulp = 0, darknet_differs = 0;
    uint32_t first_bad = 0;
    const uint32_t mant[] = {0, 1, 0x400000u, 0x7fffffu};
    for (uint32_t se = 0; se < 512; ++se)
        for (int k = 0; k < 4; ++k) {
            const uint32_t u = se << 23 | mant[k];
            volatile float vv;
            memcpy((float *)&vv, &u, sizeof u);
            const float v = vv;
            const float mine = amp_leaky(v), select = v > 0 ? v : .1f * v;
            const float dk = activate(v, LEAKY), slope = amp_leaky_slope(v);
            const float dk_slope = gradient(v, LEAKY);
            const int value_ok = !memcmp(&mine, &select, sizeof mine);
            const int slope_ok = !memcmp(&slope, &dk_slope, sizeof slope);
            if ((!value_ok || !slope_ok) && !bad_value && !bad_slope) first_bad = u;
            bad_value += !value_ok;
            bad_slope += !slope_ok;
            non_nan += !isnan(v);
            if (!isnan(v) && memcmp(&mine, &dk, sizeof mine)) {
                ++darknet_differs;
                off_ulp += fabsf(mine - dk) > fabsf(nextafterf(dk, 0) - dk);
            }
            ++leaky_n;
        }
    CHECK(!bad_value && !bad_slope,
          "leaky: the tails' value against v > 0 ? v : .1f v and their slope against darknet's "
          "gradient, bit for bit, on %d patterns: %d values and %d slopes differ (first 0x%08x)",
          leaky_n, bad_value, bad_slope, (unsigned)first_bad);
    CHECK(!off_ulp,
          "leaky: the tails' value within an ulp of darknet's (.1 in double) on the %d non-NaN "
          "patterns: %d differ by an ulp, %d by more",
          non_nan, darknet_differs - off_ulp, off_ulp);
    /* amp_act, amp_act_grad: the tails' (and the GPU's) choice among them */
    {
        const ACTIVATION all[] = {LINEAR, RELU, LOGISTIC, LEAKY, MISH, SWISH, HARD_MISH};
        const fn own[] = {NULL, NULL, NULL, amp_leaky, amp_mish, amp_swish, amp_hard_mish};
        const fn own_g[] = {NULL, NULL, NULL, NULL, amp_mish_grad, amp_swish_grad,
                            amp_hard_mish_grad};
        for (int k = 0; k < 7; ++k) {
            const ACTIVATION a = all[k];
            int n = 0, bad_v = 0, bad_g = 0;
            uint32_t first = 0;
            for (uint32_t se = 0; se < 512; ++se)
                for (int m = 0; m < 4; ++m) {
                    const uint32_t u = se << 23 | mant[m];
                    float v;
                    memcpy(&v, &u, sizeof u);
                    const float got = amp_act(v, a), y = activate(v, a);
                    const float want = own[k] ? own[k](v) : y;
                    /* the gradient: of the input for mish and the like, else
                     * darknet's of the output */
                    const float got_g = amp_act_grad(y, v, a);
                    const float want_g = own_g[k] ? own_g[k](v)
                                         : a == LEAKY ? amp_leaky_slope(y) : gradient(y, a);
                    /* a NaN's payload follows the compiler's order of operands */
                    const int bv = isnan(want) ? !isnan(got) : memcmp(&got, &want, sizeof got) != 0;
                    const int bg = isnan(want_g) ? !isnan(got_g)
                                                 : memcmp(&got_g, &want_g, sizeof got_g) != 0;
                    if ((bv || bg) && !bad_v && !bad_g) first = u;
                    bad_v += bv, bad_g += bg, ++n;
                }
            CHECK(!bad_v && !bad_g && amp_act_known(a) &&
                      amp_act_needs_input(a) == activation_needs_input(a),
                  "amp_act(%s): value and gradient bit for bit %s on %d patterns: %d values, %d "
                  "gradients differ (first 0x%08x); known, takes the %s",
                  get_activation_string(a), own[k] ? "the tails' functions" : "darknet's", n,
                  bad_v, bad_g, (unsigned)first, activation_needs_input(a) ? "input" : "output");
        }
        CHECK(!amp_act_known(ELU) && !amp_act_known(TANH) && !amp_act_known(SELU),
              "amp_act does not claim elu, tanh or selu (their tails use darknet's activate)");
        /* can fail: relu's gradient is not leaky's */
        CHECK(amp_act_grad(-1.f, -1.f, RELU) != amp_act_grad(-1.f, -1.f, LEAKY),
              "self-check: relu's and leaky's gradients at -1 differ (%g, %g)",
              amp_act_grad(-1.f, -1.f, RELU), amp_act_grad(-1.f, -1.f, LEAKY));
    }
    /* the check can fail: the gradient from the output (darknet's usual way)
     * is not mish's */
    const float x = -1.5f;
    const double from_out = gradient(activate(x, MISH), MISH), want = fd(MISH, x, 1e-2f);
    CHECK(fabs(from_out - want) > 1e-2,
          "self-check: mish's gradient taken at its output (%.4f) differs from the true one "
          "(%.4f)", from_out, want);
    CHECK(!activation_needs_input(LEAKY) && !activation_needs_input(LINEAR) &&
              !activation_is_known("gelu") && !activation_is_known("Mish"),
          "leaky and linear take the output; gelu and Mish are not known");
    return check_report();
}
