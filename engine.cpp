// engine.cpp: make_engine (engine.h), the one place that sees both engines and picks one for this machine: the
// CUDA engine (cuda_engine.cu's make_gpu_engine) when the build has it (PRISM_CUDA: the Makefile defines it
// whenever nvcc exists) and a GPU is present, the CPU reference (ref/cpu_engine.h) otherwise. Compiled apart, once
// per set of flags (the Makefile's LIB), so the entry points that call it compile neither engine.
// With several ranks (EngineOptions::dp) CPU ranks split the node's cores among themselves (unless
// OMP_NUM_THREADS says otherwise); each GPU rank takes the GPU of its local rank (make_gpu_engine).
// Does not: fall back to the CPU silently (`why` says which engine and why).
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine.h"
#include "ref/cpu_engine.h"

// The CPU engine for one rank of dp: with several ranks on a node and no OMP_NUM_THREADS, each takes its share
// of the cores this process may run on (all of them without a launcher's binding, one when bound to a core).
static std::unique_ptr<Engine> make_cpu_engine(const ModelConfig& c, const DataParallel& dp) {
    if (dp.world() > 1 && !dp.dist->over_mpi())
        throw ConfigError(
            "CPU ranks need MPI for their collectives, and this process group has none (the "
            "environment rendezvous is for GPUs); launch with mpirun or srun --mpi=pmix");
    if (dp.world() > 1 && !getenv("OMP_NUM_THREADS"))
        omp_set_num_threads(std::max(1, omp_get_num_procs() / dp.dist->local_world));
    return std::unique_ptr<Engine>(new CpuEngine(c, dp));
}

std::unique_ptr<Engine> make_engine(const ModelConfig& c, const EngineOptions& o, std::string& why) {
    std::unique_ptr<Engine> e;
#ifdef PRISM_CUDA
    e = make_gpu_engine(c, o, why);
#else
    why = o.force_cpu ? "CPU forced by --cpu" : "no CUDA engine in this build: running on the CPU";
#endif
    if (!e) e = make_cpu_engine(c, o.dp);
    e->set_optimizer_multipliers(o.multipliers);
    return e;
}

std::unique_ptr<Engine> make_engine(const ModelConfig& c, bool force_cpu, std::string& why) {
    EngineOptions o;
    o.force_cpu = force_cpu;
    return make_engine(c, o, why);
}
