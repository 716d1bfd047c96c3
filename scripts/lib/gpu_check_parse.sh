# scripts/gpu-check's parsers (sourced, POSIX sh): pure text in, text out, so
# that `scripts/gpu-check --self-test` (CTest unit.gpu_check) holds them
# against canned input on any machine: the plugin's per-layer GPU profile
# lines, ctest's output, the training driver's time lines, cuDNN versions.

# "A.B.C" > "X.Y.Z"?
ver_gt() {
    awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, "."); split(b, y, ".")
        for (i = 1; i <= 3; i++) if (x[i] + 0 != y[i] + 0) exit !(x[i] + 0 > y[i] + 0); exit 1 }'
}

# cudnn_version.h -> "9.14.0" (empty when it has no version)
header_version() {
    [ -r "$1" ] || return 0
    awk '$1 == "#define" && $2 ~ /^CUDNN_(MAJOR|MINOR|PATCHLEVEL)$/ { v[$2] = $3 + 0 }
        END { if ("CUDNN_MAJOR" in v) printf "%d.%d.%d\n", v["CUDNN_MAJOR"], v["CUDNN_MINOR"], v["CUDNN_PATCHLEVEL"] }' "$1"
}

# the driver's stdout (--time lines "time ITER SECONDS CALLS MIB") -> "images/s peakMiB calls/step"
figures() { # file batch warm
    awk -v b="$2" -v w="$3" 'BEGIN { m = -1; c = 0 }
        $1 == "time" { if ($2 > w) { s += $3; n++; if ($4 < 0) c = -1; else if (c >= 0) c += $4 }
                       if ($5 > m) m = $5 }
        END { if (!n || s <= 0) { print "n/a n/a n/a"; exit }
              printf "%.1f %s %s\n", n * b / s, m < 0 ? "n/a" : sprintf("%.0f", m),
                     c < 0 ? "n/a" : sprintf("%.1f", c / n) }' "$1"
}

# numbers, one a line -> "median min max count" (n/a when none)
stats() {
    sort -n | awk '{ v[++n] = $1 } END { if (!n) { print "n/a n/a n/a 0"; exit }
        m = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        printf "%.1f %.1f %.1f %d\n", m, v[1], v[n], n }'
}

# ctest's output -> "name<TAB>result<TAB>seconds" per test (result: Passed,
# Skipped, Failed, Timeout, Not Run, Exception: ...)
ctest_results() {
    awk '/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / {
            line = $0; sub(/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: /, "", line)
            name = line; sub(/ .*/, "", name); rest = substr(line, length(name) + 1); sec = ""
            if (match(rest, /[0-9.]+ sec *$/)) { sec = substr(rest, RSTART); sub(/ sec *$/, "", sec)
                                                 rest = substr(rest, 1, RSTART - 1) }
            sub(/^[ .]*/, "", rest); sub(/^\*+/, "", rest); sub(/ +$/, "", rest)
            print name "\t" rest "\t" sec }' "$1"
}
# ctest_results' lines -> "P passed, F failed, S skipped of N" and, after a
# tab, the names of the failed ones
ctest_counts() {
    awk -F '\t' '{ n++ } $2 == "Passed" { p++; next } $2 ~ /^Skipped/ { s++; next }
        { f++; bad = bad (bad ? ", " : "") $1 " (" $2 ")" }
        END { printf "%d passed, %d failed, %d skipped of %d\t%s\n", p, f, s, n, bad }' "$1"
}

