#!/bin/sh
# The darknet-amp program's -amp switch and its start-up line (plugin/cli.c):
# - `-amp float16` on a cfg saying amp=1 amp_dtype=bfloat16 trains in
#   float16, says once that it overrides amp_dtype=bfloat16, and its weights
#   are byte for byte those of the cfg saying amp_dtype=float16 (same seed);
# - `-amp 0` on that cfg trains without AMP, says it overrides amp=1, and
#   its weights are those of the cfg without amp keys;
# - `-amp bfloat16` on a cfg without AMP keys: no conflict line; `-amp 1`:
#   the CPU's default (bfloat16); the switch anywhere among the arguments;
# - malformed switches refused with exit status 2 and a message;
# - every run's stderr has exactly one start-up line, "darknet-amp VERSION
#   (...): AMP on, DTYPE (WHERE)" or "AMP off (...)", before the layer table.
#   program.sh DARKNET DATA_DIR CFG OUT
set -u
darknet=$1 data_dir=$2 cfg=$3 out=$4
rm -rf "$out" && mkdir -p "$out"
# One convolution form, not the fastest by timing (which may differ from one
# run to the next, and with it the sums' order): byte-for-byte comparisons.
export DARKNET_AMP_CONV=direct
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict

# run NAME KEYS ARGS...: trains a copy of CFG with KEYS (\n-separated) in
# [net] for 4 iterations into $out/NAME/, with ARGS after `detector train`
# (DATA and CFG stand for the run's own files).
run() {
    name=$1 keys=$2
    shift 2
    d=$out/$name
    mkdir -p "$d"
    sed "s|^backup *=.*|backup = $d|" "$data_dir/shapes.data" > "$d/s.data"
    sed "s/^max_batches=.*/max_batches=4/; s|^\[net\]\$|[net]$keys|" "$cfg" > "$d/p.cfg"
    args=""
    for a in "$@"; do
        case $a in DATA) a=$d/s.data ;; CFG) a=$d/p.cfg ;; esac
        args="$args $a"
    done
    # shellcheck disable=SC2086
    DARKNET_SEED=1 "$darknet" detector train $args -nogpu > "$d/out.log" 2> "$d/err.log"
    echo $? > "$d/rc"
}
rc() { cat "$out/$1/rc"; }
banner() { grep '^darknet-amp [0-9]' "$out/$1/err.log"; }
# one start-up line, before darknet's layer table, saying $2
check_banner() {
    n=$(banner "$1" | wc -l)
    first=$(grep -n -m1 '^darknet-amp [0-9]' "$out/$1/err.log" | cut -d: -f1)
    table=$(grep -n -m1 '^layer ' "$out/$1/err.log" | cut -d: -f1)
    if [ "$n" -eq 1 ] && [ "${first:-9999}" -lt "${table:-0}" ] && banner "$1" | grep -qF "$2"; then
        ok "$1: one start-up line, before the layer table: $(banner "$1")"
    else
        bad "$1: expected one start-up line saying '$2' before the layer table (line ${first:-none}, table ${table:-none}), got $n: $(banner "$1")"
    fi
}

run switch16 '\namp=1\namp_dtype=bfloat16' DATA CFG -amp float16
run cfg16 '\namp=1\namp_dtype=float16' DATA CFG
run off '\namp=1\namp_dtype=bfloat16' DATA CFG -amp 0
run fp32 '' DATA CFG
run plain '' DATA -amp bfloat16 CFG
run one '' DATA CFG -amp 1
for r in switch16 cfg16 off fp32 plain one; do
    [ "$(rc $r)" = 0 ] || bad "$r: exit status $(rc $r): $(tail -n 2 "$out/$r/err.log")"
done

check_banner switch16 "AMP on, float16 (-amp float16)"
check_banner cfg16 "AMP on, float16 ($out/cfg16/p.cfg [net] amp=1)"
check_banner off "AMP off (-amp 0)"
check_banner fp32 "AMP off ($out/fp32/p.cfg [net] has no amp=1; -amp bfloat16 or -amp float16 turns it on)"
check_banner plain "AMP on, bfloat16 (-amp bfloat16)"
check_banner one "AMP on, bfloat16 (-amp 1)"
banner switch16 | grep -Eq "; (CPU build|CUDA build, on the CPU)\)" && ok "the start-up line names the build: $(banner switch16 | sed 's/.*(darknet/(darknet/; s/): AMP.*/)/')" \
    || bad "the start-up line does not name the build: $(banner switch16)"

