#!/bin/sh
# A CUDA build of darknet-amp on a machine without a usable GPU (patch 0023
# and plugin/cli.c), run as it is, without the tests' fake device:
# - with -nogpu it trains on the CPU, AMP on: exit 0, every iteration, the
#   start-up line says "CUDA build, on the CPU";
# - without -nogpu it stops before anything with exit status 1 and a message
#   naming what CUDA reported and what to do (-nogpu, the CPU build); where a
#   GPU is present, -i with a device number it does not have is said alike;
# - never an assertion.
#   no_device.sh DARKNET PROBE DATA_DIR CFG OUT
set -u
darknet=$1 probe=$2 data_dir=$3 cfg=$4 out=$5
rm -rf "$out" && mkdir -p "$out/backup"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict, shapes_data
shapes_data "$data_dir" "$out/backup" "$out"
no_assert() { # ERR
    ! grep -q "Assertion" "$1" || bad "an assertion: $(grep Assertion "$1" | head -n 1)"
}

DARKNET_SEED=1 "$darknet" detector train "$out/s.data" "$cfg" -nogpu -amp bfloat16 \
    > "$out/cpu.log" 2> "$out/cpu.err"
rc=$?
iters=$(grep -cE '^ *[0-9]+: ' "$out/cpu.log")
want=$(sed -n 's/^max_batches=//p' "$cfg")
line=$(grep -m 1 "^darknet-amp .*CUDA build, on the CPU): AMP on, bfloat16" "$out/cpu.err")
[ $rc -eq 0 ] && [ "$iters" -eq "$want" ] && [ -n "$line" ] \
    && ok "-nogpu: trained $iters iterations on the CPU, exit 0: $line" \
    || bad "-nogpu: exit $rc, $iters of $want iterations: $(tail -n 2 "$out/cpu.err")"
no_assert "$out/cpu.err"

if "$probe" > /dev/null 2>&1; then
    "$darknet" detector train "$out/s.data" "$cfg" -i 999 > "$out/dev.log" 2> "$out/dev.err"
    rc=$?
    msg=$(grep -m 1 "GPU 999 asked for (-i), but CUDA finds [0-9]*; -i 0 to [0-9]*, or -nogpu" "$out/dev.err")
    [ $rc -eq 1 ] && [ -n "$msg" ] && ok "a GPU is present; -i 999: exit 1: $msg" \
        || bad "-i 999: exit $rc: $(tail -n 2 "$out/dev.err")"
else
    "$darknet" detector train "$out/s.data" "$cfg" > "$out/dev.log" 2> "$out/dev.err"
    rc=$?
    msg=$(grep -m 1 "this CUDA build finds no usable GPU: CUDA reports \".*\" (cuda[A-Za-z]*); train and run on the CPU with -nogpu, or use the CPU build" "$out/dev.err")
    [ $rc -eq 1 ] && [ -n "$msg" ] && [ ! -s "$out/dev.log" ] \
        && ok "no GPU, no -nogpu: exit 1 before anything: $msg" \
        || bad "no GPU, no -nogpu: exit $rc: $(tail -n 2 "$out/dev.err")"
fi
no_assert "$out/dev.err"
verdict "a CUDA build without a usable GPU"
