#!/bin/sh
# The <weights>.amp sidecar through real training runs (the fork's driver):
# resume with the same scale; missing -> fresh scaler; corrupt or truncated ->
# refused before training; a run killed while saving the weights, or while
# saving the sidecar, leaves the previous pair readable; a sidecar beside
# other weights (another save's, as a kill between the two renames leaves
# it) is told apart: fresh scaler, and the next save writes a matching one;
# a version 1 sidecar (no weights named) still resumes.
#   sidecar.sh DRIVER CFG LIST OUT     (CFG: amp=1, amp_growth_interval=3)
set -u
driver=$1 cfg=$2 list=$3 out=$4
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
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
# The new weights with the previous save's sidecar: the binding tells them
# apart; the weights load, the scaler starts fresh, and the next save binds.
if train after_kill2 2 --weights "$out/k.weights" --save "$out/k3.weights"; then
    if grep -q "amp: $out/k.weights.amp belongs to other weights" "$out/after_kill2.err" \
        && grep -q "starting with a fresh scaler" "$out/after_kill2.err" \
        && ! grep -q "resumed the scaler" "$out/after_kill2.err"; then
        ok "new weights + previous sidecar: told apart, fresh scaler: $(grep -o 'belongs to other weights.*' "$out/after_kill2.err" | cut -c1-230)"
    else
        bad "new weights + previous sidecar not told apart: $(grep 'amp:' "$out/after_kill2.err" | head -n 3)"
    fi
    s3=$(last_scale "$out/after_kill2.log")
    [ "$s3" = 65536 ] && ok "it trains from the cfg's scale $s3" || bad "after a mismatch it trains at scale '$s3', expected 65536"
else
    bad "does not load after the sidecar kill: $(tail -n 2 "$out/after_kill2.err")"
fi
train after_rebind 1 --weights "$out/k3.weights" --save "$out/k4.weights" \
    && grep -q "resumed the scaler from $out/k3.weights.amp: scale 65536, 2 steps" "$out/after_rebind.err" \
    && ok "the next save wrote a matching sidecar: $(grep -o 'resumed the scaler.*' "$out/after_rebind.err")" \
    || bad "the save after a mismatch does not resume: $(grep 'amp:' "$out/after_rebind.err" | head -n 2)"

# Another save's sidecar beside good weights (a.weights with b's): told apart
# the same way; the weights file is left alone.
cp "$out/a.weights" "$out/p.weights" && cp "$out/b.weights.amp" "$out/p.weights.amp"
train paired 1 --weights "$out/p.weights" --save "$out/p2.weights" \
    && grep -q "amp: $out/p.weights.amp belongs to other weights (saved with seen [0-9]*, [0-9]* bytes, CRC-32 0x[0-9a-f]*; $out/p.weights has seen" "$out/paired.err" \
    && ok "another save's sidecar told apart" || bad "another save's sidecar not told apart: $(grep 'amp:' "$out/paired.err" | head -n 2)"
cmp -s "$out/p.weights" "$out/a.weights" && ok "the weights file was left alone" || bad "weights changed"

# A version 1 sidecar (the first 60 bytes of version 2 with its own CRC-32):
# no weights named, so it resumes beside any weights, as before.
if command -v python3 > /dev/null; then
    cp "$out/a.weights" "$out/v1.weights"
    python3 - "$out/a.weights.amp" "$out/v1.weights.amp" <<'PY'
import struct, sys, zlib
b = bytearray(open(sys.argv[1], "rb").read()[:60])
b[8:16] = struct.pack("<II", 1, 44)
open(sys.argv[2], "wb").write(bytes(b) + struct.pack("<I", zlib.crc32(bytes(b))))
PY
    train v1 1 --weights "$out/v1.weights" --save "$out/v1b.weights" \
        && grep -q "resumed the scaler from $out/v1.weights.amp: scale 262144, 7 steps" "$out/v1.err" \
        && ok "a version 1 sidecar resumes: $(grep -o 'resumed the scaler.*' "$out/v1.err")" \
        || bad "a version 1 sidecar does not resume: $(grep 'amp:' "$out/v1.err" | head -n 2)"
else
    echo "skip: version 1 sidecar (no python3 to write one)"
fi

verdict "sidecar"
