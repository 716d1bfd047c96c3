#!/bin/sh
# One cfg of the zoo: stock darknet in FP32, then the fork with AMP float16 and
# bfloat16, each in its own process; zoo_compare judges the AMP runs.
#
#   zoo_cfg.sh STOCK_DRIVER FORK_DRIVER COMPARE CFG SIZE OUTDIR K16 KBF16 [REASON]
#
# STOCK_DRIVER "-": Debian's darknet is not installed; the fork's amp=0 run is
# the reference instead and nothing says whether stock darknet can run CFG.
# REASON: the cfg is listed, not run (a known upstream bug), with that reason.
# A cfg that stock darknet cannot run here (it exits, or dies by a signal) is
# listed with the reason too: exit 77, never a silent pass. Writes
# OUTDIR/result, the line tests/zoo/summary.sh collects.
set -u
stock=$1 fork=$2 compare=$3 cfg=$4 size=$5 out=$6 k16=$7 kbf=$8 reason=${9:-}
name=$(basename "$cfg" .cfg)
mkdir -p "$out"
rm -f "$out"/result "$out"/result.tmp "$out"/*.txt "$out"/*.bin "$out"/*.bn "$out"/*.log "$out"/*.rc
: > "$out/started"

listed() { # reason
    echo "$name listed-not-run: $1" > "$out/result"
    echo "SKIP: $name is listed, not run: $1"
    exit 77
}

[ -z "$reason" ] || listed "$reason"
if [ ! -r "$cfg" ]; then
    listed "$cfg not found (Debian's darknet package not installed)"
fi

# why RC LOG: a one-line reason a run failed
why() {
    if [ "$1" -gt 128 ]; then
        sig=$(kill -l "$(($1 - 128))" 2>/dev/null || echo "$(($1 - 128))")
        echo "killed by SIG$sig; last output: $(grep -v '^ *$' "$2" | tail -n 1 | cut -c1-160)"
    else
        echo "exit $1: $(grep -v '^ *$' "$2" | tail -n 1 | cut -c1-160)"
    fi
}

# run LABEL DRIVER MODE [BN]: one process; its exit status also in LABEL.rc
run() {
    label=$1 driver=$2 mode=$3
    shift 3
    start=$(date +%s.%N)
    "$driver" "$cfg" "$size" "$mode" "$out/$label" "$@" > "$out/$label.log" 2>&1
    rc=$?
    echo $rc > "$out/$label.rc"
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    {
        echo "$name $label: exit $rc in $secs s ($(grep '^seconds' "$out/$label.txt" 2>/dev/null | cut -d' ' -f2-))"
        grep -E '^amp: |iteration' "$out/$label.log" | sed "s/^/    /"
    } > "$out/$label.summary"
    return $rc
}

# The FP32 reference first: it also writes the batch-norm statistics every
# run normalises with (zoo_driver.c).
if [ "$stock" != - ]; then
    ref=stock
    run stock "$stock" fp32
    rc=$?
    cat "$out/stock.summary"
    [ $rc = 0 ] || listed "stock darknet cannot run it here: $(why $rc "$out/stock.log")"
else
    ref=fp32
    run fp32 "$fork" fp32
    rc=$?
    cat "$out/fp32.summary"
    if [ $rc != 0 ]; then
        r=$(why $rc "$out/fp32.log")
        echo "$name fail: the fork in FP32: $r" > "$out/result"
        echo "FAIL: $name: the fork in FP32: $r"
        exit 1
    fi
fi

# Both AMP runs at once, one thread each: most of a small network's time is
# single-threaded (weight initialisation, darknet's per-layer loops), so two
# processes keep both cores of a CI machine busy where one would not.
for dtype in float16 bfloat16; do
    OMP_NUM_THREADS=1 run "$dtype" "$fork" "$dtype" "$out/$ref.bn" &
done
wait
status=0
runs=
for dtype in float16 bfloat16; do
    cat "$out/$dtype.summary"
    rc=$(cat "$out/$dtype.rc")
    if [ "$rc" = 0 ]; then
        runs="$runs $out/$dtype"
    else
        r=$(why "$rc" "$out/$dtype.log")
        echo "FAIL: $name $dtype: $r"
        echo "$name fail: $dtype: $r" >> "$out/result.tmp"
        status=1
    fi
done
if [ -n "$runs" ]; then
    # shellcheck disable=SC2086
    "$compare" "$name" "$out/$ref" $runs -- "$k16" "$kbf" > "$out/compare.log" 2>&1 || status=1
    cat "$out/compare.log"
    grep '^RESULT ' "$out/compare.log" | sed 's/^RESULT //' >> "$out/result.tmp"
fi
mv "$out/result.tmp" "$out/result"
[ $status = 0 ] && echo "PASS: $name" || echo "FAIL: $name"
exit $status
