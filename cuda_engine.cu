// cuda_engine.cu: the CUDA engine's one translation unit: the engine, its kernels and the KV-cache decoder's, and
// the makers that hand them out. engine.h declares what the products call (gpu_engine_available,
// make_gpu_engine: defined when PRISM_CUDA is, as in every build of the products); cuda_engine_hooks.cuh what the
// tests and dev/bench_model call (make_cuda_engine, make_cuda_decoder_on). The Makefile compiles this file once
// per set of flags and links that object wherever the engine runs: nvcc's (build/cuda_engine.o) into train_prism,
// eval_zeroshot and generate, the GPU bundle's into its products, gpu_tests and bench_model, one GPU's
// (build/native/) into build/bench_model; g++'s on the CUDA-on-CPU executor (PRISM_EXECUTOR, with MPI) into
// build/train_prism_executor, the tests' (build/test/) into build/test_prism, build/test_fast and
// build/bench_model_cpu, the address build's into its model and decoder tests. So nvcc compiles the engine's
// kernels, the decoder's and the cuBLASLt calls once per build, and of the other sources that use the engine only
// test/dp_engine_check.cpp includes a kernel header (it compiles the engine with its own MPI flags).
// Does not: pick between the engines (engine.cpp's make_engine does, with what this returns).
#include <cstdio>
#include <memory>
#include <string>

#include "cuda_engine.cuh"
#include "cuda_engine_hooks.cuh"
#include "inspect/cuda_decoder.cuh"
#include "memory_plan.h"

std::unique_ptr<CudaEngineHooks> make_cuda_engine(const ModelConfig& c, bool recompute, const DataParallel& dp,
                                                  bool with_decoder) {
    return std::unique_ptr<CudaEngineHooks>(
        new CudaEngine(c, recompute, dp, with_decoder ? make_cuda_decoder : nullptr));
}

std::unique_ptr<Decoder> make_cuda_decoder_on(const ModelConfig& c, const bf16* weights, cudaStream_t stream,
                                              int capacity) {
    return std::unique_ptr<Decoder>(new CudaDecoder(c, weights, stream, capacity));
}

// The products' entry points. The tests' builds of this file leave them out: their sources see engine.h
// without PRISM_CUDA, whose gpu_engine_available is an inline `false`.
#ifdef PRISM_CUDA
namespace {

// Why cudaGetDeviceCount found no GPU, in words: a machine with the toolkit but no GPU (or no driver) answers
// "CUDA driver version is insufficient for CUDA runtime version", which reads as a version problem.
std::string no_gpu_reason(cudaError_t err) {
    if (err == cudaSuccess || err == cudaErrorNoDevice) return "none found";
    if (err == cudaErrorInsufficientDriver)
        return "no NVIDIA driver, or one older than this build's CUDA runtime: none found or none usable";
    return cudaGetErrorString(err);
}

}  // namespace

bool gpu_engine_available(bool force_cpu) {
    int n = 0;
    const bool yes = !force_cpu && cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();  // a failed query must not be reported by a later call
    return yes;
}

std::unique_ptr<Engine> make_gpu_engine(const ModelConfig& c, const EngineOptions& o, std::string& why) {
    if (o.force_cpu) {
        why = "CPU forced by --cpu";
        return nullptr;
    }
    check_gdn_on_cuda(c);
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        why = "no usable GPU (" + no_gpu_reason(err) + "): running on the CPU";
        cudaGetLastError();  // clear the failed query so later CUDA calls do not report it
        return nullptr;
    }
#ifdef PRISM_EXECUTOR
    const int local = 0;  // the executor's one device, shared by the ranks of a test
#else
    const int local = o.dp.dist ? o.dp.dist->local_rank : 0;
#endif
    if (local >= n)
        throw ConfigError("local rank " + std::to_string(local) + " needs GPU " + std::to_string(local) +
                          " but this node has " + std::to_string(n) + (n == 1 ? " GPU" : " GPUs") + "; start at most " +
                          std::to_string(n) + " ranks per node (mpirun -np, or --host a:" + std::to_string(n) + ")");
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
#endif  // PRISM_CUDA
