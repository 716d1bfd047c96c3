#!/bin/sh
# `darknet-amp detector train` writes <backup>/<cfg>.record.tsv, and -map
# evaluates the validation mAP@0.5 (plugin/cli.c):
# - run 1, 120 iterations in float16 with -map_every 50: 120 rows of 9
#   tab-separated columns after the header; loss, average loss, rate, scale
#   and skipped steps equal to the progress lines'; wall time never going
#   back; map50 at iterations 50, 100 and 120 only, equal to the "map:" lines
#   and, at 100, to eval_detector's figure on <cfg>_100.weights (the same
#   evaluation) and to `darknet-amp detector map`'s on them;
#   <cfg>_best.weights the weights of the best of them;
# - run 2, resumed from <cfg>_100.weights to 130: rows 1-100 kept as they
#   were, run 1's 101-120 dropped, a "# resumed" line, rows 101-130, wall
#   time continued;
# - a record that cannot be written, and a data file without valid=: said,
#   and training goes on to its final weights;
# - scripts/chart draws run 2's record (where gnuplot is installed).
#   record.sh DARKNET EVAL DATA_DIR CFG OUT SOURCE_DIR
set -u
darknet=$1 eval=$2 data_dir=$3 cfg=$4 out=$5 src=$6
rm -rf "$out" && mkdir -p "$out/backup"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict
shapes_data "$data_dir" "$out/backup" "$out"
sed 's/^max_batches=.*/max_batches=120/' "$cfg" > "$out/rec.cfg"
record=$out/backup/rec.record.tsv

DARKNET_SEED=1 "$darknet" detector train "$out/s.data" "$out/rec.cfg" -amp float16 -map_every 50 -nogpu \
    > "$out/run1.log" 2> "$out/run1.err" || { bad "run 1 failed: $(tail -n 3 "$out/run1.err")"; exit 1; }
cp "$record" "$out/run1.record.tsv"

# The header and the rows' shape.
sed -n 2p "$record" | grep -qxF "$(printf '# iteration\tloss\tavg_loss\trate\tscale\tskipped\timages_per_s\twall_s\tmap50')" \
    && ok "header: $(sed -n 2p "$record" | tr '\t' ' ')" || bad "header: $(sed -n 1,2p "$record")"
shape=$(awk -F'\t' '!/^#/ { n++; if (NF != 9) bad++; if ($1 != n) order++ }
    END { printf "%d %d %d", n, bad, order }' "$record")
[ "$shape" = "120 0 0" ] && ok "120 rows of 9 columns, iterations 1 to 120 in order" \
    || bad "rows, rows without 9 columns, rows out of order: $shape"

# Each row against its progress line ("N: loss, avg avg, rate rate, ...,
# scale S, K skipped"): printed with 6 decimals there.
awk -F': |, ' '/^[0-9]+: / { sub(/ avg$/, "", $3); sub(/ rate$/, "", $4); sub(/^scale /, "", $7); sub(/ skipped$/, "", $8)
    print $1, $2, $3, $4, $7, $8 }' "$out/run1.log" > "$out/progress.txt"
diffs=$(awk -F'\t' 'NR == FNR { split($0, p, " "); loss[p[1]] = p[2]; avg[p[1]] = p[3]; rate[p[1]] = p[4]
        scale[p[1]] = p[5]; skip[p[1]] = p[6]; next }
    !/^#/ { n++; if (!($1 in loss)) { miss++; next }
        d = $2 - loss[$1]; if (d < 0) d = -d; if (d > 5e-7 + 1e-6 * (loss[$1] < 0 ? -loss[$1] : loss[$1])) worse++
        d = $3 - avg[$1]; if (d < 0) d = -d; if (d > 5e-7 + 1e-6 * avg[$1]) worse++
        d = $4 - rate[$1]; if (d < 0) d = -d; if (d > 5e-7) worse++
        if ($5 + 0 != scale[$1] + 0 || $6 + 0 != skip[$1] + 0) scales++ }
    END { printf "%d %d %d %d", n, miss + 0, worse + 0, scales + 0 }' "$out/progress.txt" "$record")
[ "$diffs" = "120 0 0 0" ] && ok "120 rows equal to their progress lines (loss, avg loss, rate within the lines' 6 decimals; scale and skipped steps exactly)" \
    || bad "rows, rows without a progress line, loss/avg/rate differences, scale/skipped differences: $diffs"
