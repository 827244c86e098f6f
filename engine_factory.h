// engine_factory.h: make_engine, the one place that sees both engines and picks one for this machine: the CUDA engine
// (cuda_engine.cuh) when the build has it (PRISM_CUDA: the Makefile defines it whenever nvcc exists) and a GPU is
// present, the CPU reference (ref/cpu_engine.h) otherwise. The CUDA side is cuda_engine.cu: one translation unit,
// compiled once per build by nvcc and linked into every binary that may run on a GPU (train_prism, eval_zeroshot,
// generate), whose own sources, this header included, are plain C++. PRISM_EXECUTOR compiles cuda_engine.cu with
// g++ on the CUDA-on-CPU executor (cuda_cpu/), so the trainer's command line can be tested against it without a
// GPU. The entry points (train_prism, eval_zeroshot, generate) include this; everything below them sees only the
// Engine interface (engine.h).
// On the GPU (cuda_engine.cu's make_gpu_engine) it also decides recomputation: asked for (--recompute), or chosen when a training run's B x T would
// not fit the GPU's free memory with every activation kept but fits with recomputation (memory_plan.h), and
// `why` says so; when neither fits it fails before allocating, with the numbers and what to change.
// With several ranks (EngineOptions::dp, dist/process_group.h) each rank takes the GPU of its local rank (on the executor, which
// has one, they share it), and CPU ranks split the node's cores among themselves (unless OMP_NUM_THREADS says
// otherwise).
// It also hands the CUDA engine its KV-cache decoder (inspect/cuda_decoder.cuh), which builds on the engine's model.
// Does not: fall back to the CPU silently (`why` says which engine and why).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "ref/cpu_engine.h"
#include "engine.h"
#include "model_config.h"

// The CPU engine for one rank of dp: with several ranks on a node and no OMP_NUM_THREADS, each takes its share
// of the cores this process may run on (all of them without a launcher's binding, one when bound to a core).
inline std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& c, const DataParallel& dp) {
    if (dp.world() > 1 && !dp.dist->over_mpi())
        throw ConfigError(
            "CPU ranks need MPI for their collectives, and this process group has none (the "
            "environment rendezvous is for GPUs); launch with mpirun or srun --mpi=pmix");
    if (dp.world() > 1 && !getenv("OMP_NUM_THREADS"))
        omp_set_num_threads(std::max(1, omp_get_num_procs() / dp.dist->local_world));
    return std::unique_ptr<Engine>(new CpuEngine(c, dp));
}

// The engine for this machine: the CUDA engine when it is built in and a GPU is present (and --cpu is not
// given), the CPU reference otherwise. `why` says which and why, for the log.
inline std::unique_ptr<Engine> make_engine(const ModelConfig& c, const EngineOptions& o, std::string& why) {
#ifdef PRISM_CUDA
    if (std::unique_ptr<Engine> e = make_gpu_engine(c, o, why)) return e;
#else
    why = o.force_cpu ? "CPU forced by --cpu" : "no CUDA engine in this build: running on the CPU";
#endif
    return make_cpu_engine(c, o.dp);
}
inline std::unique_ptr<Engine> make_engine(const ModelConfig& c, bool force_cpu, std::string& why) {
    EngineOptions o;
    o.force_cpu = force_cpu;
    return make_engine(c, o, why);
}
