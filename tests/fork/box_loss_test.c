/* The IoU family of box losses (patches/0020-yolo-v4-box-loss.patch,
 * src/box_loss.c):
 * - values on box pairs computed by hand (below, with the arithmetic),
 *   degenerate ones included: identical boxes, no overlap, a box of zero
 *   width, two boxes of zero area at one point;
 * - gradients against central finite differences of the values, on random
 *   pairs away from ties of edges (where the gradient is one-sided): IoU,
 *   GIoU and DIoU exactly; CIoU as its paper prescribes, alpha held constant
 *   and the aspect term's gradient times (w^2 + h^2);
 * - every value and gradient finite on the degenerate pairs;
 * - CIoU's w, h gradient times e^t (a yolo layer's w, h delta) bounded for a
 *   predicted box that outgrows the image, where the paper's form grows as
 *   e^(tw + th).
 */
#include "box_loss.h"

#include "check.h"

#include <math.h>
#include <stdlib.h>

static box bx(float x, float y, float w, float h)
{
    box b = {x, y, w, h};
    return b;
}

static const char *kinds[] = {"mse", "iou", "giou", "diou", "ciou"};

/* value of kind for pair (a, g), expected e */
static void value_is(const char *what, box a, box g, int kind, double e)
{
    const double v = box_iou_kind(a, g, kind);
    CHECK(fabs(v - e) <= 1e-5, "%s: %s %.6f, by hand %.6f (|difference| %.1e, tolerance 1e-5)",
          what, kinds[kind], v, e, fabs(v - e));
}

static float coord(box *b, int k)
{
    return k == 0 ? b->x : k == 1 ? b->y : k == 2 ? b->w : b->h;
}

static void set_coord(box *b, int k, float v)
{
    if (k == 0) b->x = v;
    else if (k == 1) b->y = v;
    else if (k == 2) b->w = v;
    else b->h = v;
}

/* d f/d coordinate k of a, central difference with step h */
static double fd(float (*f)(box, box, int), box a, box g, int kind, int k, float h)
{
    box p = a, m = a;
    set_coord(&p, k, coord(&a, k) + h);
    set_coord(&m, k, coord(&a, k) - h);
    return ((double)f(p, g, kind) - f(m, g, kind)) / (2.0 * h);
}

static float v_of(box a, box g, int kind)
{
    (void)kind;
    return box_ciou_v(a, g);
}

static unsigned rng = 12345;
static float uniform(float lo, float hi)
{
    rng = rng * 1103515245u + 12345u;
    return lo + (hi - lo) * (float)((rng >> 8) & 0xffffff) / 16777216.0f;
}

/* whether some edge of a is within d of one of g's (a tie: one-sided gradient) */
static int near_tie(box a, box g, float d)
{
    const float ea[4] = {a.x - a.w / 2, a.x + a.w / 2, a.y - a.h / 2, a.y + a.h / 2};
    const float eg[4] = {g.x - g.w / 2, g.x + g.w / 2, g.y - g.h / 2, g.y + g.h / 2};
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j)
            if ((i < 2) == (j < 2) && fabsf(ea[i] - eg[j]) < d) return 1;
    return 0;
}