conflicts() { grep -c "^darknet-amp: -amp .* overrides" "$out/$1/err.log"; }
want="darknet-amp: -amp float16 overrides $out/switch16/p.cfg [net] amp_dtype=bfloat16"
[ "$(conflicts switch16)" -eq 1 ] && grep -qxF "$want" "$out/switch16/err.log" \
    && ok "switch16: the conflict said once: $want" \
    || bad "switch16: expected once '$want', got: $(grep 'overrides' "$out/switch16/err.log")"
want="darknet-amp: -amp 0 overrides $out/off/p.cfg [net] amp=1"
[ "$(conflicts off)" -eq 1 ] && grep -qxF "$want" "$out/off/err.log" \
    && ok "off: the conflict said once: $want" \
    || bad "off: expected once '$want', got: $(grep 'overrides' "$out/off/err.log")"
for r in cfg16 fp32 plain one; do
    [ "$(conflicts $r)" -eq 0 ] || bad "$r: a conflict line where the cfg has none: $(grep overrides "$out/$r/err.log")"
done
[ $fails -eq 0 ] && ok "no conflict line without a conflict (cfg16, fp32, plain, one)"

# What trained: the AMP description and the progress lines.
grep -q "^amp: .*: float16, dynamic loss scale" "$out/switch16/err.log" \
    && ok "switch16: the plugin trained in float16 ($(grep -m1 '^amp: .*: float16' "$out/switch16/err.log" | cut -c1-60)...)" \
    || bad "switch16: no float16 description: $(grep -m1 '^amp: ' "$out/switch16/err.log")"
grep -q '^4: .*, scale [0-9]*, [0-9]* skipped$' "$out/switch16/out.log" \
    && ok "switch16: progress lines with the loss scale" || bad "switch16: no loss scale in: $(grep '^4: ' "$out/switch16/out.log")"
! grep -q 'scale' "$out/off/out.log" && ! grep -q '^amp: .*loss scale' "$out/off/err.log" \
    && ok "off: no AMP in the run (no scale, no description)" || bad "off: AMP ran: $(grep -m1 'scale' "$out/off/out.log" "$out/off/err.log")"

# The switch is the cfg key: the same weights, byte for byte.
same() { # a b what
    if cmp -s "$out/$1/p_final.weights" "$out/$2/p_final.weights"; then
        ok "$3: $1 and $2 final weights identical ($(wc -c < "$out/$1/p_final.weights") bytes)"
    else
        bad "$3: $1 and $2 final weights differ: $(cmp "$out/$1/p_final.weights" "$out/$2/p_final.weights" 2>&1 | head -n 1)"
    fi
}
same switch16 cfg16 "-amp float16 trains as amp_dtype=float16"
same off fp32 "-amp 0 trains as a cfg without AMP"
# and differs from what it overrides (else the comparisons above prove nothing)
run cfgbf '\namp=1\namp_dtype=bfloat16' DATA CFG
cmp -s "$out/switch16/p_final.weights" "$out/cfgbf/p_final.weights" \
    && bad "-amp float16 trained exactly as the overridden bfloat16 cfg: the switch had no effect" \
    || ok "-amp float16's weights differ from the overridden amp_dtype=bfloat16's"

# Malformed switches: exit 2, a message, nothing trained.
refused() { # name expected-text args...
    name=$1 want=$2
    shift 2
    "$darknet" "$@" > "$out/$name.txt" 2>&1
    r=$?
    [ $r -eq 2 ] && grep -qF -- "$want" "$out/$name.txt" && ! grep -q '^layer ' "$out/$name.txt" \
        && ok "refused (exit 2): $(head -n 1 "$out/$name.txt")" \
        || bad "$name: exit $r, expected 2 and '$want': $(head -n 3 "$out/$name.txt")"
}
refused bad_dtype "-amp fp8: expected bfloat16, float16, float32, 1" detector train "$out/fp32/s.data" "$cfg" -amp fp8
refused no_value "-amp needs a value" detector train "$out/fp32/s.data" "$cfg" -amp
refused map_every "-map_every 0: expected a number of iterations >= 1" detector train "$out/fp32/s.data" "$cfg" -map_every 0

verdict "-amp and the start-up line"
