// attention_tiles.cuh: attention.cuh's building blocks: the runtime shape, which tile a block computes (longest
// first across the whole grid), the cp.async copies of tiles into padded shared rows, and the mma fragments
// (ldmatrix loads, bf16 packing, the C-to-A reuse that keeps P in registers). The instances' tile shapes and the
// tiles a window lets a block skip are attention_span.h's, shared with the cost model.
// Does not: compute attention (attention.cuh), or know the model (sizes and pointers only).
#pragma once

#include <cstdint>

#include "attention_span.h"
#include "cuda_common.cuh"

constexpr float ATT_LOG2E = 1.4426950408889634f;  // softmax in base 2: exp(x) = exp2(x log2 e), one FMUL saved
constexpr float ATT_LN2 = 0.6931471805599453f;
constexpr int ATT_MAX_HEAD_DIM = 1024;

// The runtime shape every kernel gets.
// qkv rows are [q (h hd) | k (kv hd) | v (kv hd)], `stride` elements apart; query head hh reads K/V head hh / (h / kv).
struct AttShape {
    int B, T, w, h, hd;
    int kv;      // K/V heads (kv = h: plain multi-head attention)
    int window;  // sliding window W: key j visible to query i iff i - W < j <= i; ATT_NO_WINDOW for a global layer
    int stride;  // qkv row: w + 2 kv hd
    int hdp;     // hd rounded up to 16: the mma k extent; columns [hd, hdp) of every shared tile are zeros
    int ld;      // shared row stride in elements: hdp + 8 (an odd number of 16-byte units: conflict-free ldmatrix)
    int vec;     // elements per cp.async: 8, 4 or 2 (16, 8 or 4 bytes), what hd and the pointers' alignment allow
};

// Which tile a block computes. The grid is (B heads chunks, tiles), heads the query heads (forward, dQ) or the K/V
// heads (dK/dV), chunks the column chunks (the output columns c0 .. c0 + HD; more than one only on the wide
// instance): blockIdx.x = (b heads + head) chunks + chunk, blockIdx.y =
// the tile's rank by length, 0 the longest (the forward's and dQ's last query block, which sees the most keys;
// dK/dV's first key block, which sees the most queries). The hardware starts blocks in order of x, then y, so
// every (b, head, chunk)'s longest tile starts before any shorter one: longest first across the whole grid, and
// the shortest tiles fill its tail. (With the tiles along x, the order held only within one (b, head): the last
// heads' long tiles started last and ran on alone.) Under a sliding window the tiles are nearly all the same
// length (the window's tiles), so the order matters little there and is kept as it is.
struct AttBlock {
    int bh, b, hh, c0, rank;
};
__host__ __device__ inline int att_col_chunks(const AttShape& s, int HD) { return (s.hdp + HD - 1) / HD; }
__host__ __device__ inline AttBlock att_block(unsigned bx, unsigned by, const AttShape& s, int HD, int heads) {
    const int nchunk = att_col_chunks(s, HD), bh = (int)bx / nchunk;
    return AttBlock{bh, bh / heads, bh % heads, (int)(bx % nchunk) * HD, (int)by};
}
// The grid of `tiles` tiles (of rows or keys) per (b, head, column chunk) over `heads` heads. gridDim.y is at
// most 65535.
inline dim3 att_grid(const AttShape& s, int HD, int tiles, int heads) {
    if (tiles > 65535) {
        fprintf(stderr,
                "attention: T = %d needs %d tiles per head, more than a grid holds (65535); use a shorter "
                "sequence\n",
                s.T, tiles);
        exit(EXIT_FAILURE);
    }
    return dim3((unsigned)(s.B * heads * att_col_chunks(s, HD)), (unsigned)tiles, 1);
}

// ---------------------------------------------------------------------------------------------------------
// device helpers: tile copies and mma fragments
// ---------------------------------------------------------------------------------------------------------

// Issues the copies of rows [row0, row0 + ROWS) of one head's hd columns (row r at src + r * stride) into a
// shared tile (ROWS, ld); rows >= T are zero-filled. Columns [hd, hdp) are left alone (att_zero_pad).
template <int ROWS, int NT, int E>
__device__ __forceinline__ void att_copy_rows(bf16* tile, const bf16* src, long stride, int row0, const AttShape& s) {
    const int chunks = s.hd / E;
    for (int i = threadIdx.x; i < ROWS * chunks; i += NT) {
        const int r = i / chunks, c = (i - r * chunks) * E;
        const bool valid = row0 + r < s.T;
        cp_async<2 * E>(tile + r * s.ld + c, src + (valid ? (long)(row0 + r) * stride + c : 0), valid);
    }
}
template <int ROWS, int NT>
__device__ __forceinline__ void att_load_tile(bf16* tile, const bf16* src, long stride, int row0, const AttShape& s) {
    if (s.vec == 8) att_copy_rows<ROWS, NT, 8>(tile, src, stride, row0, s);
    else if (s.vec == 4) att_copy_rows<ROWS, NT, 4>(tile, src, stride, row0, s);
    else att_copy_rows<ROWS, NT, 2>(tile, src, stride, row0, s);
}
// ROWS fp32 values per row (lse or D) from src[row0 ..], zeros past T.
template <int ROWS, int NT>
__device__ __forceinline__ void att_load_rows(float* dst, const float* src, int row0, int T) {
    for (int r = threadIdx.x; r < ROWS; r += NT) {
        const bool valid = row0 + r < T;
        cp_async<4>(dst + r, src + (valid ? row0 + r : 0), valid);
    }
}
// Zeros columns [hd, hdp) of `rows` consecutive shared rows: the padding the mma k loop reads and no copy fills.
template <int NT> __device__ __forceinline__ void att_zero_pad(bf16* tiles, int rows, const AttShape& s) {
    const int pad = s.hdp - s.hd;
    for (int i = threadIdx.x; i < rows * pad; i += NT)
        tiles[(i / pad) * s.ld + s.hd + i % pad] = __float2bfloat16(0.0f);
}

