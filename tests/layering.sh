#!/bin/sh
# The plugin's layers hold (docs/architecture.md, "Layers"): read from the
# compiled objects themselves (nm: which object uses a symbol that which other
# object defines), so a call through a macro, an inline function or a
# forgotten declaration counts like any other.
# - every source file has a tier (the table below, as the doc's); a file
#   uses only files of its own tier or below: a call up fails, named with the
#   symbols it takes;
# - no two backends' folders use each other;
# - no files use each other in a circle, within a tier too (tsort names the
#   files of each circle).
#   layering.sh OBJECT...   (the object files of amp_core, amp_cpu,
#                            amp_backends, amp_cuda, amp_program)
set -u
[ $# -gt 0 ] || { echo "usage: layering.sh OBJECT..."; exit 2; }
tmp=$(mktemp -d) || exit 1
#trap 'rm -rf "$tmp"' EXIT

# The object's source file, as the tree names it.
source_of() {
    echo "$1" | sed -e 's|.*/amp_core\.dir/|plugin/|' -e 's|.*/amp_cpu\.dir/|plugin/|' \
        -e 's|.*/amp_backends\.dir/|plugin/|' -e 's|.*/amp_cuda\.dir/|cuda/|' \
        -e 's|.*/amp_program\.dir/|plugin/|' -e 's|\.o$||'
}

n=0
for o in "$@"; do
    [ -f "$o" ] || { echo "FAIL: no object file $o"; exit 1; }
    f=$(source_of "$o")
    # global definitions (weak and unique ones left out: a header's inline
    # copies, which several objects may hold), and what the object uses
    nm -g --defined-only "$o" | awk -v f="$f" 'NF == 3 && $2 ~ /^[TDBRC]$/ { print "D", f, $3 }'
    nm -u "$o" | awk -v f="$f" '$1 == "U" { print "U", f, $2 }'
    n=$((n + 1))
done > "$tmp/symbols"

awk -v edges="$tmp/edges" '
# The tiers, from the bottom up (docs/architecture.md keeps the same table).
function tier(f) {
    if (f ~ /^plugin\/(common|error|kinds|contract|yolo)\.c$/) return 1 # leaf
    if (f == "plugin/scaler.c") return 2                                 # the scaler
    if (f ~ /^plugin\/(net_error|options|cfg_keys|config|weights_id|tensors|loss_cause|policy|plan|state_file|weights_check|profile|inject|dist)\.c$/)
        return 3                                                         # the network state
    if (f ~ /^plugin\/(fallback|probe)\.c$/) return 4                    # the rules
    if (f ~ /^plugin\/cpu\// || f ~ /^cuda\//) return 5                  # the backends
    if (f ~ /^plugin\/(settle|step)\.c$/) return 6                       # the training step
    if (f == "plugin/backends.c") return 7                               # the registry
    if (f ~ /^plugin\/(hooks|state_show)\.c$/) return 8                  # darknet hooks, the API
    if (f ~ /^plugin\/program\//) return 9                               # the program
    return 0
}
function backend(f) { return f ~ /^plugin\/cpu\// ? "plugin/cpu" : f ~ /^cuda\// ? "cuda" : "" }
BEGIN {
    split("leaf scaler state rules backends step registry hooks program", name, " ")
}
$1 == "D" { d = ($3 in def) ? def[$3] " " $2 : $2; def[$3] = d; files[$2] = 1; next }
$1 == "U" { use[++nu] = $2 SUBSEP $3; files[$2] = 1 }
END {
    bad = 0
    for (f in files) if (!tier(f)) {
        printf "FAIL: %s has no tier: add it to the table in tests/layering.sh and to " \
               "docs/architecture.md\n", f
        bad = 1
    }
    for (i = 1; i <= nu; i++) {
        split(use[i], p, SUBSEP)
        from = p[1]; sym = p[2]
        if (!(sym in def) || def[sym] ~ / /) continue   # outside the plugin, or not one definer
        to = def[sym]
        if (to == from) continue
        key = from SUBSEP to
        if (!(key in why)) { why[key] = sym; nedge++ } else if (length(why[key]) < 60) why[key] = why[key] ", " sym
    }
    for (key in why) {
        split(key, p, SUBSEP)
        from = p[1]; to = p[2]
        print to, from > edges
        if (tier(to) > tier(from)) {
            printf "FAIL: %s (%s) calls up into %s (%s): %s\n", from, name[tier(from)], to,
                   name[tier(to)], why[key]
            bad = 1
        } else if (backend(from) != "" && backend(to) != "" && backend(from) != backend(to)) {
            printf "FAIL: backend %s uses backend %s: %s (%s)\n", backend(from), backend(to), to,
                   why[key]
            bad = 1
        }
    }
    printf "%d files, %d uses between them\n", length(files), nedge
    exit bad
}' "$tmp/symbols"
st=$?
echo "$n objects read"
# circles: tsort breaks each one and names its files
if ! tsort "$tmp/edges" > /dev/null 2> "$tmp/loops"; then
    echo "FAIL: files that use each other in a circle (each circle that tsort broke):"
    awk '/input contains a loop/ { if (c != "") print "  " c; c = ""; next }
         { sub(/^tsort: /, ""); c = c == "" ? $0 : c " -> " $0 }
         END { if (c != "") print "  " c }' "$tmp/loops"
    st=1
fi
[ "$st" = 0 ] && echo "PASS: every use goes down the tiers or stays in one, no backend uses another, no circles"
exit "$st"
