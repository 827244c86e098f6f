// device_api.h: what device code names besides the built-in variables and collectives: the CUDA qualifiers
// (mapped to nothing or to their C++ meaning), atomics, and the math / bit intrinsics kernels commonly use.
//
// Atomics are relaxed GCC __atomic operations (a CAS loop for float, double and bf16), so ThreadSanitizer
// knows them for atomics and does not report them as races; like CUDA's they order nothing else.
// Fast-math intrinsics (__expf, __fdividef, ...) compute the accurate value: the executor does not model the
// reduced precision of the special function units.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <math.h>

#include "cuda_cpu/types.h"

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
#define __align__(n) alignas(n)
#define __launch_bounds__(...)

// ---- atomics -----------------------------------------------------------------------------------------------
namespace cuda_cpu {
template <class Bits, class T, class F> T atomic_cas_loop(T* p, F op) {
    static_assert(sizeof(Bits) == sizeof(T), "bit type must match");
    Bits* b = reinterpret_cast<Bits*>(p);
    Bits old = __atomic_load_n(b, __ATOMIC_RELAXED), next;
    T oldv, newv;
    do {
        memcpy(&oldv, &old, sizeof(T));
        newv = op(oldv);
        memcpy(&next, &newv, sizeof(T));
    } while (!__atomic_compare_exchange_n(b, &old, next, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return oldv;
}
}  // namespace cuda_cpu

inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline float atomicAdd(float* p, float v) {
    return cuda_cpu::atomic_cas_loop<uint32_t>(p, [v](float x) { return x + v; });
}
inline double atomicAdd(double* p, double v) {
    return cuda_cpu::atomic_cas_loop<uint64_t>(p, [v](double x) { return x + v; });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
    return cuda_cpu::atomic_cas_loop<uint16_t>(p, [v](__nv_bfloat16 x) { return __nv_bfloat16(float(x) + float(v)); });
}
inline int atomicSub(int* p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicSub(unsigned* p, unsigned v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
inline int atomicExch(int* p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicExch(unsigned* p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
inline float atomicExch(float* p, float v) {
    return cuda_cpu::atomic_cas_loop<uint32_t>(p, [v](float) { return v; });
}
inline int atomicMax(int* p, int v) {
    return cuda_cpu::atomic_cas_loop<int>(p, [v](int x) { return x > v ? x : v; });
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
    return cuda_cpu::atomic_cas_loop<unsigned>(p, [v](unsigned x) { return x > v ? x : v; });
}
inline int atomicMin(int* p, int v) {
    return cuda_cpu::atomic_cas_loop<int>(p, [v](int x) { return x < v ? x : v; });
}
inline unsigned atomicMin(unsigned* p, unsigned v) {
    return cuda_cpu::atomic_cas_loop<unsigned>(p, [v](unsigned x) { return x < v ? x : v; });
}
template <class T> T cuda_cpu_cas(T* p, T compare, T val) {
    __atomic_compare_exchange_n(p, &compare, val, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare;  // the old value either way
}
inline int atomicCAS(int* p, int c, int v) { return cuda_cpu_cas(p, c, v); }
inline unsigned atomicCAS(unsigned* p, unsigned c, unsigned v) { return cuda_cpu_cas(p, c, v); }
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long c, unsigned long long v) {
    return cuda_cpu_cas(p, c, v);
}

// ---- bits and math -----------------------------------------------------------------------------------------
inline float __expf(float x) { return expf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline size_t min(size_t a, size_t b) { return a < b ? a : b; }
inline size_t max(size_t a, size_t b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
