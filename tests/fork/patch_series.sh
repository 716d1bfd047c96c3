#!/bin/sh
# The patch series is applied repeat-safely: configuring twice reuses the
# patched tree, a changed patch gives a clean re-extract (no patch applied
# twice), and a patch that does not apply fails the configure naming it.
#   patch_series.sh PROJECT_SOURCE_DIR PRISTINE_DARKNET_TREE WORKDIR
set -eu
src=$1 pristine=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
# A copy of the project, so that the test can edit its patches.
proj=$work/project
mkdir -p "$proj"
tar -C "$src" --exclude=./.git --exclude='./build*' -cf - . | tar -C "$proj" -xf -
configure() {
    cmake -S "$proj" -B "$work/build" -DDARKNET_SOURCE_DIR="$pristine" \
          -DDARKNET_AMP_CUDA=OFF -DDARKNET_AMP_TESTS=OFF > "$work/log" 2>&1
}
fail() { echo "FAIL: $*"; cat "$work/log"; exit 1; }

configure || fail "first configure"
grep -q "patches applied" "$work/log" || fail "first configure did not apply the series"
n=$(grep -c '^[0-9]' "$proj/patches/series")
grep -q "darknet: $n patches applied" "$work/log" || fail "expected $n patches applied"
echo "ok: first configure applied $n patches"

configure || fail "second configure"
grep -q "patched tree up to date" "$work/log" || fail "second configure did not reuse the patched tree"
echo "ok: second configure reused the patched tree"

# A user edit in the patched tree must not survive a change to the series.
echo "/* stray edit */" >> "$work/build/_darknet/darknet/src/parser.c"
# Change one patch's header only: its content hash changes, its diff does not.
first=$(grep -m1 '^[0-9]' "$proj/patches/series")
sed -i '1s/$/ (edited)/' "$proj/patches/$first"
configure || fail "configure after a patch changed"
grep -q "darknet: $n patches applied" "$work/log" || fail "a changed patch did not re-apply the series"
if grep -q "stray edit" "$work/build/_darknet/darknet/src/parser.c"; then
    fail "the patched tree was not re-extracted from the pristine source"
fi
echo "ok: a changed patch re-extracted the tree and applied all $n patches once"

cat > "$proj/patches/9999-does-not-apply.patch" <<'PATCH'
Subject: a patch that cannot apply

--- a/src/parser.c
+++ b/src/parser.c
@@ -1,3 +1,3 @@
-this line is not in parser.c
+nor is this one
 neither is this
PATCH
echo 9999-does-not-apply.patch >> "$proj/patches/series"
if configure; then fail "configure succeeded with a patch that does not apply"; fi
grep -q "patch 9999-does-not-apply.patch does not apply" "$work/log" || \
    fail "the configure error does not name the patch"
echo "ok: configure failed naming 9999-does-not-apply.patch"
echo "PASS: patch series is applied repeat-safely"
