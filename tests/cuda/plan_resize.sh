#!/bin/sh
# The activation plan on GPU 0 through darknet's resizes (gpu.plan_resize):
# `darknet-amp detector train` of the embedded detector with random=1 and
# DARKNET_AMP_GPU_PLAN unset (the plan is the GPU's default), 40 iterations,
# against FP32 with the same cfg and seed. darknet resizes every 10 iterations (to 608 px this close to
# max_batches): it frees every layer's arrays, the plan's half ones
# included, and makes them again in float32; the plan then stores them
# again (patch 0015's hook), its convolutions set up for the new shape.
# Checks: AMP ran to the end with the plan on and at least 3 resizes; every
# loss finite; the mean loss of iterations 31-40 within 5% of FP32's (at a
# learning rate near 0 the loss is the forward pass's on the same weights and
# images; the CPU's plan measured 0.02%, 1026.39 against 1026.20: a half
# tensor read at the old size or in the wrong layout moves it by far more,
# or makes it NaN); the saved weights finite.
#   plan_resize.sh DARKNET WEIGHTS_VALUES DATA_DIR CFG OUT   (CFG: amp=1 float16)
set -u
darknet=$1 values=$2 data_dir=$3 cfg=$4 out=$5
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
shapes_data "$data_dir" "$out" "$out"
# burn_in=1000: the learning rate stays near 0 for these 40 iterations (the
# loss then follows the forward pass alone): trained at full rate from 128 px
# straight into 608, darknet's own FP32 run reached NaN by iteration 31 on
# the CPU (AMP's loss 4e7)
sed -e 's/^max_batches=.*/max_batches=40/' -e 's/^random=.*/random=1/' -e 's/^burn_in=.*/burn_in=1000/' \
    "$cfg" > "$out/amp.cfg"
sed 's/^amp=1$/amp=0/' "$out/amp.cfg" > "$out/fp32.cfg"
train() { # cfg name
    env -u DARKNET_AMP_GPU_PLAN DARKNET_SEED=1 "$darknet" detector train "$out/s.data" "$1" \
        > "$out/$2.log" 2> "$out/$2.err"
}
mean10() { # log: the loss column of iterations 31-40, averaged
    awk -F'[:,]' '/^ *[0-9]+: / && $1 + 0 > 30 && $1 + 0 <= 40 { s += $2; n++ }
        END { if (n == 10) printf "%.4f", s / n; else print "nan" }' "$1"
}
train "$out/fp32.cfg" fp32 || bad "FP32 run failed: $(tail -n 1 "$out/fp32.err")"
train "$out/amp.cfg" amp && ok "AMP float16 with the plan ran 40 iterations of random=1" \
    || bad "AMP float16 exited with an error: $(tail -n 3 "$out/amp.err" | tr '\n' '|')"
plan=$(grep -m 1 "activations: [0-9]* of [0-9]* layers' outputs and deltas in float16" "$out/amp.err")
[ -n "$plan" ] && ok "the plan was on: $(echo "$plan" | sed 's/^amp: *//')" \
    || bad "the plan stored nothing in half: $(grep -m 1 'activations' "$out/amp.err")"
resizes=$(grep -c "^Resizing" "$out/amp.log")
[ "$resizes" -ge 3 ] && ok "darknet resized the network $resizes times" \
    || bad "darknet resized the network $resizes times (expected at least 3)"
nonfinite=$(awk -F'[:,]' '/^ *[0-9]+: / && !($2 + 0 == $2 + 0 && $2 + 0 < 1e30) { n++ } END { print n + 0 }' "$out/amp.log")
[ "$nonfinite" = 0 ] && ok "every loss finite" || bad "$nonfinite non-finite losses"
got=$(mean10 "$out/amp.log") ref=$(mean10 "$out/fp32.log")
rel=$(echo "$got $ref" | awk '{ d = ($1 - $2) / $2; if (d < 0) d = -d; printf "%.4f", d }')
echo "$got $ref $rel" | awk '$1 == $1 + 0 && $2 == $2 + 0 && $3 < 0.05 { exit 0 } { exit 1 }' \
    && ok "mean loss of iterations 31-40: AMP $got against FP32's $ref (relative difference $rel, bound 0.05)" \
    || bad "mean loss of iterations 31-40: AMP $got against FP32's $ref (relative difference $rel, bound 0.05)"
v=$("$values" "$out/amp_final.weights" 2>&1)
case "$v" in
"values "*" nonfinite 0") ok "the final weights saved finite ($v)" ;;
*) bad "the final weights: $v" ;;
esac
verdict "the GPU's plan through darknet's resizes"
