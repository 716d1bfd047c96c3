#!/bin/sh
# A user's training data, however broken (patches 0027-0029, docs/training.md
# "When the data is bad"): `detector train` on a small generated dataset with
# one thing broken in each case, each case's exit status, message (file,
# line, what is wrong) and, where training goes on, finite losses, the
# summary's counts and the lists beside the weights checked:
# - bad label lines (NaN; inf, 1e30, a centre off the image; a class past
#   the last, -1; a width or height of 0 or below; 3 numbers, text, control
#   bytes): each named, skipped, counted, listed; a file whose only line is
#   bad leaves its image out;
# - a NaN line in every label file trains as the files without it, loss
#   for loss, bit for bit;
# - a missing label file, a missing, empty, truncated or undecodable image:
#   named with the list and line, skipped, the batch filled with others;
#   too many of them, or all, or a label share past -bad_max: exit 1, named;
# - an empty or missing train list, a missing names file (detector test), a
#   missing data file or cfg, a [region] tree=/map= that is not there
#   (as yolo9000.cfg's data/9k.tree): exit 1 naming the file and the key;
# - labels beside the images (the maintained darknet's rule), upper-case
#   extensions, a name with no image extension; 400 boxes in a file, an empty
#   label file, a missing backup folder; -bad_max malformed (exit 2);
# - detector map, detector test, calc_anchors and partial run (exit 0).
#   bad_data.sh DARKNET GEN_DATASET CFG OUT   (CFG: a short 64 px training cfg)
set -u
darknet=$1 gen=$2 cfg=$3 out=$4
rm -rf "$out" && mkdir -p "$out"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict, must
export DARKNET_SEED=1 DARKNET_AMP_CONV=direct

# fresh NAME: a new copy of the 12-image dataset in $out/NAME (images/,
# labels/, train.txt, s.data with its backup folder), its cfg $out/NAME/t.cfg
fresh() {
    d=$out/$1
    rm -rf "$d"
    cp -r "$out/base" "$d"
    sed "s|$out/base|$d|g" "$out/base/train.txt" > "$d/train.txt"
    printf 'classes = 3\ntrain = %s/train.txt\nnames = %s/shapes.names\nbackup = %s/backup\n' \
        "$d" "$d" "$d" > "$d/s.data"
    cp "$out/t.cfg" "$d/t.cfg"
}
# train NAME ARGS...: detector train of $out/NAME's data and cfg; exit status
# in $rc, stdout and stderr in $out/NAME/out, err
train() {
    d=$out/$1
    shift
    "$darknet" detector train "$d/s.data" "$d/t.cfg" -nogpu "$@" > "$d/out" 2> "$d/err"
    rc=$?
}
# says FILE PATTERN WHAT: FILE has a line matching PATTERN (grep -E)
says() {
    line=$(grep -E -m 1 -e "$2" "$1")
    [ -n "$line" ] && ok "$3: $(echo "$line" | cut -c1-160)" \
        || bad "$3: no line /$2/ in $1: $(tail -c 400 "$1")"
}
# trained NAME ITERATIONS WHAT: exit 0, every iteration's loss finite
trained() {
    d=$out/$1
    n=$(grep -cE '^[0-9]+: [-0-9.e+]+, ' "$d/out")
    nonfinite=$(grep -E '^[0-9]+: ' "$d/out" | grep -ciE 'nan|inf')
    [ "$rc" -eq 0 ] && [ "$n" -eq "$2" ] && [ "$nonfinite" -eq 0 ] \
        && ok "$3: exit 0, $n iterations, every loss finite" \
        || bad "$3: exit $rc, $n iterations of $2, $nonfinite losses not finite: $(tail -c 400 "$d/err")"
}
# stopped NAME PATTERN WHAT: exit 1 with a line of stderr matching PATTERN
stopped() {
    [ "$rc" -eq 1 ] && ok "$3: exit 1" || bad "$3: exit $rc (expected 1): $(tail -c 300 "$out/$1/err")"
    says "$out/$1/err" "$2" "$3"
}

