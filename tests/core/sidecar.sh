#!/bin/sh
# The <weights>.amp sidecar through real training runs (the fork's driver):
# resume with the same scale; missing -> fresh scaler; corrupt or truncated ->
# refused before training; a run killed while saving the weights, or while
# saving the sidecar, leaves the previous pair readable.
#   sidecar.sh DRIVER CFG LIST OUT     (CFG: amp=1, amp_growth_interval=3)
set -u
driver=$1 cfg=$2 list=$3 out=$4
rm -rf "$out" && mkdir -p "$out"
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
train() { # name iters [extra driver args]
    n=$1 it=$2
    shift 2
    "$driver" --cfg "$cfg" --list "$list" --iters "$it" --seed 3 "$@" > "$out/$n.log" 2> "$out/$n.err"
}
last_scale() { sed -n 's/.*, scale \([0-9.e+]*\), .*/\1/p' "$1" | tail -n 1; }

# 7 steps with growth every 3 good steps: 65536 -> 131072 (step 3) -> 262144 (step 6).
train first 7 --save "$out/a.weights" || bad "first run failed: $(tail -n 3 "$out/first.err")"
s1=$(last_scale "$out/first.log")
[ -s "$out/a.weights.amp" ] && ok "a.weights.amp written next to a.weights" || bad "no a.weights.amp"
[ "$s1" = 262144 ] && ok "first run ended at scale $s1 (65536 grown twice)" || bad "first run ended at scale '$s1', expected 262144"

train resumed 1 --weights "$out/a.weights" --save "$out/b.weights" || bad "resumed run failed"
grep -q "resumed the scaler from $out/a.weights.amp: scale 262144, 7 steps" "$out/resumed.err" \
    && ok "resumed: $(grep -o 'resumed the scaler.*' "$out/resumed.err")" \
    || bad "resume message missing: $(grep amp: "$out/resumed.err")"
s2=$(last_scale "$out/resumed.log")
[ "$s2" = 262144 ] && ok "the resumed run trains at scale $s2" || bad "resumed run at scale '$s2'"

cp "$out/a.weights" "$out/m.weights"
train missing 1 --weights "$out/m.weights" --save "$out/m2.weights" || bad "run without sidecar failed"
grep -q "no $out/m.weights.amp: starting with a fresh scaler (scale 65536)" "$out/missing.err" \
    && ok "missing sidecar: fresh scaler, said once ($(grep -c 'fresh scaler' "$out/missing.err") line)" \
    || bad "missing sidecar not reported"

for kind in corrupt truncated; do
    cp "$out/a.weights" "$out/$kind.weights"
    cp "$out/a.weights.amp" "$out/$kind.weights.amp"
    if [ $kind = corrupt ]; then
        printf '\377' | dd of="$out/$kind.weights.amp" bs=1 seek=30 conv=notrunc 2>/dev/null
    else
        head -c 40 "$out/a.weights.amp" > "$out/$kind.weights.amp"
    fi
    if train $kind 1 --weights "$out/$kind.weights"; then
        bad "$kind sidecar accepted"
    elif grep -q "$kind.weights.amp" "$out/$kind.err" && ! grep -q '^iter' "$out/$kind.log"; then
        ok "$kind sidecar refused before training: $(grep "$kind.weights.amp" "$out/$kind.err" | head -n 1)"
    else
        bad "$kind sidecar: unclear refusal: $(tail -n 2 "$out/$kind.err")"
    fi
    cmp -s "$out/$kind.weights" "$out/a.weights" && ok "$kind: the weights file was left alone" || bad "$kind: weights changed"
done

# Killed while writing the weights: a file size limit makes the kernel send
# SIGXFSZ in the middle of the 8 MB write.
cp "$out/a.weights" "$out/k.weights" && cp "$out/a.weights.amp" "$out/k.weights.amp"
(ulimit -f 64; train killed_weights 1 --weights "$out/k.weights" --save "$out/k.weights")
rc=$?
[ $rc -gt 128 ] && ok "run killed by signal $((rc - 128)) while saving weights" || bad "run was not killed (exit $rc)"
cmp -s "$out/k.weights" "$out/a.weights" && cmp -s "$out/k.weights.amp" "$out/a.weights.amp" \
    && ok "previous weights and sidecar intact after the kill" || bad "previous weights or sidecar changed"
train after_kill 1 --weights "$out/k.weights" --save "$out/k2.weights" \
    && grep -q "resumed the scaler" "$out/after_kill.err" && ok "the previous pair loads and resumes" \
    || bad "the previous pair does not load"

# Killed while writing the sidecar (test aid): new weights, previous sidecar, readable.
cp "$out/a.weights.amp" "$out/k.weights.amp"
DARKNET_AMP_TEST_CRASH_IN_SAVE=1 train killed_sidecar 1 --weights "$out/k.weights" --save "$out/k.weights"
rc=$?
[ $rc -gt 128 ] && ok "run killed by signal $((rc - 128)) while saving the sidecar" || bad "run was not killed (exit $rc)"
cmp -s "$out/k.weights.amp" "$out/a.weights.amp" && ok "previous sidecar intact" || bad "sidecar changed"
train after_kill2 1 --weights "$out/k.weights" --save "$out/k3.weights" \
    && grep -q "resumed the scaler" "$out/after_kill2.err" && ok "new weights + previous sidecar load" \
    || bad "does not load after the sidecar kill"

[ $fails -eq 0 ] && echo "PASS: sidecar" || { echo "FAIL: $fails failed checks"; exit 1; }