// Two fp32 values as the bf16 pair of an mma operand register (the lower column in the low half).
__device__ __forceinline__ uint32_t att_pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}
// A fragment (16 x 16) of a row-major shared tile: rows 0..15 at a, columns k0 .. k0 + 15.
__device__ __forceinline__ void att_lda(uint32_t* f, const bf16* a, int ld, int k0) {
    const int l = threadIdx.x % 32;
    ldmatrix_x4(f, a + ((l & 7) + ((l >> 3) & 1) * 8) * ld + k0 + (l >> 4) * 8);
}
// B fragments of two n tiles when B^T is row-major (the n index runs down the rows, k along them: K for Q K^T):
// rows 0..15 at b, columns k0 .. k0 + 15. f[0..1] is n tile 0 (rows 0..7), f[2..3] n tile 1 (rows 8..15).
__device__ __forceinline__ void att_ldb(uint32_t* f, const bf16* b, int ld, int k0) {
    const int l = threadIdx.x % 32;
    ldmatrix_x4(f, b + ((l & 7) + (l >> 4) * 8) * ld + k0 + ((l >> 3) & 1) * 8);
}
// The same for one n tile (rows 0..7).
__device__ __forceinline__ void att_ldb1(uint32_t* f, const bf16* b, int ld, int k0) {
    const int l = threadIdx.x % 32;
    ldmatrix_x2(f, b + (l & 7) * ld + k0 + ((l >> 3) & 1) * 8);
}
// B fragments of two n tiles when B itself is row-major (k down the rows: V for P V): rows k0 .. k0 + 15,
// columns 0..15 at b; f[0..1] is columns 0..7, f[2..3] columns 8..15.
__device__ __forceinline__ void att_ldb_t(uint32_t* f, const bf16* b, int ld, int k0) {
    const int l = threadIdx.x % 32;
    ldmatrix_x4_trans(f, b + (k0 + (l & 7) + ((l >> 3) & 1) * 8) * ld + (l >> 4) * 8);
}
__device__ __forceinline__ void att_mma(float* acc, const uint32_t* a, const uint32_t* b) {
    mma_m16n8k16_bf16(acc, a, b, acc);
}
// acc[m] (16 x 8 NN) += A_m B^T over k in [0, 16 nk) for MW row tiles A_m (16 rows each, at a + 16 m lda) and
// B^T's 8 NN rows at b, all row-major: each B fragment is loaded once for the MW tiles.
template <int MW, int NN>
__device__ __forceinline__ void att_mma_abt(float (*acc)[NN][4], const bf16* a, int lda, const bf16* b, int ldb,
                                            int nk) {
    for (int kc = 0; kc < nk; kc++) {
        uint32_t af[MW][4];
        UNROLL for (int mm = 0; mm < MW; mm++) att_lda(af[mm], a + 16 * mm * lda, lda, 16 * kc);
        UNROLL for (int nt = 0; nt + 1 < NN; nt += 2) {
            uint32_t bf[4];
            att_ldb(bf, b + 8 * nt * ldb, ldb, 16 * kc);
            UNROLL for (int mm = 0; mm < MW; mm++) {
                att_mma(acc[mm][nt], af[mm], bf);
                att_mma(acc[mm][nt + 1], af[mm], bf + 2);
            }
        }
        if constexpr (NN % 2 == 1) {
            uint32_t bf[2];
            att_ldb1(bf, b + 8 * (NN - 1) * ldb, ldb, 16 * kc);
            UNROLL for (int mm = 0; mm < MW; mm++) att_mma(acc[mm][NN - 1], af[mm], bf);
        }
    }
}
// The A fragment of keys 16 kc .. 16 kc + 15 from a (16 x BC) accumulator held as C fragments (P, dS).
__device__ __forceinline__ void att_c_to_a(uint32_t* a, const float (*c)[4], int kc) {
    a[0] = att_pack(c[2 * kc][0], c[2 * kc][1]);
    a[1] = att_pack(c[2 * kc][2], c[2 * kc][3]);
    a[2] = att_pack(c[2 * kc + 1][0], c[2 * kc + 1][1]);
    a[3] = att_pack(c[2 * kc + 1][2], c[2 * kc + 1][3]);
}
__device__ __forceinline__ void att_store2(bf16* p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
