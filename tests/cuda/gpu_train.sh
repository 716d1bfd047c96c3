#!/bin/sh
# AMP training on a GPU (docs/gpu.md), run by ctest only where a device exists.
#   gpu_train.sh parity DRIVER COMPARE FP32_CFG AMP32_CFG FP16_CFG BF16_CFG LIST OUT ITERS
#   gpu_train.sh syncs  DRIVER SHIM FP32_CFG AMP16_CFG LIST OUT [MPIEXEC]
#   gpu_train.sh scale  DRIVER SMALL_CFG LARGE_CFG LIST OUT ITERS
#   gpu_train.sh profile DRIVER AMP32_CFG AMP16_CFG LIST OUT
#   gpu_train.sh pinned DRIVER SHIM AMP16_CFG LIST OUT
# parity: ITERS (100) iterations of the embedded detector on GPU 0, seed 7.
# - amp_dtype=float32 against FP32 bit for bit when darknet's own GPU run is
#   repeatable (two FP32 runs equal), else like the half dtypes below;
# - float16 and bfloat16 (their convolutions in half through cuDNN, which
#   each run's precision table must say): the mean loss of the last 20
#   iterations within 5% of FP32's, as integration.half_parity compares;
# - bfloat16 on a GPU below compute capability 8.0 must be refused with a
#   message naming the GPU instead.
# syncs: blocking CUDA calls per training step (LD_PRELOAD counting shim),
# from runs of 3 and 8 iterations: AMP must add none to darknet's own. With
# MPIEXEC (an MPI build), the same for a data-parallel launch of one process
# (DARKNET_AMP_DIST=1: the data-parallel step's code path, NCCL's sum and
# the batch-norm statistics' exchange included, on one GPU; the consistency
# check, which reads the device every DARKNET_AMP_DIST_CHECK steps, off).
set -eu
mode=$1
shift
export TRAIN_DRIVER_GPU=0
if [ "$mode" = parity ]; then
    driver=$1 compare=$2 fp32=$3 amp32=$4 fp16=$5 bf16=$6 list=$7 out=$8 iters=$9
    rm -rf "$out" && mkdir -p "$out"
    args="--list $list --iters $iters --seed 7"
    # The tolerance, from the CPU emulation on this cfg, seed and data (100
    # iterations, batch 8, measured with build/cpu; relative difference of the
    # mean loss over iterations 81-100 from FP32's): float16 -0.7%, bfloat16
    # -0.5%, and float32 through oneDNN (the same arithmetic summed in another
    # order, as a GPU sums) -0.03%. One window earlier (61-80) the same runs
    # are 5.2%, 1.7% and 3.9% apart: training is chaotic, and a GPU's sums
    # differ from the CPU's from the first step. 5% is seven times the largest
    # late difference measured and what a reordering alone gives while the
    # loss still falls fast; a half path that is wrong (stale weights, a
    # gradient written over instead of added, no unscaling) moves the late
    # loss by far more, or makes it non-finite.
    tol=0.05 first=$((iters - 19))
    fail=0
    run() { # name cfg
        "$driver" --cfg "$2" $args --save "$out/$1.weights" > "$out/$1.log" 2> "$out/$1.err" || {
            echo "FAIL: $1 exited with an error:"; tail -n 5 "$out/$1.err"; fail=1; return 1; }
    }
    window() { # log -> mean loss over iterations first..iters
        awk -v a="$first" '$1 == "iter" && $2 >= a { s += $4; n++ } END { printf "%.6f", n ? s / n : -1 }' "$1"
    }
    late() { # name: compares its window with FP32's
        m=$(window "$out/$1.log") ref=$(window "$out/fp32.log")
        rel=$(awk -v a="$m" -v b="$ref" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; printf "%.4f", d }')
        msg="$1: mean loss of iterations $first-$iters $m vs FP32 $ref (relative difference $rel, tolerance $tol); skipped steps and scale: $(grep '^iter' "$out/$1.log" | tail -n 1 | cut -d, -f2-)"
        if awk -v r="$rel" -v t="$tol" 'BEGIN { exit !(r == r && r <= t) }'; then echo "ok: $msg"
        else echo "FAIL: $msg"; fail=1; fi
    }
    # shellcheck disable=SC2086
    if COMPARE_OUT="$out/repeat" sh "$compare" fp32 "$driver" fp32_again "$driver" 0 -- --cfg "$fp32" $args > "$out/repeat.txt"; then
        echo "FP32 on this GPU is repeatable: AMP float32 must be bit for bit"
        # shellcheck disable=SC2086
        COMPARE_OUT="$out/f32" COMPARE_B_ARGS="--cfg $amp32" sh "$compare" fp32 "$driver" amp_float32 "$driver" 0 -- --cfg "$fp32" $args > "$out/f32.txt" || fail=1
        tail -n 3 "$out/f32.txt"
    else
        echo "FP32 on this GPU is not repeatable (cuDNN's algorithms): AMP float32 compared as the half dtypes"
        tail -n 3 "$out/repeat.txt"
    fi
    cp "$out/repeat/fp32.log" "$out/fp32.log"
    if run amp_float32 "$amp32"; then late amp_float32; fi
    # The half dtypes' runs must have stored tensors between layers in half
    # under the plan (DARKNET_AMP_GPU_PLAN unset or half: gpu.train_parity.plan),
    # and none with DARKNET_AMP_GPU_PLAN=float32 (gpu.train_parity), saying why
    planned() { # name dtype
        if [ "${DARKNET_AMP_GPU_PLAN:-half}" = float32 ]; then
            if grep -q "activations: float32 (DARKNET_AMP_GPU_PLAN=float32)" "$out/$1.err"; then
                echo "ok: $1: $(grep -m 1 "activations: " "$out/$1.err" | sed 's/^amp: *//')"
            else
                echo "FAIL: $1: DARKNET_AMP_GPU_PLAN=float32, but the table does not say every tensor is float32 for it:"
                grep "activations" "$out/$1.err" | head -n 3; fail=1
            fi
            return 0
        fi
        if grep -q "activations: [0-9]* of [0-9]* layers' outputs and deltas in $2" "$out/$1.err"; then
            echo "ok: $1: $(grep -m 1 "activations: " "$out/$1.err" | sed 's/^amp: *//')"
        else
            echo "FAIL: $1: the activation plan (DARKNET_AMP_GPU_PLAN=${DARKNET_AMP_GPU_PLAN:-unset}) stored no tensor in half:"
            grep "activations" "$out/$1.err" | head -n 3; fail=1
        fi
    }
    if run amp_float16 "$fp16"; then
        late amp_float16
        planned amp_float16 float16
        if grep -q "float16 (cuDNN)" "$out/amp_float16.err"; then
            echo "ok: $(grep "float16 (cuDNN)" "$out/amp_float16.err")"
        else
            echo "FAIL: the float16 run ran no convolution through cuDNN in half:"
            grep "amp: " "$out/amp_float16.err" | head -n 12; fail=1
        fi
    fi
    if "$driver" --cfg "$bf16" $args --save "$out/amp_bfloat16.weights" > "$out/amp_bfloat16.log" 2> "$out/amp_bfloat16.err"; then
        late amp_bfloat16
        planned amp_bfloat16 bfloat16
        grep -q "bfloat16 (cuDNN)" "$out/amp_bfloat16.err" && echo "ok: $(grep "bfloat16 (cuDNN)" "$out/amp_bfloat16.err")" ||
            { echo "FAIL: the bfloat16 run ran no convolution through cuDNN in half"; fail=1; }
    elif grep -q "amp_dtype=bfloat16 needs a GPU of compute capability 8.0 or newer; GPU 0 (" "$out/amp_bfloat16.err"; then
        echo "ok: bfloat16 refused on this GPU:"; grep "bfloat16 needs" "$out/amp_bfloat16.err"
    else
        echo "FAIL: amp_bfloat16 exited with an error:"; tail -n 5 "$out/amp_bfloat16.err"; fail=1
    fi
    [ $fail = 0 ] && echo PASS || echo FAIL
    exit $fail
