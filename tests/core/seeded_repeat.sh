#!/bin/sh
# A seeded run repeats (docs/cfg.md, DARKNET_AMP_CONV): with DARKNET_SEED set
# and DARKNET_AMP_CONV unset, each convolution's form (oneDNN's convolution
# or im2col + matmul, which sum in different orders) is chosen by its shape,
# not timed, so that `darknet detector train` on the embedded detector gives
# the same weights twice. For float16 and bfloat16:
# - two runs of 10 iterations: net_final.weights and its state file
#   (.amp) bit for bit alike (sha256), the start-up table saying the forms
#   go by shape and listing the same ones;
# - a run with DARKNET_AMP_CONV=matmul (other forms, the same seed): other
#   weights, so the comparison sees a change of form;
# - a resume from the first run's weights and state file: the same forms.
# A build without oneDNN (BUILD no-onednn) has one form, the emulation: the
# two runs and the resume are checked, the forms' lines and the matmul run
# are not (and it says so).
#   seeded_repeat.sh DARKNET DATA_DIR CFG OUT [onednn|no-onednn]
set -u
darknet=$1 data_dir=$2 cfg=$3 out=$4 build=${5:-onednn}
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
unset DARKNET_AMP_CONV
train() { # dtype name [weights] [VAR=value...]: trains into $out/name/
    dt=$1 name=$2 w=${3:-}
    shift 2
    [ $# -gt 0 ] && shift
    d=$out/$name
    mkdir -p "$d"
    shapes_data "$data_dir" "$d" "$d"
    sed "s/^max_batches=.*/max_batches=10/; s|^\[net\]\$|[net]\namp=1\namp_dtype=$dt|" "$cfg" \
        > "$d/net.cfg"
    env DARKNET_SEED=7 "$@" "$darknet" detector train "$d/s.data" "$d/net.cfg" $w -nogpu \
        > "$d/log" 2> "$d/err" || bad "$name: exit $?: $(tail -n 1 "$d/err")"
}
sums() { # name: sha256 of its final weights and state file
    cat "$out/$1/net_final.weights" "$out/$1/net_final.weights.amp" 2> /dev/null | sha256sum | cut -c1-16
}
forms() { # name: the start-up table's precision lines of the half layers
    grep -E '^amp:   (float16|bfloat16) \(' "$out/$1/err" | sed 's/  */ /g' | paste -sd';' -
}
for dt in float16 bfloat16; do
    train $dt $dt-a
    train $dt $dt-b
    a=$(sums $dt-a) b=$(sums $dt-b)
    fa=$(forms $dt-a) fb=$(forms $dt-b)
    [ -s "$out/$dt-a/net_final.weights.amp" ] && [ "$a" = "$b" ] && [ "$fa" = "$fb" ] \
        && ok "$dt: two seeded runs of 10 iterations: weights and state file bit for bit alike ($a), forms alike ($fa)" \
        || bad "$dt: two seeded runs differ: weights and state $a and $b; forms '$fa' and '$fb'"
    if [ "$build" = onednn ]; then
        train $dt $dt-matmul "" DARKNET_AMP_CONV=matmul
        m=$(sums $dt-matmul)
        grep -q "^amp:   convolution forms: by shape, so that a run repeats" "$out/$dt-a/err" \
            && ok "$dt: the start-up table says the forms go by shape" \
            || bad "$dt: no 'by shape' line: $(grep 'convolution forms' "$out/$dt-a/err")"
        echo "$fa" | grep -q "im2col + matmul" && [ "$m" != "$a" ] \
            && ok "$dt: DARKNET_AMP_CONV=matmul, the same seed: other weights ($m), so a change of form shows" \
            || bad "$dt: the matmul run's weights $m against $a (the runs must use both forms: '$fa')"
    else
        echo "not checked: $dt: this build has no oneDNN, so one convolution form ('$fa'): no forms to choose by shape, no matmul run"
    fi
    train $dt $dt-resume "$out/$dt-a/net_final.weights"
    fr=$(forms $dt-resume)
    grep -q "amp: resumed" "$out/$dt-resume/err" && [ "$fr" = "$fa" ] \
        && ok "$dt: a resume from the run's weights and state file takes the run's forms" \
        || bad "$dt: the resume's forms '$fr' against the run's '$fa' ($(grep -m1 'resum' "$out/$dt-resume/err"))"
done
verdict "seeded runs repeat"
