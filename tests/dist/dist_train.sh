#!/bin/sh
# Data-parallel training over MPI (docs/distributed.md): `mpirun -np 2 darknet
# detector train` against one process, and its refusals.
#   dist_train.sh CASE DARKNET MPIEXEC DATA_DIR CFG OUT
# CASE:
#   equivalence  2 processes of batch 8, subdivisions 1 (4 images each)
#                against 1 process of batch 8, subdivisions 2 (the same two
#                halves in turn), 20 iterations, FP32 (amp=0), AMP bfloat16
#                and AMP float16: the printed loss (the processes' mean)
#                iteration by iteration. The data, weights and half
#                rounding are the same; only the order of each gradient
#                element's sum differs, (h + g0) + g1 against h + (g0 + g1)
#                (and each image's terms within g0 and g1): differences at
#                float32's rounding level, which training then amplifies at
#                a rate that depends on the trajectory, so on the machine
#                (its data augmentation, its kernels): on an Intel Xeon FP32
#                stayed within 8.9e-7 for 11 iterations, on an AMD EPYC
#                (AVX2) it reached 6.5e-4 by iteration 9. The bound is
#                therefore measured in the same run: a control, one process
#                in FP32 whose gradients carry a rounding-level perturbation
#                of their own (a static loss scale of 3: every gradient
#                element scaled and unscaled, rounded twice more, each
#                step). Iterations 1-10 must stay within 10 times the
#                control's largest difference there in FP32, 30 times in
#                bfloat16 and float16, whose roundings turn a float32-level
#                difference into a half ulp where a value crosses a rounding
#                boundary (at least 1e-5; bfloat16 at least 2e-2, since its
#                activations are stored in bfloat16: below), all 20 within 5
#                times its largest (at least 5e-2). Measured on the
#                EPYC: control 5.6e-4 and 2.6e-2; FP32 6.5e-4 and 6.0e-2,
#                bfloat16 4.3e-3 and 2.7e-2, float16 0 and 1.6e-3, whose loss
#                scale and skip count must also be equal. An update given
#                the wrong batch (the processes' share, not the whole) gave
#                3.9e-1 by iteration 10 (docs/distributed.md).
#   skip         AMP float32 (dynamic scale 65536: no overflow of its own), a NaN injected into one process's gradient at
#                step 3: every process skips it and backs the scale off
#                once, and the processes stay identical (their layers
#                compared after every step: DARKNET_AMP_DIST_CHECK=1)
#   save         only rank 0 saves; a resumed 2-process run starts from the
#                saved scale on both ranks
#   bad_data     a NaN label line and 4 undecodable images of 16, on 2
#                processes: each named once (by rank 0), the processes
#                identical after every step, both train; past -bad_max both
#                stop with status 1, said once
#   refuse       an indivisible batch, different cfgs, a bad DARKNET_AMP_DIST_CHECK or DARKNET_AMP_DIST,
#                a missing MPI module
set -u
case_=$1 darknet=$2 mpiexec=$3 data_dir=$4 cfg=$5 out=$6
rm -rf "$out" && mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1 DARKNET_SEED=1 DARKNET_AMP_CONV=direct
fail=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
mpi() { "$mpiexec" -np 2 -x OMP_NUM_THREADS -x DARKNET_SEED -x DARKNET_AMP_CONV "$@"; }

# mkcfg NAME SUBDIVISIONS ITERS KEYS: $out/NAME.cfg and $out/NAME.data
mkcfg() {
    sed "s/^batch=.*/batch=8/; s/^subdivisions=.*/subdivisions=$2/; s/^max_batches=.*/max_batches=$3/
         s/^learning_rate=.*/learning_rate=0.0002/; s/^burn_in=.*/burn_in=5/" "$cfg" > "$out/$1.cfg"
    [ -z "$4" ] || sed -i "s|^\[net\]\$|[net]\n$4|" "$out/$1.cfg"
    mkdir -p "$out/$1"
    sed "s|^backup *=.*|backup = $out/$1|" "$data_dir/shapes.data" > "$out/$1.data"
}
# same_processes ERR: no step after which the processes' layers differed
# (DARKNET_AMP_DIST_CHECK=1 compares them after every step)
same_processes() {
    n=$(grep -c 'differs' "$1")
    [ "$n" -eq 0 ] && ok "the processes' layers compared after every step: identical" \
        || bad "$(grep -m1 differs "$1")"
}
losses() { grep -E '^[0-9]+: ' "$1" | awk -F'[:,]' '{ print $1, $2 }'; }
progress_tail() { grep -E '^[0-9]+: ' "$1" | tail -n 1 | sed 's/.*, scale/scale/'; }

