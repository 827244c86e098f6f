// embedding.cuh: the token embedding, forward and backward.
//   forward:  x (N, D) = [wte[tokens[n]] (d) | zeros (D - d)], N = B * T rows, wte (V, d)
//   backward: dwte (V, d) += dx[:, :d] gathered by token, into the fp32 gradient buffer; dx (N, ldx) the residual
//             stream gradient
// The backward is deterministic and atomic-free: the host sorts the positions by token once per micro-batch
// (it holds the tokens anyway, they came from the data loader), a counting sort of O(N + V), and cuts each token's
// positions into segments of at most EMB_SEGMENT (embedding_plan below); the engine does it after the
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

#include <algorithm>
#include <vector>

#include "cuda_common.cuh"
#include "kernel_sizes.h"  // EMB_SEGMENT, embedding_partial_rows: the backward's segments and scratch
#include "vec.cuh"

// The backward's plan for one micro-batch (built on the host, uploaded with the tokens). Arrays of the caller,
// sized N, N + 1, N, N, N, N + 1 ints (the engine's pinned upload slot, in this order):
//   positions (N)       row indices n grouped by token (tokens increasing), increasing within each token
//   seg_start (S + 1)   segment s sums positions[seg_start[s] .. seg_start[s + 1]) (at most EMB_SEGMENT)
//   seg_row (S)         the token of segment s
//   seg_slot (S)        -1: the token's only segment, added straight into dwte; else the partial row it writes
//   fin_row (M)         the M tokens of more than one segment, increasing ...
//   fin_first (M + 1)   ... whose partial rows fin_first[m] .. fin_first[m + 1] - 1 are added, in order, into dwte
// `count` is the histogram scratch. A counting sort: positions are placed in increasing n, so each token's are
// in order, and a token's segments (and partial rows) are consecutive.
struct EmbeddingPlanSize {
    int segments = 0, multi = 0, partials = 0;  // S, M, and the partial rows used (fin_first[M])
    int distinct = 0, most = 0;                 // distinct tokens, and the positions of the most frequent one
};
inline EmbeddingPlanSize embedding_plan(const int* tokens, long N, int* positions, int* seg_start, int* seg_row,
                                        int* seg_slot, int* fin_row, int* fin_first, std::vector<int>& count) {
    int V = 0;
    for (long n = 0; n < N; n++) V = std::max(V, tokens[n] + 1);
    count.assign((size_t)V + 1, 0);
    for (long n = 0; n < N; n++) count[tokens[n] + 1]++;
    EmbeddingPlanSize z;
    fin_first[0] = 0;
    for (int v = 0; v < V; v++) {
        const int c = count[v + 1], first = count[v];  // this token's positions start at slot `first`
        if (c) {
            z.distinct++, z.most = std::max(z.most, c);
            const bool multi = c > EMB_SEGMENT;
            for (int k = 0; k < c; k += EMB_SEGMENT) {
                seg_start[z.segments] = first + k, seg_row[z.segments] = v;
                seg_slot[z.segments] = multi ? z.partials++ : -1;
                z.segments++;
            }
            if (multi) fin_row[z.multi] = v, fin_first[++z.multi] = z.partials;
        }
        count[v + 1] += first;  // count[v] = first slot of token v
    }
    seg_start[z.segments] = (int)N;
    for (long n = 0; n < N; n++) positions[count[tokens[n]]++] = (int)n;
    return z;
}
struct EmbeddingPlan {
    std::vector<int> positions, seg_start, seg_row, seg_slot, fin_row, fin_first;
    EmbeddingPlanSize size;
};
inline EmbeddingPlan embedding_plan(const int* tokens, long N) {
    EmbeddingPlan e;
    e.positions.resize(N), e.seg_start.resize(N + 1), e.seg_row.resize(N), e.seg_slot.resize(N);
    e.fin_row.resize(N), e.fin_first.resize(N + 1);
    std::vector<int> count;
    e.size = embedding_plan(tokens, N, e.positions.data(), e.seg_start.data(), e.seg_row.data(), e.seg_slot.data(),
                            e.fin_row.data(), e.fin_first.data(), count);
    const EmbeddingPlanSize& z = e.size;
    e.seg_start.resize(z.segments + 1), e.seg_row.resize(z.segments), e.seg_slot.resize(z.segments);
    e.fin_row.resize(z.multi), e.fin_first.resize(z.multi + 1);
    return e;
}

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
