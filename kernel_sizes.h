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

// gdn_chunk.cuh's forward (the chunked gated delta rule): rows a chunk (ref::GDN_CHUNK), and the scratch it asks of
// its caller: W, U and V' (B h nc, 64, hd) bf16 each and G (B h nc, 64) fp32, nc = ceil(T / 64) chunks a sequence.
constexpr int GDN_CHUNK_ROWS = 64;
inline size_t gdn_chunk_forward_scratch_bytes(int B, int T, int h, int hd) {
    const size_t rows = (size_t)B * h * ((T + GDN_CHUNK_ROWS - 1) / GDN_CHUNK_ROWS) * GDN_CHUNK_ROWS;
    return rows * (3 * (size_t)hd * 2 + 4);
}

// gdn_chunk_bwd.cuh (the chunked gated delta rule's backward, in the forward's chunks of C = GDN_CHUNK_ROWS): the
// workspace of one (sequence, head, chunk), in 4-byte words: four C x C fp32 matrices (K K^T, the masked Q K^T,
// dQK / T^T dT, dA), five C x hd fp32 (dQ, dK, U dS1, dKb, dVb), two C x C bf16 (T, dT) and four C x hd bf16 (W,
// U, dU, dW: the values only ever read as mma operands), and the chunk's end-state gradient dS1 (hd x hd fp32).
// The backward runs its three kernels over windows of chunks (the same chunks of every sequence and head, last
// window first), so the scratch it asks of its caller is one window's workspaces plus one hd x hd carry per
// (sequence, head) (the state gradient handed from a window to the one before it): a bound that does not grow with
// T. A window holds the fewest chunks that give its chunk-parallel kernels GDN_CHUNK_BWD_WINDOW_BLOCKS blocks (all
// chunks if fewer).
constexpr long GDN_CHUNK_BWD_WINDOW_BLOCKS = 1024;
inline long gdn_chunk_bwd_ws_floats(int hd) {
    const long C = GDN_CHUNK_ROWS;
    return 4 * C * C + 5 * C * hd + (2 * C * C + 4 * C * hd) / 2 + (long)hd * hd;
}
// Chunks a window (0 when there is nothing to do).
inline int gdn_chunk_bwd_window(int B, int T, int h) {
    const long chunks = ((long)T + GDN_CHUNK_ROWS - 1) / GDN_CHUNK_ROWS, pairs = (long)B * h;
    if (chunks <= 0 || pairs <= 0) return 0;
    const long want = (GDN_CHUNK_BWD_WINDOW_BLOCKS + pairs - 1) / pairs;
    return (int)(want < chunks ? want : chunks);
}
// The scratch for windows of `window` chunks: B h workspaces per chunk of the window, then B h carries.
inline size_t gdn_chunk_bwd_scratch_bytes_window(int B, int h, int hd, int window) {
    const long pairs = (long)B * h;
    return (size_t)pairs * ((long)window * gdn_chunk_bwd_ws_floats(hd) + (long)hd * hd) * sizeof(float);
}
inline size_t gdn_chunk_backward_scratch_bytes(int B, int T, int h, int hd) {
    const int window = gdn_chunk_bwd_window(B, T, h);
    return window ? gdn_chunk_bwd_scratch_bytes_window(B, h, hd, window) : 0;
}
