#!/bin/sh
# A half layer that overflows float16 in its forward pass, through `darknet
# detector train` (the embedded detector, float16, dynamic scale): starting
# weights whose layer 2 is 1e5 times too large (scale_weights), as a large
# learning rate or imported weights leave them. FP32 trains from them.
# - amp_fallback (the default): step 1 is skipped and named for what it is
#   (layer 2, the forward pass, its largest finite magnitude against
#   float16's 65504, not a data problem), layer 2 runs in float32 from step 2
#   on (one line, and the precision table at the end), every skip is counted
#   (the summary's total matches the progress line, split by cause), and the
#   loss of the last 10 iterations is finite and within 1.5x FP32's;
# - amp_fallback=0 amp_max_skips=3: the same diagnosis, no fallback, and the
#   stop after 3 such steps (exit 1) with what to do;
# - the same weights and cfg without the large layer (the usual float16
#   start, whose first steps overflow in the backward pass while the scale
#   backs off): no fallback.
# - the gradient rule: layer 2's weight gradient made infinite
#   (DARKNET_AMP_INJECT) at steps 2-4 in bfloat16, whose static scale of 1 is
#   the minimum: after the third such skip in a row layer 2 falls back; with
#   amp_fallback_after=4, three are not enough.
# - a resume from the first run's final weights and their state file (version
#   3): layer 2 runs in float32 from the first step (said once, in the table
#   at the end as an earlier run's), no step overflows, the skip counts go on
#   from the saved ones; with amp_fallback=0 the resume says layer 2 runs in
#   float16 again, and its forward pass overflows again at iteration 31.
# - what each run saved: every value of every weights file finite (read back
#   by weights_values, the tests' own reader: the skipped steps' forward
#   passes ran the batch-norm statistics on inf and NaN, and the skips must
#   have put them back), and `amp show` counting the steps and skips as the
#   run's summary did, for every cause of a skip (a forward overflow with and
#   without fallback, gradient overflows, a non-finite loss);
# - end to end: 200 iterations from the large weights with -map every 100,
#   AMP (which falls back) and FP32: AMP's evaluations happen and find
#   objects (mAP@0.5 above 0, at least a quarter of FP32's), its best weights
#   are kept and finite, and `detector test` on three training images finds
#   boxes above 0.01 on each, as FP32's weights do. Before the skips restored
#   the statistics, the weights such a run saved held NaN in every layer from
#   the overflowing one on, and predicted nothing (mAP 0, no box).
# With FALLBACK_GPU=1 (gpu.fallback) the runs train on GPU 0, and only the
# first scenario (the forward rule, the counts, the loss against FP32's, the
# saved weights, the end to end runs) is checked; the host learns a GPU
# step's outcome during the next step (after its forward), so there the
# second step overflows and is skipped too.
#   fallback.sh DARKNET SCALE_WEIGHTS WEIGHTS_VALUES DATA_DIR CFG OUT   (CFG: amp=1 float16)
set -u
darknet=$1 scale=$2 values=$3 data_dir=$4 cfg=$5 out=$6
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
shapes_data "$data_dir" "$out" "$out"
sed 's/^max_batches=.*/max_batches=30/' "$cfg" > "$out/amp.cfg"
sed 's/^amp=1$/amp=0/' "$out/amp.cfg" > "$out/fp32.cfg"
must "$out" scale.log "$scale" "$cfg" 1 2 1e5 "$out/big.weights"
must "$out" scale.log "$scale" "$cfg" 1 2 1 "$out/plain.weights"
gpu=${FALLBACK_GPU:-0}
fwd=1 # steps skipped for the forward overflow before the layer is float32
[ "$gpu" = 1 ] && fwd=2
nogpu=-nogpu
[ "$gpu" = 1 ] && nogpu=""
train() { # cfg weights name [options]
    c=$1 w=$2 n=$3
    shift 3
    # shellcheck disable=SC2086
    DARKNET_SEED=1 "$darknet" detector train "$out/s.data" "$c" "$w" $nogpu "$@" > "$out/$n.log" 2> "$out/$n.err"
}
# every value of a weights file finite, read back value by value
finite() { # file what
    v=$("$values" "$1" 2>&1)
    case "$v" in
        "values "*" nonfinite 0") ok "$2: $(basename "$1") saved finite ($v)" ;;
        *) bad "$2: $(basename "$1"): $v" ;;
    esac
}
# `amp show` of a run's final weights counts its steps and skips as its summary did
counts() { # name [cfg name, when not the run's]
    sum=$(sed -n 's/^amp: training done: \([0-9]*\) steps, \([0-9]*\) skipped.*/\1 \2/p' "$out/$1.err")
    show=$("$darknet" amp show "$out/${2:-$1}_final.weights" | awk '/^  steps /{s = $2} /^  skipped /{k = $2; sub(":", "", k)} END {print s, k}')
    [ -n "$sum" ] && [ "$sum" = "$show" ] \
        && ok "$1: amp show counts the steps and skips as the summary did ($show)" \
        || bad "$1: the summary says steps/skipped '$sum', amp show '$show'"
}
# the loss column of the progress lines of 10 iterations from the (N+1)-th, averaged
mean10() { # log N
    awk -F'[:,]' -v a="$2" '/^ *[0-9]+: / && $1 + 0 > a && $1 + 0 <= a + 10 { s += $2; n++ }
        END { if (n == 10) printf "%.4f", s / n; else print "nan" }' "$1"
}

