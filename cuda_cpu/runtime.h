// runtime.h: the CUDA runtime API as the executor fakes it. "Device" memory is host memory from malloc,
// filled with 0xff bytes (NaN for float and bf16) so reads of never-written device memory show up, and
// tracked so cudaFree / cudaMemcpy reject pointers the real runtime would reject, with the real error codes.
// Streams and events are synchronous (everything has finished when a call returns); events record the host
// clock, so cudaEventElapsedTime times the CPU execution. One device, shaped like an H100 SXM (sm_90).
// What would stall a real GPU is counted, since it cannot be timed here (sync_count(), default_stream_count()):
//   synchronising calls  cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize; cudaMemcpy to or
//                        from host memory; cudaMemcpyAsync to or from pageable host memory (host memory not from
//                        cudaMallocHost: the driver stages it and may wait); cudaMalloc, cudaFree, cudaMallocHost,
//                        cudaFreeHost (the runtime may synchronise the device to change its memory map)
//   default-stream work  kernel launches, async copies and memsets on the legacy default stream (stream 0), and
//                        the blocking cudaMemcpy / cudaMemset, which serialise with every other blocking stream
// Tests read the counters before and after a training step to pin what a step costs the host.
//
// Does not: model asynchrony, peer access, unified memory, graphs, textures, or the driver API.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "cuda_cpu/types.h"

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
};
typedef cudaError_t cudaError;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum : unsigned { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
enum : unsigned { cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2 };

struct CUstream_st {
    int id;
};
struct CUevent_st {
    std::chrono::steady_clock::time_point t;
    bool recorded;
};
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem, sharedMemPerBlock, sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
    int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
    int multiProcessorCount, maxThreadsPerMultiProcessor, major, minor, l2CacheSize;
};

namespace cuda_cpu {
inline constexpr size_t kSharedDefault = 48 << 10;  // static + dynamic limit without the opt-in attribute
inline constexpr size_t kSharedOptin = 227 << 10;   // sharedMemPerBlockOptin of an H100
inline constexpr size_t kGlobalMem = 80ull << 30;

struct Runtime {
    cudaError_t last_error = cudaSuccess;
    std::map<const char*, size_t, std::less<>> allocs;  // device allocations: start -> bytes
    size_t allocated = 0;
    std::map<const void*, int> max_dynamic_smem;        // per kernel, from cudaFuncSetAttribute
    std::map<const char*, size_t, std::less<>> pinned;  // cudaMallocHost allocations: start -> bytes
    long syncs = 0, default_stream = 0;                 // see the top
    std::map<std::string, long> sync_calls;             // syncs by call name, for test diagnostics
};
inline Runtime& runtime() {
    static Runtime r;
    return r;
}
inline cudaError_t fail(cudaError_t e) {
    runtime().last_error = e;
    return e;
}

// The counters of the top of this file.
inline void count_sync(const char* call) { runtime().syncs++, runtime().sync_calls[call]++; }
inline void note_stream(cudaStream_t s) {
    if (!s) runtime().default_stream++;
}
inline long sync_count() { return runtime().syncs; }
inline long default_stream_count() { return runtime().default_stream; }
// "cudaMemcpy x2, cudaStreamSynchronize x1": every synchronising call so far, by name.
inline std::string sync_calls() {
    std::string s;
    for (auto& [name, n] : runtime().sync_calls) s += (s.empty() ? "" : ", ") + name + " x" + std::to_string(n);
    return s;
}

// Is [p, p+bytes) inside one device allocation?
inline bool is_device_range(const void* p, size_t bytes) {
    auto& a = runtime().allocs;
    auto it = a.upper_bound((const char*)p);
    if (it == a.begin()) return false;
    --it;
    return (const char*)p + bytes <= it->first + it->second;
}
// Is [p, p+bytes) inside one cudaMallocHost allocation?
inline bool is_pinned_range(const void* p, size_t bytes) {
    auto& a = runtime().pinned;
    auto it = a.upper_bound((const char*)p);
    if (it == a.begin()) return false;
    --it;
    return (const char*)p + bytes <= it->first + it->second;
}
}  // namespace cuda_cpu

inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess:
            return "no error";
        case cudaErrorInvalidValue:
            return "invalid argument";
        case cudaErrorMemoryAllocation:
            return "out of memory";
        case cudaErrorInitializationError:
            return "initialization error";
        case cudaErrorInvalidConfiguration:
            return "invalid configuration argument";
        case cudaErrorInvalidDevicePointer:
            return "invalid device pointer";
        case cudaErrorInvalidMemcpyDirection:
            return "invalid copy direction for memcpy";
        case cudaErrorInsufficientDriver:
            return "CUDA driver version is insufficient for CUDA runtime version";
        case cudaErrorInvalidDeviceFunction:
            return "invalid device function";
        case cudaErrorNoDevice:
            return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice:
            return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle:
            return "invalid resource handle";
        case cudaErrorNotReady:
            return "device not ready";
        case cudaErrorIllegalAddress:
            return "an illegal memory access was encountered";
        case cudaErrorLaunchOutOfResources:
            return "too many resources requested for launch";
    }
    return "unrecognized error code";
}
inline cudaError_t cudaGetLastError() {
    auto e = cuda_cpu::runtime().last_error;
    cuda_cpu::runtime().last_error = cudaSuccess;
    return e;
}

// ---- device ----------------------------------------------------------------------------------------------
inline cudaError_t cudaGetDeviceCount(int* n) {
    *n = 1;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cuda_cpu::fail(cudaErrorInvalidDevice); }
inline cudaError_t cudaGetDevice(int* d) {
    *d = 0;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
    cuda_cpu::count_sync("cudaDeviceSynchronize");
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d != 0) return cuda_cpu::fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "CUDA-on-CPU executor (H100-shaped)");
    p->totalGlobalMem = cuda_cpu::kGlobalMem;
    p->sharedMemPerBlock = cuda_cpu::kSharedDefault;
    p->sharedMemPerBlockOptin = cuda_cpu::kSharedOptin;
    p->sharedMemPerMultiprocessor = 228 << 10;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->multiProcessorCount = 132;
    p->maxThreadsPerMultiProcessor = 2048;
    p->major = 9;
    p->minor = 0;
    p->l2CacheSize = 50 << 20;
    return cudaSuccess;
}
template <class F> cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || (size_t)value > cuda_cpu::kSharedOptin)
        return cuda_cpu::fail(cudaErrorInvalidValue);
    cuda_cpu::runtime().max_dynamic_smem[(const void*)kernel] = value;
    return cudaSuccess;
}