# The plugin's per-layer profile (DARKNET_AMP_PROFILE=1, at the end of training):
#   amp: profile: gpu layer %3d %-8s fwd F bwd B upd U convert C kernel K ms/step  LABEL
#   amp: profile: gpu total fwd F bwd B upd U convert C kernel K scaling S ms/step over N steps
# Two runs' stderr (AMP float32, AMP float16) -> the markdown tables joined by
# layer index; status 1, after saying so, when a run printed none of them.
profile_tables() { # fp32.err fp16.err
    awk '
    FNR == 1 { f++ }
    function val(key,   k) { for (k = 1; k < NF; k++) if ($k == key) return $(k + 1) + 0; return 0 }
    /^amp: profile: gpu layer / {
        i = $5 + 0; lines[f]++; seen[i] = 1; type[i] = $6; if (i > top) top = i
        ms[f, i] = val("fwd") + val("bwd") + val("upd"); cv[f, i] = val("convert"); kr[f, i] = val("kernel")
        l = $0; sub(/^.* ms\/step */, "", l); label[f, i] = l; has[f, i] = 1; next }
    /^amp: profile: gpu total / {
        tot[f] = sprintf("%.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %d",
                         val("fwd"), val("bwd"), val("upd"), val("fwd") + val("bwd") + val("upd"),
                         val("convert"), val("kernel"), val("scaling"), val("over"))
        sum[f] = val("fwd") + val("bwd") + val("upd") + val("scaling") }
    function cell(x) { return x == "" ? "n/a" : sprintf("%.3f", x) }
    function speed(a, b) { return (a != "" && b != "" && b > 0) ? sprintf("%.2fx", a / b) : "n/a" }
    END {
        if (!lines[1] || !lines[2]) {
            printf "no `amp: profile: gpu layer` lines in the %s run%s stderr\n",
                   !lines[1] && !lines[2] ? "AMP float32 and AMP float16" : !lines[1] ? "AMP float32" : "AMP float16",
                   !lines[1] && !lines[2] ? "s'\''" : "'\''s"
            if (!lines[1] && !lines[2]) exit 1
        }
        print "| layer | type | FP32 fwd+bwd+upd ms | float16 fwd+bwd+upd ms | FP32/float16 | float16 convert ms | float16 kernel ms | float16 label |"
        print "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"
        for (i = 0; i <= top; i++) {
            if (!seen[i]) continue
            a = has[1, i] ? ms[1, i] : ""; b = has[2, i] ? ms[2, i] : ""
            lab = has[2, i] ? label[2, i] : ""
            # the FP32 run labels its layers float32; another label there is news
            if (has[1, i] && label[1, i] != lab && label[1, i] != "float32") lab = lab " (FP32: " label[1, i] ")"
            printf "| %d | %s | %s | %s | %s | %s | %s | %s |\n", i, type[i], cell(a), cell(b), speed(a, b),
                   has[2, i] ? cell(cv[2, i]) : "n/a", has[2, i] ? cell(kr[2, i]) : "n/a", lab
            if (a != "" && b != "") d[i] = a - b
        }
        print ""
        print "| run | fwd | bwd | upd | fwd+bwd+upd | convert | kernel | scaling | steps |"
        print "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        print "| AMP float32 | " (1 in tot ? tot[1] : "n/a | | | | | | |") " |"
        print "| AMP float16 | " (2 in tot ? tot[2] : "n/a | | | | | | |") " |"
        if ((1 in sum) && (2 in sum) && sum[2] > 0)
            printf "\nstep (fwd+bwd+upd+scaling): FP32 %.3f ms, float16 %.3f ms: %.2fx\n", sum[1], sum[2], sum[1] / sum[2]
        for (pass = 1; pass <= 2; pass++) {
            printf "\n%s\n\n", pass == 1 ? "Where AMP gains (FP32 ms - float16 ms, largest first):" \
                                         : "Where AMP loses (float16 ms - FP32 ms, largest first):"
            split("", used); k = 0
            for (r = 1; r <= 5; r++) {
                best = ""
                for (i in d) if (!(i in used) && (pass == 1 ? d[i] > 0 : d[i] < 0) &&
                                 (best == "" || (pass == 1 ? d[i] > d[best] : d[i] < d[best]))) best = i
                if (best == "") break
                used[best] = 1; k++
                printf "- layer %d %s: %+.3f ms/step (%s -> %s ms; %s)\n", best, type[best],
                       pass == 1 ? d[best] : -d[best], cell(ms[1, best]), cell(ms[2, best]), label[2, best]
            }
            if (!k) print "- none"
        }
    }' "$1" "$2"
}

