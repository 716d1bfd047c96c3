#!/bin/sh
# The label gpu marks exactly the tests of the GPU path (named gpu.*), so that
# "ctest -L gpu" on a machine lent a GPU for a few minutes runs those and
# nothing else. CPU-network tests of a CUDA build carry their own labels
# (unit, integration, ...) and run on the fake device without a GPU.
#   gpu_label.sh BUILD_DIR WITH_CUDA
set -u
dir=$1 cuda=$2
cd "$dir" || exit 1
# ctest also lists the fixture the GPU training tests need (dataset.generate).
names() { ctest -N "$@" | sed -n 's/^ *Test *#[0-9]*: *//p' | grep -v '^dataset\.generate$' | sort; }
labelled=$(names -L '^gpu$')
named=$(names -R '^gpu\.')
nl=$(echo "$labelled" | grep -c . || true)
nn=$(echo "$named" | grep -c . || true)
echo "tests labelled gpu: $nl; tests named gpu.*: $nn"
echo "$labelled" | sed 's/^/  /'
fail=0
odd=$(echo "$labelled" | grep -v '^gpu\.' | grep . || true)
[ -z "$odd" ] || { echo "FAIL: labelled gpu but not a test of the GPU path: $odd"; fail=1; }
[ "$labelled" = "$named" ] || { echo "FAIL: the gpu.* tests and the gpu label differ"; fail=1; }
case "$cuda" in
ON | TRUE | 1) [ "$nl" -gt 0 ] || { echo "FAIL: a CUDA build with no gpu tests"; fail=1; } ;;
*) [ "$nl" -eq 0 ] || { echo "FAIL: a CPU build with gpu tests"; fail=1; } ;;
esac
[ $fail = 0 ] && echo PASS
exit $fail
