#!/bin/sh
# AMP training on a GPU (docs/gpu.md), run by ctest only where a device exists.
#   gpu_train.sh parity DRIVER COMPARE FP32_CFG AMP32_CFG FP16_CFG BF16_CFG LIST OUT ITERS
#   gpu_train.sh syncs  DRIVER SHIM FP32_CFG AMP16_CFG LIST OUT
# parity: 20 iterations of the embedded detector on GPU 0. amp_dtype=float32
# against FP32 bit for bit when darknet's own GPU run is repeatable (two FP32
# runs equal), else within 1e-3 (cuDNN's non-deterministic algorithms); float16
# and bfloat16 (their convolutions in half through cuDNN, which each run's
# precision table must say) within 5% at every iteration. bfloat16 on a GPU
# below compute capability 8.0 must be refused with a message naming the GPU
# instead.
# syncs: blocking CUDA calls per training step (LD_PRELOAD counting shim),
# from runs of 3 and 8 iterations: AMP must add none to darknet's own.
set -eu
mode=$1
shift
export TRAIN_DRIVER_GPU=0
if [ "$mode" = parity ]; then
    driver=$1 compare=$2 fp32=$3 amp32=$4 fp16=$5 bf16=$6 list=$7 out=$8 iters=$9
    rm -rf "$out" && mkdir -p "$out"
    args="--list $list --iters $iters --seed 7"
    # shellcheck disable=SC2086
    if COMPARE_OUT="$out/repeat" sh "$compare" fp32 "$driver" fp32_again "$driver" 0 -- --cfg "$fp32" $args > "$out/repeat.txt"; then
        tol=0
        echo "FP32 on this GPU is repeatable: AMP float32 must be bit for bit"
    else
        tol=1e-3
        echo "FP32 on this GPU is not repeatable (cuDNN algorithms): AMP float32 within $tol"
        tail -n 3 "$out/repeat.txt"
    fi
    fail=0
    # shellcheck disable=SC2086
    COMPARE_OUT="$out/f32" COMPARE_B_ARGS="--cfg $amp32" sh "$compare" fp32 "$driver" amp_float32 "$driver" $tol -- --cfg "$fp32" $args || fail=1
    # shellcheck disable=SC2086
    COMPARE_OUT="$out/f16" COMPARE_B_ARGS="--cfg $fp16" sh "$compare" fp32 "$driver" amp_float16 "$driver" 0.05 -- --cfg "$fp32" $args || fail=1
    if grep -q "float16 (cuDNN)" "$out/f16/amp_float16.err"; then
        grep "float16 (cuDNN)" "$out/f16/amp_float16.err"
    else
        echo "FAIL: the float16 run ran no convolution through cuDNN in half:"
        grep "amp: " "$out/f16/amp_float16.err" | head -n 12; fail=1
    fi
    # shellcheck disable=SC2086
    if COMPARE_OUT="$out/bf16" COMPARE_B_ARGS="--cfg $bf16" sh "$compare" fp32 "$driver" amp_bfloat16 "$driver" 0.05 -- --cfg "$fp32" $args > "$out/bf16.txt" 2>&1; then
        cat "$out/bf16.txt"
        if grep -q "needs a GPU of compute capability 8.0" "$out/bf16/amp_bfloat16.err" 2>/dev/null; then
            echo "FAIL: bfloat16 trained although refused"; fail=1
        fi
        grep -q "bfloat16 (cuDNN)" "$out/bf16/amp_bfloat16.err" ||
            { echo "FAIL: the bfloat16 run ran no convolution through cuDNN in half"; fail=1; }
    elif grep -q "amp_dtype=bfloat16 needs a GPU of compute capability 8.0 or newer; GPU 0 (" "$out/bf16/amp_bfloat16.err"; then
        echo "ok: bfloat16 refused on this GPU:"; grep "bfloat16 needs" "$out/bf16/amp_bfloat16.err"
    else
        cat "$out/bf16.txt"; fail=1
    fi
    [ $fail = 0 ] && echo PASS || echo FAIL
    exit $fail
fi
if [ "$mode" = syncs ]; then
    driver=$1 shim=$2 fp32=$3 amp=$4 list=$5 out=$6
    rm -rf "$out" && mkdir -p "$out"
    count() { # cfg iters -> total blocking calls
        SYNC_COUNT_OUT="$out/$3.txt" LD_PRELOAD="$shim" "$driver" --cfg "$1" --list "$list" \
            --iters "$2" --seed 7 --save "$out/$3.weights" > "$out/$3.log" 2> "$out/$3.err" ||
            { echo "FAIL: $3 exited with an error"; tail -n 20 "$out/$3.err"; exit 1; }
        [ -s "$out/$3.txt" ] || { echo "FAIL: the shim wrote no counts (not preloaded?)"; exit 1; }
        awk '{ s += $2 } END { print s }' "$out/$3.txt"
    }
    f3=$(count "$fp32" 3 fp32_3) f8=$(count "$fp32" 8 fp32_8)
    a3=$(count "$amp" 3 amp_3) a8=$(count "$amp" 8 amp_8)
    grep -q "scale" "$out/amp_8.log" || { echo "FAIL: the AMP run shows no loss scale"; exit 1; }
    per_f=$(( (f8 - f3) / 5 )) per_a=$(( (a8 - a3) / 5 ))
    echo "blocking CUDA calls per step: FP32 $per_f, AMP float16 $per_a (totals 3/8 steps: FP32 $f3/$f8, AMP $a3/$a8)"
    paste "$out/fp32_8.txt" "$out/amp_8.txt"
    if [ $((f8 - f3)) -ne $((a8 - a3)) ]; then
        echo "FAIL: AMP adds $(( (a8 - a3) - (f8 - f3) )) blocking calls over 5 steps"; exit 1
    fi
    if [ "$f8" -le "$f3" ]; then echo "FAIL: the counts did not grow with the steps (shim not active?)"; exit 1; fi
    echo PASS; exit 0
fi
echo "usage: gpu_train.sh parity|syncs ..." >&2
exit 2
