// cuda_common.cuh: the few portable wrappers every kernel file uses, so that the same .cuh compiles with nvcc
// (runs on the GPU) and with g++ (runs on the CUDA-on-CPU executor in cuda_cpu/, for CI without a GPU).
// These macros are the only #if between the two worlds; kernel bodies are plain CUDA.
//
//   LAUNCH(grid, block, smem_bytes, stream, kernel)(args...)   kernel<<<grid, block, smem_bytes, stream>>>(args...)
//   SHARED(float[32][33], tile);       __shared__ float tile[32][33];  (a type with a comma needs a typedef)
//   DYNAMIC_SHARED(float, buf);        extern __shared__ float buf[];  (as float* buf)
//   cudaCheck(cudaMalloc(...));        aborts with file, line and the error string
//   bf16                               __nv_bfloat16 (host and device; float conversions round to nearest even)
//   mma_m16n8k16_bf16(d, a, b, c)      one tensor-core tile d = a * b + c, fp32 accumulate (PTX fragment layouts)
//   ldmatrix_x{1,2,4}[_trans](r, p)    warp-collective 8x8 bf16 matrix loads from shared memory
//   cp_async<BYTES>(smem, gmem, valid)  asynchronous global -> shared copy of 4, 8 or 16 bytes (zeros if !valid);
//   cp_async_commit(); cp_async_wait<N>()  close a group of copies; wait until at most N groups are in flight
//   UNROLL                             #pragma unroll for nvcc (nothing for g++), before loops over register arrays
//   fast_exp2(x)                       2^x on the special-function unit, flush-to-zero (ex2.approx.ftz.f32)
//   OpTimer                            told the end of every op of a training step (dev/bench_model times them)
//
// Under the executor the launch checks its configuration like the driver, shared memory is poisoned (NaN) at
// every block start, and barrier misuse aborts with the kernel name and thread coordinates.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <string>

#define LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
template <class T> using prism_ident_t = T;
#define SHARED(T, name) __shared__ prism_ident_t<T> name
#define DYNAMIC_SHARED(T, name)                                                                                        \
    extern __shared__ __align__(16) unsigned char name##_dynamic_smem_[];                                              \
    T* name = reinterpret_cast<T*>(name##_dynamic_smem_)

// Tensor cores (sm_80+). Fragment layouts: see the header of cuda_cpu/warp.h, which implements them on
// the CPU; the arguments are per-lane register arrays.
__device__ __forceinline__ void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
__device__ __forceinline__ unsigned prism_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x1(uint32_t* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(prism_smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(prism_smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(prism_smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(prism_smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(prism_smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(prism_smem_addr(p)));
}

// Asynchronous copies (sm_80+, PTX cp.async). With valid false the source is not read (src-size 0) and the
// destination is zero-filled; gmem must still be a valid, aligned address. A copy is only guaranteed to have
// landed once a cp_async_wait has retired its group (then a __syncthreads makes it visible to the block).
template <int BYTES> __device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool valid) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
    if constexpr (BYTES == 16)  // .cg: cache in L2 only (tiles are reused across blocks, not within one)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(prism_smem_addr(smem)), "l"(gmem),
                     "r"(valid ? 16 : 0)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(prism_smem_addr(smem)), "l"(gmem),
                     "n"(BYTES), "r"(valid ? BYTES : 0)
                     : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#define UNROLL _Pragma("unroll")

// 2^x as one MUFU.EX2 (ex2.approx.ftz.f32: max relative error 2^-22, results below 2^-126 flushed to +0, 2^-inf =
// +0). Plain exp2f compiles to the same instruction wrapped in a range check (FSETP.GEU x, -126) and two
// conditional multiplies that keep subnormal results: three extra instructions per exponential, which the
// softmax of attention.cuh issues once per score. A softmax never needs a probability below 2^-126.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

#else  // the CUDA-on-CPU executor

#include "cuda_cpu/cuda_cpu.h"

#define LAUNCH(grid, block, smem, stream, ...)                                                                         \
    ::cuda_cpu::make_launch(#__VA_ARGS__, (grid), (block), (smem), (stream), __VA_ARGS__)
#define SHARED(T, name)                                                                                                \
    static ::cuda_cpu::SharedTag name##_shared_tag_;                                                                   \
    ::cuda_cpu::ident_t<T>& name = ::cuda_cpu::shared_var<::cuda_cpu::ident_t<T>>(name##_shared_tag_, #name)
#define DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::cuda_cpu::dynamic_shared())
#define UNROLL

// The GPU's fast_exp2 on the CPU: exp2f with the same flush of subnormal results to +0.
inline float fast_exp2(float x) {
    const float y = exp2f(x);
    return y < 1.17549435e-38f ? 0.0f : y;  // FLT_MIN: 2^-126
}

#endif

typedef __nv_bfloat16 bf16;

// Every CUDA runtime call goes through cudaCheck: a failure names the call site and the runtime's message.
inline void cuda_check(cudaError_t err, const char* file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "[CUDA ERROR] at %s:%d: %s\n", file, line, cudaGetErrorString(err));
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) cuda_check((err), __FILE__, __LINE__)

// OpTimer, told the end of every op of a training step on the stream it ran on, under
// run/cost_model.h's op names. model.cuh's CudaModel tells it (the model's ops and the engine's); dev/bench_model
// records an event per op, test_model_cuda.cpp lists the names against the cost model's.
// Does not: time anything itself (its implementations do).

struct OpTimer {
    virtual ~OpTimer() = default;
    virtual void mark(const char* op, cudaStream_t stream) = 0;
};

// Model FLOPs utilisation. MFU = 3 x dense forward FLOPs per token (model_config.h's account(), attention
// over the full T x T square, as PaLM and llm.c count) x tokens/s / the device's dense bf16 peak. The table
// holds dense bf16 tensor-core peaks (TFLOP/s, fp32 accumulate, no sparsity), matched against the CUDA device
// name in order, so more specific names come first. A device missing from the table has peak 0 and no MFU
// is printed (never a made-up number).

struct DevicePeak {
    const char* name;
    double tflops;
};

inline double peak_bf16_tflops(const std::string& device) {
    static const DevicePeak peaks[] = {
        {"H200", 989.0},      {"GH200", 989.0},    {"H100 SXM", 989.0}, {"H100 80GB HBM3", 989.0}, {"H100 NVL", 835.0},
        {"H100 PCIe", 756.0}, {"H100", 756.0},     {"A100", 312.0},     {"L40S", 362.0},           {"L4", 121.0},
        {"A10G", 70.0},       {"RTX 4090", 165.2}, {"RTX 3090", 71.0},
    };
    for (const DevicePeak& p : peaks)
        if (device.find(p.name) != std::string::npos) return p.tflops;
    return 0;
}