must "$out" gen.log "$gen" --seed 3 --train 12 --valid 2 --size 64 "$out/base"
sed "s/^max_batches *=.*/max_batches=3/" "$cfg" > "$out/t.cfg"
L=$out/NAME/labels/train_00003.txt

# -- Bad label lines: named, skipped, counted; the run trains on.
fresh nan
printf '0 nan 0.5 0.2 0.2\n' >> "$out/nan/labels/train_00003.txt"
train nan
trained nan 3 "a NaN centre"
says "$out/nan/err" "^$out/nan/labels/train_00003.txt:[0-9]+: x is not finite \(nan\); box skipped$" "a NaN centre: named with file and line"
says "$out/nan/err" "^data: 1 of [0-9]+ boxes skipped in 1 label files" "a NaN centre: counted in the summary"
grep -qx "$out/nan/labels/train_00003.txt" "$out/nan/backup/t.bad_labels.list" \
    && ok "a NaN centre: its file in backup/t.bad_labels.list" \
    || bad "a NaN centre: backup/t.bad_labels.list: $(cat "$out/nan/backup/t.bad_labels.list" 2>&1)"

fresh values
f=$out/values/labels/train_00004.txt
printf '1 0.5 0.5 inf 0.2\n1 1e30 0.5 0.2 0.2\n1 1.7 -0.4 0.2 0.2\n' >> "$f"
g=$out/values/labels/train_00005.txt
printf '7 0.5 0.5 0.2 0.2\n-1 0.5 0.5 0.2 0.2\n' >> "$g"
h=$out/values/labels/train_00006.txt
printf '1 0.5 0.5 0 0.2\n1 0.5 0.5 0.2 -0.2\n' >> "$h"
k=$out/values/labels/train_00007.txt
printf '1 0.5 0.5\nhello world\n\001\002 0.5 0.5 0.2 0.2\n' >> "$k"
train values -bad_max 0.5
trained values 3 "values out of range"
says "$out/values/err" "^$f:[0-9]+: width is not finite \(inf\); box skipped$" "an inf width"
says "$out/values/err" "^$f:[0-9]+: x 1e\+30, the box's centre, is outside \[0, 1\]; box skipped$" "a centre of 1e30"
says "$out/values/err" "^$f:[0-9]+: x 1.7, the box's centre, is outside \[0, 1\]; box skipped$" "a centre off the image (1.7 -0.4)"
says "$out/values/err" "^$g:[0-9]+: class 7 is outside \[0, 3\); box skipped$" "class 7 with classes=3"
says "$out/values/err" "^$g:[0-9]+: class -1 is outside \[0, 3\); box skipped$" "class -1"
says "$out/values/err" "^$h:[0-9]+: width 0 is not in \(0, 1\]; box skipped$" "a width of 0"
says "$out/values/err" "^$h:[0-9]+: height -0.2 is not in \(0, 1\]; box skipped$" "a negative height"
says "$out/values/err" "^$k:[0-9]+: expected 5 numbers \(class x y width height\), found 3; box skipped$" "a line of 3 numbers"
says "$out/values/err" "^$k:[0-9]+: 'hello' is not a number; box skipped$" "a line of text"
says "$out/values/err" "^$k:[0-9]+: '\\\\x01\\\\x02' is not a number; box skipped$" "control bytes"
says "$out/values/err" "^data: 10 of [0-9]+ boxes skipped in 4 label files" "10 bad lines in 4 files counted"
n=$(wc -l < "$out/values/backup/t.bad_labels.list")
[ "$n" -eq 4 ] && ok "4 label files listed" || bad "$n label files listed (expected 4)"

# -- A file whose every line is bad: its image is left out, not trained as background.
fresh allbad
printf '0 nan 0.5 0.2 0.2\n' > "$out/allbad/labels/train_00002.txt"
train allbad
trained allbad 3 "a label file of bad lines only"
says "$out/allbad/err" "^$out/allbad/train.txt:3: $out/allbad/images/train_00002.png: no box of its labels is good.*; image skipped$" \
    "a label file of bad lines only: its image skipped, named with the list's line"