case $case_ in
equivalence)
    # rel_max FILE FIRST LAST: the largest relative difference of a join's
    # two losses over iterations FIRST..LAST
    rel_max() {
        awk -v f="$2" -v l="$3" '$1 >= f && $1 <= l { d = $2 - $3; if (d < 0) d = -d
            r = d / ($2 > 0 ? $2 : 1); if (r > m) m = r } END { printf "%.2e", m + 0 }' "$1"
    }
    # compare NAME ONE TWO: joins two runs' losses into $out/NAME.join, prints them
    compare() {
        losses "$out/$2.log" > "$out/$2.loss"
        losses "$out/$3.log" > "$out/$3.loss"
        join "$out/$2.loss" "$out/$3.loss" > "$out/$1.join"
        n=$(wc -l < "$out/$1.join")
        [ "$n" -eq 20 ] || bad "$1: $n iterations compared, not 20"
        echo "$1: iteration, loss of $2, of $3, relative difference"
        awk '{ d = $2 - $3; if (d < 0) d = -d; printf "  %2d %12.6f %12.6f %.2e\n", $1, $2, $3, d / ($2 > 0 ? $2 : 1) }' "$out/$1.join"
    }
    # The control: one process, FP32, a static loss scale of 3
    mkcfg control 2 20 'amp=1\namp_dtype=float32\nloss_scale=3'
    mkcfg fp32-one 2 20 ""
    for r in fp32-one control; do
        "$darknet" detector train "$out/$r.data" "$out/$r.cfg" > "$out/$r.log" 2> "$out/$r.err" \
            || bad "$r: one process failed: $(tail -n 3 "$out/$r.err")"
    done
    compare control fp32-one control
    c=$(rel_max "$out/control.join" 1 10) c20=$(rel_max "$out/control.join" 1 20)
    late_bound=$(awk -v c="$c20" 'BEGIN { b = 5 * c; printf "%.2e", (b > 5e-2 ? b : 5e-2) }')
    echo "control: a rounding-level perturbation grows to $c over iterations 1-10, $c20 over 1-20"
    for m in fp32 bf16 f16; do
        # k: the half types' roundings turn a float32-level difference into a
        # half ulp where a value crosses a rounding boundary (bfloat16 measured
        # 7.8 times the control on an AMD EPYC)
        # floor: bfloat16 stores the activations between half layers (the
        # activation plan), so a float32-level weight difference flips stored
        # values by 2^-8 from the first step it reaches: on an Intel Xeon
        # (AVX512-BF16) iterations 1-4 were equal and 1-10 reached 6.6e-3
        # (94 x a control of 7.0e-5; 1.1e-7 with amp_activations=float32); the
        # floor, 2e-2, is 20 times below the wrong batch's 3.9e-1
        case $m in fp32) keys="" k=10 floor=1e-5 ;; bf16) keys='amp=1\namp_dtype=bfloat16' k=30 floor=2e-2 ;; f16) keys='amp=1\namp_dtype=float16' k=30 floor=1e-5 ;; esac
        early_bound=$(awk -v c="$c" -v k="$k" -v f="$floor" 'BEGIN { b = k * c; printf "%.2e", (b > f ? b : f) }')
        mkcfg "$m-one" 2 20 "$keys"
        mkcfg "$m-two" 1 20 "$keys"
        [ "$m" = fp32 ] || "$darknet" detector train "$out/$m-one.data" "$out/$m-one.cfg" > "$out/$m-one.log" 2> "$out/$m-one.err" \
            || { bad "$m: one process failed: $(tail -n 3 "$out/$m-one.err")"; continue; }
        mpi "$darknet" detector train "$out/$m-two.data" "$out/$m-two.cfg" > "$out/$m-two.log" 2> "$out/$m-two.err" \
            || { bad "$m: two processes failed: $(tail -n 5 "$out/$m-two.err")"; continue; }
        compare "$m" "$m-one" "$m-two"
        early=$(rel_max "$out/$m.join" 1 10) late=$(rel_max "$out/$m.join" 1 20)
        awk -v e="$early" -v b="$early_bound" 'BEGIN { exit !(e + 0 <= b + 0) }' \
            && ok "$m: iterations 1-10 within $early of one process (bound $early_bound: $k x the control's $c, at least $floor)" \
            || bad "$m: iterations 1-10 differ by $early from one process (bound $early_bound: $k x the control's $c, at least $floor)"
        awk -v e="$late" -v b="$late_bound" 'BEGIN { exit !(e + 0 <= b + 0) }' \
            && ok "$m: all 20 iterations within $late (bound $late_bound: 5 x the control's $c20, at least 5e-2)" \
            || bad "$m: 20 iterations differ by up to $late (bound $late_bound: 5 x the control's $c20, at least 5e-2)"
        if [ "$m" = f16 ]; then
            a=$(progress_tail "$out/$m-one.log") b=$(progress_tail "$out/$m-two.log")
            [ "$a" = "$b" ] && ok "$m: the same loss scale and skips: $a" || bad "$m: one process ends with '$a', two with '$b'"
        fi
    done ;;
