// engines.h: make_engine, the one place that sees both engines and picks one for this machine: the CUDA engine
// (model.cuh) when the file is compiled by nvcc with PRISM_CUDA defined (the Makefile does this whenever nvcc
// exists) and a GPU is present, the CPU reference (cpu_engine.h) otherwise. PRISM_EXECUTOR builds the CUDA
// engine with g++ on the CUDA-on-CPU executor (test/cuda_cpu/), so the trainer's command line can be tested
// against it without a GPU. The entry points (train_prism, eval_zeroshot) include this; everything below them
// sees only the Engine interface (engine.h).
// On the GPU it also decides recomputation: asked for (--recompute), or chosen when a training run's B x T would
// not fit the GPU's free memory with every activation kept but fits with recomputation (memory_plan.h), and
// `why` says so; when neither fits it fails before allocating, with the numbers and what to change.
// Does not: choose among several GPUs (it takes device 0); the fallback to the CPU is never silent (`why`).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "cpu_engine.h"
#include "engine.h"
#include "schedule.h"
#if defined(PRISM_CUDA) && (defined(__CUDACC__) || defined(PRISM_EXECUTOR))
#define PRISM_HAS_CUDA_ENGINE 1
#include "memory_plan.h"
#include "model.cuh"
#endif

struct EngineOptions {
    bool force_cpu = false;
    bool recompute = false;  // GPU: recompute norm and SwiGLU outputs in the backward
    int B = 0, T = 0;        // a training run's micro-batch, for the memory check (0: no check, e.g. evaluation)
};

// The engine for this machine: the CUDA engine when it is built in and a GPU is present (and --cpu is not
// given), the CPU reference otherwise. `why` says which and why, for the log.
inline std::unique_ptr<Engine> make_engine(const ModelConfig& c, const EngineOptions& o, std::string& why) {
#ifdef PRISM_HAS_CUDA_ENGINE
    int n = 0;
    cudaError_t err = o.force_cpu ? cudaSuccess : cudaGetDeviceCount(&n);
    if (!o.force_cpu && err == cudaSuccess && n > 0) {
        cudaDeviceProp p;
        cudaCheck(cudaGetDeviceProperties(&p, 0));
        why = std::string("GPU 0: ") + p.name;
        bool recompute = o.recompute;
        if (o.B > 0) {
            size_t free = 0, total = 0;
            cudaCheck(cudaMemGetInfo(&free, &total));
            const int choice = choose_recompute(c, o.B, o.T, free);
            char msg[256];
            if (choice < 0) {
                snprintf(msg, sizeof msg, "B %d x T %d needs %.1f GiB of GPU memory (%.1f GiB with --recompute) but "
                         "%.1f GiB are free; lower -b (--total-batch keeps the tokens per step)", o.B, o.T,
                         gib(gpu_memory(c, o.B, o.T, false).total()), gib(gpu_memory(c, o.B, o.T, true).total()),
                         gib(free));
                throw ConfigError(msg);
            }
            if (choice == 1 && !recompute) {
                snprintf(msg, sizeof msg, "; recomputing norm and SwiGLU outputs in the backward (activations need "
                         "%.1f GiB, %.1f GiB free)", gib(gpu_memory(c, o.B, o.T, false).total()), gib(free));
                why += msg;
                recompute = true;
            }
        }
        return std::unique_ptr<Engine>(new CudaEngine(c, recompute));
    }
    why = o.force_cpu ? "CPU forced by --cpu"
                      : std::string("no usable GPU (") + (err == cudaSuccess ? "none found" : cudaGetErrorString(err)) +
                            "): running on the CPU";
    cudaGetLastError();  // clear the failed query so later CUDA calls do not report it
#else
    why = o.force_cpu ? "CPU forced by --cpu" : "no CUDA engine in this build: running on the CPU";
#endif
    return std::unique_ptr<Engine>(new CpuEngine(c));
}
inline std::unique_ptr<Engine> make_engine(const ModelConfig& c, bool force_cpu, std::string& why) {
    EngineOptions o;
    o.force_cpu = force_cpu;
    return make_engine(c, o, why);
}
