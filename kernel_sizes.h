// kernel_sizes.h: the sizes the kernels fix that the host must know without compiling them: the scratch memory
// a kernel asks its caller for. The kernel that owns each constant includes this file, and memory_plan.h (which
// runs on machines without CUDA) sizes the activation block from the same numbers.
// Does not: include CUDA, or name a ModelConfig (sizes only).
#pragma once

#include <cstddef>

// layernorm.cuh's backward: rows per block, i.e. per weight-gradient partial row.
constexpr int NORM_ROWS_PER_CHUNK = 64;

// fp32 scratch the norm backward needs for N rows of width w: two (chunks, w) partial-sum planes (weight, bias).
inline size_t norm_backward_scratch_floats(long N, int w) {
    return 2 * (size_t)((N + NORM_ROWS_PER_CHUNK - 1) / NORM_ROWS_PER_CHUNK) * w;
}

// embedding.cuh's backward: positions per block at most, and its fp32 partial rows (d floats each): a token of
// c positions has ceil(c / EMB_SEGMENT) < 2 c / EMB_SEGMENT segments, so fewer than 2 N / EMB_SEGMENT in all.
constexpr int EMB_SEGMENT = 32;
inline long embedding_partial_rows(long N) { return (2 * N + EMB_SEGMENT - 1) / EMB_SEGMENT; }

// gdn.cuh's backwards: rows per block of the conv's and the gated norm's walkers (partial sums per slice), and of
// the gates' backward; the scratch (floats) of each one's partial sums (C = 3 w channels of the conv).
constexpr int GDN_SLICE_ROWS = 64;
constexpr int GDN_GATE_ROWS = 1024;
inline long gdn_conv_scratch_floats(int B, int T, int C) {
    return (long)B * ((T + GDN_SLICE_ROWS - 1) / GDN_SLICE_ROWS) * C * 4;
}
inline long gdn_gates_scratch_floats(long N, int h) { return (N + GDN_GATE_ROWS - 1) / GDN_GATE_ROWS * 2 * h; }
inline long gdn_norm_scratch_floats(long N, int hd) { return (N + GDN_SLICE_ROWS - 1) / GDN_SLICE_ROWS * hd; }