# ---------------------------------------------------------------- self-test
self_test() {
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    fails=0 checks=0
    check() { # what expected got
        checks=$((checks + 1))
        if [ "$2" = "$3" ]; then echo "ok: $1"; else echo "FAIL: $1: expected '$2', got '$3'"; fails=$((fails + 1)); fi
    }
    has() { # what pattern file
        checks=$((checks + 1))
        if grep -qF -- "$2" "$3"; then echo "ok: $1"; else echo "FAIL: $1: no '$2' in:"; sed 's/^/  /' "$3"; fails=$((fails + 1)); fi
    }
    # the plugin's own formats
    layer() { printf 'amp: profile: gpu layer %3d %-8s fwd %8.3f bwd %8.3f upd %8.3f convert %8.3f kernel %8.3f ms/step  %s\n' "$@"; }
    total() { printf 'amp: profile: gpu total fwd %8.3f bwd %8.3f upd %8.3f convert %8.3f kernel %8.3f scaling %8.3f ms/step over %d steps\n' "$@"; }
    {
        echo "amp: 3 layers in float32 (start-up table)"
        layer 0 conv 4 8 1 0 0 float32
        layer 1 maxpool 1 1 0 0 0 float32
        layer 2 conv 10 20 2 0 0 float32
        layer 3 yolo 0.5 0.5 0 0 0 float32
        total 15.5 29.5 3 0 0 0.1 10
    } > "$tmp/fp32.err"
    {
        layer 0 conv 5 9 1 2 3 'cuDNN fwd IMPLICIT_PRECOMP_GEMM+TC, bwd-data ALGO_1+TC, wgrad cuBLAS, ws 12.0 MiB'
        layer 1 maxpool 1 1 0 0 0 float32
        layer 2 conv 4 8 1 1.5 9 'cuDNN fwd ALGO_1+TC'
        layer 3 yolo 0.5 0.5 0 0 0 float32
        total 10.5 18.5 2 3.5 12 0.4 10
        echo "train_driver: some other line"
    } > "$tmp/fp16.err"
    status=0
    profile_tables "$tmp/fp32.err" "$tmp/fp16.err" > "$tmp/p.md" || status=$?
    check "profile: status with both runs" 0 $status
    has "profile: layer 0 joined (13 -> 15 ms, 0.87x, convert, kernel, label)" \
        "| 0 | conv | 13.000 | 15.000 | 0.87x | 2.000 | 3.000 | cuDNN fwd IMPLICIT_PRECOMP_GEMM+TC, bwd-data ALGO_1+TC, wgrad cuBLAS, ws 12.0 MiB |" "$tmp/p.md"
    has "profile: layer 2 joined" "| 2 | conv | 32.000 | 13.000 | 2.46x | 1.500 | 9.000 | cuDNN fwd ALGO_1+TC |" "$tmp/p.md"
    has "profile: a float32 layer's label" "| 1 | maxpool | 2.000 | 2.000 | 1.00x | 0.000 | 0.000 | float32 |" "$tmp/p.md"
    has "profile: totals" "| AMP float16 | 10.500 | 18.500 | 2.000 | 31.000 | 3.500 | 12.000 | 0.400 | 10 |" "$tmp/p.md"
    has "profile: step ratio" "FP32 48.100 ms, float16 31.400 ms: 1.53x" "$tmp/p.md"
    has "profile: largest gain" "- layer 2 conv: +19.000 ms/step (32.000 -> 13.000 ms; cuDNN fwd ALGO_1+TC)" "$tmp/p.md"
    has "profile: the loss" "- layer 0 conv: +2.000 ms/step (13.000 -> 15.000 ms;" "$tmp/p.md"
    check "profile: one gain listed (equal layers are neither)" 1 "$(grep -c '^- layer 2 ' "$tmp/p.md")"
    echo "amp: nothing profiled" > "$tmp/none.err"
    status=0
    profile_tables "$tmp/none.err" "$tmp/none.err" > "$tmp/n.md" || status=$?
    check "profile: status without profile lines" 1 $status
    has "profile: says the lines are missing" "no \`amp: profile: gpu layer\` lines in the AMP float32 and AMP float16 runs' stderr" "$tmp/n.md"
    status=0
    profile_tables "$tmp/fp32.err" "$tmp/none.err" > "$tmp/h.md" || status=$?
    check "profile: one run without lines still tabulates the other" 0 $status
    has "profile: the float16 side n/a" "| 2 | conv | 32.000 | n/a | n/a | n/a | n/a |" "$tmp/h.md"

    printf 'train_driver: x\ntime 1 9.0 3 100\niter 1 loss 1\ntime 2 0.5 4 300\ntime 3 0.5 4 200\ntime 4 1.0 4 250\n' > "$tmp/drv.out"
    check "bench figures: 64 x 3 / 2 s, the peak, calls per step" "96.0 300 4.0" "$(figures "$tmp/drv.out" 64 1)"
    printf 'time 1 1 -1 -1\ntime 2 0.5 -1 -1\n' > "$tmp/cpu.out"
    check "bench figures without shim or device" "128.0 n/a n/a" "$(figures "$tmp/cpu.out" 64 1)"
    check "bench figures without time lines" "n/a n/a n/a" "$(figures "$tmp/none.err" 64 1)"
    check "stats: median of 3" "2.0 1.0 5.0 3" "$(printf '5\n1\n2\n' | stats)"
    check "stats: median of 2" "3.0 2.0 4.0 2" "$(printf '4\n2\n' | stats)"
    check "stats: none" "n/a n/a n/a 0" "$(printf '' | stats)"

    cat > "$tmp/ctest.log" << 'EOF'
Test project /x/build/gpu
    Start  1: dataset.generate
 1/4 Test  #1: dataset.generate .................   Passed    0.31 sec
 2/4 Test  #7: gpu.kernels ......................***Failed    3.52 sec
 3/4 Test  #9: gpu.train_parity .................***Skipped   0.02 sec
 4/4 Test #10: gpu.host_syncs ...................***Exception: SegFault  1.20 sec
50% tests passed, 2 tests failed out of 4
EOF
    ctest_results "$tmp/ctest.log" > "$tmp/ctest.tsv"
    check "ctest: a failed test's line" "$(printf 'gpu.kernels\tFailed\t3.52')" "$(sed -n 2p "$tmp/ctest.tsv")"
    check "ctest: an exception" "$(printf 'gpu.host_syncs\tException: SegFault\t1.20')" "$(sed -n 4p "$tmp/ctest.tsv")"
    check "ctest: counts and failing names" \
        "$(printf '1 passed, 2 failed, 1 skipped of 4\tgpu.kernels (Failed), gpu.host_syncs (Exception: SegFault)')" \
        "$(ctest_counts "$tmp/ctest.tsv")"

    printf '#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 19\n#define CUDNN_PATCHLEVEL 0\n' > "$tmp/cudnn_version.h"
    check "cuDNN header version" 9.19.0 "$(header_version "$tmp/cudnn_version.h")"
    check "versions: 9.19.0 > 9.14.0" yes "$(ver_gt 9.19.0 9.14.0 && echo yes || echo no)"
    check "versions: 9.14.0 > 9.14.0" no "$(ver_gt 9.14.0 9.14.0 && echo yes || echo no)"
    check "versions: 9.9.1 > 9.14.0" no "$(ver_gt 9.9.1 9.14.0 && echo yes || echo no)"
    echo "gpu-check self-test: $((checks - fails)) of $checks checks passed"
    [ $fails = 0 ]
}