train "$out/fp32.cfg" "$out/big.weights" fp32 || bad "FP32 run failed: $(tail -n 1 "$out/fp32.err")"

train "$out/amp.cfg" "$out/big.weights" amp
rc=$?
[ $rc -eq 0 ] && ok "AMP float16 ran to the end" || bad "AMP float16 exited $rc: $(tail -n 2 "$out/amp.err")"
l1=$(grep "amp: step 1 skipped: layer 2 \[convolutional\] overflowed float16 in its forward pass" "$out/amp.err")
echo "$l1" | grep -q "largest finite magnitude [0-9.e+]*, float16's largest 65504" \
    && echo "$l1" | grep -q "not a data problem" \
    && ok "step 1 named for what it is: $(echo "$l1" | cut -c1-300)..." \
    || bad "step 1: $(grep 'amp: step 1' "$out/amp.err")"
grep -q "non-finite loss in layer" "$out/amp.err" && bad "a step called a data problem: $(grep -m1 'non-finite loss in layer' "$out/amp.err")" \
    || ok "no step called a data or model problem"
fb=$(grep -c "amp: layer 2 \[convolutional\] runs in float32 from the next step on: its forward pass overflowed float16" "$out/amp.err")
[ "$fb" -eq 1 ] && ok "layer 2 fell back once: $(grep 'runs in float32' "$out/amp.err")" || bad "$fb fallback lines"
grep -Eq "amp:   float32 \(fell back: forward overflow\) +1 layers: 2$" "$out/amp.err" \
    && ok "the precision table at the end shows it: $(grep 'fell back: forward' "$out/amp.err")" \
    || bad "no fell-back row in the end table: $(grep -A6 'fell back to float32' "$out/amp.err")"
last=$(grep -E '^ *30: ' "$out/amp.log" | sed -n 's/.*, \([0-9]*\) skipped$/\1/p')
sum=$(grep 'amp: training done:' "$out/amp.err")
split=$(grep 'amp: skipped:' "$out/amp.err")
grads=$(echo "$split" | sed -n 's/amp: skipped: \([0-9]*\) for a gradient.*/\1/p')
echo "$sum" | grep -q "done: 30 steps, $last skipped" && [ "$last" = "$((grads + fwd))" ] \
    && echo "$split" | grep -q ", $fwd for a half layer's forward overflow, 0 for a non-finite loss" \
    && ok "every skip counted, by cause: $sum; $split; progress: $last skipped" \
    || bad "counts: '$sum' '$split', progress line $last skipped"
