#!/usr/bin/env bash
# setup.sh: everything Prism needs on a fresh Debian 12 / Ubuntu machine, once.
#   1. build dependencies from Debian (apt-get; as root, or through sudo): g++, make, Catch2 v2, PCRE2,
#      Boost.Context (the CUDA-on-CPU test executor), OpenMPI, python3 + pip + venv (to download data files, and
#      dev/ci_venv.sh's environment of CI's comparisons),
#      bible-kjv (part of the default corpus), zlib (the tests read a browser's PNG screenshot), nlohmann/json
#      (util/json.h), simdjson (prepare_shards' JSON Lines), Boost.Math headers (studies/stats.h: Student's t),
#      libxml2 (the tests parse report's page and every SVG with it), strace (a test kills the trainer at each
#      rename of a branch).
#      The CUDA toolkit (nvcc, cuBLASLt, NCCL) is optional: without
#      it everything builds and trains on the CPU.
#   2. the GPT-2 ranks file into data/cache/ (data/get_tokenizer.sh)
#   3. the default corpus into data/default/ (data/get_default.sh)
# Idempotent: rerunning skips what is already there. Usage: bash setup.sh [--deps-only] [--slurm]
#   --deps-only  the packages only (1.), not the data files
#   --slurm      Debian's Slurm too, for make test-slurm (test/slurm/run.sh starts a single-node cluster of it):
#                slurmctld, slurmd, slurm-client (sbatch, srun; its plugins include PMIx, through libpmix2) and munge
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

deps_only=0 slurm=0
for a in "$@"; do
    case $a in
        --deps-only) deps_only=1 ;;
        --slurm) slurm=1 ;;
        *) echo "setup: error: unknown option $a; usage: bash setup.sh [--deps-only] [--slurm]" >&2; exit 1 ;;
    esac
done

packages=(g++ make catch2 libpcre2-dev libboost-context-dev libopenmpi-dev openmpi-bin python3 python3-pip python3-venv
          bible-kjv zlib1g-dev nlohmann-json3-dev libsimdjson-dev libboost-dev libxml2-dev strace)
((slurm)) && packages+=(slurmctld slurmd slurm-client munge)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    if [[ "$(id -u)" -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || { echo "setup: error: need root to install ${missing[*]}; rerun as root" >&2; exit 1; }
        sudo=sudo
    fi
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
((deps_only)) && exit 0

bash data/get_tokenizer.sh
bash data/get_default.sh
echo "setup: done. Next: make run (trains tiny on the default corpus), make test"
