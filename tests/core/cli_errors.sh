#!/bin/sh
# `darknet detector train` with AMP, through the real program:
# 1. every AMP cfg key with a bad value is refused before any training, with
#    the cfg file, section, key, value and valid range in the message;
# 2. the progress line shows the scale and skipped steps, a skipped step names
#    the layer, and amp_max_skips consecutive skips stop training with an
#    error naming the first non-finite layer; a summary ends a finished run.
#   cli_errors.sh DARKNET DATA_DIR CFG OUT   (CFG: the 4-iteration seed cfg)
set -u
darknet=$1 data_dir=$2 cfg=$3 out=$4
rm -rf "$out" && mkdir -p "$out/backup"
sed "s|^backup *=.*|backup = $out/backup|" "$data_dir/shapes.data" > "$out/shapes.data"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
with_net_key() { sed "s|^\[net\]\$|[net]\n$1|" "$cfg" > "$2"; }
train() { # cfg name
    DARKNET_SEED=1 "$darknet" detector train "$out/shapes.data" "$1" -nogpu > "$out/$2.log" 2> "$out/$2.err"
}

n=0
while read -r kv; do
    [ -n "$kv" ] || continue
    n=$((n + 1))
    c="$out/bad$n.cfg"
    with_net_key "$kv" "$c"
    key=${kv%%=*}
    if train "$c" bad$n; then
        bad "$kv accepted"; continue
    fi
    msg=$(grep -F "$c" "$out/bad$n.err" | head -n 1)
    if [ -z "$msg" ] || ! echo "$msg" | grep -qF "[net]" || ! echo "$msg" | grep -qF "$kv"; then
        bad "$kv: message lacks file, section or key=value: '$(tail -n 1 "$out/bad$n.err")'"
    elif grep -qE '^[0-9]+: |^Loaded' "$out/bad$n.log" || [ -n "$(ls "$out/backup")" ]; then
        bad "$kv: training started"
    else
        ok "$kv -> $msg"
    fi
done <<'KEYS'
amp=2
amp_dtype=float8
amp_dtype=1
loss_scale=0
loss_scale=-4
loss_scale=abc
amp_init_scale=nan
amp_init_scale=1e39
amp_growth_factor=1
amp_growth_factor=two
amp_backoff_factor=1
amp_backoff_factor=0
amp_growth_interval=0
amp_growth_interval=1.5
amp_hysteresis=0
amp_min_scale=0
amp_max_scale=0.5
amp_max_skips=-1
amp_max_skips=x
amp_growth_intervall=10
KEYS

# A layer's amp key.
sed '0,/^\[convolutional\]$/s//[convolutional]\namp=2/' "$cfg" > "$out/badlayer.cfg"
if train "$out/badlayer.cfg" badlayer; then bad "layer amp=2 accepted"
elif grep -q "layer 0 \[convolutional\] amp=2" "$out/badlayer.err"; then
    ok "layer amp=2 -> $(grep -F 'amp=2' "$out/badlayer.err" | head -n 1)"
else bad "layer amp=2: unclear message: $(tail -n 1 "$out/badlayer.err")"; fi

# Logging and the skip limit: NaN in layer 0's weight gradient at steps 2 and 3.
with_net_key "amp=1\namp_dtype=float32\namp_max_skips=2" "$out/skips.cfg"
DARKNET_AMP_INJECT="0:weights:nan:2,3" train "$out/skips.cfg" skips
rc=$?
grep -E '^1: .*, scale 65536, 0 skipped$' "$out/skips.log" > /dev/null \
    && ok "progress line: $(grep -E '^1: ' "$out/skips.log")" || bad "progress line lacks scale/skips: $(grep -E '^1: ' "$out/skips.log")"
grep -q "amp: step 2 skipped: non-finite gradient, first in layer 0 \[convolutional\] weights" "$out/skips.err" \
    && ok "skip logged: $(grep 'step 2 skipped' "$out/skips.err")" || bad "skip not logged with its layer"
grep -E '^2: .*, scale 32768, 1 skipped$' "$out/skips.log" > /dev/null \
    && ok "after the skip: $(grep -E '^2: ' "$out/skips.log")" || bad "line 2: $(grep -E '^2: ' "$out/skips.log")"
if [ $rc -ne 0 ] && grep -q "2 consecutive steps skipped (amp_max_skips=2).*first in layer 0 \[convolutional\] weights" "$out/skips.err" \
   && ! grep -qE '^4: ' "$out/skips.log"; then
    ok "stopped at the skip limit (exit $rc): $(grep 'consecutive steps skipped' "$out/skips.err" | head -n 1)"
else
    bad "skip limit: exit $rc, $(tail -n 1 "$out/skips.err")"
fi

# A clean AMP run ends with the summary.
with_net_key "amp=1\namp_dtype=float32" "$out/clean.cfg"
if train "$out/clean.cfg" clean && grep -q "amp: training done: 4 steps, 0 skipped (0.00%), final loss scale 65536" "$out/clean.err"; then
    ok "summary: $(grep 'training done' "$out/clean.err")"
else bad "no summary at the end of training: $(tail -n 2 "$out/clean.err")"; fi

[ $fails -eq 0 ] && echo "PASS: $n bad [net] values, a bad layer value, logging and the skip limit" \
    || { echo "FAIL: $fails failed checks"; exit 1; }
