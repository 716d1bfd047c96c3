#!/bin/sh
# study.accuracy_bfloat16: the accuracy study (scripts/accuracy) reduced to
# SEEDS seeds of AMP bfloat16, held against the FP32 figures of the same seeds
# that the full study recorded (fp32-runs.tsv beside this file: FP32 training
# is deterministic, bit for bit the same on any thread count, so recorded
# figures stand for a rerun; scripts/accuracy refuses them if the study's cfg
# or dataset changed). Fails if the mean over seeds of AMP's validation
# mAP@0.5 is further than BOUND points from FP32's (CMakeLists.txt beside this
# file derives BOUND from the full study).
#   accuracy.sh ROOT BUILD OUT SEEDS BOUND
# ACCURACY_REUSE=1 keeps the runs OUT already holds (a second look at the
# same runs, e.g. against another bound, without training again).
set -u
root=$1 build=$2 out=$3 seeds=$4 bound=$5
[ "${ACCURACY_REUSE:-0}" = 1 ] || rm -rf "$out"
mkdir -p "$out"
DARKNET_AMP_SKIP_INSTALL=1 ACCURACY_SKIP_BUILD=1 DARKNET_AMP_BUILD_DIR="$build" \
    ACCURACY_DATA="$build/study-data" ACCURACY_OUT="$out" ACCURACY_PLOT=0 \
    ACCURACY_SEEDS="$seeds" ACCURACY_MODES=bfloat16 \
    ACCURACY_FP32_FROM="$root/tests/study/fp32-runs.tsv" \
    sh "$root/scripts/accuracy" > "$out/accuracy.log" 2>&1
st=$?
cat "$out/accuracy.log"
[ "$st" = 0 ] || { echo "FAIL: scripts/accuracy exited with status $st"; exit 1; }
# runs.tsv: mode seed map50 recall ...; the paired difference in points
awk -v bound="$bound" -v n="$seeds" '
    /^#/ { next }
    { map[$1, $2] = 100 * $3 }
    END {
        for (s = 1; s <= n; s++) {
            if (!((("fp32", s) in map) && (("bfloat16", s) in map))) { print "FAIL: no figures for seed " s; exit 1 }
            f += map["fp32", s]; b += map["bfloat16", s]
            per = per sprintf(" %d: %.2f vs %.2f (%+.2f);", s, map["bfloat16", s], map["fp32", s], map["bfloat16", s] - map["fp32", s])
        }
        f /= n; b /= n; d = b - f; a = d < 0 ? -d : d
        printf "per seed, AMP bfloat16 vs FP32 mAP@0.5 (%%):%s\n", per
        printf "mean over %d seeds: AMP bfloat16 %.2f%%, FP32 %.2f%% (recorded), difference %+.2f points; bound %.2f points\n", n, b, f, d, bound
        if (a > bound) { printf "FAIL: AMP bfloat16 is %.2f points from FP32, more than the bound %.2f\n", a, bound; exit 1 }
        printf "ok: within the bound (%.2f of %.2f points)\n", a, bound
    }' "$out/runs.tsv"
