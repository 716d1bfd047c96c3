# Shell functions shared by scripts/main-job and scripts/accuracy (sourced,
# POSIX sh): build the tools, generate a dataset, train and validate one run.
# One copy of the training, validation and summary logic, so the main job and
# the accuracy study measure the same thing the same way.
#
# The caller sets: prog (prefix of error messages), root (the checkout),
# build (the build directory); train_run also reads show_every (progress
# line every N iterations, default 50) and iterations (overrides the cfg's
# max_batches when not empty).

# shellcheck disable=SC2154 # prog, root, build: the caller's (above)
die() { echo "$prog: $*" >&2; exit 1; }

now() { date +%s.%N; }

# Configures $build (CPU only) and builds the programs a training run needs.
build_tools() {
    mkdir -p "$root/build"
    echo "== build ($build)"
    cmake -S "$root" -B "$build" -DDARKNET_AMP_CUDA=OFF > "$root/build/$prog-configure.log" 2>&1 || {
        cat "$root/build/$prog-configure.log"; die "cmake configure failed (log above)"; }
    cmake --build "$build" -j "$(nproc)" --target darknet_cli gen_dataset eval_detector > /dev/null \
        || die "build failed in $build"
}

# make_dataset DIR TRAIN VALID: the generated three-shape dataset (seed 1),
# kept when DIR already holds one of that size. A dataset's images depend on
# (seed, split, index) only, so a larger one starts with a smaller one's.
make_dataset() {
    if [ ! -s "$1/valid.txt" ] || [ "$(wc -l < "$1/train.txt")" != "$2" ] \
        || [ "$(wc -l < "$1/valid.txt")" != "$3" ]; then
        rm -rf "$1"
        "$build/bin/gen_dataset" --seed 1 --train "$2" --valid "$3" "$1"
    fi
}

# train_run NAME DIR CFG DATA KEYS: trains CFG with KEYS (lines joined by a
# literal \n, e.g. "amp=1\namp_dtype=float16") added to [net], on the
# dataset DATA (gen_dataset's directory), with the fork's `darknet-amp
# detector train`, then validates the final weights on DATA's valid list.
# Shows, as they come, the program's start-up banner and its warnings and
# notes (start_show). Writes into DIR: the cfg, train.log (stdout),
# train.err (stderr), eval.log, loss.dat (one row per iteration: iteration,
# loss, average loss, step seconds, scale, skipped steps; NaN where the run
# has no AMP, so that gnuplot leaves a gap) and summary (key|value lines,
# read with summary_value).
train_run() {
    name=$1 dir=$2 src=$3 dset=$4 keys=$5
    rm -rf "$dir" && mkdir -p "$dir/weights"
    cfg=$dir/$(basename "$src")
    sed "s|^\[net\]\$|[net]\n$keys|" "$src" > "$cfg"
    [ -z "${iterations:-}" ] || sed -i "s/^max_batches=.*/max_batches=$iterations/" "$cfg"
    sed "s|^backup *=.*|backup = $dir/weights|" "$dset/shapes.data" > "$dir/shapes.data"
    n_iter=$(sed -n 's/^max_batches=//p' "$cfg")
    batch=$(sed -n 's/^batch=//p' "$cfg")
    every=${show_every:-50}
    echo "== train $name: $n_iter iterations of $batch images (every ${every}th shown; log $dir/train.log)"
    start=$(now)
    # stdbuf: darknet prints with printf, block-buffered into a pipe. The
    # pipeline's status is the last command's, so darknet's own is kept in a file.
    # GNU time: the run's peak resident memory (its exit status is darknet's).
    # stdout (fd 3) goes to train.log and the progress lines; stderr to
    # train.err and, filtered, straight to the console (fd 4): the start-up
    # lines come before the first iteration, so they show under "== train".
    {
        {
            { st=0; stdbuf -oL /usr/bin/time -f %M -o "$dir/maxrss" "$build/bin/darknet-amp" detector train \
                  "$dir/shapes.data" "$cfg" 2>&1 1>&3 3>&- || st=$?; echo "$st" > "$dir/train.rc"; } \
                | tee "$dir/train.err" | start_show 3>&- >&4
        } 3>&1 | tee "$dir/train.log" | awk -F': |, ' -v every="$every" '/^[0-9]+: / && ($1 % every == 0 || $1 == 1) {
            extra = ""; for (i = 7; i <= NF; i++) extra = extra ", " $i
            printf "  iteration %5d  loss %8.3f  avg %8.3f  %s%s\n", $1, $2, $3, $5, extra; fflush() }'
    } 4>&1
    seconds=$(echo "$start $(now)" | awk '{ printf "%.1f", $2 - $1 }')
    rc=$(cat "$dir/train.rc" 2>/dev/null || echo "unknown")
    weights=$(ls "$dir"/weights/*_final.weights 2>/dev/null || true)
    if [ "$rc" != 0 ] || [ -z "$weights" ]; then
        echo "$prog: training $name failed (exit status $rc, final weights: ${weights:-none}); last lines of $dir/train.err:" >&2
        tail -n 15 "$dir/train.err" >&2
        exit 1
    fi
    "$build/bin/eval_detector" "$cfg" "$weights" "$dset/valid.txt" --names "$dset/shapes.names" \
        2>"$dir/eval.err" > "$dir/eval.log" || { cat "$dir/eval.err" >&2; die "validating $name failed"; }
    sed -n 's/^  mAP/  validation: mAP/p' "$dir/eval.log"
    awk -F': |, ' '/^[0-9]+: / {
        scale = "NaN"; skipped = "NaN"
        for (i = 7; i <= NF; i++) {
            if ($i ~ /^scale /) { scale = substr($i, 7) }
            else if ($i ~ / skipped$/) { skipped = $i; sub(/ skipped$/, "", skipped) }
        }
        sub(/ avg$/, "", $3); sub(/ seconds$/, "", $5)
        for (i = 2; i <= 3; i++) if ($i !~ /^[0-9.eE+-]+$/) $i = "NaN"  # -nan, inf
        print $1, $2, $3, $5, scale, skipped }' "$dir/train.log" > "$dir/loss.dat"
    [ -s "$dir/loss.dat" ] || die "no iteration lines in $dir/train.log"
    last=$(tail -n 1 "$dir/loss.dat")
    {
        echo "wall time|$seconds s"
        awk -v s="$seconds" -v n="$n_iter" -v b="$batch" 'BEGIN { printf "images/s (incl. loading)|%.1f\n", (s > 0 ? n * b / s : 0) }'
        # darknet's "seconds" per iteration: the training step alone; the
        # first step (allocation, oneDNN primitive creation) is left out.
        awk -v b="$batch" 'NR > 1 { s += $4; n++ } END { printf "images/s (training steps)|%s\n", (s > 0 ? sprintf("%.1f", n * b / s) : "-") }' "$dir/loss.dat"
        echo "$last" | awk '{ printf "final average loss|%.3f\n", $3 }'
        sed -n 's/.*map50=\([0-9.]*\) recall=\([0-9.]*\).*/validation mAP@0.5|\1\nvalidation recall (>=0.25)|\2/p' "$dir/eval.log" \
            | awk -F'|' '{ printf "%s|%.1f%%\n", $1, 100 * $2 }'
        echo "$last" | awk '$5 != "NaN" { printf "skipped steps|%d\nfinal loss scale|%s\n", $6, $5 }'
        awk 'NR == 1 && $1 + 0 > 0 { printf "peak memory|%.0f MiB\n", $1 / 1024 }' "$dir/maxrss" 2>/dev/null || true
        echo "half path|$(half_path "$dir/train.err")"
        echo "weights|$weights"
    } > "$dir/summary"
}