skip)
    mkcfg skip 1 6 'amp=1\namp_dtype=float32'
    mpi sh -c '[ "$OMPI_COMM_WORLD_RANK" != 1 ] || export DARKNET_AMP_INJECT=0:weights:nan:3
               DARKNET_AMP_DIST_CHECK=1 exec "$0" detector train "$1" "$2"' \
        "$darknet" "$out/skip.data" "$out/skip.cfg" > "$out/skip.log" 2> "$out/skip.err" \
        || bad "the run stopped: $(grep -m2 'amp:' "$out/skip.err")"
    grep -E '^[0-9]+: ' "$out/skip.log" | sed 's/^/  /'
    s2=$(grep -E '^2: ' "$out/skip.log" | sed 's/.*, scale \([0-9.e+-]*\), \([0-9]*\) skipped/\1 \2/')
    s3=$(grep -E '^3: ' "$out/skip.log" | sed 's/.*, scale \([0-9.e+-]*\), \([0-9]*\) skipped/\1 \2/')
    echo "$s2 $s3" | awk '{ exit !($4 == $2 + 1 && $3 == $1 / 2) }' \
        && ok "step 3 skipped and the scale backed off once ($s2 -> $s3: scale, skipped)" \
        || bad "step 3: (scale, skipped) went $s2 -> $s3, not one skip and half the scale"
    same_processes "$out/skip.err"
    n=$(grep -c 'training done: 6 steps, 1 skipped' "$out/skip.err")
    [ "$n" -eq 2 ] && ok "both processes counted 6 steps, 1 skipped" || bad "$n processes counted 6 steps, 1 skipped"
    ;;
save)
    mkcfg save 1 4 'amp=1\namp_dtype=float16'
    mpi "$darknet" detector train "$out/save.data" "$out/save.cfg" > "$out/save.log" 2> "$out/save.err" \
        || bad "the run failed: $(tail -n 3 "$out/save.err")"
    n=$(grep -c '^Saving weights to' "$out/save.err")
    [ "$n" -eq 1 ] && ok "one process saved (1 'Saving weights' line: the final weights)" \
        || bad "$n 'Saving weights' lines, not 1: not only rank 0 saves"
    w=$out/save/save_final.weights
    [ -s "$w" ] && [ -s "$w.amp" ] || bad "no final weights or state file in $out/save"
    scale=$(progress_tail "$out/save.log" | sed 's/scale \([0-9.e+-]*\),.*/\1/')
    sed -i "s/^max_batches=.*/max_batches=6/" "$out/save.cfg"
    mpi "$darknet" detector train "$out/save.data" "$out/save.cfg" "$w" > "$out/resume.log" 2> "$out/resume.err" \
        || bad "the resumed run failed: $(tail -n 3 "$out/resume.err")"
    n=$(grep -c "resumed the scaler from $w.amp: scale $scale," "$out/resume.err")
    [ "$n" -eq 2 ] && ok "both processes resumed at the saved scale $scale" \
        || bad "$n processes resumed at scale $scale: $(grep -m2 'amp: resumed\|amp: no' "$out/resume.err")"
    ;;