# -- The same NaN line in every label file trains as the files without it, bit for bit.
fresh clean
fresh dirty
for f in "$out/dirty/labels/"*.txt; do
    # first, so that the good boxes' line numbers move too
    { echo '2 0.5 nan 0.3 0.3'; cat "$f"; } > "$f.new" && mv "$f.new" "$f"
done
train clean
trained clean 3 "the clean files"
train dirty -bad_max 0.5
trained dirty 3 "a NaN line in every file"
grep -E '^[0-9]+: ' "$out/clean/out" | cut -d, -f1-2 > "$out/clean/losses"
grep -E '^[0-9]+: ' "$out/dirty/out" | cut -d, -f1-2 > "$out/dirty/losses"
if [ -s "$out/clean/losses" ] && cmp -s "$out/clean/losses" "$out/dirty/losses"; then
    ok "a NaN line in every file: losses those of the files without it, bit for bit ($(tr '\n' ' ' < "$out/clean/losses"))"
else
    bad "a NaN line in every file: losses $(tr '\n' ' ' < "$out/dirty/losses") against $(tr '\n' ' ' < "$out/clean/losses")"
fi
cmp -s "$out/clean/backup/t_final.weights" "$out/dirty/backup/t_final.weights" \
    && ok "a NaN line in every file: the same final weights, byte for byte" \
    || bad "a NaN line in every file: final weights differ"

# -- Too many bad boxes: exit 1 before training, naming the share and -bad_max.
train dirty
stopped dirty "^$out/dirty/s.data: train=$out/dirty/train.txt: 12 of its [0-9]+ boxes \([0-9.]+%\) are bad, more than -bad_max 0.1 allows: see $out/dirty/backup/t.bad_labels.list" \
    "a bad line in every file at the default -bad_max"
grep -qE '^[0-9]+: ' "$out/dirty/out" && bad "trained after the stop" || ok "no iteration before the stop"

# -- Missing label file; missing, empty, truncated and undecodable images.
fresh nolabel
rm "$out/nolabel/labels/train_00005.txt"
train nolabel
trained nolabel 3 "a missing label file"
says "$out/nolabel/err" "^$out/nolabel/train.txt:6: $out/nolabel/images/train_00005.png: no label file \(neither $out/nolabel/labels/train_00005.txt nor $out/nolabel/images/train_00005.txt\); image skipped$" \
    "a missing label file: named with the list's line and both places looked in"
says "$out/nolabel/err" "; 1 of 12 images skipped; listed in $out/nolabel/backup/t.bad_images.list$" "a missing label file: counted, listed"
grep -qx "$out/nolabel/images/train_00005.png" "$out/nolabel/backup/t.bad_images.list" \
    && ok "the image's path, as the list has it, in t.bad_images.list" || bad "t.bad_images.list: $(cat "$out/nolabel/backup/t.bad_images.list")"

fresh imgs
rm "$out/imgs/images/train_00001.png"
: > "$out/imgs/images/train_00002.png"
train imgs -bad_max 0.5
trained imgs 3 "a missing and an empty image"
says "$out/imgs/err" "^$out/imgs/train.txt:2: $out/imgs/images/train_00001.png: cannot open it \(No such file or directory\); image skipped$" "a missing image"
says "$out/imgs/err" "^$out/imgs/train.txt:3: $out/imgs/images/train_00002.png: the file is empty; image skipped$" "an empty image"

# Undecodable images are found when the loader draws them: a list of one
# good image and two that do not decode, drawn 6 times over 3 iterations.
fresh decode
head -c 300 "$out/decode/images/train_00000.png" > "$out/decode/images/trunc.png"
echo "not an image" > "$out/decode/images/text.png"
cp "$out/decode/labels/train_00000.txt" "$out/decode/labels/trunc.txt"
cp "$out/decode/labels/train_00000.txt" "$out/decode/labels/text.txt"
printf '%s\n' "$out/decode/images/trunc.png" "$out/decode/images/text.png" \
    "$out/decode/images/train_00000.png" > "$out/decode/train.txt"
