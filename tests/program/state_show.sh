#!/bin/sh
# `darknet amp show FILE` (patch 0021's command hook): a state file saved by
# a short float16 training run printed in words and matching its weights; the
# weights changed: "does NOT match"; a corrupt state file, a missing one and
# a wrong usage refused with exit statuses 1, 1 and 2 and a message.
#   state_show.sh DARKNET DATA_DIR CFG OUT
set -u
darknet=$1 data_dir=$2 cfg=$3 out=$4
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
shapes_data "$data_dir" "$out" "$out"
sed 's/^max_batches=.*/max_batches=2/; s|^\[net\]$|[net]\namp=1\namp_dtype=float16|' "$cfg" > "$out/show.cfg"
DARKNET_SEED=1 "$darknet" detector train "$out/s.data" "$out/show.cfg" -nogpu > "$out/train.log" 2>&1 \
    || { bad "training failed: $(tail -n 2 "$out/train.log")"; exit 1; }
w="$out/show_final.weights"
"$darknet" amp show "$w.amp" > "$out/show.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q 'half type *float16' "$out/show.txt" && grep -q 'steps *2$' "$out/show.txt" \
    && grep -q 'matches: loading these weights resumes this state' "$out/show.txt" \
    && ok "the state file in words, matching its weights: $(grep -E 'loss scale|steps ' "$out/show.txt" | tr -s ' ' | tr '\n' ';')" \
    || bad "amp show (exit $rc): $(cat "$out/show.txt")"
"$darknet" amp show "$w" > "$out/show2.txt" 2>&1 && cmp -s "$out/show.txt" "$out/show2.txt" \
    && ok "the weights file's name shows its state file the same" || bad "amp show WEIGHTS differs"
cp "$w" "$out/changed.weights" && cp "$w.amp" "$out/changed.weights.amp"
printf '\001' | dd of="$out/changed.weights" bs=1 seek=100 conv=notrunc 2>/dev/null
"$darknet" amp show "$out/changed.weights.amp" > "$out/changed.txt" 2>&1
grep -q 'does NOT match' "$out/changed.txt" && ok "changed weights: $(grep 'weights file' "$out/changed.txt" | sed 's/.*: //')" \
    || bad "changed weights not told: $(cat "$out/changed.txt")"
cp "$w.amp" "$out/corrupt.weights.amp"
printf '\001' | dd of="$out/corrupt.weights.amp" bs=1 seek=20 conv=notrunc 2>/dev/null
"$darknet" amp show "$out/corrupt.weights.amp" > "$out/corrupt.txt" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q 'corrupt.weights.amp' "$out/corrupt.txt" && ! grep -q 'loss scale' "$out/corrupt.txt" \
    && ok "a corrupt state file: exit 1, nothing printed but why: $(head -n 1 "$out/corrupt.txt")" \
    || bad "corrupt state file (exit $rc): $(cat "$out/corrupt.txt")"
"$darknet" amp show "$out/none.weights.amp" > "$out/none.txt" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q 'no such state file' "$out/none.txt" && ok "a missing one: exit 1, $(cat "$out/none.txt")" \
    || bad "missing state file (exit $rc): $(cat "$out/none.txt")"
"$darknet" amp > "$out/usage.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q 'usage:' "$out/usage.txt" && ok "usage: exit 2" || bad "usage (exit $rc)"
verdict "amp show"
