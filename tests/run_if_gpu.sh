#!/bin/sh
# run_if_gpu.sh PROBE COMMAND...: runs a test of the GPU path (label gpu) when
# PROBE finds a CUDA device, otherwise exits 77 (skipped) with its reason.
probe=$1
shift
"$probe" || exit $?
exec "$@"
