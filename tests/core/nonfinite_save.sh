#!/bin/sh
# A weights file saved with non-finite values is said, by layer and array,
# and never replaces a finite -map best (docs/design.md, "A weights file with
# non-finite values"). The starting weights of the second run hold a NaN in
# each of layer 0's 8 batch-norm rolling means (scale_weights ... nan
# rolling_mean): training keeps it (0.99 NaN + 0.01 x is NaN) while its loss,
# computed with the batch's own statistics, stays finite, so every save
# carries it; what a forward overflow's statistics left before skipped
# steps restored them, in a file that loads and predicts nothing.
# - run 1, finite weights, -map every 10: a best weights file is kept;
# - run 2, the NaN weights, the same cfg (the same best file), -map every 10:
#   each save says "holds 8 non-finite values ... layer 0 [convolutional]
#   rolling_mean (8 of 8)"; -map says "not evaluated" and leaves the best
#   file byte for byte as run 1 kept it; the summary counts the file; `amp
#   show` says "8 of N NOT finite" (N and 8 as weights_values reads them);
# - the same NaN weights with AMP off: the save is said all the same.
#   nonfinite_save.sh DARKNET SCALE_WEIGHTS WEIGHTS_VALUES DATA_DIR CFG OUT   (CFG: amp=1)
set -u
darknet=$1 scale=$2 values=$3 data_dir=$4 cfg=$5 out=$6
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
shapes_data "$data_dir" "$out" "$out"
sed 's/^max_batches=.*/max_batches=20/' "$cfg" > "$out/run.cfg"
sed 's/^amp=1$/amp=0/' "$out/run.cfg" > "$out/off.cfg"
must "$out" scale.log "$scale" "$cfg" 1 0 1 "$out/plain.weights"
must "$out" scale.log "$scale" "$cfg" 1 0 nan "$out/nan.weights" rolling_mean
train() { # cfg weights name
    DARKNET_SEED=1 "$darknet" detector train "$out/s.data" "$1" "$2" -nogpu -map_every 10 > "$out/$3.log" 2> "$out/$3.err"
}
train "$out/run.cfg" "$out/plain.weights" first || bad "run 1 failed: $(tail -n 1 "$out/first.err")"
best="$out/run_best.weights"
if [ -f "$best" ] && "$values" "$best" | grep -q ' nonfinite 0$'; then
    cp "$best" "$out/best.copy"
    ok "run 1 kept a finite best: $(grep '^map:' "$out/first.log" | head -n 1 | cut -c1-80)..."
else
    bad "run 1 kept no finite $best"
fi
train "$out/run.cfg" "$out/nan.weights" second || bad "run 2 failed: $(tail -n 1 "$out/second.err")"
read_back=$("$values" "$out/run_final.weights")
n=$(echo "$read_back" | sed -n 's/^values \([0-9]*\) nonfinite 8$/\1/p')
said=$(grep "amp: warning: $out/run_final.weights holds 8 non-finite values (of $n): layer 0 \[convolutional\] rolling_mean (8 of 8); these weights cannot predict" "$out/second.err")
[ -n "$n" ] && [ -n "$said" ] \
    && ok "the save said by layer and array: $(echo "$said" | cut -c1-200)... (read back: $read_back)" \
    || bad "the save of run 2 (read back: $read_back): $(grep 'amp: warning' "$out/second.err" | head -n 2)"
nev=$(grep -c "^map: iteration [12]0: not evaluated: the weights hold 8 non-finite values (layer 0 \[convolutional\] rolling_mean (8 of 8)); $best is not replaced" "$out/second.log")
[ "$nev" -eq 2 ] && cmp -s "$best" "$out/best.copy" \
    && ok "-map: both evaluations not made, the best weights byte for byte run 1's" \
    || bad "-map: $nev 'not evaluated' lines; best $(cmp "$best" "$out/best.copy" 2>&1 || true); $(grep '^map:' "$out/second.log" | head -n 2)"
grep -q "amp: warning: 1 weights file was saved with non-finite values in this run, the last $out/run_final.weights, 8 values: layer 0 \[convolutional\] rolling_mean (8 of 8)" "$out/second.err" \
    && ok "the summary counts it: $(grep 'weights file was saved' "$out/second.err" | cut -c1-120)..." \
    || bad "the summary: $(grep -E 'amp: (warning: [0-9]|training done)' "$out/second.err")"
"$darknet" amp show "$out/run_final.weights" > "$out/show.txt" 2>&1
grep -q "weights values *8 of $n NOT finite" "$out/show.txt" \
    && ok "amp show: $(grep 'weights values' "$out/show.txt" | tr -s ' ')" \
    || bad "amp show: $(grep -E 'weights' "$out/show.txt")"
DARKNET_SEED=1 "$darknet" detector train "$out/s.data" "$out/off.cfg" "$out/nan.weights" -nogpu > "$out/off.log" 2> "$out/off.err" \
    || bad "AMP off failed: $(tail -n 1 "$out/off.err")"
grep -q "amp: warning: $out/off_final.weights holds 8 non-finite values (of $n): layer 0 \[convolutional\] rolling_mean (8 of 8)" "$out/off.err" \
    && ! grep -q "amp: training done" "$out/off.err" \
    && ok "AMP off: the save said all the same (no AMP summary)" \
    || bad "AMP off: $(grep 'amp:' "$out/off.err" | head -n 3)"
verdict "non-finite saves"