fi
if [ "$mode" = syncs ]; then
    driver=$1 shim=$2 fp32=$3 amp=$4 list=$5 out=$6 mpiexec=${7:-}
    rm -rf "$out" && mkdir -p "$out"
    count() { # cfg iters name [launcher...] -> total blocking calls
        cfg=$1 n=$2 name=$3
        shift 3
        "$@" env SYNC_COUNT_OUT="$out/$name.txt" LD_PRELOAD="$shim" "$driver" --cfg "$cfg" --list "$list" \
            --iters "$n" --seed 7 --save "$out/$name.weights" > "$out/$name.log" 2> "$out/$name.err" ||
            { echo "FAIL: $name exited with an error" >&2; tail -n 20 "$out/$name.err" >&2; return 1; }
        [ -s "$out/$name.txt" ] || { echo "FAIL: the shim wrote no counts (not preloaded?)" >&2; return 1; }
        awk '$1 !~ /^#/ { s += $2 } END { print s }' "$out/$name.txt"
    }
    f3=$(count "$fp32" 3 fp32_3) && f8=$(count "$fp32" 8 fp32_8) &&
        a3=$(count "$amp" 3 amp_3) && a8=$(count "$amp" 8 amp_8) || exit 1
    grep -q "scale" "$out/amp_8.log" || { echo "FAIL: the AMP run shows no loss scale"; exit 1; }
    per_f=$(( (f8 - f3) / 5 )) per_a=$(( (a8 - a3) / 5 ))
    echo "blocking CUDA calls per step: FP32 $per_f, AMP float16 $per_a (totals 3/8 steps: FP32 $f3/$f8, AMP $a3/$a8)"
    paste "$out/fp32_8.txt" "$out/amp_8.txt"
    if [ $((f8 - f3)) -ne $((a8 - a3)) ]; then
        echo "FAIL: AMP adds $(( (a8 - a3) - (f8 - f3) )) blocking calls over 5 steps"; exit 1
    fi
    if [ "$f8" -le "$f3" ]; then echo "FAIL: the counts did not grow with the steps (shim not active?)"; exit 1; fi
    if [ -n "$mpiexec" ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        if d3=$(count "$amp" 3 dist_3 "$mpiexec" -n 1 env DARKNET_AMP_DIST=1 DARKNET_AMP_DIST_CHECK=0) &&
            d8=$(count "$amp" 8 dist_8 "$mpiexec" -n 1 env DARKNET_AMP_DIST=1 DARKNET_AMP_DIST_CHECK=0); then
            grep -q "data-parallel: process 0 of 1" "$out/dist_8.err" ||
                { echo "FAIL: the one-process launch did not train data-parallel:"; grep "^amp: " "$out/dist_8.err" | tail -n 5; exit 1; }
            echo "data-parallel, one process: $(( (d8 - d3) / 5 )) blocking CUDA calls per step (totals 3/8 steps: $d3/$d8)"
            paste "$out/amp_8.txt" "$out/dist_8.txt"
            [ $((d8 - d3)) -eq $((a8 - a3)) ] ||
                { echo "FAIL: the data-parallel step adds $(( (d8 - d3) - (a8 - a3) )) blocking calls over 5 steps"; exit 1; }
        elif grep -q "built without it" "$out/dist_3.err" 2> /dev/null; then
            echo "data-parallel, one process: not counted: $(grep -m 1 "built without it" "$out/dist_3.err")"
        else
            exit 1
        fi
    fi
    echo PASS; exit 0
fi
# pinned: the yolo loss's page-locked staging (cuda/layers.c, cudaMallocHost)
# and the network's input and truth (patch 0026, cudaHostAlloc). Each asked
# for while the network is made or its yolo layers first grow the staging,
# never per step (3 and 8 steps ask as often); where the host refuses them
# (the shim's SYNC_SHIM_REFUSE_PINNED: every request of 1 KiB or more,
# which these are and the scaler's few-byte mirror is not), the staging's
# refusal said once on stderr and asked for once in all, the network's
# arrays asked for as often as granted ones (then darknet's calloc), and
# training goes on through pageable arrays with finite losses. Only
# requests of 1 KiB or more count.
if [ "$mode" = pinned ]; then
    driver=$1 shim=$2 amp=$3 list=$4 out=$5
    rm -rf "$out" && mkdir -p "$out"
    asks() { # name iters [env...] -> cudaMallocHost, then cudaHostAlloc, calls of 1 KiB or more
        name=$1 n=$2
        shift 2
        env "$@" SYNC_COUNT_OUT="$out/$name.txt" LD_PRELOAD="$shim" "$driver" --cfg "$amp" \
            --list "$list" --iters "$n" --seed 7 --save "$out/$name.weights" > "$out/$name.log" \
            2> "$out/$name.err" ||
            { echo "FAIL: $name exited with an error" >&2; tail -n 20 "$out/$name.err" >&2; return 1; }
        bad=$(awk '$1 == "iter" && !($4 == $4 && $4 < 1e30 && $4 > -1e30) { n++ } END { print n + 0 }' "$out/$name.log")
        [ "$bad" = 0 ] || { echo "FAIL: $name: $bad non-finite losses" >&2; return 1; }
        [ "$(grep -c "^iter" "$out/$name.log")" -eq "$n" ] || { echo "FAIL: $name: not $n iterations" >&2; return 1; }
        echo "$(sed -n 's/^#cudaMallocHost-1KiB //p' "$out/$name.txt")" \
            "$(sed -n 's/^#cudaHostAlloc-1KiB //p' "$out/$name.txt")"
    }
    a3=$(asks ok_3 3) && a8=$(asks ok_8 8) && ar8=$(asks refused_8 8 SYNC_SHIM_REFUSE_PINNED=1) || exit 1
    p3=${a3% *} p8=${a8% *} r8=${ar8% *} h3=${a3#* } h8=${a8#* } hr8=${ar8#* }
    said=$(grep -c "page-locked host memory refused" "$out/refused_8.err" || true)
    echo "cudaMallocHost calls of 1 KiB or more: 3 steps $p3, 8 steps $p8; refused, 8 steps $r8" \
        "(said $said times)"
    echo "cudaHostAlloc calls of 1 KiB or more (the network's input and truth): 3 steps $h3," \
        "8 steps $h8; refused, 8 steps $hr8"
    fail=0
    [ -n "$p3" ] && [ "$p3" -gt 0 ] || { echo "FAIL: no page-locked staging asked for (yolo layers on the host's threads?)"; fail=1; }
    [ "$p3" = "$p8" ] || { echo "FAIL: asked for per step ($p3 in 3 steps, $p8 in 8)"; fail=1; }
    [ "$r8" = 1 ] || { echo "FAIL: asked for $r8 times after a refusal (once expected)"; fail=1; }
    [ "$said" = 1 ] || { echo "FAIL: the refusal said $said times (once expected)"; fail=1; }
    [ -n "$h3" ] && [ "$h3" -ge 2 ] || { echo "FAIL: the network's input and truth not asked for page-locked ($h3 requests; patch 0026)"; fail=1; }
    [ "$h3" = "$h8" ] && [ "$hr8" = "$h8" ] || { echo "FAIL: the network's arrays asked for per step or again after a refusal ($h3 in 3 steps, $h8 in 8, $hr8 refused)"; fail=1; }
    [ $fail = 0 ] && echo PASS
    exit $fail
fi
# scale: ITERS iterations of SMALL_CFG and of LARGE_CFG (yolov3 at 416 px,
# float16, batch 8 and batch 64, the cfg's own burn-in: the weights stay at
# darknet's random initialisation) on GPU 0. darknet's loss is a sum over
# the batch: a weight gradient sums 8 times as many terms at batch 64, an
# activation gradient does not. With the weight gradients in float32 the
# loss scale is bounded by the activation gradients alone, so batch 64 must
# end within a factor 2 of batch 8; written in half, the weight gradients
# overflow float16 first and batch 64's scale ends about 8 times lower (the
# scale fell from 65536 to 2 in 15 steps at batch 64 that way). Every loss
# finite; each run's skips and their causes printed.
if [ "$mode" = scale ]; then
    driver=$1 small=$2 large=$3 list=$4 out=$5 iters=$6
    rm -rf "$out" && mkdir -p "$out"
    final() { # name cfg -> the loss scale after the run
        "$driver" --cfg "$2" --list "$list" --iters "$iters" --seed 7 --save "$out/$1.weights" \
            > "$out/$1.log" 2> "$out/$1.err" ||
            { echo "FAIL: $1 exited with an error:" >&2; tail -n 20 "$out/$1.err" >&2; return 1; }
        [ "$(grep -c "^iter" "$out/$1.log")" -eq "$iters" ] || { echo "FAIL: $1: not $iters iterations" >&2; return 1; }
        bad=$(awk '$1 == "iter" && !($4 == $4 && $4 < 1e30 && $4 > -1e30) { n++ } END { print n + 0 }' "$out/$1.log")
        [ "$bad" = 0 ] || { echo "FAIL: $1: $bad non-finite losses" >&2; return 1; }
        grep "^iter" "$out/$1.log" | tail -n 1 | sed -n 's/.*, scale \([0-9.e+-]*\),.*/\1/p'
    }
    s8=$(final small "$small") && s64=$(final large "$large") || exit 1
    for r in small large; do
        echo "$r: $(grep "^iter" "$out/$r.log" | tail -n 1)"
        grep -E "^amp: step [0-9]+ skipped" "$out/$r.err" | head -n 8
    done
    [ -n "$s8" ] && [ -n "$s64" ] || { echo "FAIL: no loss scale in the iteration lines"; exit 1; }
    msg="loss scale after $iters steps: batch 64 $s64, batch 8 $s8 (batch 64 at least half of batch 8's)"
    if awk -v a="$s64" -v b="$s8" 'BEGIN { exit !(a + 0 >= b / 2) }'; then echo "ok: $msg"; echo PASS; exit 0; fi
    echo "FAIL: $msg"; exit 1
fi
# profile: DARKNET_AMP_PROFILE=1 on GPU 0, 6 iterations of each cfg: a table
# row per layer, every layer's forward timed above 0 ms, each float16
# convolution's conversions and kernels above 0 and within its forward plus
# backward, its label naming cuDNN's algorithms; amp_dtype=float32's layers
# without conversions; the total line the sum of the rows.
if [ "$mode" = profile ]; then
    driver=$1 amp32=$2 amp16=$3 list=$4 out=$5
    rm -rf "$out" && mkdir -p "$out"
    fail=0
    for name in amp32 amp16; do
        cfg=$amp32; [ $name = amp16 ] && cfg=$amp16
        DARKNET_AMP_PROFILE=1 "$driver" --cfg "$cfg" --list "$list" --iters 6 --seed 7 \
            --save "$out/$name.weights" > "$out/$name.log" 2> "$out/$name.err" ||
            { echo "FAIL: $name exited with an error:"; tail -n 20 "$out/$name.err"; exit 1; }
        grep "^amp: profile: gpu" "$out/$name.err" | head -n 4
        r=$(awk -v half=$([ $name = amp16 ] && echo 1 || echo 0) '
            $3 == "gpu" && $4 == "layer" {
                rows++; f = $8; b = $10; u = $12; c = $14; k = $16
                sf += f; sb += b; su += u; sc += c; sk += k
                if (!(f > 0)) bad = bad "layer " $5 " forward " f " ms; "
                if ($6 == "conv" && half) {
                    if (!(c > 0 && k > 0 && c + k <= f + b)) bad = bad "layer " $5 " convert " c " kernel " k " of " f + b " ms; "
                    if ($0 !~ /cuDNN forward [A-Z_]+.*backward-data [A-Z_0-9]+.*weight gradient cuBLAS float32/) bad = bad "layer " $5 " label: " $0 "; "
                }
                if (!half && c != 0) bad = bad "layer " $5 " (float32) convert " c " ms; "
            }
            $3 == "gpu" && $4 == "total" { tf = $6; tb = $8; tc = $12 }
            END {
                if (!rows) { print "no per-layer rows"; exit }
                d = sf - tf; if (d < 0) d = -d
                if (d > 0.01 + 1e-3 * tf) bad = bad "rows sum to forward " sf " ms, total says " tf "; "
                printf "%d rows; forward %.3f, backward %.3f, convert %.3f ms/step; %s", rows, tf, tb, tc, bad == "" ? "ok" : bad
            }' "$out/$name.err")
        case $r in
        *"; ok") echo "ok: $name: $r" ;;
        *) echo "FAIL: $name: $r"; fail=1 ;;
        esac
    done
    [ $fail = 0 ] && echo PASS || echo FAIL
    exit $fail
fi
echo "usage: gpu_train.sh parity|syncs|pinned|scale|profile ..." >&2
exit 2
