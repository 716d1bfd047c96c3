/* Which of the CPU backend's own SIMD variants run here: the tails'
 * per-channel loops (tail.c) exist for baseline x86-64 (SSE2), AVX2 and
 * AVX-512, the half rounding of arrays (round.c) in portable code, with F16C
 * (from AVX up) and with AVX2. The widest the CPU and the operating system support is used,
 * capped by DARKNET_AMP_MAX_CPU_ISA (docs/cfg.md), the plugin's counterpart
 * of oneDNN's DNNL_MAX_CPU_ISA: a machine with AVX-512 can then run, and
 * test, every narrower path. Decided once per process, before any thread
 * starts, like oneDNN's.
 */
#include "cpu.h"

#include <stdlib.h>
#include <strings.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#define AMP_ISA_X86 1
#endif

static const char *const isa_names[AMP_ISA_COUNT] = {"sse2", "avx", "avx2", "avx512"};

const char *amp_cpu_isa_name(amp_cpu_isa isa)
{
    return isa >= 0 && isa < AMP_ISA_COUNT ? isa_names[isa] : "?";
}

amp_status amp_cpu_isa_parse(const char *value, amp_cpu_isa *out, char *err, size_t errlen)
{
    if (!value || !*value) {
        *out = AMP_ISA_COUNT - 1; /* no cap */
        return AMP_OK;
    }
    for (int i = 0; i < AMP_ISA_COUNT; ++i)
        if (!strcasecmp(value, isa_names[i])) {
            *out = (amp_cpu_isa)i;
            return AMP_OK;
        }
    char shown[256];
    AMP_RETURN_ERROR(AMP_ERR_INVALID, err, errlen,
                     "DARKNET_AMP_MAX_CPU_ISA=%s: expected sse2, avx, avx2 or avx512",
                     amp_show(shown, sizeof shown, value, 64));
}

/* What the CPU and the operating system support (CPUID, XGETBV): AVX with
 * F16C and the YMM state saved; AVX2 too; AVX-512 F with the ZMM and mask
 * state too. */
static amp_cpu_isa detect(void)
{
#ifdef AMP_ISA_X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return AMP_ISA_SSE2;
    const unsigned need1 = 1u << 27 | 1u << 28 | 1u << 29; /* OSXSAVE, AVX, F16C */
    if ((c & need1) != need1) return AMP_ISA_SSE2;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & 6u) != 6u) return AMP_ISA_SSE2; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & 1u << 5)) return AMP_ISA_AVX;
    const int zmm = (lo & 0xe0u) == 0xe0u; /* opmask, ZMM 0-15 upper halves, ZMM 16-31 */
    return zmm && (b & 1u << 16) ? AMP_ISA_AVX512 : AMP_ISA_AVX2;
#else
    return AMP_ISA_SSE2;
#endif
}

/* Each decided once and kept; relaxed atomics, so that threads that ask
 * together read a whole value (every one computes the same). */
amp_cpu_isa amp_cpu_isa_detected(void)
{
    static int known = -1;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        v = (int)detect();
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return (amp_cpu_isa)v;
}

amp_cpu_isa amp_cpu_isa_used(void)
{
    static int known = -1;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        amp_cpu_isa cap = AMP_ISA_COUNT - 1;
        /* a bad value is refused when a network attaches (net_init); here it caps nothing */
        if (amp_cpu_isa_parse(getenv("DARKNET_AMP_MAX_CPU_ISA"), &cap, NULL, 0) != AMP_OK)
            cap = AMP_ISA_COUNT - 1;
        const amp_cpu_isa have = amp_cpu_isa_detected();
        v = (int)(cap < have ? cap : have);
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return (amp_cpu_isa)v;
}