# AMP's last 10 iterations took their steps $last fewer than FP32's did by then
got=$(mean10 "$out/amp.log" 20) ref=$(mean10 "$out/fp32.log" $((20 - last)))
echo "$got $ref" | awk '$1 == $1 + 0 && $2 == $2 + 0 && $1 < 1.5 * $2 { exit 0 } { exit 1 }' \
    && ok "mean loss of iterations 21-30: AMP $got against FP32's $ref after as many steps taken (iterations $((21 - last))-$((30 - last)); bound 1.5x)" \
    || bad "mean loss of iterations 21-30: AMP $got against FP32's $ref after as many steps taken (iterations $((21 - last))-$((30 - last)); bound 1.5x)"

finite "$out/amp_final.weights" "the fallback run (forward overflow, then gradient overflows)"
counts amp

# End to end: the weights a fallback run keeps predict, as FP32's from the same start do.
sed 's/^max_batches=.*/max_batches=200/' "$out/amp.cfg" > "$out/e2e.cfg"
sed 's/^max_batches=.*/max_batches=200/' "$out/fp32.cfg" > "$out/e2e_fp32.cfg"
train "$out/e2e.cfg" "$out/big.weights" e2e -map_every 100 || bad "AMP 200 iterations: $(tail -n 1 "$out/e2e.err")"
train "$out/e2e_fp32.cfg" "$out/big.weights" e2e_fp32 -map_every 100 || bad "FP32 200 iterations: $(tail -n 1 "$out/e2e_fp32.err")"
map200() { sed -n 's/^map: iteration 200: mAP@0.5 \([0-9.]*\)%.*/\1/p' "$out/$1.log"; }
m=$(map200 e2e) mf=$(map200 e2e_fp32)
grep -q "runs in float32 from the next step on" "$out/e2e.err" && ! grep -q "not evaluated" "$out/e2e.log" \
    && echo "${m:-x} ${mf:-x}" | awk '$1 == $1 + 0 && $2 == $2 + 0 && $1 > 0 && $1 >= 0.25 * $2 { exit 0 } { exit 1 }' \
    && ok "-map after the fallback: mAP@0.5 at iteration 200 ${m}% against FP32's ${mf}% from the same weights (above 0, at least a quarter of FP32's)" \
    || bad "-map after the fallback: AMP '${m}' against FP32 '${mf}'; $(grep '^map:' "$out/e2e.log" | tr '\n' ' ')"
finite "$out/e2e_final.weights" "the 200-iteration fallback run"
[ -f "$out/e2e_best.weights" ] && finite "$out/e2e_best.weights" "its -map best" || bad "no e2e_best.weights"
boxes() { # cfg weights image: the boxes detector test finds above 0.01 (its output in $out/test.txt)
    # shellcheck disable=SC2086
    "$darknet" detector test "$out/s.data" "$1" "$2" "$3" -thresh 0.01 $nogpu > "$out/test.txt" 2> "$out/test.err"
    grep -c '%$' "$out/test.txt"
}
found="" found_fp32="" least=""
# detector test draws its labels with darknet's alphabet, which Debian's
# darknet package installs (scripts/install-deps); without it the command
# stops before predicting, so the check says so instead of failing.
labels=/usr/share/darknet/data/labels/32_0.png
[ -f "$labels" ] || echo "skip: detector test not run: $labels is missing (Debian's darknet package, scripts/install-deps, installs darknet's label images)"
[ -f "$labels" ] && for img in $(head -n 3 "$data_dir/train.txt"); do
    a=$(boxes "$out/fp32.cfg" "$out/e2e_final.weights" "$img") f=$(boxes "$out/fp32.cfg" "$out/e2e_fp32_final.weights" "$img")
    found="$found $a" found_fp32="$found_fp32 $f"
    [ "${a:-0}" -ge 1 ] || least=no
done
[ ! -f "$labels" ] || { [ -z "$least" ] && ok "detector test -thresh 0.01 on 3 training images: boxes$found with the fallback run's weights,$found_fp32 with FP32's" \
    || bad "detector test -thresh 0.01 on 3 training images: boxes$found with the fallback run's weights (FP32's:$found_fp32); the last one said: $(tail -n 4 "$out/test.txt" | tr '\n' '|') $(tail -n 6 "$out/test.err" | tr '\n' '|')"; }