bad_data)
    # 16 images, the first label file with a NaN line before its boxes,
    # 4 images cut to 100 bytes: every process reads the same list and
    # draws the same images, so each finds the same problems and decides
    # the same; rank 0 names each once for all.
    mkcfg bad 1 4 'amp=1\namp_dtype=bfloat16'
    mkdir -p "$out/bd/images" "$out/bd/labels"
    head -n 16 "$data_dir/train.txt" | while read -r img; do
        b=$(basename "$img" .png)
        cp "$img" "$out/bd/images/$b.png"
        cp "$data_dir/labels/$b.txt" "$out/bd/labels/$b.txt"
        echo "$out/bd/images/$b.png"
    done > "$out/bd/train.txt"
    first=$(head -n 1 "$out/bd/train.txt" | sed 's|/images/|/labels/|; s|\.png$|.txt|')
    sed -i '1i 0 nan 0.5 0.2 0.2' "$first"
    for k in 4 8 12 16; do
        f=$(sed -n "${k}p" "$out/bd/train.txt")
        head -c 100 "$f" > "$f.cut" && mv "$f.cut" "$f"
    done
    sed -i "s|^train *=.*|train = $out/bd/train.txt|" "$out/bad.data"
    mpi -x DARKNET_AMP_DIST_CHECK=1 "$darknet" detector train "$out/bad.data" "$out/bad.cfg" -bad_max 0.5 \
        > "$out/bad.log" 2> "$out/bad.err" || bad "the run failed: $(tail -n 3 "$out/bad.err")"
    n=$(grep -c "^$first:1: x is not finite (nan); box skipped\$" "$out/bad.err")
    [ "$n" -eq 1 ] && ok "the NaN line named once, by rank 0: $first:1" || bad "the NaN line named $n times, not once"
    n=$(grep -c 'cannot be decoded' "$out/bad.err")
    d=$(grep 'cannot be decoded' "$out/bad.err" | sort | uniq -d | wc -l)
    [ "$n" -ge 1 ] && [ "$d" -eq 0 ] && ok "$n cut images drawn, each named once: $(grep -m1 'cannot be decoded' "$out/bad.err" | cut -c1-150)" \
        || bad "$n cut images named ($d twice); expected each drawn one once"
    same_processes "$out/bad.err"
    n=$(grep -c 'training done: 4 steps' "$out/bad.err")
    [ "$n" -eq 2 ] && ok "both processes trained 4 steps" || bad "$n processes trained 4 steps, not 2"
    bad_losses=$(grep -E '^[0-9]+: ' "$out/bad.log" | awk -F'[:,]' '!($2 + 0 == $2 + 0 && $2 < 1e30) { print }')
    [ -z "$bad_losses" ] && ok "finite losses: $(grep -E '^[0-9]+: ' "$out/bad.log" | awk -F'[:,]' '{ printf "%s ", $2 }')" \
        || bad "a loss that is not finite: $bad_losses"
    # past -bad_max (4 of 16 images, 25%): every process stops with status 1
    if mpi "$darknet" detector train "$out/bad.data" "$out/bad.cfg" -bad_max 0.2 > "$out/stop.log" 2> "$out/stop.err"; then
        bad "past -bad_max 0.2: the launch exited 0"
    else
        n=$(grep -c 'more than -bad_max 0.2 allows' "$out/stop.err")
        t=$(grep -c 'training done' "$out/stop.err")
        [ "$n" -eq 1 ] && [ "$t" -eq 0 ] && ok "past -bad_max 0.2: no step, said once: $(grep -m1 'more than -bad_max' "$out/stop.err" | cut -c1-160)" \
            || bad "past -bad_max 0.2: said $n times, $t processes trained"
    fi ;;
refuse)
    # refused NAME PATTERN COMMAND...: COMMAND must fail, its errors saying PATTERN
    refused() {
        name=$1 pat=$2
        shift 2
        if "$@" > "$out/$name.log" 2> "$out/$name.err"; then
            bad "$name: accepted: $*"
        elif grep -q -- "$pat" "$out/$name.err"; then
            ok "$name refused: $(grep -m1 -- "$pat" "$out/$name.err" | cut -c1-160)"
        else
            bad "$name refused without '$pat': $(tail -n 3 "$out/$name.err")"
        fi
    }
    mkcfg odd 1 2 ""
    sed -i 's/^batch=.*/batch=9/' "$out/odd.cfg"
    refused "batch 9 on 2 processes" 'the 9 images of each forward pass do not divide among 2 processes' \
        mpi "$darknet" detector train "$out/odd.data" "$out/odd.cfg"
    mkcfg same 1 2 ""
    sed 's/^learning_rate=.*/learning_rate=0.0003/' "$out/same.cfg" > "$out/other.cfg"
    refused "different cfgs on the two processes" 'were given different cfgs' \
        mpi sh -c 'c=$2; [ "$OMPI_COMM_WORLD_RANK" != 1 ] || c=$3; exec "$0" detector train "$1" "$c"' \
        "$darknet" "$out/same.data" "$out/same.cfg" "$out/other.cfg"
    refused "DARKNET_AMP_DIST_CHECK=often" 'DARKNET_AMP_DIST_CHECK=often: expected a number of steps' \
        mpi -x DARKNET_AMP_DIST_CHECK=often "$darknet" detector train "$out/same.data" "$out/same.cfg"
    # one process, not launched by MPI: DARKNET_AMP_DIST takes 0 or 1 only
    refused "DARKNET_AMP_DIST=yes" 'DARKNET_AMP_DIST=yes: expected 1' \
        env DARKNET_AMP_DIST=yes "$darknet" detector train "$out/same.data" "$out/same.cfg"
    refused "a launch without the MPI module" 'the MPI module cannot be loaded' \
        mpi -x DARKNET_AMP_MPI_MODULE=/nonexistent/libdarknet_amp_mpi.so "$darknet" detector train \
        "$out/same.data" "$out/same.cfg" ;;
*) echo "usage: dist_train.sh equivalence|skip|save|bad_data|refuse DARKNET MPIEXEC DATA_DIR CFG OUT"; exit 2 ;;
esac
[ "$fail" = 0 ] && echo "PASS" || echo "FAIL"
exit "$fail"
