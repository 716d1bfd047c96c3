#!/bin/sh
# A non-finite loss through `darknet detector train` (float16, dynamic scale):
# DARKNET_AMP_INJECT puts a NaN into the first yolo layer's delta at step 2
# and an inf into the second's loss at step 3. Each step is skipped with the
# scale as it was, the message names the yolo layer, the iteration and the
# images (patch 0013: the one whose delta was not finite, or the batch's
# first ones), every named image is in the training list; then amp_max_skips=2
# such steps in a row stop the run with exit status 1 and the message.
# The cause: the injected losses come from valid labels and a finite input
# (the loss layer's own, said as FP32's too; the data side: loss_cause_test.c).
#   loss_paths.sh DARKNET DATA_DIR CFG OUT      (CFG: amp=1, float16, 3 iterations)
set -u
darknet=$1 data_dir=$2 cfg=$3 out=$4
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
shapes_data "$data_dir" "$out" "$out"
list=$(sed -n 's/^train *= *//p' "$data_dir/shapes.data")
yolo1=$(awk '/^\[/ { if ($0 != "[net]") n++ } /^\[yolo\]/ { print n - 1; exit }' "$cfg")
yolo2=$(awk '/^\[/ { if ($0 != "[net]") n++ } /^\[yolo\]/ { y = n - 1 } END { print y }' "$cfg")
echo "yolo layers $yolo1 and $yolo2"

DARKNET_AMP_INJECT="$yolo1:delta:nan:2;$yolo2:loss:inf:3" DARKNET_SEED=1 \
    "$darknet" detector train "$out/s.data" "$cfg" -nogpu > "$out/a.log" 2> "$out/a.err"
rc=$?
[ $rc -eq 0 ] && ok "the run went on after the skipped steps" || bad "exit $rc: $(tail -n 2 "$out/a.err")"
l2=$(grep "amp: step 2 skipped: non-finite loss in layer $yolo1 \[yolo\] at iteration 2, image " "$out/a.err")
[ -n "$l2" ] && ok "step 2: $l2" || bad "step 2 not reported as a non-finite loss with its image: $(grep 'amp: step 2' "$out/a.err")"
img=$(echo "$l2" | sed -n 's/.*, image \([^ ]*\) (.*/\1/p')
[ -n "$img" ] && grep -qxF "$img" "$list" && ok "the image named is in the training list" || bad "image '$img' is not in $list"
echo "$l2" | grep -q "(the loss layer's own, FP32 training has it too: valid labels, a finite input (largest magnitude [0-9.e+]*), a float32 loss" \
    && ok "the cause: the loss layer's own (valid labels, finite input)" || bad "step 2's cause: $l2"
l3=$(grep "amp: step 3 skipped: non-finite loss in layer $yolo2 \[yolo\] at iteration 3, batch of 8 images: " "$out/a.err")
[ -n "$l3" ] && ok "step 3: $(echo "$l3" | cut -c1-200)..." || bad "step 3 not reported: $(grep 'amp: step 3' "$out/a.err")"
n=0
for p in $(echo "$l3" | sed -n 's/.*images: \(.*\) and 5 more.*/\1/p' | tr -d ','); do
    grep -qxF "$p" "$list" && n=$((n + 1))
done
[ $n -eq 3 ] && ok "the batch's first 3 images are named, all in the training list" || bad "$n of 3 named images in the list"
# Step 1 may overflow in float16 and back off; from step 2 on the scale stays.
changed=$(awk '/amp: step 2 skipped/ { on = 1 } on && /loss scale .* -> / { print }' "$out/a.err")
s2=$(grep -o 'stays [0-9]*' "$out/a.err" | sort -u | wc -l)
[ -z "$changed" ] && [ "$s2" -eq 1 ] \
    && ok "the scale did not change over the skipped steps: $(grep -o 'stays [0-9]*' "$out/a.err" | head -n 1); progress: $(grep -o 'scale [0-9]*, [0-9]* skipped' "$out/a.log" | tr '\n' ';')" \
    || bad "the scale changed: $changed"
grep -Eq "amp: skipped: [0-9]+ for a gradient overflow, 0 for a half layer's forward overflow, 2 for a non-finite loss" "$out/a.err" \
    && ok "the summary counts them apart: $(grep 'amp: skipped:' "$out/a.err")" \
    || bad "summary: $(grep 'amp: .*skipped' "$out/a.err" | tail -n 2)"
sum=$(grep 'amp: training done:' "$out/a.err")
total=$(echo "$sum" | sed -n 's/.*done: \([0-9]*\) steps, \([0-9]*\) skipped.*/\1 \2/p')
grads=$(sed -n "s/amp: skipped: \([0-9]*\) for a gradient.*/\1/p" "$out/a.err")
[ "$total" = "3 $((grads + 2))" ] && ok "every step and every skip counted: $sum" || bad "counts: $sum (gradient overflows: $grads)"

sed 's/^\[net\]/[net]\namp_max_skips=2/' "$cfg" > "$out/max.cfg"
DARKNET_AMP_INJECT="$yolo1:delta:nan:1,2" DARKNET_SEED=1 \
    "$darknet" detector train "$out/s.data" "$out/max.cfg" -nogpu > "$out/b.log" 2> "$out/b.err"
rc=$?
msg=$(grep "amp_max_skips=2): the loss of layer $yolo1 \[yolo\] is not finite" "$out/b.err")
[ $rc -eq 1 ] && [ -n "$msg" ] && ok "amp_max_skips=2 stopped the run (exit 1): $msg" \
    || bad "amp_max_skips: exit $rc, $(tail -n 2 "$out/b.err")"

verdict "non-finite loss"
