// cuda_cpu.h: the CUDA-on-CPU executor, everything a .cuh kernel file needs when compiled by g++ instead of
// nvcc. Included by cuda_common.cuh when __CUDACC__ is not defined; kernel files never include it directly.
//
// What it models: threads, warps and blocks with CUDA's synchronisation rules (fibers, see executor.h),
// shared memory (poisoned per block), atomics, warp collectives, the mma/ldmatrix tensor-core fragments, cp.async
// copies (landing only at the wait that retires them), and a synchronous runtime with the real error codes.
// What it does not: timing, memory coalescing or bank
// conflicts, the order in which hardware schedules warps, floating-point order inside tensor cores, the
// reduced precision of fast-math intrinsics, cross-block races (blocks run in sequence with a happens-before
// edge between them), asynchronous streams, and the cooperative-groups API.
//
// Header-only; builds with g++ 12 (C++17) on x86-64 Linux. Not thread-safe: launch kernels from one thread.
#pragma once

#include "cuda_cpu/types.h"
#include "cuda_cpu/runtime.h"
#include "cuda_cpu/device_api.h"
#include "cuda_cpu/executor.h"
#include "cuda_cpu/async_copy.h"

#define CUDA_CPU_EXECUTOR 1
