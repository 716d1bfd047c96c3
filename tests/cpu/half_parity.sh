#!/bin/sh
# Half-precision layers (CPU emulation) against FP32 on the embedded detector:
# 1. every convolution with amp=0 and amp_dtype=float16: no half layer is
#    left, so training must be bit-for-bit FP32's (amp=0 really keeps float32);
# 2. amp=0 on layer 0 alone shows in the precision table;
# 3. float16 (dynamic scale) and bfloat16 (static scale 1) for ITERS
#    iterations, same seed and batches: the mean loss of the last 10
#    iterations within a tolerance of FP32's;
# 4. in each run (FP32 too) the loss falls: the mean of the last 10
#    iterations below half the mean of the first 10.
#   half_parity.sh DRIVER COMPARE FP32_CFG LIST OUT ITERS
set -u
driver=$1 compare=$2 cfg=$3 list=$4 out=$5 iters=$6
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
with_net() { sed "s|^\[net\]\$|[net]\n$1|" "$cfg" > "$2"; }

with_net "amp=1\namp_dtype=float16" "$out/fp16-all-off.cfg"
sed -i 's|^\[convolutional\]$|[convolutional]\namp=0|' "$out/fp16-all-off.cfg"
if COMPARE_OUT="$out/all-off" COMPARE_B_ARGS="--cfg $out/fp16-all-off.cfg" sh "$compare" \
       fp32 "$driver" fp16_all_amp0 "$driver" 0 -- --cfg "$cfg" --list "$list" --iters 10 --seed 7 \
       > "$out/all-off.txt"; then
    ok "float16 with amp=0 on every convolution: $(grep 'bit-for-bit equal' "$out/all-off.txt")"
else
    bad "float16 with amp=0 everywhere differs from FP32:"; tail -n 4 "$out/all-off.txt"
fi
nconv=$(grep -c '^\[convolutional\]$' "$cfg")
grep -q "float32 (amp=0) .*$nconv layers" "$out/all-off/fp16_all_amp0.err" \
    && ok "precision table: $(grep 'amp=0)' "$out/all-off/fp16_all_amp0.err" | sed 's/^amp: *//')" \
    || bad "precision table does not list the amp=0 layers"

with_net "amp=1\namp_dtype=float16" "$out/fp16-first-off.cfg"
sed -i '0,/^\[convolutional\]$/s//[convolutional]\namp=0/' "$out/fp16-first-off.cfg"
"$driver" --cfg "$out/fp16-first-off.cfg" --list "$list" --iters 1 > /dev/null 2> "$out/first-off.err"
grep -q "float32 (amp=0) *1 layers: 0\$" "$out/first-off.err" \
    && ok "amp=0 on layer 0 only: $(grep 'amp=0)' "$out/first-off.err" | sed 's/^amp: *//')" \
    || bad "amp=0 on layer 0 not shown: $(grep 'amp: ' "$out/first-off.err")"

# Tolerances on the mean of the last 10 losses, relative to FP32's; measured
# on this cfg (seed 7, 200 iterations, 2 threads): float16 1.5% above FP32 (8
# early skips while the scale backs off to 256), bfloat16 through oneDNN 3.8%,
# bfloat16 emulated 0.6%. Each run is deterministic for a given thread count,
# but 200 iterations of a detector are chaotic: a one-ulp difference early on
# moves the last losses by a few percent, hence 6%. On shapes-v4-tiny (100
# iterations): float16 3.8%, bfloat16 0.1%, bfloat16 emulated 0.4%. A short
# run whose loss still falls steeply (shapes-v4, 40 iterations) gives
# PARITY_TOL: there float16 is the 7 steps it skipped behind (16% measured).
tol=${PARITY_TOL:-0.06}
run() { # name cfg [env...]
    name=$1 c=$2
    shift 2
    env "$@" "$driver" --cfg "$c" --list "$list" --iters "$iters" --seed 7 --save "$out/$name.weights" \
        > "$out/$name.log" 2> "$out/$name.err" || bad "$name run failed: $(tail -n 2 "$out/$name.err")"
}
mean10() { grep '^iter' "$1" | tail -n 10 | awk '{ s += $4 } END { printf "%.6f", s / NR }'; }
first10() { grep '^iter' "$1" | head -n 10 | awk '{ s += $4 } END { printf "%.6f", s / NR }'; }
run fp32 "$cfg"
with_net "amp=1\namp_dtype=float16" "$out/fp16.cfg"
with_net "amp=1\namp_dtype=bfloat16" "$out/bf16.cfg"
run float16 "$out/fp16.cfg"
# bfloat16 twice: through oneDNN where the CPU has it (the default), and the
# emulation, which a CPU without oneDNN's bfloat16 kernels runs.
run bfloat16 "$out/bf16.cfg"
run bfloat16-emulated "$out/bf16.cfg" DARKNET_AMP_CPU=emulate
grep -E '^amp: +bfloat16 ' "$out/bfloat16.err" | sed 's/^amp: */note: default bfloat16 run: /'
ref=$(mean10 "$out/fp32.log")
for dt in float16:$tol bfloat16:$tol bfloat16-emulated:$tol; do
    name=${dt%%:*} tol=${dt#*:}
    m=$(mean10 "$out/$name.log")
    last=$(grep '^iter' "$out/$name.log" | tail -n 1)
    rel=$(awk -v a="$m" -v b="$ref" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; printf "%.4f", d }')
    msg="$name: mean loss of the last 10 of $iters iterations $m vs FP32 $ref (relative difference $rel, tolerance $tol); last line: $last"
    awk -v r="$rel" -v t="$tol" 'BEGIN { exit !(r <= t) }' && ok "$msg" || bad "$msg"
done
for name in fp32 float16 bfloat16 bfloat16-emulated; do
    a=$(first10 "$out/$name.log") b=$(mean10 "$out/$name.log")
    msg="$name: the loss falls: mean of the first 10 iterations $a, of the last 10 $b (must be below half)"
    awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a / 2) }' && ok "$msg" || bad "$msg"
done
verdict "half parity"
