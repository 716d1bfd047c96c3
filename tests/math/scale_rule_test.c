/* Scale trajectories of scale_rule.h against traces derived by hand from the
 * rules in docs/design.md (PyTorch GradScaler plus hysteresis and bounds).
 * Each case feeds a sequence of overflow flags ('.' good step, 'x' overflow)
 * and compares the scale after every step with the expected list. */
#include "math/scale_rule.h"

#include <stdio.h>
#include <string.h>

static int failures;

static amp_scale_params params(float growth, float backoff, long interval, int hysteresis,
                               float min, float max)
{
    amp_scale_params p = {growth, backoff, min, max, interval, hysteresis, 1};
    return p;
}

/* expected[i]: the scale after step i+1. */
static void trace(const char *name, amp_scale_params p, float init, const char *flags,
                  const float *expected)
{
    amp_scale_state s;
    amp_scale_state_init(&s, &p, init);
    size_t n = strlen(flags);
    int bad = 0;
    printf("%s: init %g, steps %s\n  got     ", name, init, flags);
    for (size_t i = 0; i < n; ++i) {
        amp_scale_update(&s, &p, flags[i] == 'x');
        printf(" %g", s.scale);
        if (s.scale != expected[i]) bad = 1; /* exact: every value is a power of two */
    }
    printf("\n  expected");
    for (size_t i = 0; i < n; ++i) printf(" %g", expected[i]);
    unsigned long long skips = 0;
    for (size_t i = 0; i < n; ++i) skips += flags[i] == 'x';
    if (s.steps != n || s.skips != skips) bad = 1;
    printf("\n  steps %llu (expected %zu), skips %llu (expected %llu): %s\n", s.steps, n, s.skips,
           skips, bad ? "FAIL" : "ok");
    failures += bad;
}

/* amp_step_decide: a step with a non-finite loss ('L') is skipped and leaves
 * the whole state as it was, even with an overflow at the same step ('B'); the
 * other steps follow amp_scale_update, so the trace equals the one without
 * the L and B steps. */
static void loss_trace(void)
{
    const char *flags = "..LLx.B.xL...x..LLLL.";
    amp_scale_params p = params(2, .5f, 2, 2, 1, 1 << 24);
    amp_scale_state s, ref;
    amp_scale_state_init(&s, &p, 256);
    amp_scale_state_init(&ref, &p, 256);
    int bad = 0, kept = 0, nloss = 0;
    printf("non-finite loss steps: %s\n  scale", flags);
    for (size_t i = 0; flags[i]; ++i) {
        const int loss = flags[i] == 'L' || flags[i] == 'B';
        const int found = flags[i] == 'x' || flags[i] == 'B';
        const amp_scale_state before = s;
        const int skipped = amp_step_decide(&s, &p, found ? 3u : 0u, loss ? 9u : 0u, 1);
        if (loss) {
            ++nloss;
            kept += amp_scale_state_same(&before, &s);
            bad |= skipped != 1;
        } else {
            amp_scale_update(&ref, &p, found);
            bad |= skipped != found || !amp_scale_state_same(&ref, &s);
        }
        printf(" %g", s.scale);
    }
    bad |= kept != nloss;
    printf("\n  %d of %d loss steps skipped with the state untouched; the rest as "
           "amp_scale_update (final scale %g, expected %g, %llu steps, %llu skips): %s\n",
           kept, nloss, s.scale, ref.scale, s.steps, s.skips, bad ? "FAIL" : "ok");
    failures += bad;
}

int main(void)
{
    loss_trace();
    {   /* growth after 3 good steps; an overflow backs off and resets the tracker */
        const float e[] = {8, 8, 16, 8, 8, 8, 16, 16, 16, 32};
        trace("growth at the interval, backoff resets the tracker",
              params(2, .5f, 3, 1, 1, 1 << 24), 8, "...x......", e);
    }
    {   /* max clamp: 32 -> 64 refused (max 48), tracker still resets */
        const float e[] = {16, 32, 32, 32, 32};
        trace("growth refused past max_scale", params(2, .5f, 1, 1, 1, 48), 8, ".....", e);
    }
    {   /* min clamp: 4 -> 2 -> 1.5 (min) -> 1.5 */
        const float e[] = {2, 1.5f, 1.5f, 1.5f};
        trace("backoff clamped to min_scale", params(2, .5f, 100, 1, 1.5f, 1 << 24), 4, "xxxx", e);
    }
    {   /* non-finite growth refused even with an infinite max */
        float inf = 1.0f / 0.0f;
        const float e[] = {0x1p127f, 0x1p127f, 0x1p127f};
        trace("non-finite growth refused", params(2, .5f, 1, 1, 1, inf), 0x1p126f, "...", e);
    }
    {   /* hysteresis 3: backs off on the 3rd overflow in a row; a good step re-arms it */
        const float e[] = {1024, 1024, 512, 512, 512, 256, 256, 256, 256, 128};
        trace("hysteresis 3", params(2, .5f, 100, 3, 1, 1 << 24), 1024, "xxxxxx.xxx", e);
    }
    {   /* static scale: overflows counted, scale fixed */
        amp_scale_params p = params(2, .5f, 1, 1, 1, 1 << 24);
        p.dynamic = 0;
        const float e[] = {1, 1, 1, 1};
        trace("static scale", p, 1, ".x.x", e);
    }
    printf("%s: %d failed traces\n", failures ? "FAIL" : "PASS", failures);
    return failures != 0;
}
