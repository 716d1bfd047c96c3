#!/bin/sh
# DARKNET_AMP_PROFILE=1 on a network with the activation plan on (half
# storage between layers), through `darknet detector train`: training runs
# (the timers wrap the plugin's layer functions, never darknet's own, which
# would read half storage as float32: the cfg hook attaches before the
# timers are installed) and the profile is printed: time by layer type,
# memory (the process's resident memory split into code and data, the data
# the figures leave out not negative), the half layers.
#   profile.sh DARKNET DATA_DIR CFG OUT
set -u
darknet=$1 data_dir=$2 cfg=$3 out=$4
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
shapes_data "$data_dir" "$out" "$out"
sed 's/^max_batches=.*/max_batches=2/; s|^\[net\]$|[net]\namp=1\namp_dtype=bfloat16|' "$cfg" \
    > "$out/profile.cfg"
DARKNET_AMP_PROFILE=1 DARKNET_SEED=1 "$darknet" detector train "$out/s.data" "$out/profile.cfg" \
    -nogpu > "$out/run.log" 2> "$out/run.err"
rc=$?
[ $rc -eq 0 ] && ok "2 iterations of darknet detector train with DARKNET_AMP_PROFILE=1 and half activations: exit 0" \
    || bad "exit $rc: $(grep -v '^Loaded' "$out/run.err" | tail -n 2)"
grep -q 'activations: .* in bfloat16' "$out/run.err" \
    && ok "the activation plan was on: $(grep -m1 'activations:' "$out/run.err" | sed 's/^amp: *//')" \
    || bad "the activation plan was not on (nothing to test)"
n=$(grep -c '^amp: profile: layer ' "$out/run.err")
grep -q '^amp: profile: time in layers' "$out/run.err" && [ "$n" -gt 0 ] \
    && ok "profile printed: time by layer type, $n half layers" \
    || bad "no profile in the output"
# the resident memory split: code and data, and the data the figures leave
# out, which cannot be negative (a figure counted twice, or one not resident)
split=$(sed -n 's/^amp: profile: memory: the process holds \([0-9.]*\) MiB .*: \([0-9.]*\) MiB code and libraries, \([0-9.]*\) MiB data, of which the above \([0-9.]*\) and \(-*[0-9.]*\) else .*/\1 \2 \3 \4 \5/p' "$out/run.err")
echo "$split" | awk 'NF == 5 && $5 >= 0 && $2 + $3 <= $1 + 0.2 { ok = 1 } END { exit !ok }' \
    && ok "memory: holds, code, data, counted, else: $split MiB (else >= 0, code + data = held)" \
    || bad "memory split: '$split' ($(grep 'the process holds' "$out/run.err"))"
verdict "profile"
