#!/bin/sh
# Which CPU backend half layers get, and what the user is told:
# 1. bfloat16 by default goes through oneDNN where the CPU runs bfloat16
#    (AVX512-BF16 or AMX), with no warning;
# 2. with oneDNN limited to AVX2 (DNNL_MAX_CPU_ISA, as on a CPU without
#    AVX512-BF16 or AMX), bfloat16 goes to oneDNN's float32 kernels on
#    bfloat16-rounded operands, and one note says so;
# 3. DARKNET_AMP_CPU=emulate and =onednn are obeyed, the emulation with a
#    warning; a bad value is refused with a message naming the variable;
#    DARKNET_AMP_MAX_CPU_ISA caps the plugin's own loops (said in the
#    start-up lines), and a bad value is refused the same way;
# 4. float16 goes to oneDNN as float32 kernels on float16-rounded operands
#    (oneDNN 2.6 has no float16 convolution on CPUs), by default; with
#    DARKNET_AMP_CPU=emulate it stays in the emulation.
#   cpu_backend.sh DRIVER CFG LIST OUT ONEDNN(ON|OFF)
set -u
driver=$1 cfg=$2 list=$3 out=$4 onednn=$5
if [ "$onednn" != ON ]; then
    echo "SKIP: built without oneDNN (DARKNET_AMP_ONEDNN=OFF or libdnnl-dev missing)"
    exit 77
fi
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
sed 's|^\[net\]$|[net]\namp=1\namp_dtype=bfloat16|' "$cfg" > "$out/bf16.cfg"
sed 's|^\[net\]$|[net]\namp=1\namp_dtype=float16|' "$cfg" > "$out/fp16.cfg"
run() { # name cfg env...: one iteration, stderr to $out/name.err
    name=$1 c=$2
    shift 2
    env "$@" "$driver" --cfg "$c" --list "$list" --iters 1 > "$out/$name.out" 2> "$out/$name.err"
    echo $? > "$out/$name.rc"
}
table() { grep -E '^amp: +(bfloat16|float16) ' "$out/$1.err" | sed 's/^amp: *//' | tr -s ' '; }
warned() { grep -c 'note: this CPU has neither AVX512-BF16 nor AMX' "$out/$1.err"; }

if grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo && [ -z "${DNNL_MAX_CPU_ISA:-}" ]; then
    run native "$out/bf16.cfg"
    [ "$(table native)" != "" ] && table native | grep -Eq 'oneDNN|im2col' && ! table native | grep -Eq 'emulated|float32 kernels' \
        && ok "bfloat16 on this CPU: $(table native)" || bad "bfloat16 not through oneDNN: $(table native)"
    [ "$(warned native)" = 0 ] && ok "no warning where the CPU has bfloat16" \
        || bad "warned on a CPU with bfloat16"
else
    echo "note: this CPU has neither avx512_bf16 nor amx_bf16 (or DNNL_MAX_CPU_ISA caps oneDNN): the native case is not checked"
fi

run avx2 "$out/bf16.cfg" DNNL_MAX_CPU_ISA=AVX2
[ "$(warned avx2)" = 1 ] && ok "oneDNN limited to AVX2: one note: $(grep 'note:' "$out/avx2.err" | head -1)" \
    || bad "expected one note with DNNL_MAX_CPU_ISA=AVX2, got $(warned avx2)"
table avx2 | grep -Eq 'bfloat16 \((oneDNN convolution|im2col \+ matmul) on float32 kernels\)' && ! table avx2 | grep -q emulated \
    && ok "... and oneDNN's float32 kernels on bfloat16 operands: $(table avx2)" \
    || bad "with AVX2 only: $(table avx2)"

run emulate "$out/bf16.cfg" DARKNET_AMP_CPU=emulate
table emulate | grep -q emulated && ! table emulate | grep -Eq 'oneDNN|im2col' \
    && ok "DARKNET_AMP_CPU=emulate: $(table emulate)" || bad "DARKNET_AMP_CPU=emulate: $(table emulate)"
grep -q 'warning: the half layers are emulated in software (DARKNET_AMP_CPU=emulate)' "$out/emulate.err" \
    && ok "... with a warning: $(grep -m1 'warning:' "$out/emulate.err")" \
    || bad "DARKNET_AMP_CPU=emulate without the warning: $(grep -m1 'amp:' "$out/emulate.err")"

run sse2 "$out/bf16.cfg" DARKNET_AMP_MAX_CPU_ISA=sse2
grep -q "the plugin's loops sse2" "$out/sse2.err" \
    && ok "DARKNET_AMP_MAX_CPU_ISA=sse2: $(grep -m1 "the plugin's loops" "$out/sse2.err")" \
    || bad "DARKNET_AMP_MAX_CPU_ISA=sse2 not said: $(grep -m1 "CPU:" "$out/sse2.err")"
run isabogus "$out/bf16.cfg" DARKNET_AMP_MAX_CPU_ISA=avx3
[ "$(cat "$out/isabogus.rc")" != 0 ] && grep -q 'DARKNET_AMP_MAX_CPU_ISA=avx3: expected sse2, avx, avx2 or avx512' "$out/isabogus.err" \
    && ok "DARKNET_AMP_MAX_CPU_ISA=avx3 refused: $(grep -m1 'DARKNET_AMP_MAX_CPU_ISA' "$out/isabogus.err")" \
    || bad "DARKNET_AMP_MAX_CPU_ISA=avx3 not refused (exit $(cat "$out/isabogus.rc")): $(tail -n 2 "$out/isabogus.err")"

run bogus "$out/bf16.cfg" DARKNET_AMP_CPU=fast
[ "$(cat "$out/bogus.rc")" != 0 ] && grep -q 'DARKNET_AMP_CPU=fast: expected auto, onednn or emulate' "$out/bogus.err" \
    && ok "DARKNET_AMP_CPU=fast refused: $(grep -m1 'DARKNET_AMP_CPU' "$out/bogus.err")" \
    || bad "DARKNET_AMP_CPU=fast not refused (exit $(cat "$out/bogus.rc")): $(tail -n 2 "$out/bogus.err")"

run fp16 "$out/fp16.cfg"
table fp16 | grep -Eq 'float16 \((oneDNN convolution|im2col \+ matmul) on float32 kernels\)' && ! table fp16 | grep -q emulated \
    && ok "float16 by default: $(table fp16)" || bad "float16 by default: $(table fp16)"
run fp16emu "$out/fp16.cfg" DARKNET_AMP_CPU=emulate
table fp16emu | grep -q 'float16 (emulated)' && ! table fp16emu | grep -Eq 'oneDNN|im2col' \
    && ok "float16 with DARKNET_AMP_CPU=emulate: $(table fp16emu)" \
    || bad "float16 with DARKNET_AMP_CPU=emulate: $(table fp16emu)"

for f in "$out"/*.rc; do
    n=$(basename "$f" .rc)
    [ "$n" = bogus ] || [ "$n" = isabogus ] || [ "$(cat "$f")" = 0 ] || bad "$n run failed: $(tail -n 2 "$out/$n.err")"
done
[ "$fails" = 0 ] && echo "PASS" || echo "FAIL: $fails checks"
[ "$fails" = 0 ]