train decode -bad_max 0.9
trained decode 3 "a truncated and an undecodable image"
says "$out/decode/err" "^$out/decode/train.txt:1: $out/decode/images/trunc.png: cannot be decoded \(.+\); image skipped$" "a truncated image"
says "$out/decode/err" "^$out/decode/train.txt:2: $out/decode/images/text.png: cannot be decoded \(.+\); image skipped$" "a file that is not an image"
# ... and at the default -bad_max, the first of them stops the run, exit 1
train decode
stopped decode "train=$out/decode/train.txt: [12] of its 3 images \([0-9.]+%\) cannot be trained on, more than -bad_max 0.1 allows" \
    "undecodable images past -bad_max, found in the loader"

fresh allgone
for f in "$out/allgone/images/"*.png; do : > "$f"; done
train allgone -bad_max 1
stopped allgone "train=$out/allgone/train.txt: none of its 12 images can be trained on" "every image empty (-bad_max 1)"
fresh most
for i in 00 01 02 03 04 05 06; do rm "$out/most/images/train_000$i.png"; done
train most
stopped most "train=$out/most/train.txt: 7 of its 12 images \(58.3%\) cannot be trained on, more than -bad_max 0.1 allows: see $out/most/backup/t.bad_images.list" \
    "7 of 12 images missing"

# -- A run that cannot train exits 1, naming the file and the key.
fresh lists
: > "$out/lists/train.txt"
train lists
stopped lists "^$out/lists/s.data: train=$out/lists/train.txt: the list names no image \(0 lines\)$" "an empty train list"
rm "$out/lists/train.txt"
train lists
stopped lists "^$out/lists/s.data: train=$out/lists/train.txt: cannot open the list \(No such file or directory\)$" "a missing train list"
"$darknet" detector train "$out/lists/none.data" "$out/lists/t.cfg" -nogpu > "$out/lists/out" 2> "$out/lists/err"
rc=$?
stopped lists "none.data" "a missing data file"
"$darknet" detector train "$out/lists/s.data" "$out/lists/none.cfg" -nogpu > "$out/lists/out" 2> "$out/lists/err"
rc=$?
stopped lists "none.cfg" "a missing cfg"
fresh names
sed -i "s|^names = .*|names = $out/names/none.names|" "$out/names/s.data"
"$darknet" detector test "$out/names/s.data" "$out/names/t.cfg" "" "$out/names/images/train_00000.png" -nogpu \
    > "$out/names/out" 2> "$out/names/err"
rc=$?
stopped names "^$out/names/s.data: names=$out/names/none.names: cannot open it \(No such file or directory\)$" "detector test with a missing names file"
# A [region] whose tree= or map= is not there (yolo9000.cfg without data/9k.tree).
fresh tree
cat > "$out/tree/t.cfg" <<EOF
[net]
batch=2
subdivisions=1
width=32
height=32
channels=3
max_batches=2

[convolutional]
filters=12
size=1
stride=1
activation=linear

[region]
anchors=1,1
classes=1
coords=4
num=2
softmax=1
tree=$out/tree/missing/9k.tree
EOF
train tree
stopped tree "^$out/tree/t.cfg: layer 1 \\[region\\]: tree=$out/tree/missing/9k.tree: cannot open it \(No such file or directory\)" "a [region] tree= that is not there"
sed -i "s|^tree=.*|map=$out/tree/missing/9k.map|" "$out/tree/t.cfg"
train tree
stopped tree "^$out/tree/t.cfg: layer 1 \\[region\\]: map=$out/tree/missing/9k.map: cannot open it" "a [region] map= that is not there"
# -- Where labels are, and which names have one.
fresh beside
for f in "$out/beside/labels/"*.txt; do mv "$f" "$out/beside/images/"; done
rmdir "$out/beside/labels"
mv "$out/beside/images/train_00000.png" "$out/beside/images/train_00000.PNG"
sed -i 's|train_00000.png$|train_00000.PNG|' "$out/beside/train.txt"
cp "$out/beside/images/train_00001.png" "$out/beside/images/train_00001.gif"
echo "$out/beside/images/train_00001.gif" >> "$out/beside/train.txt"
train beside
trained beside 3 "labels beside the images"
says "$out/beside/err" "^$out/beside/train.txt: 13 images; labels beside the images \(IMAGE.txt\)$" "labels beside the images: said at start-up"
grep -q "train_00000.PNG: " "$out/beside/err" && bad "an upper-case .PNG was not taken: $(grep PNG "$out/beside/err")" \
    || ok "an upper-case .PNG has its label beside it"
