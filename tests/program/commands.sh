#!/bin/sh
# The command lines darknet users type, each with its exit status and message
# checked (plugin/cli_help.c, cli_map.c, cli.c):
# - no command: the help on stderr, exit 2; -h, --help: the help on stdout
#   (detector map, the -amp options), exit 0; --version: the start-up line's
#   version part, exit 0;
# - an unknown command (a typo), a family's unknown subcommand, a family
#   without a subcommand, a subcommand without its arguments: refused with
#   exit 2 and the list of what exists;
# - detector map without its arguments (2, usage), with a data file that is
#   not there (1, named), with an unknown option (2); its figures are checked
#   by integration.record;
# - detector calc_anchors on labels of known shapes (below);
# - amp kinds: the table of layer kinds, each with its role and, for every
#   backend of the build, its half forms in float16 and bfloat16
#   (convolutional yes, batchnorm none); amp kindz refused with the list;
# - -dont_show, -show_imgs and -mjpeg_port N: accepted and said once,
#   training runs; darknet's own commands (ops) run as before.
#   commands.sh DARKNET DATA_DIR CFG OUT     (CFG: a short training cfg)
set -u
darknet=$1 data_dir=$2 cfg=$3 out=$4
rm -rf "$out" && mkdir -p "$out/backup"
. "$(dirname "$0")/../lib.sh" # ok, bad, verdict, shapes_data
shapes_data "$data_dir" "$out/backup" "$out"
n=0
# expect STATUS STREAM PATTERN ARGS...: one command line, its exit status and
# a line of its stdout or stderr matching PATTERN (grep -E)
expect() {
    want=$1 stream=$2 pattern=$3
    shift 3
    n=$((n + 1))
    "$darknet" "$@" > "$out/$n.out" 2> "$out/$n.err"
    rc=$?
    f=$out/$n.$stream
    line=$(grep -E -m 1 -e "$pattern" "$f")
    [ $rc -eq "$want" ] && [ -n "$line" ] && ok "darknet-amp $*: exit $rc, $stream: $(echo "$line" | cut -c1-150)" \
        || bad "darknet-amp $*: exit $rc (expected $want), $stream without /$pattern/: $(head -c 300 "$f")"
}

expect 2 err "^usage: .* COMMAND \.\.\.: darknet's commands"
expect 0 out "detector map DATA CFG WEIGHTS" --help
expect 0 out "^  -amp bfloat16\|float16\|float32\|1\|0" -h
expect 0 out "^  -bad_max FRACTION +detector train: the largest share of bad boxes" --help
expect 0 out "^darknet-amp [0-9][^ ]* \(darknet [^ ]+ with [0-9]+ patches; (CPU|CUDA) build\)$" --version
expect 0 out "^  convolutional +GEMM in half +yes +yes" amp kinds
expect 0 out "^  batchnorm +float32 statistics +-  +-" amp kinds
expect 0 out "^  route +moves half tensors +yes +yes" amp kinds
rows=$(grep -cE "^  [a-z]+ +(GEMM in half|GEMMs in sub-layers|float32 statistics|moves half tensors) " "$out/$n.out")
[ "$rows" -eq 17 ] && ok "amp kinds: 17 kinds" || bad "amp kinds: $rows kinds (expected 17): $(cat "$out/$n.out")"
expect 2 err "amp: unknown subcommand 'kindz'; the subcommands: show kinds$" amp kindz
expect 2 err "unknown command 'detectr'" detectr train "$out/s.data" "$cfg"
expect 2 err "^the commands: detector classifier .* partial" detectr train "$out/s.data" "$cfg"
expect 2 err "detector: unknown subcommand 'anchors'; the subcommands: train test valid valid2 recall demo map calc_anchors$" \
    detector anchors "$out/s.data" -num_of_clusters 6 -width 416 -height 416
expect 2 err "classifier needs a subcommand: predict " classifier
expect 2 err "detector train needs its arguments" detector train
expect 2 err "detector map: needs DATA, CFG and WEIGHTS" detector map "$out/s.data" "$cfg"
expect 1 err "detector map: $out/none.data: cannot read the data file" detector map "$out/none.data" "$cfg" w -nogpu
expect 2 err "detector map: unknown option -bogus" detector map "$out/s.data" "$cfg" w -bogus
expect 0 out "Floating Point Operations: " ops "$cfg" -nogpu

