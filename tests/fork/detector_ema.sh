#!/bin/sh
# `darknet-amp detector train` with [net] ema_alpha (patch 0035), AMP on:
# max_batches=4, so the average starts at iteration 2 (max_batches / 2) and
# is never applied (that is at max_batches - 1000). Checks that the start is
# said; that BASE_ema.weights is written, with BASE_final.weights' size, and
# differs from it (iteration 2's weights, not 4's); and that the average
# changes nothing else: the same run without the key saves the same final
# weights, byte for byte. Then a resume past the start goes on from the
# average saved beside the weights, and says it starts again without it.
#   detector_ema.sh DARKNET DATA_DIR CFG OUT
set -eu
darknet=$1 data_dir=$2 cfg=$3 out=$4
rm -rf "$out"
mkdir -p "$out"

train() { # name ema_alpha-line
    mkdir -p "$out/$1"
    sed "s|^backup *=.*|backup = $out/$1|" "$data_dir/shapes.data" > "$out/$1.data"
    sed -e "s/^max_batches=.*/max_batches=4/" -e "s/^\[net\]/[net]\n$2/" "$cfg" > "$out/$1.cfg"
    if ! DARKNET_SEED=7 "$darknet" detector train "$out/$1.data" "$out/$1.cfg" -nogpu \
            -amp bfloat16 > "$out/$1.log" 2> "$out/$1.err"; then
        echo "FAIL: run $1 exited with an error:"; tail -n 20 "$out/$1.err"; exit 1
    fi
}
train ema "ema_alpha=0.5"
train plain ""
final=$(ls "$out/ema"/*_final.weights)
ema=${final%_final.weights}_ema.weights
grep -h "EMA of the weights started at iteration 2 " "$out/ema.log" "$out/ema.err" ||
    { echo "FAIL: no line says the average started at iteration 2"; exit 1; }
[ -f "$ema" ] || { echo "FAIL: no $ema"; ls "$out/ema"; exit 1; }
fs=$(wc -c < "$final") es=$(wc -c < "$ema")
[ "$fs" = "$es" ] || { echo "FAIL: $ema has $es bytes, $final $fs"; exit 1; }
echo "ok: $ema written, $es bytes, as $final"
if cmp -s "$ema" "$final"; then echo "FAIL: the average is the final weights"; exit 1; fi
echo "ok: the average differs from the final weights ($(cmp -l "$ema" "$final" | wc -l) bytes)"
plain=$(ls "$out/plain"/*_final.weights)
cmp "$final" "$plain" || { echo "FAIL: ema_alpha changed the training's final weights"; exit 1; }
echo "ok: without ema_alpha the final weights are the same, byte for byte"
[ ! -e "${plain%_final.weights}_ema.weights" ] || { echo "FAIL: an _ema.weights without ema_alpha"; exit 1; }

# Resumed from the final weights with max_batches=6 (the average from
# iteration 3): with the average saved beside them it goes on from it; with
# it removed it starts again, and the two averages differ.
resume() { # name keep-ema
    mkdir -p "$out/$1/cfg"
    cp "$out/ema"/ema_final.weights* "$out/$1/"
    [ "$2" = 0 ] || cp "$out/ema/ema_ema.weights" "$out/$1/"
    sed "s|^backup *=.*|backup = $out/$1|" "$data_dir/shapes.data" > "$out/$1.data"
    sed "s/^max_batches=.*/max_batches=6/" "$out/ema.cfg" > "$out/$1/cfg/ema.cfg"
    if ! DARKNET_SEED=7 "$darknet" detector train "$out/$1.data" "$out/$1/cfg/ema.cfg" \
            "$out/$1/ema_final.weights" -nogpu -amp bfloat16 > "$out/$1.log" 2> "$out/$1.err"; then
        echo "FAIL: run $1 exited with an error:"; tail -n 20 "$out/$1.err"; exit 1
    fi
}
resume resumed 1
resume restarted 0
grep -h "EMA of the weights resumed from .*ema_ema.weights (iteration 4)" "$out/resumed.log" "$out/resumed.err" ||
    { echo "FAIL: the resumed run does not say it went on with the saved average"; exit 1; }
grep -h "EMA of the weights not resumed: .*cannot open it" "$out/restarted.log" "$out/restarted.err" ||
    { echo "FAIL: the run without the saved average does not say it starts again"; exit 1; }
if cmp -s "$out/resumed/ema_ema.weights" "$out/restarted/ema_ema.weights"; then
    echo "FAIL: resumed and restarted averages are the same"; exit 1
fi
echo "ok: the resumed and the restarted averages differ"
echo "PASS: ema_alpha's average written beside the weights, resumed with them, the training unchanged"
