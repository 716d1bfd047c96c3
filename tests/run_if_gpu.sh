#!/bin/sh
# run_if_gpu.sh PROBE COMMAND...: runs COMMAND when PROBE finds a CUDA device,
# otherwise exits 77 (skipped) with PROBE's reason.
probe=$1
shift
"$probe" || exit $?
exec "$@"
