// util/bf16.h: bfloat16's two conversions as bit patterns, the one copy of the rounding: fp32 -> bf16 rounds to
// nearest, ties to even (a NaN stays a quiet NaN of its sign), bf16 -> fp32 is exact. hf/safetensors.h writes
// BF16 tensors with it; the CUDA-on-CPU executor's __nv_bfloat16 (cuda_cpu/types.h) is built on it.
#pragma once

#include <cstdint>
#include <cstring>

inline uint16_t bf16_from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float float_from_bf16(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
