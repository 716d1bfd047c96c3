#!/bin/sh
# The zoo's table: one line per cfg from OUTDIR/<name>/result (written by
# zoo_cfg.sh), then the counts. Runs after every zoo.<cfg> test of a ctest
# invocation (a fixture cleanup); a cfg whose test was not selected is said so.
# Exit 1 when a cfg failed or left no result after running.
#
#   summary.sh OUTDIR NAME...
set -u
out=$1
shift
total=0 ok=0 listed=0 failed=0 notrun=0
echo "cfg zoo: stock darknet FP32 against AMP float16 and bfloat16"
for name in "$@"; do
    total=$((total + 1))
    if [ ! -f "$out/$name/started" ]; then
        notrun=$((notrun + 1))
        echo "  $name: not run in this ctest run (not selected, or skipped before it started)"
        continue
    fi
    if [ ! -s "$out/$name/result" ]; then
        failed=$((failed + 1))
        echo "  $name: FAIL: started but left no result (crashed or timed out?)"
        continue
    fi
    line=$(cat "$out/$name/result")
    case "$line" in
    "$name ok"*) ok=$((ok + 1)) ;;
    "$name listed-not-run"*) listed=$((listed + 1)) ;;
    *) failed=$((failed + 1)) ;;
    esac
    echo "  $line"
done
echo "cfg zoo: $total cfgs, $ok ok, $failed failed, $listed listed-not-run (reasons above)," \
     "$notrun not run"
[ "$failed" = 0 ]
