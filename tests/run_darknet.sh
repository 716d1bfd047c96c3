#!/bin/sh
# run_darknet.sh PROBE FAKE_DEVICE COMMAND...: runs a test of CPU networks in a
# CUDA build. A CUDA build of darknet allocates device memory for every
# network it builds, a CPU network's included: with a GPU present (PROBE exits
# 0) COMMAND runs as it is; without one it runs with FAKE_DEVICE preloaded, a
# device made of host memory that serves CPU networks and refuses anything
# that computes on the GPU (tests/fake_device.c).
probe=$1 fake=$2
shift 2
if "$probe" > /dev/null; then
    exec "$@"
fi
echo "no GPU: CPU networks on the fake device ($fake)"
LD_PRELOAD=$fake${LD_PRELOAD:+:$LD_PRELOAD} exec "$@"