times=$(awk -F'\t' '!/^#/ { if (n && $8 < w) back++; if ($7 <= 0) slow++; w = $8; n++ } END { printf "%d %d %.1f", back + 0, slow + 0, w }' "$record")
set -- $times
[ "$1" = 0 ] && [ "$2" = 0 ] && ok "wall time never goes back ($3 s at the end), images/s > 0 on every row" \
    || bad "rows whose wall time went back, rows without images/s: $1 $2"

# map50: at 50, 100 and 120 only, and equal to the printed lines.
maps=$(awk -F'\t' '!/^#/ && $9 != "NaN" { printf "%s%d", sep, $1; sep = "," }' "$record")
[ "$maps" = "50,100,120" ] && ok "map50 recorded at iterations $maps" || bad "map50 recorded at iterations '$maps', expected 50,100,120"
for i in 50 100 120; do
    rec=$(awk -F'\t' -v i=$i '$1 == i { printf "%.2f", 100 * $9 }' "$record")
    line=$(sed -n "s/^map: iteration $i: mAP@0.5 \([0-9.]*\)%.*/\1/p" "$out/run1.log")
    [ -n "$line" ] && [ "$rec" = "$line" ] && ok "iteration $i: the record's map50 is the map line's $line%" \
        || bad "iteration $i: record $rec%, map line '$line'"
done
# The same evaluation as eval_detector's, on the weights saved at 100.
"$eval" "$out/rec.cfg" "$out/backup/rec_100.weights" "$data_dir/valid.txt" > "$out/eval100.txt" 2> /dev/null
ev=$(sed -n 's/^eval: map50=\([0-9.]*\) .*/\1/p' "$out/eval100.txt")
rec=$(awk -F'\t' '$1 == 100 { printf "%.4f", $9 }' "$record") # at eval_detector's precision
[ -n "$ev" ] && [ "$ev" = "$rec" ] && ok "-map at 100 ($rec) equals eval_detector on rec_100.weights ($ev)" \
    || bad "-map at 100 ($rec) and eval_detector on rec_100.weights (${ev:-failed}) differ"
# `darknet-amp detector map` on the same weights: the same figure, to the
# record's 6 decimals; a line per class; TP + FN every object of the labels.
"$darknet" detector map "$out/s.data" "$out/rec.cfg" "$out/backup/rec_100.weights" -nogpu \
    > "$out/map100.txt" 2> "$out/map100.err"
rc=$?
dm=$(sed -n 's/^ mean average precision (mAP@0.50) = \([0-9.]*\),.*/\1/p' "$out/map100.txt")
rec6=$(awk -F'\t' '$1 == 100 { print $9 }' "$record")
[ $rc -eq 0 ] && [ -n "$dm" ] && [ "$dm" = "$rec6" ] \
    && ok "detector map on rec_100.weights: mAP@0.50 $dm, the record's $rec6 at 100" \
    || bad "detector map (exit $rc): '${dm:-$(tail -n 1 "$out/map100.err")}', the record's $rec6 at 100"
objects=$(sed 's|/images/|/labels/|; s|\.png$|.txt|' "$data_dir/valid.txt" | xargs cat | grep -c .)
tpfn=$(sed -n 's/.*TP = \([0-9]*\), FP = [0-9]*, FN = \([0-9]*\),.*/\1 + \2/p' "$out/map100.txt")
[ "$(grep -c '^class_id = ' "$out/map100.txt")" -eq 3 ] && [ -n "$tpfn" ] && [ $(($tpfn)) -eq "$objects" ] \
    && ok "detector map: 3 class lines, TP + FN = $tpfn = the $objects objects of the validation labels" \
    || bad "detector map: $(grep -c '^class_id = ' "$out/map100.txt") class lines, TP + FN '$tpfn', $objects objects"
best=$(awk -F'\t' '!/^#/ && $9 != "NaN" && $9 + 0 > b + 0 { b = $9; i = $1 } END { print i }' "$record")
case $best in
100) want=$out/backup/rec_100.weights ;;
120) want=$out/backup/rec_final.weights ;;
*) want="" ;;
esac
if [ -n "$want" ]; then
    cmp -s "$out/backup/rec_best.weights" "$want" && ok "rec_best.weights is the weights of iteration $best, the best mAP" \
        || bad "rec_best.weights differs from $(basename "$want") (best mAP at $best)"
