#!/usr/bin/env bash
# dev/closure.sh [FILE...]: the project files a reader of the trainer must cross, as the compilers see them: the
# include closure of train_prism.cu built for the GPU (PRISM_CUDA, PRISM_MPI, PRISM_NCCL; g++ -MM) plus that of
# cuda_engine.cu (nvcc -M), system headers left out; prints the files with their lines, then the totals. Given
# files, the closure of those instead (g++ -MM, no defines). Run from the checkout's root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
deps() { tr ' \\' '\n\n' | grep -v ':$' | grep -v '^/' | grep -v '^$' | sed 's|^\./||' | grep -v '\.o$' || true; }
if [ $# -gt 0 ]; then
    files=$(for f in "$@"; do g++ -std=c++17 -MM -x c++ -I. "$f" | deps; done | sort -u)
else
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    mpi=$(mpicxx --showme:compile 2> /dev/null || true)
    files=$({ g++ -std=c++17 -MM -x c++ -DPRISM_CUDA -DPRISM_MPI -DPRISM_NCCL -DOMPI_SKIP_MPICXX -I. $mpi \
                -I"$(dirname "$nvcc")/../include" train_prism.cu | deps
              "$nvcc" -std=c++17 -M -DPRISM_CUDA -DPRISM_NCCL -I. cuda_engine.cu | deps; } | sort -u)
fi
wc -l $files | sort -n
echo "closure: $(echo "$files" | wc -l) files, $(cat $files | wc -l) lines"