says "$out/beside/err" "^$out/beside/train.txt:13: $out/beside/images/train_00001.gif: its name has no image extension" "a .gif named: no label path"
fresh labels_dir
train labels_dir
says "$out/labels_dir/err" "^$out/labels_dir/train.txt: 12 images; labels in labels folders \(darknet's images -> labels rule\)$" "labels in labels/: said at start-up"
says "$out/labels_dir/err" "^data: 0 of [0-9]+ boxes skipped in 0 label files, [0-9]+ clipped to the image; 0 of 12 images skipped$" "a clean dataset: the summary says nothing skipped"

# -- Handled before, still handled: 400 boxes, an empty label file, no backup folder.
fresh many
awk 'BEGIN { for (i = 0; i < 400; i++) printf "%d 0.5 0.5 0.%03d 0.1\n", i % 3, 100 + i }' \
    > "$out/many/labels/train_00000.txt"
: > "$out/many/labels/train_00001.txt"
train many
trained many 3 "400 boxes in one file, an empty label file"
fresh nobackup
rm -rf "$out/nobackup/backup"
printf '0 nan 0.5 0.2 0.2\n' >> "$out/nobackup/labels/train_00003.txt"
train nobackup
says "$out/nobackup/err" "t.bad_labels.list: cannot write the list of bad files \(No such file or directory\); they are named here only" \
    "no backup folder: the list cannot be written, said"
[ "$rc" -ne 0 ] && ok "no backup folder: exit $rc (the weights could not be saved)" \
    || says "$out/nobackup/err" "[Cc]ould not save|cannot" "no backup folder: the save failure said"

# -- The other commands on the clean run's weights (under the sanitizers in
# build/asan): detector map, detector test, calc_anchors, partial.
c=$out/clean
w=$c/backup/t_final.weights
printf 'valid = %s/train.txt\n' "$c" >> "$c/s.data"
for cmd in "detector map $c/s.data $c/t.cfg $w -nogpu" \
           "detector test $c/s.data $c/t.cfg $w $c/images/train_00000.png -nogpu" \
           "detector calc_anchors $c/s.data -num_of_clusters 3 -width 64 -height 64" \
           "partial $c/t.cfg $w $c/t.conv.4 4 -nogpu"; do
    # shellcheck disable=SC2086
    (cd "$c" && "$darknet" $cmd > cmd.out 2> cmd.err)
    rc=$?
    [ "$rc" -eq 0 ] && ok "darknet-amp $(echo "$cmd" | cut -d' ' -f1-2): exit 0" \
        || bad "darknet-amp $cmd: exit $rc: $(tail -c 300 "$c/cmd.err")"
done
[ -s "$c/t.conv.4" ] && ok "partial wrote t.conv.4" || bad "partial wrote no t.conv.4"

# -- -bad_max malformed
for v in 2 -0.1 abc; do
    train labels_dir -bad_max "$v"
    [ "$rc" -eq 2 ] && grep -q "^-bad_max $v: expected a fraction between 0 and 1" "$out/labels_dir/err" \
        && ok "-bad_max $v refused (exit 2)" || bad "-bad_max $v: exit $rc: $(tail -c 200 "$out/labels_dir/err")"
done
verdict "broken training data is named, skipped and counted, and a run that cannot train exits 1"
