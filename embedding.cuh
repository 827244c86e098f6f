// embedding.cuh: the token embedding, forward and backward.
//   forward:  x (N, D) = [wte[tokens[n]] (d) | zeros (D - d)], N = B * T rows, wte (V, d)
//   backward: dwte (V, d) += dx[:, :d] gathered by token, into the fp32 gradient buffer; dx (N, ldx) the residual
//             stream gradient
// The backward is deterministic and atomic-free: the host sorts the positions by token once per micro-batch
// (it holds the tokens anyway, they came from the data loader), a counting sort of O(N + V), and cuts each token's
// positions into segments of at most EMB_SEGMENT (embedding_plan.h); the engine does it after the
// micro-batch's forward is queued, so the GPU is busy meanwhile, and uploads the plan with the tokens' next copy.
// On the device one block per segment: a thread owns 8 columns and adds the segment's positions in increasing
// order; a token with one segment adds its sum into its row of dwte, the segments of a token with more write
// fp32 partial rows, and a second kernel adds each such token's partials, in order, into its row. So every sum
// has one fixed order, rows no token touched are not even read, and no block walks more than EMB_SEGMENT
// positions: in real text the most frequent token (",", "the", "." or the end-of-text) is 3-5% of a micro-batch,
// ~600 of 16K positions, which one block per token walked one after another while the rest of the grid had long
// finished (cost_model.h estimates both). Sums run in fp32.
// Does not: add positional embeddings (RoPE lives in rope.cuh), or check token ids (the engine does).
#pragma once

#include "cuda_common.cuh"
#include "embedding_plan.h"
#include "kernel_sizes.h"  // EMB_SEGMENT, embedding_partial_rows: the backward's segments and scratch
#include "vec.cuh"

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::embedding_forward. One thread per 8 columns of a row of x (row_grid); coordinates [d, D) are
// written with zeros because the stream's unused tail must be exactly 0 (narrower layers pass it through).
static __global__ void embedding_forward_kernel(bf16* x, const int* tokens, const bf16* wte, long N, int d, int D) {
    const long n = grid_row();
    const int c = 8 * grid_vec();
    if (n >= N || c >= D) return;
    float v[8];
    load8(v, wte + (size_t)tokens[n] * d + c, c < d ? in_row(d, c, 8) : 0);  // zeros past d
    store8(x + n * D + c, v, in_row(D, c, 8));
}

// Matches ref::embedding_backward, with embedding_backward_finish_kernel. Block (segment, column chunk): a thread
// owns 8 columns, sums the segment's positions in order, and adds the sum into dwte's row (the token's only
// segment) or writes it as partial row seg_slot.
static __global__ void embedding_backward_kernel(float* dwte, float* partial, const bf16* dx, long ldx,
                                                 const int* positions, const int* seg_start, const int* seg_row,
                                                 const int* seg_slot, int d) {
    const int s = blockIdx.x;
    const int c = 8 * (blockIdx.y * blockDim.x + threadIdx.x);
    if (c >= d) return;
    const int k = in_row(d, c, 8), slot = seg_slot[s];
    float acc[8] = {}, v[8];
    for (int i = seg_start[s]; i < seg_start[s + 1]; i++) {
        load8(v, dx + (size_t)positions[i] * ldx + c, k);
        UNROLL
        for (int j = 0; j < 8; j++) acc[j] += v[j];
    }
    float* g = slot < 0 ? dwte + (size_t)seg_row[s] * d + c : partial + (size_t)slot * d + c;
    if (slot < 0) {
        load4(v, g, k < 4 ? k : 4), load4(v + 4, g + 4, k > 4 ? k - 4 : 0);
        UNROLL
        for (int j = 0; j < 8; j++) acc[j] += v[j];
    }
    store4(g, acc, k < 4 ? k : 4), store4(g + 4, acc + 4, k > 4 ? k - 4 : 0);
}

// Block (token of several segments, column chunk): dwte's row += that token's partial rows, in order.
static __global__ void embedding_backward_finish_kernel(float* dwte, const float* partial, const int* fin_row,
                                                        const int* fin_first, int d) {
    const int m = blockIdx.x;
    const int c = 8 * (blockIdx.y * blockDim.x + threadIdx.x);
    if (c >= d) return;
    const int k = in_row(d, c, 8);
    float* g = dwte + (size_t)fin_row[m] * d + c;
    float acc[8], v[8];
    load4(acc, g, k < 4 ? k : 4), load4(acc + 4, g + 4, k > 4 ? k - 4 : 0);
    for (int p = fin_first[m]; p < fin_first[m + 1]; p++) {
        const float* q = partial + (size_t)p * d + c;
        load4(v, q, k < 4 ? k : 4), load4(v + 4, q + 4, k > 4 ? k - 4 : 0);
        UNROLL
        for (int j = 0; j < 8; j++) acc[j] += v[j];
    }
    store4(g, acc, k < 4 ? k : 4), store4(g + 4, acc + 4, k > 4 ? k - 4 : 0);
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// x (N, D) bf16, tokens (N) int on the device, wte (V, d).
inline void embedding_forward(bf16* x, const int* tokens, const bf16* wte, long N, int d, int D, cudaStream_t stream) {
    const RowGrid g = row_grid(N, (D + 7) / 8);
    LAUNCH(g.grid, g.block, 0, stream, embedding_forward_kernel)(x, tokens, wte, N, d, D);
    cudaCheck(cudaGetLastError());
}

// dwte (V, d) fp32 += dx[:, :d]. positions .. fin_first: embedding_plan's arrays uploaded to the device, with its
// segment count S and multi-segment token count M; partial: embedding_partial_rows(N) x d floats of scratch.
inline void embedding_backward(float* dwte, float* partial, const bf16* dx, long ldx, const int* positions,
                               const int* seg_start, const int* seg_row, const int* seg_slot, const int* fin_row,
                               const int* fin_first, int S, int M, int d, cudaStream_t stream) {
    if (S == 0) return;
    const int vecs = (d + 7) / 8, block = vecs < 128 ? 32 * ((vecs + 31) / 32) : 128;
    const dim3 grid(S, (vecs + block - 1) / block);
    LAUNCH(grid, block, 0, stream, embedding_backward_kernel)
    (dwte, partial, dx, ldx, positions, seg_start, seg_row, seg_slot, d);
    cudaCheck(cudaGetLastError());
    if (M == 0) return;
    LAUNCH(dim3(M, grid.y), block, 0, stream, embedding_backward_finish_kernel)(dwte, partial, fin_row, fin_first, d);
    cudaCheck(cudaGetLastError());
}
