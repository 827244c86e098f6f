// engines.h: make_engine, the one place that sees both engines and picks one for this machine: the CUDA engine
// (model.cuh) when the file is compiled by nvcc with PRISM_CUDA defined (the Makefile does this whenever nvcc
// exists) and a GPU is present, the CPU reference (cpu_engine.h) otherwise. The entry points (train_prism,
// eval_zeroshot) include this; everything below them sees only the Engine interface (engine.h).
// Does not: choose among several GPUs (it takes device 0); the fallback to the CPU is never silent (`why`).
#pragma once

#include <memory>
#include <string>

#include "cpu_engine.h"
#include "engine.h"
#include "schedule.h"
#if defined(PRISM_CUDA) && defined(__CUDACC__)
#include "model.cuh"
#endif

// The engine for this machine: the CUDA engine when it is built in and a GPU is present (and --cpu is not
// given), the CPU reference otherwise. `why` says which and why, for the log.
inline std::unique_ptr<Engine> make_engine(const ModelConfig& c, bool force_cpu, std::string& why) {
#if defined(PRISM_CUDA) && defined(__CUDACC__)
    int n = 0;
    cudaError_t err = force_cpu ? cudaSuccess : cudaGetDeviceCount(&n);
    if (!force_cpu && err == cudaSuccess && n > 0) {
        cudaDeviceProp p;
        cudaCheck(cudaGetDeviceProperties(&p, 0));
        why = std::string("GPU 0: ") + p.name;
        return std::unique_ptr<Engine>(new CudaEngine(c));
    }
    why = force_cpu ? "CPU forced by --cpu"
                    : std::string("no usable GPU (") + (err == cudaSuccess ? "none found" : cudaGetErrorString(err)) +
                          "): running on the CPU";
    cudaGetLastError();  // clear the failed query so later CUDA calls do not report it
#else
    why = force_cpu ? "CPU forced by --cpu" : "no CUDA engine in this build: running on the CPU";
#endif
    return std::unique_ptr<Engine>(new CpuEngine(c));
}
