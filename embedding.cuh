// embedding.cuh: the token embedding, forward and backward.
//   forward:  x (N, D) = [wte[tokens[n]] (d) | zeros (D - d)], N = B * T rows, wte (V, d)
//   backward: dwte (V, d) += dx[:, :d] gathered by token, dx (N, ldx) the residual stream gradient
// The backward is deterministic and atomic-free: the host sorts the positions by token once per micro-batch
// (it holds the tokens anyway, they came from the data loader) into buckets, EmbeddingBuckets below; on the
// device one thread owns one (token, column) of dwte and adds that token's positions in increasing order, then
// writes once. So a token that occurs 500 times is summed in one fixed order, and rows no token touched are not
// even read. Sums run in fp32; dwte is rounded to bf16 once per call.
// Does not: add positional embeddings (RoPE lives in rope.cuh), or check token ids (the engine does).
#pragma once

#include <algorithm>
#include <vector>

#include "cuda_common.cuh"

// The positions of a micro-batch grouped by token (built on the host, uploaded with the tokens):
//   rows (U)        the distinct tokens, increasing
//   starts (U + 1)  bucket u holds positions[starts[u] .. starts[u + 1])
//   positions (N)   row indices n, increasing within each bucket
struct EmbeddingBuckets {
    std::vector<int> rows, starts, positions;
};
inline EmbeddingBuckets embedding_buckets(const int* tokens, long N) {
    EmbeddingBuckets e;
    e.positions.resize(N);
    for (long n = 0; n < N; n++) e.positions[n] = (int)n;
    // stable: equal tokens keep increasing positions, which fixes the summation order
    std::stable_sort(e.positions.begin(), e.positions.end(), [&](int a, int b) { return tokens[a] < tokens[b]; });
    for (long i = 0; i < N; i++) {
        const int tok = tokens[e.positions[i]];
        if (e.rows.empty() || e.rows.back() != tok) {
            e.rows.push_back(tok);
            e.starts.push_back((int)i);
        }
    }
    e.starts.push_back((int)N);
    return e;
}

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::embedding_forward. One thread per element of x; coordinates [d, D) are written with zeros
// because the stream's unused tail must be exactly 0 (layers narrower than D pass it through untouched).
static __global__ void embedding_forward_kernel(bf16* x, const int* tokens, const bf16* wte, long N, int d, int D) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * D) return;
    const long n = i / D;
    const int c = (int)(i % D);
    x[i] = c < d ? wte[(size_t)tokens[n] * d + c] : __float2bfloat16(0.0f);
}

// Matches ref::embedding_backward. Block (u, column chunk): thread c walks bucket u's positions in order.
static __global__ void embedding_backward_kernel(bf16* dwte, const bf16* dx, long ldx, const int* rows,
                                                 const int* starts, const int* positions, int d) {
    const int u = blockIdx.x;
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= d) return;
    bf16* g = dwte + (size_t)rows[u] * d + c;
    float acc = __bfloat162float(*g);
    for (int i = starts[u]; i < starts[u + 1]; i++) acc += __bfloat162float(dx[(size_t)positions[i] * ldx + c]);
    *g = __float2bfloat16(acc);
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// x (N, D) bf16, tokens (N) int on the device, wte (V, d).
inline void embedding_forward(bf16* x, const int* tokens, const bf16* wte, long N, int d, int D, cudaStream_t stream) {
    const int block = 256;
    const long grid = (N * D + block - 1) / block;
    LAUNCH((unsigned)grid, block, 0, stream, embedding_forward_kernel)(x, tokens, wte, N, d, D);
    cudaCheck(cudaGetLastError());
}

// dwte (V, d) += dx[:, :d]; rows / starts / positions are EmbeddingBuckets uploaded to the device, U = the
// number of distinct tokens (rows.size()).
inline void embedding_backward(bf16* dwte, const bf16* dx, long ldx, const int* rows, const int* starts,
                               const int* positions, int U, int d, cudaStream_t stream) {
    if (U == 0) return;
    const int block = d < 128 ? 32 * ((d + 31) / 32) : 128;
    const dim3 grid(U, (d + block - 1) / block);
    LAUNCH(grid, block, 0, stream, embedding_backward_kernel)(dwte, dx, ldx, rows, starts, positions, d);
    cudaCheck(cudaGetLastError());
}