int main(void)
{
    /* identical boxes: every variant 1 (v = 0, alpha = 0) */
    const box s = bx(.5f, .5f, .2f, .4f);
    for (int k = IOU_LOSS_IOU; k <= IOU_LOSS_CIOU; ++k) value_is("identical boxes", s, s, k, 1);
    /* a = [-1,1]x[-1,1], g = [0,2]x[-1,1]: I = 1*2 = 2, U = 4 + 4 - 2 = 6, IoU = 1/3;
     * enclosing 3x2 = 6 = U: GIoU = 1/3; rho^2 = 1, c^2 = 9 + 4 = 13: DIoU = 1/3 - 1/13;
     * same aspect: v = 0, CIoU = DIoU */
    const box a2 = bx(0, 0, 2, 2), g2 = bx(1, 0, 2, 2);
    value_is("half overlap", a2, g2, IOU_LOSS_IOU, 1.0 / 3);
    value_is("half overlap", a2, g2, IOU_LOSS_GIOU, 1.0 / 3);
    value_is("half overlap", a2, g2, IOU_LOSS_DIOU, 1.0 / 3 - 1.0 / 13);
    value_is("half overlap", a2, g2, IOU_LOSS_CIOU, 1.0 / 3 - 1.0 / 13);
    /* no overlap: [-.5,.5]^2 and [2.5,3.5]x[-.5,.5]: IoU 0, U = 2, enclosing 4x1:
     * GIoU = -(4 - 2)/4 = -1/2; rho^2 = 9, c^2 = 16 + 1: DIoU = -9/17 */
    const box a3 = bx(0, 0, 1, 1), g3 = bx(3, 0, 1, 1);
    value_is("no overlap", a3, g3, IOU_LOSS_IOU, 0);
    value_is("no overlap", a3, g3, IOU_LOSS_GIOU, -0.5);
    value_is("no overlap", a3, g3, IOU_LOSS_DIOU, -9.0 / 17);
    value_is("no overlap", a3, g3, IOU_LOSS_CIOU, -9.0 / 17);
    /* crossed 2x1 and 1x2 at one centre: I = 1, U = 3, IoU = 1/3; enclosing 2x2:
     * GIoU = 1/3 - 1/4; rho = 0: DIoU = 1/3; v = 4/pi^2 (atan(1/2) - atan(2))^2
     * = 0.4052847 * 0.6435011^2 = 0.1678258, alpha = v/(1 - 1/3 + v) = 0.2011113,
     * CIoU = 1/3 - alpha v = 0.2995816 */
    const box a4 = bx(0, 0, 2, 1), g4 = bx(0, 0, 1, 2);
    value_is("crossed", a4, g4, IOU_LOSS_IOU, 1.0 / 3);
    value_is("crossed", a4, g4, IOU_LOSS_GIOU, 1.0 / 3 - 0.25);
    value_is("crossed", a4, g4, IOU_LOSS_DIOU, 1.0 / 3);
    value_is("crossed", a4, g4, IOU_LOSS_CIOU, 0.2995816);
    /* zero width inside a unit box: I = 0, U = 1, IoU 0; enclosing = g: GIoU 0;
     * rho 0: DIoU 0; v = 4/pi^2 (pi/4)^2 = 1/4, alpha = .25/1.25 = .2, CIoU = -.05 */
    const box a5 = bx(0, 0, 0, 1), g5 = bx(0, 0, 1, 1);
    value_is("zero width", a5, g5, IOU_LOSS_IOU, 0);
    value_is("zero width", a5, g5, IOU_LOSS_GIOU, 0);
    value_is("zero width", a5, g5, IOU_LOSS_DIOU, 0);
    value_is("zero width", a5, g5, IOU_LOSS_CIOU, -0.05);
    /* two points at one place: nothing in any ratio, every variant 0, finite */
    const box p6 = bx(1, 1, 0, 0);
    for (int k = IOU_LOSS_IOU; k <= IOU_LOSS_CIOU; ++k) value_is("two points", p6, p6, k, 0);

    /* degenerate pairs: finite gradients */
    const box deg[][2] = {{s, s}, {a3, g3}, {a5, g5}, {p6, p6}, {g5, a5}};
    int finite = 1;
    for (size_t i = 0; i < sizeof deg / sizeof deg[0]; ++i)
        for (int k = IOU_LOSS_IOU; k <= IOU_LOSS_CIOU; ++k) {
            const box d = box_iou_kind_gradient(deg[i][0], deg[i][1], k);
            finite &= isfinite(d.x) && isfinite(d.y) && isfinite(d.w) && isfinite(d.h);
        }
    CHECK(finite, "gradients finite on identical, disjoint, zero-width and zero-area pairs");

    /* gradients against finite differences. Step 1e-3 on boxes of size .2-1:
     * float rounding of the values gives an error about 1e-7/1e-3 = 1e-4 per
     * difference, the curvature h^2 f''' ~1e-6; tolerance 2e-3 (1 + |g|). */
    const float h = 1e-3f;
    for (int k = IOU_LOSS_IOU; k <= IOU_LOSS_CIOU; ++k) {
        double worst = 0;
        int pairs = 0, bad = 0;
        while (pairs < 200) {
            box a = bx(uniform(0, 1), uniform(0, 1), uniform(.2f, 1), uniform(.2f, 1));
            box g = bx(uniform(0, 1), uniform(0, 1), uniform(.2f, 1), uniform(.2f, 1));
            if (near_tie(a, g, 4 * h)) continue;
            ++pairs;
            const box an = box_iou_kind_gradient(a, g, k);
            for (int c = 0; c < 4; ++c) {
                double want;
                if (k == IOU_LOSS_CIOU) { /* DIoU's, minus alpha (w^2 + h^2) dv */
                    want = fd(box_iou_kind, a, g, IOU_LOSS_DIOU, c, h);
                    if (c >= 2)
                        want -= box_ciou_alpha(a, g) * (a.w * a.w + a.h * a.h) *
                                fd(v_of, a, g, 0, c, h);
                } else {
                    want = fd(box_iou_kind, a, g, k, c, h);
                }
                const double got = coord((box *)&an, c), err = fabs(got - want);
                if (err / (1 + fabs(want)) > worst) worst = err / (1 + fabs(want));
                bad += err > 2e-3 * (1 + fabs(want));
            }
        }
        CHECK(!bad, "%s: gradient against finite differences on %d random pairs: largest "
                    "|difference|/(1 + |gradient|) %.2e (tolerance 2e-3), %d components beyond",
              kinds[k], pairs, worst, bad);
    }
    /* the check can fail: a gradient with one term left out is caught */
    {
        const box a = bx(.3f, .4f, .5f, .6f), g = bx(.5f, .45f, .4f, .7f);
        const box an = box_iou_kind_gradient(a, g, IOU_LOSS_IOU);
        const double want = fd(box_iou_kind, a, g, IOU_LOSS_DIOU, 0, h);
        CHECK(fabs(an.x - want) > 2e-3 * (1 + fabs(want)),
              "self-check: IoU's x gradient %.5f is not DIoU's %.5f (the comparison can fail)",
              an.x, want);
    }
    /* A predicted box that outgrows the image: a yolo layer's w, h deltas are
     * the gradient times e^t (patches/0020). yolov4-tiny's 81x82 anchor at
     * 128 px, a 4:1 truth, t = 0..8 (the box 0.6 to 2000 images wide).
     * Bounded: alpha <= 1, |k8| <= 4/pi, h e^tw 2/(w^2 + h^2) <= 1/anchor
     * width, and the IoU and distance terms fall with the box; the paper's
     * form (no 2/(w^2 + h^2)) is 675 at t = 5 and e^(2t) beyond. */
    {
        const box g = bx(.5f, .5f, .4f, .1f);
        const float aw = 81.f / 128, ah = 82.f / 128;
        const double bound = 4 / 3.14159265358979 / aw + 0.5;
        double worst = 0, at5 = 0;
        for (int t = 0; t <= 8; ++t) {
            const float e = expf((float)t);
            const box a = bx(.55f, .5f, aw * e, ah * e);
            const box d = box_iou_kind_gradient(a, g, IOU_LOSS_CIOU);
            const double m = fmax(fabs(d.w * e), fabs(d.h * e));
            if (m > worst || m != m) worst = m;
            if (t == 5) at5 = m;
        }
        CHECK(worst <= bound, "CIoU's w, h gradient times e^t for a predicted box up to 2000 "
                              "images wide: at most %.3f (at t = 5: %.3f; bound %.3f)",
              worst, at5, bound);
    }
    /* names */
    CHECK(iou_loss_kind("ciou") == IOU_LOSS_CIOU && iou_loss_kind("mse") == IOU_LOSS_MSE &&
              iou_loss_kind("CIoU") < 0 && iou_loss_kind("") < 0,
          "iou_loss names: mse..ciou known, others (\"CIoU\", \"\") refused");
    return check_report();
}
