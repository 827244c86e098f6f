#!/usr/bin/env bash
# dev/gpu_check.sh [OUT]: the GPU check on a GPU machine with this checkout: brings the GPU bundle up to date
# where nvcc is found (make gpu-bundle; else the bundle already in build/gpu-bundle/ is used),
# then runs it (build/gpu-bundle/run.sh: eight stages, at most 8.5 minutes, the summary and logs into OUT, default
# build/gpu_check). Compiling takes minutes: where the GPU machine's time is short, build the bundle elsewhere
# and run only its run.sh there (docs/gpu.md, "The GPU bundle").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/gpu_check}
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    make -s -j"$(nproc)" gpu-bundle || { echo "gpu_check: make gpu-bundle failed"; exit 1; }
elif [ ! -x build/gpu-bundle/run.sh ]; then
    echo "gpu_check: no nvcc and no build/gpu-bundle/: build the bundle with make gpu-bundle where nvcc is"
    exit 1
fi
exec bash build/gpu-bundle/run.sh "$OUT"
