// engine_factory.h: make_engine, the one place that sees both engines and picks one for this machine: the CUDA engine
// (cuda_engine.cuh) when the file is compiled by nvcc with PRISM_CUDA defined (the Makefile does this whenever nvcc
// exists) and a GPU is present, the CPU reference (ref/cpu_engine.h) otherwise. PRISM_EXECUTOR builds the CUDA
// engine with g++ on the CUDA-on-CPU executor (cuda_cpu/), so the trainer's command line can be tested
// against it without a GPU. The entry points (train_prism, eval_zeroshot) include this; everything below them
// sees only the Engine interface (engine.h).
// On the GPU it also decides recomputation: asked for (--recompute), or chosen when a training run's B x T would
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
#if defined(PRISM_CUDA) && (defined(__CUDACC__) || defined(PRISM_EXECUTOR))
#define PRISM_HAS_CUDA_ENGINE 1
#include "memory_plan.h"
#include "cuda_engine.cuh"
#include "inspect/cuda_decoder.cuh"
#endif

struct EngineOptions {
    bool force_cpu = false;
    bool recompute = false;  // GPU: recompute norm and SwiGLU outputs in the backward
    int B = 0, T = 0;        // a training run's micro-batch, for the memory check (0: no check, e.g. evaluation)
    DataParallel dp;         // this rank of a data-parallel run (default: one process)
};

// Whether make_engine would pick the CUDA engine (a CUDA build, a GPU, no --cpu).
inline bool gpu_engine_available(bool force_cpu) {
#ifdef PRISM_HAS_CUDA_ENGINE
    int n = 0;
    const bool yes = !force_cpu && cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();  // a failed query must not be reported by a later call
    return yes;
#else
    (void)force_cpu;
    return false;
#endif
}

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

#ifdef PRISM_HAS_CUDA_ENGINE
// Why cudaGetDeviceCount found no GPU, in words: a machine with the toolkit but no GPU (or no driver) answers
// "CUDA driver version is insufficient for CUDA runtime version", which reads as a version problem.
inline std::string no_gpu_reason(cudaError_t err) {
    if (err == cudaSuccess || err == cudaErrorNoDevice) return "none found";
    if (err == cudaErrorInsufficientDriver)
        return "no NVIDIA driver, or one older than this build's CUDA runtime: none found or none usable";
    return cudaGetErrorString(err);
}
#endif

// The engine for this machine: the CUDA engine when it is built in and a GPU is present (and --cpu is not
// given), the CPU reference otherwise. `why` says which and why, for the log.
inline std::unique_ptr<Engine> make_engine(const ModelConfig& c, const EngineOptions& o, std::string& why) {
#ifdef PRISM_HAS_CUDA_ENGINE
    int n = 0;
    cudaError_t err = o.force_cpu ? cudaSuccess : cudaGetDeviceCount(&n);
    if (!o.force_cpu && err == cudaSuccess && n > 0) {
#ifdef PRISM_EXECUTOR
        const int local = 0;  // the executor's one device, shared by the ranks of a test
#else
        const int local = o.dp.dist ? o.dp.dist->local_rank : 0;
#endif
        if (local >= n)
            throw ConfigError("local rank " + std::to_string(local) + " needs GPU " + std::to_string(local) +
                              " but this node has " + std::to_string(n) + (n == 1 ? " GPU" : " GPUs") +
                              "; start at most " + std::to_string(n) +
                              " ranks per node (mpirun -np, or --host a:" + std::to_string(n) + ")");
        cudaCheck(cudaSetDevice(local));
        cudaDeviceProp p;
        cudaCheck(cudaGetDeviceProperties(&p, local));
        why = "GPU " + std::to_string(local) + ": " + p.name;
        bool recompute = o.recompute;
        if (o.B > 0) {
            size_t free = 0, total = 0;
            cudaCheck(cudaMemGetInfo(&free, &total));
            const int shards = o.dp.zero >= 1 ? o.dp.world() : 1;  // ZeRO-1: this GPU's share of the optimizer
            const int choice = choose_recompute(c, o.B, o.T, free, shards);
            char msg[256];
            if (choice < 0) {
                snprintf(msg, sizeof msg,
                         "B %d x T %d needs %.1f GiB of GPU memory (%.1f GiB with --recompute) but "
                         "%.1f GiB are free; lower -b (--total-batch keeps the tokens per step)",
                         o.B, o.T, gib(gpu_memory(c, o.B, o.T, false, shards).total()),
                         gib(gpu_memory(c, o.B, o.T, true, shards).total()), gib(free));
                throw ConfigError(msg);
            }
            if (choice == 1 && !recompute) {
                snprintf(msg, sizeof msg,
                         "; recomputing norm and SwiGLU outputs in the backward (activations need "
                         "%.1f GiB, %.1f GiB free)",
                         gib(gpu_memory(c, o.B, o.T, false, shards).total()), gib(free));
                why += msg;
                recompute = true;
            }
        }
        return std::unique_ptr<Engine>(new CudaEngine(c, recompute, o.dp, make_cuda_decoder));
    }
    why = o.force_cpu ? "CPU forced by --cpu" : "no usable GPU (" + no_gpu_reason(err) + "): running on the CPU";
    cudaGetLastError();  // clear the failed query so later CUDA calls do not report it
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
