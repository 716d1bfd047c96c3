#!/bin/sh
# amp_probe=1: on the first batch every half layer's output against darknet's
# float32 forward of the same layer on the same input, through `darknet
# detector train` (the embedded detector, float16, the oneDNN convolution
# form fixed so that runs repeat bit for bit):
# - the usual weights: every layer within the bound (a few float16 units),
#   and the probe changes nothing: the losses of 6 iterations bit for bit
#   those of a run without it;
# - layer 2's weights 1e6 times too small (scale_weights), its output deep in
#   float16's subnormals, which loses precision without any inf or NaN (the
#   loss stays finite, so nothing else finds it): layer 2 named beyond the
#   bound and put back to float32 from the next step on, shown in the table
#   at the end; with amp_fallback=0 named and kept in half; without the probe
#   nothing falls back.
#   probe.sh DARKNET SCALE_WEIGHTS DATA_DIR CFG OUT   (CFG: amp=1 float16)
set -u
darknet=$1 scale=$2 data_dir=$3 cfg=$4 out=$5
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
shapes_data "$data_dir" "$out" "$out"
sed 's/^max_batches=.*/max_batches=6/' "$cfg" > "$out/off.cfg"
sed 's/^\[net\]/[net]\namp_probe=1/' "$out/off.cfg" > "$out/probe.cfg"
sed 's/^\[net\]/[net]\namp_fallback=0/' "$out/probe.cfg" > "$out/keep.cfg"
must "$out" scale.log "$scale" "$cfg" 1 2 1 "$out/plain.weights"
must "$out" scale.log "$scale" "$cfg" 1 2 1e-6 "$out/tiny.weights"
train() { # cfg weights name
    DARKNET_AMP_CONV=direct DARKNET_SEED=1 "$darknet" detector train "$out/s.data" "$1" "$2" -nogpu \
        > "$out/$3.log" 2> "$out/$3.err" || bad "$3: exit $?: $(tail -n 1 "$out/$3.err")"
}
losses() { grep -E '^ *[0-9]+: ' "$1" | cut -d, -f1 | tr '\n' ' '; }

train "$out/probe.cfg" "$out/plain.weights" plain
train "$out/off.cfg" "$out/plain.weights" plain_off
head=$(grep -c "amp: probe (amp_probe=1): 13 half layers' outputs on the first batch against float32 on the same input, relative 2-norm difference, bound 0.0156 for float16" "$out/plain.err")
rows=$(grep -c "^amp:   layer [0-9]* \[convolutional\] [0-9.e-]*$" "$out/plain.err")
worst=$(grep -m 1 "^amp:   layer" "$out/plain.err")
[ "$head" -eq 1 ] && [ "$rows" -eq 5 ] && ! grep -q "beyond the bound\|runs in float32" "$out/plain.err" \
    && ok "usual weights: 13 layers probed, the worst within the bound: $worst" \
    || bad "usual weights: $head headers, $rows rows; $(grep -E 'probe|amp:   layer|float32' "$out/plain.err")"
a=$(losses "$out/plain.log") b=$(losses "$out/plain_off.log")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "the probe changes nothing: losses bit for bit those without it ($a)" \
    || bad "losses with the probe '$a', without '$b'"

train "$out/probe.cfg" "$out/tiny.weights" tiny
row=$(grep "^amp:   layer 2 \[convolutional\] [0-9.e-]* (beyond the bound)$" "$out/tiny.err")
fb=$(grep -c "amp: layer 2 \[convolutional\] runs in float32 from the next step on: amp_probe found its output [0-9.e-]* from float32's on the first batch (bound 0.0156)" "$out/tiny.err")
[ -n "$row" ] && [ "$fb" -eq 1 ] && grep -Eq "amp:   float32 \(fell back: amp_probe\) +1 layers: 2$" "$out/tiny.err" \
    && [ "$(grep -c 'runs in float32' "$out/tiny.err")" -eq 1 ] \
    && ok "layer 2 in float16's subnormals: named ($row), fell back, in the table at the end" \
    || bad "tiny weights: $(grep -E 'probe|amp:   layer|float32' "$out/tiny.err")"
train "$out/keep.cfg" "$out/tiny.weights" keep
grep -q "^amp:   layer 2 \[convolutional\] [0-9.e-]* (beyond the bound)$" "$out/keep.err" \
    && grep -q "amp: probe: 1 layer beyond the bound: kept in half (amp_fallback=0)" "$out/keep.err" \
    && ! grep -q "runs in float32" "$out/keep.err" \
    && ok "amp_fallback=0: named and kept in float16" \
    || bad "amp_fallback=0: $(grep -E 'probe|float32' "$out/keep.err")"
train "$out/off.cfg" "$out/tiny.weights" tiny_off
! grep -q "runs in float32\|amp: probe" "$out/tiny_off.err" \
    && ok "without the probe nothing finds layer 2: no fallback" \
    || bad "without the probe: $(grep -E 'probe|float32' "$out/tiny_off.err")"
verdict "probe"