else
    [ -s "$out/backup/rec_best.weights" ] && ok "rec_best.weights written (best mAP at iteration $best, whose weights no other file keeps)" \
        || bad "no rec_best.weights"
fi

# Run 2: resumed from the weights of iteration 100, to 130.
sed -i 's/^max_batches=.*/max_batches=130/' "$out/rec.cfg"
DARKNET_SEED=1 "$darknet" detector train "$out/s.data" "$out/rec.cfg" "$out/backup/rec_100.weights" -amp float16 \
    -map_every 50 -nogpu > "$out/run2.log" 2> "$out/run2.err" || bad "run 2 failed: $(tail -n 3 "$out/run2.err")"
grep -q "training record $record .*; continued" "$out/run2.err" && ok "run 2 says it continues the record" \
    || bad "run 2 does not say it continues the record: $(grep 'record' "$out/run2.err")"
grep -v '^#' "$record" | head -n 100 > "$out/kept.tmp"
grep -v '^#' "$out/run1.record.tsv" | head -n 100 | cmp -s - "$out/kept.tmp" \
    && ok "rows 1-100 as run 1 wrote them" || bad "rows 1-100 changed by the resume"
shape=$(awk -F'\t' '/^# resumed at iteration 101/ { r = NR } !/^#/ { n++; if ($1 != n) order++ } END { printf "%d %d %d", n, order + 0, (r > 0) }' "$record")
[ "$shape" = "130 0 1" ] && ok "130 rows, 1 to 130 once each, after a '# resumed at iteration 101' line (run 1's 101-120 dropped)" \
    || bad "rows, rows out of order, resumed line: $shape"
cont=$(awk -F'\t' '$1 == 100 { a = $8 } $1 == 101 { b = $8 } END { print (b >= a ? "yes" : "no"), a, b }' "$record")
case $cont in yes*) ok "wall time continued: $cont" ;; *) bad "wall time went back at the resume: $cont" ;; esac
awk -F'\t' '$1 == 130 && $9 != "NaN"' "$record" | grep -q . && ok "run 2 took the mAP at its end (130)" \
    || bad "run 2 has no mAP at 130"

# A record that cannot be written, a data file without valid=: training goes on.
mkdir -p "$out/nowrite" "$out/nowrite/rec.record.tsv.tmp"
sed "s|^backup *=.*|backup = $out/nowrite|; /^valid/d" "$data_dir/shapes.data" > "$out/novalid.data"
sed -i 's/^max_batches=.*/max_batches=3/' "$out/rec.cfg"
DARKNET_SEED=1 "$darknet" detector train "$out/novalid.data" "$out/rec.cfg" -map -nogpu > "$out/run3.log" 2> "$out/run3.err"
r=$?
[ $r -eq 0 ] && [ -s "$out/nowrite/rec_final.weights" ] \
    && grep -q "cannot write the training record $out/nowrite/rec.record.tsv" "$out/run3.err" \
    && grep -q "has no valid= list" "$out/run3.err" \
    && ok "an unwritable record and a data file without valid= said, training went on: $(grep -c 'darknet-amp: ' "$out/run3.err") lines" \
    || bad "run 3 (exit $r): $(grep 'darknet-amp' "$out/run3.err" | head -n 3)"

if command -v gnuplot > /dev/null; then
    sh "$src/scripts/chart" "$record" "$out/chart.png" > "$out/chart.log" 2>&1
    r=$?
    sig=$(head -c 4 "$out/chart.png" 2> /dev/null | od -An -c | tr -d ' ')
    [ $r -eq 0 ] && [ "$sig" = "211PNG" ] && [ "$(wc -c < "$out/chart.png")" -gt 10000 ] \
        && ok "scripts/chart drew $out/chart.png ($(wc -c < "$out/chart.png") bytes)" \
        || bad "scripts/chart (exit $r, signature '$sig'): $(tail -n 3 "$out/chart.log")"
else
    echo "note: no gnuplot here: scripts/chart not tried"
fi

verdict "the training record and -map"
