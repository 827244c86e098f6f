// embedding.cuh: the token embedding, forward and backward.
//   forward:  x (N, D) = [wte[tokens[n]] (d) | zeros (D - d)], N = B * T rows, wte (V, d)
//   backward: dwte (V, d) += dx[:, :d] gathered by token, into the fp32 gradient buffer; dx (N, ldx) the residual
//             stream gradient
// The backward is deterministic and atomic-free: the host sorts the positions by token once per micro-batch
// (it holds the tokens anyway, they came from the data loader) into buckets, embedding_buckets below, a
// counting sort of O(N + V); the engine does it after the micro-batch's forward is queued, so the GPU is busy
// meanwhile, and uploads them with the tokens' next copy. On the device one thread owns 8 columns of one token's
// row of dwte and adds that token's positions in increasing order, then writes once. So a token that occurs 500
// times is summed in one fixed order, and rows no token touched are not even read. Sums run in fp32.
// Does not: add positional embeddings (RoPE lives in rope.cuh), or check token ids (the engine does).
#pragma once

#include <algorithm>
#include <vector>

#include "cuda_common.cuh"
#include "vec.cuh"

// The positions of a micro-batch grouped by token (built on the host, uploaded with the tokens), U distinct:
//   rows (U)        the distinct tokens, increasing
//   starts (U + 1)  bucket u holds positions[starts[u] .. starts[u + 1])
//   positions (N)   row indices n, increasing within each bucket
// Writes into caller arrays of N, N + 1 and N ints (the engine's pinned upload slot) and returns U; `count` is
// the histogram scratch. A counting sort: positions are placed in increasing n, so each bucket is in order.
inline int embedding_buckets(const int* tokens, long N, int* rows, int* starts, int* positions,
                             std::vector<int>& count) {
    int V = 0;
    for (long n = 0; n < N; n++) V = std::max(V, tokens[n] + 1);
    count.assign((size_t)V + 1, 0);
    for (long n = 0; n < N; n++) count[tokens[n] + 1]++;
    int U = 0;
    for (int v = 0; v < V; v++) {
        if (count[v + 1]) rows[U] = v, starts[U] = count[v], U++;
        count[v + 1] += count[v];  // count[v] = first slot of token v
    }
    starts[U] = (int)N;
    for (long n = 0; n < N; n++) positions[count[tokens[n]]++] = (int)n;
    return U;
}
struct EmbeddingBuckets {
    std::vector<int> rows, starts, positions;
};
inline EmbeddingBuckets embedding_buckets(const int* tokens, long N) {
    EmbeddingBuckets e;
    e.rows.resize(N), e.starts.resize(N + 1), e.positions.resize(N);
    std::vector<int> count;
    const int U = embedding_buckets(tokens, N, e.rows.data(), e.starts.data(), e.positions.data(), count);
    e.rows.resize(U), e.starts.resize(U + 1);
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

// Matches ref::embedding_backward. Block (u, column chunk): thread owns 8 columns and walks bucket u's positions.
static __global__ void embedding_backward_kernel(float* dwte, const bf16* dx, long ldx, const int* rows,
                                                 const int* starts, const int* positions, int d) {
    const int u = blockIdx.x;
    const int c = 8 * (blockIdx.y * blockDim.x + threadIdx.x);
    if (c >= d) return;
    const int k = in_row(d, c, 8);
    float* g = dwte + (size_t)rows[u] * d + c;
    float acc[8], v[8];
    load4(acc, g, k < 4 ? k : 4), load4(acc + 4, g + 4, k > 4 ? k - 4 : 0);
    for (int i = starts[u]; i < starts[u + 1]; i++) {
        load8(v, dx + (size_t)positions[i] * ldx + c, k);
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

// dwte (V, d) fp32 += dx[:, :d]; rows / starts / positions are embedding_buckets uploaded to the device, U = the
// number of distinct tokens.
inline void embedding_backward(float* dwte, const bf16* dx, long ldx, const int* rows, const int* starts,
                               const int* positions, int U, int d, cudaStream_t stream) {
    if (U == 0) return;
    const int vecs = (d + 7) / 8, block = vecs < 128 ? 32 * ((vecs + 31) / 32) : 128;
    const dim3 grid(U, (vecs + block - 1) / block);
    LAUNCH(grid, block, 0, stream, embedding_backward_kernel)(dwte, dx, ldx, rows, starts, positions, d);
    cudaCheck(cudaGetLastError());
}
