#!/bin/sh
# Checks that a CUDA build produced GPU code: the fork's library exports darknet's
# GPU entry points, links cuDNN/cuBLAS, and carries device code for the
# requested architectures. Exit 77 (skipped) in a build without CUDA.
#   cuda_objects.sh WITH_CUDA LIBDARKNET DARKNET_CLI ARCHITECTURES
set -eu
with_cuda=$1 lib=$2 cli=$3 archs=$4
if [ "$with_cuda" != "ON" ]; then
    echo "SKIP: not a CUDA build (configured with DARKNET_AMP_CUDA off or no nvcc found)"
    exit 77
fi
fail=0
for f in "$lib" "$cli"; do
    [ -s "$f" ] || { echo "FAIL: $f missing"; exit 1; }
done
for sym in forward_convolutional_layer_gpu backward_convolutional_layer_gpu \
           cudnn_convolutional_setup update_network_gpu cuda_make_array; do
    if nm -D --defined-only "$lib" | grep -qw "$sym"; then
        echo "ok: $lib defines $sym"
    else
        echo "FAIL: $lib lacks $sym"; fail=1
    fi
done
for dep in libcudnn libcublas libcudart; do
    if readelf -d "$lib" | grep NEEDED | grep -q "$dep"; then
        echo "ok: $lib needs $dep"
    else
        echo "FAIL: $lib does not link $dep"; fail=1
    fi
done
if readelf -S "$lib" | grep -q '\.nv_fatbin'; then
    echo "ok: $lib carries a .nv_fatbin section (device code)"
else
    echo "FAIL: $lib has no device code (.nv_fatbin section)"; fail=1
fi
if command -v cuobjdump > /dev/null 2>&1; then
    elf=$(cuobjdump --list-elf "$lib" 2>/dev/null || true)
    for a in $(echo "$archs" | tr ';' ' '); do
        sm=$(echo "$a" | sed 's/-.*//')
        if echo "$elf" | grep -q "sm_$sm"; then
            echo "ok: device code for sm_$sm"
        else
            echo "FAIL: no device code for sm_$sm in $lib"; fail=1
        fi
    done
fi
[ $fail -eq 0 ] && echo "PASS: CUDA build complete" || exit 1