# start_show: reads a run's stderr and shows, as they come and once each,
# the program's start-up banner ("darknet-amp 0.2.0 (...): AMP on, ..."),
# its own lines ("darknet-amp: -amp 0 overrides ...") and the plugin's
# warnings and notes ("amp: warning: ...", "amp: note: "). A read loop, not
# awk: Debian's awk (mawk) reads a pipe in blocks, which would hold these
# lines back until the run has written a few KiB more or ended.
start_show() {
    seen="
"
    while IFS= read -r line || [ -n "$line" ]; do
        case $line in
        "darknet-amp "* | "darknet-amp:"* | "amp: warning:"* | "amp: note:"*)
            case $seen in *"
$line
"*) ;;
            *)
                seen="$seen$line
"
                printf '  %s\n' "$line"
                ;;
            esac
            ;;
        esac
    done
}

# start_lines FILE: the warnings and notes among those lines of a run's
# stderr (FILE), once each: not the banner nor the program's lines that only
# say where things are (its training record, what -map validates on).
start_lines() {
    awk '/^(darknet-amp:|amp: (warning|note):)/ && !/^darknet-amp: (training record |-map: validation mAP)/ \
         && !seen[$0]++' "$1" 2>/dev/null || true
}

# half_path FILE: what ran a run's half layers, in words, from the plugin's
# start-up table in its stderr (FILE): the first "layer precision:" table's
# half rows, "<dtype> (<label>)", where the CPU backend's labels are the form
# ("oneDNN convolution", "im2col + matmul", ...), " on float32 kernels" when
# oneDNN has no kernels of the half type here and computes on operands
# rounded to it, or "emulated"; then its "CPU: oneDNN <isa>; the plugin's
# loops <isa>" line. "-" when the run printed no table (amp=0), "none" when
# no layer ran in half. A label of another backend is shown as it is.
half_path() {
    awk '
        !table && /^amp: .*layer precision:$/ { table = 1; next }
        table == 1 && /^amp:   (float16|bfloat16) \(/ {
            dtype = $2; label = $0
            sub(/^amp:   [a-z0-9]+ \(/, "", label); sub(/\) +[0-9]+ layers?: .*$/, "", label)
            if (label == "emulated") emulated = 1
            else if (label ~ /^(oneDNN |im2col \+ matmul)/) {
                if (label ~ / on float32 kernels$/) f32 = 1; else native = 1
            } else if (!(label in other)) { other[label] = 1; others = others (others == "" ? "" : ", ") label }
            next
        }
        table == 1 && /^amp:   [a-z]/ { next }
        table == 1 { table = 2 }
        /^amp:   CPU: oneDNN / && isa == "" {
            isa = $4; sub(/;$/, "", isa); loops = $0; sub(/.*the plugin.s loops /, "", loops); sub(/ .*/, "", loops)
        }
        END {
            if (!table) { print "-"; exit }
            s = ""
            if (native) s = "oneDNN " dtype " kernels" (isa != "" ? " (" isa ")" : "")
            if (f32) s = s (s != "" ? " + " : "") "oneDNN float32 kernels, " dtype " operands" (isa != "" ? " (" isa ")" : "")
            if (emulated) s = s (s != "" ? " + " : "") "emulated" (loops != "" ? " (" loops " loops)" : "")
            if (others != "") s = s (s != "" ? " + " : "") others
            print (s != "" ? s : "none (all layers float32)")
        }' "$1" 2>/dev/null || echo "-"
}

# summary_value DIR KEY: a value from DIR/summary.
summary_value() { grep -F "$2|" "$1/summary" | cut -d'|' -f2; }