// ---- memory ----------------------------------------------------------------------------------------------
inline cudaError_t cudaMalloc(void** p, size_t bytes) {
    auto& rt = cuda_cpu::runtime();
    cuda_cpu::count_sync("cudaMalloc");
    if (rt.allocated + bytes > cuda_cpu::kGlobalMem) {
        *p = nullptr;
        return cuda_cpu::fail(cudaErrorMemoryAllocation);
    }
    void* mem = nullptr;  // exactly `bytes` long, so AddressSanitizer sees an overflow of even one element
    if (posix_memalign(&mem, 256, bytes ? bytes : 1) != 0) {
        *p = nullptr;
        return cuda_cpu::fail(cudaErrorMemoryAllocation);
    }
    char* m = (char*)mem;
    memset(m, 0xff, bytes);  // poison: uninitialised device memory reads as NaN
    rt.allocs[m] = bytes;
    rt.allocated += bytes;
    *p = m;
    return cudaSuccess;
}
template <class T> cudaError_t cudaMalloc(T** p, size_t bytes) { return cudaMalloc((void**)p, bytes); }
inline cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    auto& rt = cuda_cpu::runtime();
    cuda_cpu::count_sync("cudaFree");
    auto it = rt.allocs.find((const char*)p);
    if (it == rt.allocs.end()) return cuda_cpu::fail(cudaErrorInvalidValue);
    rt.allocated -= it->second;
    rt.allocs.erase(it);
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, size_t bytes) {
    cuda_cpu::count_sync("cudaMallocHost");
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return cuda_cpu::fail(cudaErrorMemoryAllocation);
    cuda_cpu::runtime().pinned[(const char*)*p] = bytes;
    return cudaSuccess;
}
template <class T> cudaError_t cudaMallocHost(T** p, size_t bytes) { return cudaMallocHost((void**)p, bytes); }
inline cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    cuda_cpu::count_sync("cudaFreeHost");
    if (!cuda_cpu::runtime().pinned.erase((const char*)p)) return cuda_cpu::fail(cudaErrorInvalidValue);
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    *total = cuda_cpu::kGlobalMem;
    *free_bytes = cuda_cpu::kGlobalMem - cuda_cpu::runtime().allocated;
    return cudaSuccess;
}
namespace cuda_cpu {
inline cudaError_t checked_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (bytes == 0) return cudaSuccess;
    bool ok = true;
    switch (kind) {
        case cudaMemcpyHostToDevice:
            ok = is_device_range(dst, bytes);
            break;
        case cudaMemcpyDeviceToHost:
            ok = is_device_range(src, bytes);
            break;
        case cudaMemcpyDeviceToDevice:
            ok = is_device_range(dst, bytes) && is_device_range(src, bytes);
            break;
        case cudaMemcpyHostToHost:
        case cudaMemcpyDefault:
            break;
        default:
            return cuda_cpu::fail(cudaErrorInvalidMemcpyDirection);
    }
    if (!ok) return fail(cudaErrorInvalidValue);
    memmove(dst, src, bytes);
    return cudaSuccess;
}
inline cudaError_t checked_memset(void* p, int value, size_t bytes) {
    if (bytes && !is_device_range(p, bytes)) return fail(cudaErrorInvalidValue);
    memset(p, value, bytes);
    return cudaSuccess;
}
}  // namespace cuda_cpu
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (kind != cudaMemcpyDeviceToDevice) cuda_cpu::count_sync("cudaMemcpy");
    cuda_cpu::note_stream(nullptr);
    return cuda_cpu::checked_copy(dst, src, bytes, kind);
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                   cudaStream_t s = nullptr) {
    const void* host = kind == cudaMemcpyHostToDevice ? src : kind == cudaMemcpyDeviceToHost ? dst : nullptr;
    if (host && !cuda_cpu::is_pinned_range(host, bytes)) cuda_cpu::count_sync("cudaMemcpyAsync (pageable)");
    cuda_cpu::note_stream(s);
    return cuda_cpu::checked_copy(dst, src, bytes, kind);
}
inline cudaError_t cudaMemset(void* p, int value, size_t bytes) {
    cuda_cpu::note_stream(nullptr);
    return cuda_cpu::checked_memset(p, value, bytes);
}
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = nullptr) {
    cuda_cpu::note_stream(s);
    return cuda_cpu::checked_memset(p, value, bytes);
}
// Rows of `width` bytes, `pitch` apart.
inline cudaError_t cudaMemset2DAsync(void* p, size_t pitch, int value, size_t width, size_t height,
                                     cudaStream_t s = nullptr) {
    cuda_cpu::note_stream(s);
    if (width > pitch) return cuda_cpu::fail(cudaErrorInvalidValue);
    for (size_t r = 0; r < height; r++)
        if (cudaError_t e = cuda_cpu::checked_memset((char*)p + r * pitch, value, width)) return e;
    return cudaSuccess;
}

// ---- streams and events (synchronous) ---------------------------------------------------------------------
inline cudaError_t cudaStreamCreate(cudaStream_t* s) {
    static int next = 1;
    *s = new CUstream_st{next++};
    return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return cuda_cpu::fail(cudaErrorInvalidResourceHandle);
    delete s;
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
    cuda_cpu::count_sync("cudaStreamSynchronize");
    return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned = 0) { return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) {
    *e = new CUevent_st{{}, false};
    return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e) return cuda_cpu::fail(cudaErrorInvalidResourceHandle);
    delete e;
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
    if (!e) return cuda_cpu::fail(cudaErrorInvalidResourceHandle);
    e->t = std::chrono::steady_clock::now();
    e->recorded = true;
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) {
    cuda_cpu::count_sync("cudaEventSynchronize");
    return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!start || !end) return cuda_cpu::fail(cudaErrorInvalidResourceHandle);
    if (!start->recorded || !end->recorded) return cuda_cpu::fail(cudaErrorInvalidResourceHandle);
    *ms = std::chrono::duration<float, std::milli>(end->t - start->t).count();
    return cudaSuccess;
}