if [ "$gpu" = 1 ]; then
    [ $fails -eq 0 ] && echo "PASS: fallback on GPU 0" || { echo "FAIL: $fails failed checks"; exit 1; }
    exit 0
fi

# resume: 10 more iterations from the first run's final weights and state
sed 's/^max_batches=.*/max_batches=40/' "$out/amp.cfg" > "$out/amp2.cfg"
cp "$out/amp_final.weights" "$out/resume.weights" && cp "$out/amp_final.weights.amp" "$out/resume.weights.amp" \
    || bad "the first run saved no amp_final.weights and .amp"
train "$out/amp2.cfg" "$out/resume.weights" resume
rc=$?
said=$(grep -c "amp: 1 layer runs in float32 as in the run that saved $out/resume.weights.amp (amp_fallback)" "$out/resume.err")
over=$(grep -c "overflowed float16 in its forward pass" "$out/resume.err")
rsplit=$(grep 'amp: skipped:' "$out/resume.err")
[ $rc -eq 0 ] && [ "$said" -eq 1 ] && [ "$over" -eq 0 ] && ! grep -q "runs in float32 from the next step on" "$out/resume.err" \
    && grep -Eq "amp:   float32 \(fell back in an earlier run: forward overflow\) +1 layers: 2$" "$out/resume.err" \
    && echo "$rsplit" | grep -q ", 1 for a half layer's forward overflow," \
    && ok "resumed (iterations 31-40): layer 2 in float32 from the first step, no overflow, counts go on ($rsplit)" \
    || bad "resume: exit $rc, $said resume lines, $over overflows; $(grep -E 'float32|skipped:' "$out/resume.err" | head -n 5)"
sed 's/^\[net\]/[net]\namp_fallback=0\namp_max_skips=3/' "$out/amp2.cfg" > "$out/off2.cfg"
cp "$out/amp_final.weights.amp" "$out/resume.weights.amp"
train "$out/off2.cfg" "$out/resume.weights" resume_off
grep -q "amp: $out/resume.weights.amp lists 1 layer put back to float32 in an earlier run; amp_fallback=0: it runs in float16 again" "$out/resume_off.err" \
    && grep -Eq "amp: step [0-9]+ skipped: layer 2 \[convolutional\] overflowed float16 in its forward pass .* at iteration 31," "$out/resume_off.err" \
    && ok "resumed with amp_fallback=0: layer 2 in float16 again, and it overflows again at iteration 31" \
    || bad "resume with amp_fallback=0: $(grep -E 'amp_fallback=0|iteration 31' "$out/resume_off.err" | head -n 3)"

sed 's/^\[net\]/[net]\namp_fallback=0\namp_max_skips=3/' "$out/amp.cfg" > "$out/off.cfg"
train "$out/off.cfg" "$out/big.weights" off
rc=$?
stop=$(grep "amp: 3 consecutive steps skipped (amp_max_skips=3): layer 2 \[convolutional\] overflowed float16 in its forward pass" "$out/off.err")
[ $rc -eq 1 ] && echo "$stop" | grep -q "amp=0 in its section" && ! grep -q "runs in float32" "$out/off.err" \
    && ok "amp_fallback=0: no fallback, stopped at amp_max_skips (exit 1): $(echo "$stop" | cut -c1-240)..." \
    || bad "amp_fallback=0: exit $rc, $(tail -n 2 "$out/off.err")"

sed 's/^max_batches=.*/max_batches=12/' "$out/amp.cfg" > "$out/plain.cfg"
train "$out/plain.cfg" "$out/plain.weights" plain
g=$(sed -n 's/amp: training done: 12 steps, \([0-9]*\) skipped.*/\1/p' "$out/plain.err")
[ "${g:-0}" -gt 0 ] && ! grep -q "runs in float32" "$out/plain.err" \
    && ok "the usual float16 start: $g steps skipped for a backward overflow while the scale backed off, no fallback" \
    || bad "plain weights: $(grep -E 'runs in float32|amp: skipped' "$out/plain.err")"
