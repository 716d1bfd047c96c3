#!/bin/sh
# `darknet detector train` twice with the same DARKNET_SEED must print the same
# losses and save byte-identical weights; a third run with another seed must
# differ (so the comparison can fail).
#   detector_seed.sh DARKNET DATA_DIR CFG OUT
set -eu
darknet=$1 data_dir=$2 cfg=$3 out=$4
rm -rf "$out"
mkdir -p "$out"

train() { # name seed
    mkdir -p "$out/$1"
    sed "s|^backup *=.*|backup = $out/$1|" "$data_dir/shapes.data" > "$out/$1.data"
    # Only the iteration lines "N: loss, avg, rate, seconds, images" carry numbers
    # to compare; drop the seconds field, which is wall time.
    if ! DARKNET_SEED=$2 "$darknet" detector train "$out/$1.data" "$cfg" -nogpu \
            > "$out/$1.log" 2> "$out/$1.err"; then
        echo "FAIL: run $1 exited with an error:"; tail -n 20 "$out/$1.err"; exit 1
    fi
    grep -E '^[0-9]+: ' "$out/$1.log" | sed 's/, [0-9.]* seconds//' > "$out/$1.losses"
    w=$(ls "$out/$1"/*_final.weights)
    cksum < "$w" | cut -d' ' -f1
}
a=$(train a 12345)
b=$(train b 12345)
c=$(train c 54321)
echo "seed 12345, run a:"; cat "$out/a.losses"
echo "seed 12345, run b:"; cat "$out/b.losses"
echo "seed 54321, run c:"; cat "$out/c.losses"
echo "final weights CRC: a=$a b=$b c=$c"
n=$(wc -l < "$out/a.losses")
[ "$n" -ge 1 ] || { echo "FAIL: no iteration lines in the training output"; exit 1; }
if ! cmp -s "$out/a.losses" "$out/b.losses" || [ "$a" != "$b" ]; then
    echo "FAIL: same seed, different training (losses or weights differ)"; exit 1
fi
if cmp -s "$out/a.losses" "$out/c.losses" && [ "$a" = "$c" ]; then
    echo "FAIL: another seed gave identical training: the seed has no effect"; exit 1
fi
echo "PASS: $n iterations identical with the same seed, different with another"
