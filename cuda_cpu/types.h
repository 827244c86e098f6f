// types.h: the CUDA value types kernels use, for the CPU executor: dim3/uint3, the vector types (float4 and
// friends, with CUDA's alignment so vectorised loads keep their meaning) and __nv_bfloat16 / __nv_bfloat162
// with the toolkit's host semantics: float -> bf16 rounds to nearest even (NaN stays NaN), bf16 -> float is
// exact, arithmetic is done in float and rounded back (what sm_80+ computes for a single bf16 op).
//
// Written here rather than taken from cuda_bf16.h so the executor builds on machines without the CUDA toolkit.
#pragma once

#include <cstdint>
#include <cstring>

#include "util/bf16.h"

// ---- dim3 and the vector types ------------------------------------------------------------------------------
struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) int2 {
    int x, y;
};
struct alignas(16) int4 {
    int x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned int x, y;
};
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};

// ---- bfloat16 ---------------------------------------------------------------------------------------------

struct alignas(2) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(bf16_from_float(f)) {}
    __nv_bfloat16(double f) : __x(bf16_from_float((float)f)) {}
    __nv_bfloat16(int i) : __x(bf16_from_float((float)i)) {}
    operator float() const { return float_from_bf16(__x); }
    __nv_bfloat16& operator+=(__nv_bfloat16 o) { return *this = __nv_bfloat16(float(*this) + float(o)); }
    __nv_bfloat16& operator-=(__nv_bfloat16 o) { return *this = __nv_bfloat16(float(*this) - float(o)); }
    __nv_bfloat16& operator*=(__nv_bfloat16 o) { return *this = __nv_bfloat16(float(*this) * float(o)); }
    __nv_bfloat16& operator/=(__nv_bfloat16 o) { return *this = __nv_bfloat16(float(*this) / float(o)); }
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

inline __nv_bfloat16 operator+(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(float(a) + float(b)); }
inline __nv_bfloat16 operator-(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(float(a) - float(b)); }
inline __nv_bfloat16 operator*(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(float(a) * float(b)); }
inline __nv_bfloat16 operator/(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16(float(a) / float(b)); }
inline __nv_bfloat16 operator-(__nv_bfloat16 a) {
    __nv_bfloat16 r;
    r.__x = a.__x ^ 0x8000u;
    return r;
}

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return float(b); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline float __low2float(__nv_bfloat162 b) { return float(b.x); }
inline float __high2float(__nv_bfloat162 b) { return float(b.y); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
    __nv_bfloat16 b;
    b.__x = u;
    return b;
}