# more than half of the 12 steps skipped: the line at the end says why, and
# that it is the scale's start, not a layer to take out of half
most=$(grep "amp: most steps were skipped" "$out/plain.err")
if [ "$((2 * ${g:-0}))" -gt 12 ]; then
    echo "$most" | grep -Eq "^amp: most steps were skipped \($g of 12\), most for a gradient overflow while the dynamic loss scale backed off from amp_init_scale 65536 to [0-9]+: the first steps of a float16 run find the scale" \
        && ok "most steps skipped, said at the end as the scale's start: $(echo "$most" | cut -c1-160)..." \
        || bad "the most-skipped line for the usual start: '$most'"
else
    [ -z "$most" ] && ok "$g of 12 skipped: no most-skipped line" || bad "$g of 12 skipped, yet: '$most'"
fi
# every step skipped for the forward overflow (amp_fallback=0, no limit)
sed 's/^\[net\]/[net]\namp_fallback=0/; s/^max_batches=.*/max_batches=4/' "$out/amp.cfg" > "$out/keep.cfg"
train "$out/keep.cfg" "$out/big.weights" keep
finite "$out/keep_final.weights" "amp_fallback=0, every step skipped for the forward overflow"
counts keep
grep -q "amp: most steps were skipped (4 of 4), most for a half layer's forward overflow" "$out/keep.err" \
    && grep -q "run that layer in float32 (amp=0 in its section of the cfg)" "$out/keep.err" \
    && ok "amp_fallback=0, 4 steps: all skipped for the forward overflow, said at the end with what to do" \
    || bad "amp_fallback=0, 4 steps: $(grep -E 'most steps|training done' "$out/keep.err")"
finite "$out/plain_final.weights" "the usual float16 start (gradient overflows)"
counts plain
sed 's/^amp_dtype=float16$/amp_dtype=bfloat16/' "$out/plain.cfg" > "$out/bf16.cfg"
DARKNET_AMP_INJECT="2:weights:inf:2,3,4" train "$out/bf16.cfg" "$out/plain.weights" grad
line=$(grep "amp: layer 2 \[convolutional\] runs in float32 from the next step on: its gradients were the first not finite in 3 steps in a row skipped at the minimum loss scale, 1" "$out/grad.err")
skips=$(grep -c "amp: step [234] skipped: non-finite gradient, first in layer 2 \[convolutional\] weights" "$out/grad.err")
[ -n "$line" ] && [ "$skips" -eq 3 ] && grep -Eq "amp:   float32 \(fell back: gradient overflow\) +1 layers: 2$" "$out/grad.err" \
    && ok "gradient rule, bfloat16 at its static scale 1: $line" \
    || bad "gradient rule: $skips skips; $(grep -E 'runs in float32|fell back' "$out/grad.err")"
sed 's/^\[net\]/[net]\namp_fallback_after=4/' "$out/bf16.cfg" > "$out/after4.cfg"
DARKNET_AMP_INJECT="2:weights:inf:2,3,4" train "$out/after4.cfg" "$out/plain.weights" after4
grep -q "runs in float32" "$out/after4.err" && bad "amp_fallback_after=4: fell back after 3: $(grep 'runs in float32' "$out/after4.err")" \
    || ok "amp_fallback_after=4: 3 such skips in a row leave layer 2 in bfloat16"
finite "$out/bf16_final.weights" "the gradient rule's run"
counts grad bf16
# a non-finite loss (the yolo layer's, injected at steps 3 and 5): skipped with the scale left alone
sed 's/^max_batches=.*/max_batches=8/' "$out/bf16.cfg" > "$out/loss.cfg"
DARKNET_AMP_INJECT="16:loss:nan:3,5" train "$out/loss.cfg" "$out/plain.weights" loss
grep -q "amp: skipped: 0 for a gradient overflow, 0 for a half layer's forward overflow, 2 for a non-finite loss" "$out/loss.err" \
    && ok "a non-finite loss at steps 3 and 5: $(grep 'amp: skipped:' "$out/loss.err")" \
    || bad "a non-finite loss at steps 3 and 5: $(grep -E 'amp: (skipped|training done)' "$out/loss.err")"
finite "$out/loss_final.weights" "the non-finite loss run"
counts loss
finite "$out/amp2_final.weights" "the resumed run"
counts resume amp2
verdict "fallback"