# calc_anchors on labels in three known clusters of shapes (0.1 x 0.1, 0.3 x
# 0.5 and 0.8 x 0.6 of the image, each box within 0.005 of its cluster's):
# at 416 x 416 the anchors are those shapes within 3%, by area, the mean IoU
# above 95%; two runs print the same; a missing option (2) and a missing
# label file (1) are refused, named.
mkdir -p "$out/anch/labels"
for i in 0 1 2 3 4 5 6 7 8 9; do
    echo "$out/anch/images/img$i.png"
    awk -v i=$i 'BEGIN { split("0.1 0.1 0.3 0.5 0.8 0.6", s, " ")
        for (c = 0; c < 3; c++) for (j = 0; j < 3; j++) {
            d = ((i * 7 + j * 3 + c) % 11 - 5) / 1000
            printf "%d 0.5 0.5 %.4f %.4f\n", c, s[2 * c + 1] + d, s[2 * c + 2] - d } }' \
        > "$out/anch/labels/img$i.txt"
done > "$out/anch/train.txt"
printf 'classes = 3\ntrain = %s\n' "$out/anch/train.txt" > "$out/anch/anch.data"
expect 0 out "^anchors = " detector calc_anchors "$out/anch/anch.data" -num_of_clusters 3 -width 416 -height 416
first=$n
anchors=$(sed -n 's/^anchors = //p' "$out/$first.out")
echo "$anchors" | tr -d ' ' | awk -F, '{
    split("41.6 41.6 124.8 208 332.8 249.6", want, " ")
    for (k = 1; k <= 6; k++) { e = ($k - want[k]) / want[k]; if (e < 0) e = -e; if (e > w) w = e }
    exit !(NF == 6 && w <= 0.03) }' \
    && ok "calc_anchors: $anchors, within 3% of 42,42, 125,208, 333,250" \
    || bad "calc_anchors: '$anchors', expected within 3% of 42,42, 125,208, 333,250"
iou=$(sed -n 's/^avg IoU = \([0-9.]*\) %.*/\1/p' "$out/$first.out")
awk -v x="$iou" 'BEGIN { exit !(x > 95) }' && ok "calc_anchors: avg IoU $iou% > 95%" || bad "calc_anchors: avg IoU '$iou'"
expect 0 out "^anchors = " detector calc_anchors "$out/anch/anch.data" -num_of_clusters 3 -width 416 -height 416
cmp -s "$out/$first.out" "$out/$n.out" && ok "calc_anchors: a second run prints the same" \
    || bad "calc_anchors: two runs differ: $(diff "$out/$first.out" "$out/$n.out" | head -n 4)"
expect 2 err "calc_anchors: needs DATA, -num_of_clusters, -width and -height" \
    detector calc_anchors "$out/anch/anch.data" -width 416 -height 416
echo "$out/anch/images/none.png" >> "$out/anch/train.txt"
expect 1 err "calc_anchors: $out/anch/images/none.png: no label file $out/anch/labels/none.txt" \
    detector calc_anchors "$out/anch/anch.data" -num_of_clusters 3 -width 416 -height 416

# The display options of other forks: accepted, each said once, training runs.
DARKNET_SEED=1 "$darknet" detector train "$out/s.data" "$cfg" -dont_show -nogpu -mjpeg_port 8090 \
    -show_imgs -dont_show > "$out/train.log" 2> "$out/train.err"
rc=$?
said=$(grep -c "accepted: this darknet opens no windows" "$out/train.err")
iters=$(grep -cE '^ *[0-9]+: ' "$out/train.log")
[ $rc -eq 0 ] && [ "$said" -eq 3 ] && [ "$iters" -gt 0 ] \
    && ok "-dont_show (twice), -mjpeg_port 8090, -show_imgs: said once each ($said lines), $iters iterations, exit 0" \
    || bad "display options: exit $rc, $said lines said (expected 3), $iters iterations: $(tail -n 2 "$out/train.err")"
verdict "the command lines darknet users type"
