#!/bin/sh
# Runs the training driver built against two darknet libraries on the same cfg,
# data and seed, and compares them iteration by iteration.
#
#   compare_runs.sh NAME_A DRIVER_A NAME_B DRIVER_B TOLERANCE -- DRIVER_ARGS...
#
# TOLERANCE is the largest |loss_A - loss_B| / max(1, |loss_A|) accepted at any
# iteration; 0 demands bit-for-bit equal losses and weights files. Prints every
# iteration's two losses and their difference, then the verdict. Exit 0 = pass.
# COMPARE_B_ARGS (optional) is appended to B's arguments only; COMPARE_OUT is
# where logs and weights go.
set -eu
name_a=$1 driver_a=$2 name_b=$3 driver_b=$4 tol=$5
shift 5
[ "$1" = "--" ] && shift
out=${COMPARE_OUT:-.}
mkdir -p "$out"

run() { # name driver args...
    n=$1 d=$2
    shift 2
    if ! "$d" "$@" --save "$out/$n.weights" > "$out/$n.log" 2> "$out/$n.err"; then
        echo "FAIL: $n driver exited with an error:"; tail -n 20 "$out/$n.err"; exit 1
    fi
}
run "$name_a" "$driver_a" "$@"
# shellcheck disable=SC2086
run "$name_b" "$driver_b" "$@" ${COMPARE_B_ARGS:-}
head -n 1 "$out/$name_a.log"

awk -v a="$name_a" -v b="$name_b" -v tol="$tol" '
    FNR == 1 { file++ }
    $1 == "iter"    { loss[file, $2] = $4; hex[file, $2] = $5; n[file] = $2 }
    $1 == "weights" { sum[file] = $6; bytes[file] = $3 }
    END {
        if (n[1] != n[2] || n[1] < 1) {
            printf "FAIL: %s ran %d iterations, %s ran %d\n", a, n[1], b, n[2]; exit 1
        }
        printf "%5s %16s %16s %12s  %s\n", "iter", a " loss", b " loss", "rel diff", "bits"
        worst = 0; same = 0
        for (i = 1; i <= n[1]; i++) {
            d = loss[1, i] - loss[2, i]; if (d < 0) d = -d
            m = loss[1, i]; if (m < 0) m = -m; if (m < 1) m = 1
            r = d / m; if (r > worst) { worst = r; at = i }
            eq = hex[1, i] == hex[2, i]; same += eq
            if (loss[1, i] != loss[1, i] + 0 || loss[1, i] ~ /nan|inf/) bad = 1
            printf "%5d %16.9g %16.9g %12.3g  %s\n", i, loss[1, i], loss[2, i], r, eq ? "equal" : "differ"
        }
        printf "losses bit-for-bit equal: %d of %d iterations; largest relative difference %.3g", same, n[1], worst
        if (worst > 0) printf " (iteration %d)", at
        printf "\nweights file: %s %s bytes fnv1a64 %s, %s %s bytes fnv1a64 %s: %s\n",
               a, bytes[1], sum[1], b, bytes[2], sum[2], sum[1] == sum[2] ? "equal" : "different"
        if (bad) { print "FAIL: non-finite loss"; exit 1 }
        if (tol == 0) {
            if (same != n[1] || sum[1] != sum[2]) { print "FAIL: tolerance 0 demands bit-for-bit equality"; exit 1 }
        } else if (worst > tol) {
            printf "FAIL: largest relative loss difference %.3g exceeds tolerance %g\n", worst, tol; exit 1
        }
        printf "PASS (tolerance %g)\n", tol
    }' "$out/$name_a.log" "$out/$name_b.log"
