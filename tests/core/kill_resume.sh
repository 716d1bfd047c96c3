#!/bin/sh
# Kill and resume: `darknet detector train` of an AMP cfg that saves every 100
# iterations, killed with SIGKILL at seeded random moments, resumed each time
# from the newest pair (<backup>/<cfg>.backup and its .amp). After every kill:
# - every weights file present is whole (the checked loader takes it);
# - every state file matches its weights (seen, size, CRC-32), except where
#   the kill fell between the two renames (the weights file's, then its state
#   file's): then the newest weights file, the one whose save was cut, has the
#   previous save's state file (other-weights) or, for a new name such as
#   <cfg>_600.weights, none; a resume from it must say so and start a fresh
#   scaler. No later run rewrites a numbered file, so such a file is accepted
#   in later checks only while it is unchanged;
# - the iteration count of the newest pair only moves forward.
# The last run trains to max_batches; its final pair must match.
#   kill_resume.sh DARKNET STATE_CHECK DATA_DIR CFG OUT SEED KILLS
set -u
darknet=$1 check=$2 data_dir=$3 cfg=$4 out=$5 seed=$6 kills=$7
rm -rf "$out" && mkdir -p "$out/backup"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
sed "s|^backup *=.*|backup = $out/backup|" "$data_dir/shapes.data" > "$out/kill.data"
base=$(basename "$cfg" .cfg)
newest="$out/backup/$base.backup"
batch=$(sed -n 's/^batch=//p' "$cfg" | head -n 1)

# The machine's pace: the first run trains until its first save (iteration
# 100) appears, T seconds after its start, and is killed a seeded random
# 0 to T seconds later. Every later run is killed 0.3T to 2.5T seconds after
# its start: before, during and between saves (one every T).

start() { # run-name: trains in the background, from the newest pair if there is one
    w=""
    [ -f "$newest" ] && w=$newest
    DARKNET_SEED=$seed "$darknet" detector train "$out/kill.data" "$cfg" $w -nogpu \
        > "$out/$1.log" 2> "$out/$1.err" &
    pid=$!
}

rand() { # i lo hi: the i-th seeded number in [lo, hi)
    awk -v s="$seed" -v i="$1" -v lo="$2" -v hi="$3" 'BEGIN { srand(s); for (j = 0; j <= i; j++) r = rand(); printf "%.2f", lo + (hi - lo) * r }'
}
prev_state="" last_iter=0 k=0 told_apart=0 pairs=0 survived=0
t0=$(date +%s.%N)
start run1
while [ ! -f "$newest" ] && kill -0 "$pid" 2> /dev/null; do sleep 0.1; done
pace=$(echo "$(date +%s.%N) $t0" | awk '{ printf "%.2f", $1 - $2 }')
echo "seed $seed: the first save came after $pace s"
while [ $k -lt "$kills" ]; do
    k=$((k + 1))
    if [ $k -eq 1 ]; then
        d=$(rand 0 0 "$pace")
    else
        d=$(rand $k "$(echo "$pace" | awk '{ print 0.3 * $1 }')" "$(echo "$pace" | awk '{ print 2.5 * $1 }')")
        start run$k
    fi
    sleep "$d"
    kill -KILL "$pid" 2> /dev/null && survived=$((survived + 1))
    wait "$pid" 2> /dev/null
    # The run just killed resumed from the previous newest pair, if it got as
    # far as loading it.
    if [ -n "$prev_state" ] && grep -q "Done!" "$out/run$k.err"; then
        if [ "$prev_state" = match ]; then
            grep -q "resumed the scaler from $newest.amp" "$out/run$k.err" \
                && ok "run $k resumed the scaler from the matching pair" \
                || bad "run $k did not resume the scaler: $(grep 'amp:' "$out/run$k.err" | head -n 2)"
        elif [ "$prev_state" = other-weights ]; then
            grep -q "belongs to other weights" "$out/run$k.err" \
                && ok "run $k told the mismatched state apart and started a fresh scaler" \
                || bad "run $k resumed a state of other weights: $(grep 'amp:' "$out/run$k.err" | head -n 2)"
        elif [ "$prev_state" = none ]; then
            grep -q "no $newest.amp: starting with a fresh scaler" "$out/run$k.err" \
                && ok "run $k found no state file and started a fresh scaler" \
                || bad "run $k did not say that the state file was missing: $(grep 'amp:' "$out/run$k.err" | head -n 2)"
        fi
    fi
    set -- "$out"/backup/*.weights "$out"/backup/*.backup
    files=""
    for f in "$@"; do [ -f "$f" ] && files="$files $f"; done
    prev_state=""
    if [ -z "$files" ]; then
        ok "kill $k after ${d}s: no pair saved yet"
        continue
    fi
    # shellcheck disable=SC2086
    "$check" "$cfg" $files > "$out/check$k.txt" 2> /dev/null
    n=$(wc -l < "$out/check$k.txt")
    # shellcheck disable=SC2086
    cut=$(ls -t $files | head -n 1)
    torn=0 cut_now=0 unexplained=""
    grep -v ' whole .*state=match$' "$out/check$k.txt" > "$out/odd$k.txt"
    while read -r line; do
        if grep -qxF "$line" "$out/torn.txt" 2> /dev/null; then
            torn=$((torn + 1)) # cut by an earlier kill, unchanged since
        elif [ "${line%% *}" = "$cut" ] && [ $cut_now -eq 0 ] \
            && echo "$line" | grep -q ' whole .*state=\(other-weights\|none\)$'; then
            echo "$line" >> "$out/torn.txt"
            torn=$((torn + 1)) cut_now=1 told_apart=$((told_apart + 1))
        else
            unexplained="$unexplained${unexplained:+; }$line"
        fi
    done < "$out/odd$k.txt"
    pairs=$((pairs + n))
    tmp=$(find "$out/backup" -name '*tmp*' | wc -l)
    [ -z "$unexplained" ] \
        && ok "kill $k after ${d}s: $n weights files whole, $((n - torn)) state files match, $torn cut between the renames (the previous save's state file or none), $tmp stray temporary files" \
        || bad "kill $k after ${d}s: $unexplained"
    if [ -f "$newest" ]; then
        line=$(grep "^$newest " "$out/check$k.txt")
        seen=$(echo "$line" | sed -n 's/.* seen=\([0-9]*\).*/\1/p')
        prev_state=$(echo "$line" | sed -n 's/.* state=\([a-z-]*\).*/\1/p')
        iter=$((seen / batch))
        [ "$iter" -ge "$last_iter" ] && ok "the newest pair is at iteration $iter (was $last_iter)" \
            || bad "the newest pair went back from iteration $last_iter to $iter"
        last_iter=$iter
    fi
done

# The last run trains to the end from the newest pair.
k=$((k + 1))
start run$k
wait "$pid"
rc=$?
[ $rc -eq 0 ] && ok "the last run, resumed at iteration $last_iter, trained to the end" \
    || bad "the last run failed (exit $rc): $(tail -n 2 "$out/run$k.err")"
final="$out/backup/${base}_final.weights"
"$check" "$cfg" "$final" > "$out/check_final.txt" 2> /dev/null
grep -q ' whole .*state=match' "$out/check_final.txt" \
    && ok "final pair whole and matching: $(cat "$out/check_final.txt")" \
    || bad "final pair: $(cat "$out/check_final.txt")"
echo "$survived kills of a running trainer; $pairs weights files checked, $told_apart saves cut between the renames (told apart)"
verdict "kill and resume"
