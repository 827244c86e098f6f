// gdn_chunk.cuh: the gated delta rule's forward in its chunked form on tensor cores (mma.sync m16n8k16, bf16
// operands, fp32 accumulation): ref::gdn_delta_chunk_forward's outputs (o, the per-chunk starting states) from q, k,
// v (bf16 rows of stride ld, head j at columns j hd; q and k L2-normalised), beta and g (fp32 (N, h)). B sequences
// of T rows (any T), h heads of hd channels (16 <= hd <= 256, a multiple of 8: 32, 48, 64, 128 and 256 among them;
// any other is refused with one line). Chunks of C = 64 rows from each sequence's start, the last one shorter.
// In a chunk, with S0 its starting state (value rows by key columns), G_i = g_0 + .. + g_i, Gamma_ij = e^(G_i - G_j):
//   A = strictly lower (diag(beta) (K K^T o Gamma)),  T = (I + A)^-1,  W = T diag(beta e^G) K,  U = T diag(beta) V
//   V' = U - W S0^T,  O = (diag(e^G) Q S0^T + (tril(Q K^T) o Gamma) V') / sqrt(hd)
//   S1 = e^(G_{L-1}) S0 + V'^T diag(e^(G_{L-1} - G)) K
// Three kernels, so that only the part that must be sequential is:
//   prep    per (b, head, chunk), 4 warps: the cumulative G, K K^T on mma (a warp's 16 x 16 tiles on or left of
//           the diagonal only, none past the chunk's L rows), A into fp32 shared memory, T in 16 x 16 blocks (the
//           diagonal blocks by forward substitution, a thread per column, then the blocks below by distance from
//           the diagonal as small fp32 products), then W = (T diag(beta e^G)) K and U = (T diag(beta)) V on mma
//           (the diagonals folded into T's columns before its one rounding to bf16; K and V stay exact bf16
//           operands). W, U (bf16) and G (fp32) to scratch.
//   state   per (b, head, tile of 64 value rows), a warp per 16 rows: S's rows are independent, so a warp carries its
//           16 rows of S through the chunks in fp32 registers (C fragments; hd / 2 floats a thread) and reuses them
//           as the A fragments of the next product without shared memory: states[c] = S, V'^T = U^T - S W^T,
//           S = e^(G_L) S + (V'^T diag(e^(G_L - G))) K. W, U and K stream through two cp.async stages; V' (bf16)
//           goes to scratch through shared memory (coalesced rows).
//   output  per (b, head, 64 or 128 output columns, chunk), a warp per 16 rows: Q S0^T (S0 from states, rounded
//           to bf16 in shared memory) and Q K^T on mma, the decays and the causal mask on the fragments, then
//           P V' with P kept in registers (the C-to-A reuse of attention.cuh); Q K^T and P V' in the tiles on or
//           left of the diagonal only, and a warp whose rows are all past L returns.
// Skipping a tile leaves exact zeros where its products were masked to zeros or were zero (K's rows past L), and
// each kept tile sums k in the same order: the outputs are the same bits as computing every tile.
// Memory: scratch 3 N w bf16 (W, U, V') + N h fp32 (G) (gdn_chunk_forward_scratch_bytes, kernel_sizes.h). The
// backward reads only states (and recomputes the rest), so the scratch is dead after the forward.
// Deterministic: no atomics, every sum in a fixed order. Each row of T and every rounding depends on the chunk
// alone, so a launch gives the same bits every time.
// ptxas -v (nvcc 13.0, -O3), registers sm_80 / sm_90, no spills, no stack: prep 95 / 96; state<64> 128 / 128,
// <128> 162 / 168, <256> 245 / 246; output<64> 115 / 107, <128> 147 / 149. Dynamic shared memory (bytes) at hd
// 64 / 128 / 256: prep 70912 / 87296 / 120064, state 55808 / 88576 / 154112, output 37120 / 87296 / 152832.
// Does not: the backward (a file of its own), the per-row ops around it (gdn.cuh), or hd above 256.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "attention_tiles.cuh"
#include "cuda_common.cuh"
#include "kernel_sizes.h"

constexpr int GDNC_C = GDN_CHUNK_ROWS;  // rows a chunk (ref::GDN_CHUNK)
constexpr int GDNC_MAX_HD = 256;
constexpr int GDNC_LDT = GDNC_C + 8;  // shared row (bf16) of a 64-column tile: 144 bytes, conflict-free ldmatrix
constexpr int GDNC_LDF = GDNC_C + 1;  // shared row (fp32) of A and T

// The runtime shape every kernel gets.
struct GdncShape {
    int B, T, h, hd;
    int hdp;   // hd rounded up to 16 (the mma k); columns [hd, hdp) of every shared tile are zeros
    int ld;    // shared row of a (rows, hd) tile: hdp + 8 elements
    int nc;    // chunks a sequence
    long ldx;  // q, k, v rows (global)
};

// The scratch's parts: W, U, V' (B h nc, 64, hd) bf16 each, then G (B h nc, 64) fp32.
struct GdncScratch {
    bf16 *W, *U, *V;
    float* G;
};
inline GdncScratch gdn_chunk_scratch(void* scratch, int B, int T, int h, int hd) {
    const size_t n = (size_t)B * h * ((T + GDNC_C - 1) / GDNC_C) * GDNC_C * hd;
    bf16* p = static_cast<bf16*>(scratch);
    return GdncScratch{p, p + n, p + 2 * n, reinterpret_cast<float*>(p + 3 * n)};
}

// ---------------------------------------------------------------------------------------------------------
// device helpers
// ---------------------------------------------------------------------------------------------------------

// Issues 16-byte copies of `rows` x `cols` bf16 (cols a multiple of 8) from src (row stride lds) into a shared tile
// (row stride ldt); rows in [valid, rows) are zero-filled.
template <int NT>
__device__ __forceinline__ void gdnc_copy(bf16* tile, int ldt, const bf16* src, long lds, int rows, int valid,
                                          int cols) {
    const int chunks = cols / 8;
    for (int e = threadIdx.x; e < rows * chunks; e += NT) {
        const int r = e / chunks, c = (e - r * chunks) * 8;
        const bool ok = r < valid;
        cp_async<16>(tile + r * ldt + c, src + (ok ? (long)r * lds + c : 0), ok);
    }
}
// Zeros columns [c0, c1) of `rows` shared rows (stride ldt): the padding no copy fills and the mma reads.
template <int NT> __device__ __forceinline__ void gdnc_zero(bf16* tile, int ldt, int rows, int c0, int c1) {
    const int n = c1 - c0;
    if (n <= 0) return;
    for (int e = threadIdx.x; e < rows * n; e += NT) tile[(e / n) * ldt + c0 + e % n] = __float2bfloat16(0.0f);
}

// att_mma_abt<1, 2 NP> in the 16-column tiles p < np only, the rest of acc left as it is (k summed in the same order,
// so a tile's bits do not depend on which are skipped). Tiles outer, k inner: with k outer, ptxas capped
// output<128> at 128 registers and spilled.
template <int NP>
__device__ __forceinline__ void gdnc_mma_abt(float (*acc)[4], const bf16* a, int lda, const bf16* b, int ldb, int nk,
                                             int np) {
    UNROLL for (int p = 0; p < NP; p++) if (p < np) {
        for (int kc = 0; kc < nk; kc++) {
            uint32_t af[4], bf[4];
            att_lda(af, a, lda, 16 * kc);
            att_ldb(bf, b + 16 * p * ldb, ldb, 16 * kc);
            att_mma(acc[2 * p], af, bf), att_mma(acc[2 * p + 1], af, bf + 2);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Per (b, head) x chunk (grid (B h, nc)), 128 threads. Dynamic shared memory (gdn_chunk_prep_smem): K, V (64, ld)
// bf16; T diag(beta e^G), T diag(beta) (64, GDNC_LDT) bf16; A, T (64, GDNC_LDF) fp32; G, beta, beta e^G (64) fp32.
static __global__ void __launch_bounds__(128) gdn_chunk_prep_kernel(GdncScratch sc, const bf16* k, const bf16* v,
                                                                    const float* beta, const float* g, GdncShape s) {
    constexpr int C = GDNC_C, LDT = GDNC_LDT, LDF = GDNC_LDF, NT = 128;
    DYNAMIC_SHARED(bf16, smem);
    const int ld = s.ld, hd = s.hd, hdp = s.hdp;
    bf16* sK = smem;
    bf16* sV = sK + C * ld;
    bf16* sTw = sV + C * ld;
    bf16* sTu = sTw + C * LDT;
    float* sA = reinterpret_cast<float*>(sTu + C * LDT);
    float* sT = sA + C * LDF;
    float* sG = sT + C * LDF;
    float* sB = sG + C;
    float* sBe = sB + C;
    const int bh = blockIdx.x, c = blockIdx.y, b = bh / s.h, j = bh % s.h;
    const int L = min(C, s.T - c * C);
    const long row0 = (long)b * s.T + (long)c * C;  // the chunk's first row
    const long blk = ((long)bh * s.nc + c) * C;     // the chunk's first row in the scratch

    gdnc_copy<NT>(sK, ld, k + row0 * s.ldx + (long)j * hd, s.ldx, C, L, hd);
    gdnc_copy<NT>(sV, ld, v + row0 * s.ldx + (long)j * hd, s.ldx, C, L, hd);
    cp_async_commit();
    gdnc_zero<NT>(sK, ld, 2 * C, hd, hdp);  // K's and V's rows are consecutive
    const int tid = threadIdx.x;
    if (tid < C) sB[tid] = tid < L ? beta[(row0 + tid) * s.h + j] : 0.0f;
    if (tid == 0) {  // G in order, as the reference sums it; rows past L add nothing
        float G = 0.0f;
        for (int i = 0; i < C; i++) {
            G += i < L ? g[(row0 + i) * s.h + j] : 0.0f;
            sG[i] = G;
            sc.G[blk + i] = G;
        }
    }
    cp_async_wait<0>();
    __syncthreads();

    const int warp = tid / 32, lane = tid % 32, gq = lane / 4, t4 = lane % 4;
    // A warp's 16 x 16 tiles: p <= warp (those right are above the diagonal), none if its rows are past L.
    const int tiles = 16 * warp < L ? warp + 1 : 0;
    {  // A = strictly lower (diag(beta) (K K^T o Gamma)); warp w rows 16 w .. 16 w + 15
        float acc[C / 8][4] = {};
        gdnc_mma_abt<C / 16>(acc, sK + 16 * warp * ld, ld, sK, ld, hdp / 16, tiles);
        UNROLL for (int nt = 0; nt < C / 8; nt++) UNROLL for (int e = 0; e < 4; e++) {
            const int i = 16 * warp + gq + 8 * (e / 2), l = 8 * nt + 2 * t4 + e % 2;
            sA[i * LDF + l] = l < i ? sB[i] * expf(sG[i] - sG[l]) * acc[nt][e] : 0.0f;
        }
    }
    if (tid < C) sBe[tid] = sB[tid] * expf(sG[tid]);
    __syncthreads();
    // T = (I + A)^-1 in 16 x 16 blocks I, J: the diagonal blocks by substitution, a thread per column m (T_im =
    // -sum_{m <= l < i} A_il T_lm, T_mm = 1; the other threads zero the blocks above), then by d = I - J = 1, 2, 3:
    // S_IJ = A_(I, J..I-1) T_(J..I-1, J) into A's unused upper block (J, I), T_IJ = -T_II S_IJ. A thread takes a
    // block's (r, c) and (15 - r, 15 - c), so its chains pair up: 452 dependent fmaf a thread, not one 64-row
    // substitution's 2016. Each sum is an ascending fmaf chain (the test's bound on T counts its roundings).
    if (tid < C) {
        const int m = tid, m0 = m & ~15;
        for (int i = m0; i < m; i++) sT[i * LDF + m] = 0.0f;
        sT[m * LDF + m] = 1.0f;
        for (int i = m + 1; i < m0 + 16; i++) {
            float acc = 0.0f;
            for (int l = m; l < i; l++) acc = fmaf(-sA[i * LDF + l], sT[l * LDF + m], acc);
            sT[i * LDF + m] = acc;
        }
    } else {
        const int i = tid - C;
        for (int l = (i | 15) + 1; l < C; l++) sT[i * LDF + l] = 0.0f;
    }
    __syncthreads();
    for (int d = 1; d < C / 16; d++) {
        const int n = (C / 16 - d) * 256;  // the elements of the blocks (J + d, J)
        for (int e = tid; e < n; e += NT) {
            const int f = (e >> 7 & 1) * 15, I0 = 16 * (e / 256 + d), r = (e >> 4 & 7) ^ f,
                      j = 16 * (e / 256) + ((e & 15) ^ f);
            float acc = 0.0f;  // T_lj = 0 for l < j
            for (int l = j; l < I0; l++) acc = fmaf(sA[(I0 + r) * LDF + l], sT[l * LDF + j], acc);
            sA[(j - j % 16 + r) * LDF + I0 + j % 16] = acc;
        }
        __syncthreads();
        for (int e = tid; e < n; e += NT) {
            const int f = (e >> 7 & 1) * 15, I0 = 16 * (e / 256 + d), r = (e >> 4 & 7) ^ f,
                      j = 16 * (e / 256) + ((e & 15) ^ f);
            float acc = 0.0f;  // T_ip = 0 for p > i
            for (int p = 0; p <= r; p++)
                acc = fmaf(sT[(I0 + r) * LDF + I0 + p], sA[(j - j % 16 + p) * LDF + I0 + j % 16], acc);
            sT[(I0 + r) * LDF + j] = -acc;
        }
        __syncthreads();
    }
    for (int e = tid; e < C * C; e += NT) {  // the diagonals folded into T's columns, then one rounding
        const int i = e / C, l = e % C;
        const float t = sT[i * LDF + l];
        sTw[i * LDT + l] = __float2bfloat16(t * sBe[l]);
        sTu[i * LDT + l] = __float2bfloat16(t * sB[l]);
    }
    __syncthreads();
    // W = Tw K, U = Tu V: warp w rows 16 w .., k over the chunk rows <= 16 w + 15 (T is lower triangular)
    for (int c0 = 0; c0 < hdp; c0 += 64) {
        float aw[8][4] = {}, au[8][4] = {};
        for (int kc = 0; kc < tiles; kc++) {
            uint32_t fw[4], fu[4];
            att_lda(fw, sTw + 16 * warp * LDT, LDT, 16 * kc);
            att_lda(fu, sTu + 16 * warp * LDT, LDT, 16 * kc);
            UNROLL for (int nt = 0; nt < 8; nt += 2) if (c0 + 8 * nt < hdp) {
                uint32_t bk[4], bv[4];
                att_ldb_t(bk, sK + c0 + 8 * nt, ld, 16 * kc);
                att_ldb_t(bv, sV + c0 + 8 * nt, ld, 16 * kc);
                att_mma(aw[nt], fw, bk), att_mma(aw[nt + 1], fw, bk + 2);
                att_mma(au[nt], fu, bv), att_mma(au[nt + 1], fu, bv + 2);
            }
        }
        UNROLL for (int nt = 0; nt < 8; nt++) {
            const int col = c0 + 8 * nt + 2 * t4;
            if (col >= hd) continue;
            UNROLL for (int r = 0; r < 2; r++) {
                const long row = blk + 16 * warp + gq + 8 * r;
                att_store2(sc.W + row * hd + col, aw[nt][2 * r], aw[nt][2 * r + 1]);
                att_store2(sc.U + row * hd + col, au[nt][2 * r], au[nt][2 * r + 1]);
            }
        }
    }
}

// Per (b, head) x tile of 64 value rows (grid (B h, ceil(hdp / 64))), 128 threads: warp w carries S's rows r0 + 16 w
// .. + 15 through the nc chunks. Dynamic shared memory (gdn_chunk_state_smem), two stages of: W, K (64, ld) bf16,
// U's columns r0 .. r0 + 63 (64, GDNC_LDT) bf16 (overwritten by V'), G (64) fp32. HD >= hdp: S's columns in
// registers.
template <int HD>
static __global__ void __launch_bounds__(128)
    gdn_chunk_state_kernel(float* states, float* s_last, GdncScratch sc, const bf16* k, const float* s0, GdncShape s) {
    constexpr int C = GDNC_C, LDT = GDNC_LDT, NT = 128, NO = HD / 8;
    DYNAMIC_SHARED(bf16, smem);
    const int ld = s.ld, hd = s.hd, hdp = s.hdp, nc = s.nc;
    const int stage = 2 * C * ld + C * LDT + 2 * C;  // bf16 elements a stage (G: 64 floats)
    const int bh = blockIdx.x, b = bh / s.h, j = bh % s.h, r0 = 64 * blockIdx.y;
    const int ncols = min(64, hd - r0);  // U's and V''s columns of this block
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, t4 = lane % 4;
    const int rw = r0 + 16 * warp;  // this warp's first row of S
    const bool active = rw < hd;
    const long hd2 = (long)hd * hd;

    auto load = [&](int c, int st) {
        bf16* sW = smem + st * stage;
        const long blk = ((long)bh * nc + c) * C;
        const long row0 = (long)b * s.T + (long)c * C;
        gdnc_copy<NT>(sW, ld, sc.W + blk * hd, hd, C, C, hd);
        gdnc_copy<NT>(sW + C * ld, ld, k + row0 * s.ldx + (long)j * hd, s.ldx, C, min(C, s.T - c * C), hd);
        gdnc_copy<NT>(sW + 2 * C * ld, LDT, sc.U + blk * hd + r0, hd, C, C, ncols);
        float* sG = reinterpret_cast<float*>(sW + 2 * C * ld + C * LDT);
        for (int e = tid; e < C / 4; e += NT) cp_async<16>(sG + 4 * e, sc.G + blk + 4 * e, true);
    };
    for (int st = 0; st < 2; st++) {
        gdnc_zero<NT>(smem + st * stage, ld, 2 * C, hd, hdp);
        gdnc_zero<NT>(smem + st * stage + 2 * C * ld, LDT, C, ncols, 64);
    }
    load(0, 0);
    cp_async_commit();

    float S[NO][4];  // rows rw + gq (+ 8), columns 8 nt + 2 t4 (+ 1)
    UNROLL for (int nt = 0; nt < NO; nt++) UNROLL for (int e = 0; e < 4; e++) {
        const int r = rw + gq + 8 * (e / 2), x = 8 * nt + 2 * t4 + e % 2;
        S[nt][e] = s0 && r < hd && x < hd ? s0[(long)bh * hd2 + (long)r * hd + x] : 0.0f;
    }
    for (int c = 0; c < nc; c++) {
        cp_async_wait<0>();
        __syncthreads();  // chunk c has landed; every warp is done with the other stage
        if (c + 1 < nc) load(c + 1, (c + 1) & 1);
        cp_async_commit();
        const bf16* sW = smem + (c & 1) * stage;
        const bf16* sK = sW + C * ld;
        bf16* sU = smem + (c & 1) * stage + 2 * C * ld;
        const float* sG = reinterpret_cast<const float*>(sU + C * LDT);
        const float GL = sG[C - 1];
        float p[C / 8][4] = {};  // S W^T, then V'^T, then V'^T diag(e^(G_L - G)): rows r, columns i
        if (active) {
            float* st = states + ((long)bh * nc + c) * hd2;
            UNROLL for (int nt = 0; nt < NO; nt++) if (8 * nt < hd) UNROLL for (int r = 0; r < 2; r++) {
                const int row = rw + gq + 8 * r;
                if (row < hd)
                    *reinterpret_cast<float2*>(st + (long)row * hd + 8 * nt + 2 * t4) =
                        float2{S[nt][2 * r], S[nt][2 * r + 1]};
            }
            UNROLL for (int kc = 0; kc < HD / 16; kc++) if (16 * kc < hdp) {
                uint32_t a[4];
                att_c_to_a(a, S, kc);
                UNROLL for (int nt = 0; nt < C / 8; nt += 2) {
                    uint32_t bf[4];
                    att_ldb(bf, sW + 8 * nt * ld, ld, 16 * kc);
                    att_mma(p[nt], a, bf), att_mma(p[nt + 1], a, bf + 2);
                }
            }
            UNROLL for (int nt = 0; nt < C / 8; nt++) UNROLL for (int e = 0; e < 4; e++) {
                const int cu = rw - r0 + gq + 8 * (e / 2), i = 8 * nt + 2 * t4 + e % 2;
                const bf16 vb = __float2bfloat16(__bfloat162float(sU[i * LDT + cu]) - p[nt][e]);
                sU[i * LDT + cu] = vb;
                p[nt][e] = __bfloat162float(vb) * expf(GL - sG[i]);
            }
        }
        __syncthreads();  // V' complete in sU
        {
            const long blk = ((long)bh * nc + c) * C;
            const int chunks = ncols / 8;
            for (int e = tid; e < C * chunks; e += NT) {
                const int i = e / chunks, cc = (e - i * chunks) * 8;
                *reinterpret_cast<uint4*>(sc.V + (blk + i) * hd + r0 + cc) =
                    *reinterpret_cast<const uint4*>(sU + i * LDT + cc);
            }
        }
        if (active) {  // S = e^(G_L) S + (V'^T diag(e^(G_L - G))) K
            const float eL = expf(GL);
            UNROLL for (int nt = 0; nt < NO; nt++) UNROLL for (int e = 0; e < 4; e++) S[nt][e] *= eL;
            UNROLL for (int kc = 0; kc < C / 16; kc++) {
                uint32_t a[4];
                att_c_to_a(a, p, kc);
                UNROLL for (int nt = 0; nt < NO; nt += 2) if (8 * nt < hdp) {
                    uint32_t bf[4];
                    att_ldb_t(bf, sK + 8 * nt, ld, 16 * kc);
                    att_mma(S[nt], a, bf), att_mma(S[nt + 1], a, bf + 2);
                }
            }
        }
    }
    cp_async_wait<0>();
    if (!s_last || !active) return;
    UNROLL for (int nt = 0; nt < NO; nt++) if (8 * nt < hd) UNROLL for (int r = 0; r < 2; r++) {
        const int row = rw + gq + 8 * r;
        if (row < hd)
            *reinterpret_cast<float2*>(s_last + (long)bh * hd2 + (long)row * hd + 8 * nt + 2 * t4) =
                float2{S[nt][2 * r], S[nt][2 * r + 1]};
    }
}

// Per (b, head, column chunk) x chunk (grid (B h ncol, nc)), 128 threads: warp w computes rows 16 w .. 16 w + 15 of
// the chunk's O, columns (value channels) r0 .. r0 + OC - 1. Dynamic shared memory (gdn_chunk_output_smem): Q, K
// (64, ld) bf16; S0's rows r0 .. r0 + OC - 1 (OC, ld) bf16; V''s columns r0 .. (64, OC + 8) bf16; G (64) fp32.
template <int OC>
static __global__ void __launch_bounds__(128)
    gdn_chunk_output_kernel(bf16* o, long ldo, const float* states, GdncScratch sc, const bf16* q, const bf16* k,
                            GdncShape s, float scale) {
    constexpr int C = GDNC_C, NT = 128, LDV = OC + 8;
    DYNAMIC_SHARED(bf16, smem);
    const int ld = s.ld, hd = s.hd, hdp = s.hdp, ncol = (hdp + OC - 1) / OC;
    bf16* sQ = smem;
    bf16* sK = sQ + C * ld;
    bf16* sS = sK + C * ld;
    bf16* sV = sS + OC * ld;
    float* sG = reinterpret_cast<float*>(sV + C * LDV);
    const int bh = blockIdx.x / ncol, r0 = (blockIdx.x % ncol) * OC, c = blockIdx.y, b = bh / s.h, j = bh % s.h;
    const int L = min(C, s.T - c * C), ncols = min(OC, hd - r0);
    const long row0 = (long)b * s.T + (long)c * C, blk = ((long)bh * s.nc + c) * C;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane / 4, t4 = lane % 4;

    gdnc_copy<NT>(sQ, ld, q + row0 * s.ldx + (long)j * hd, s.ldx, C, L, hd);
    gdnc_copy<NT>(sK, ld, k + row0 * s.ldx + (long)j * hd, s.ldx, C, L, hd);
    gdnc_copy<NT>(sV, LDV, sc.V + blk * hd + r0, hd, C, C, ncols);
    for (int e = tid; e < C / 4; e += NT) cp_async<16>(sG + 4 * e, sc.G + blk + 4 * e, true);
    cp_async_commit();
    gdnc_zero<NT>(sQ, ld, 2 * C, hd, hdp);
    gdnc_zero<NT>(sV, LDV, C, ncols, OC);
    {  // S0 (fp32) rounded to bf16; rows past hd and columns past hd zero
        const float* st = states + ((long)bh * s.nc + c) * hd * hd;
        for (int e = tid; e < OC * (hdp / 2); e += NT) {
            const int rr = e / (hdp / 2), x = 2 * (e % (hdp / 2)), r = r0 + rr;
            float2 val = float2{0.0f, 0.0f};
            if (r < hd && x < hd) val = *reinterpret_cast<const float2*>(st + (long)r * hd + x);
            att_store2(sS + rr * ld + x, val.x, val.y);
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    if (16 * warp >= L) return;  // rows past the chunk's end: nothing to store

    float acc[1][OC / 8][4] = {}, qk[C / 8][4] = {};
    att_mma_abt<1, OC / 8>(acc, sQ + 16 * warp * ld, ld, sS, ld, hdp / 16);         // Q S0^T
    gdnc_mma_abt<C / 16>(qk, sQ + 16 * warp * ld, ld, sK, ld, hdp / 16, warp + 1);  // Q K^T
    float eG[2];
    UNROLL for (int r = 0; r < 2; r++) eG[r] = expf(sG[16 * warp + gq + 8 * r]);
    UNROLL for (int nt = 0; nt < OC / 8; nt++) UNROLL for (int e = 0; e < 4; e++) acc[0][nt][e] *= eG[e / 2];
    UNROLL for (int nt = 0; nt < C / 8; nt++) UNROLL for (int e = 0; e < 4; e++) {
        const int i = 16 * warp + gq + 8 * (e / 2), l = 8 * nt + 2 * t4 + e % 2;
        qk[nt][e] = l <= i ? qk[nt][e] * expf(sG[i] - sG[l]) : 0.0f;
    }
    UNROLL for (int kc = 0; kc < C / 16; kc++) if (kc <= warp) {  // + (tril(Q K^T) o Gamma) V', P in registers
        uint32_t a[4];
        att_c_to_a(a, qk, kc);
        UNROLL for (int nt = 0; nt < OC / 8; nt += 2) if (r0 + 8 * nt < hdp) {
            uint32_t bf[4];
            att_ldb_t(bf, sV + 8 * nt, LDV, 16 * kc);
            att_mma(acc[0][nt], a, bf), att_mma(acc[0][nt + 1], a, bf + 2);
        }
    }
    UNROLL for (int r = 0; r < 2; r++) {
        const int i = 16 * warp + gq + 8 * r;
        if (i >= L) continue;
        bf16* y = o + (row0 + i) * ldo + (long)j * hd + r0;
        UNROLL for (int nt = 0; nt < OC / 8; nt++) {
            const int col = 8 * nt + 2 * t4;
            if (col < ncols) att_store2(y + col, acc[0][nt][2 * r] * scale, acc[0][nt][2 * r + 1] * scale);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

inline int gdn_chunk_ld(int hd) { return (hd + 15) / 16 * 16 + 8; }
inline size_t gdn_chunk_prep_smem(int hd) {
    return (size_t)2 * GDNC_C * gdn_chunk_ld(hd) * sizeof(bf16) + 2 * GDNC_C * GDNC_LDT * sizeof(bf16) +
           (2 * GDNC_C * GDNC_LDF + 3 * GDNC_C) * sizeof(float);
}
inline size_t gdn_chunk_state_smem(int hd) {
    return 2 * ((size_t)(2 * GDNC_C * gdn_chunk_ld(hd) + GDNC_C * GDNC_LDT) * sizeof(bf16) + GDNC_C * sizeof(float));
}
inline int gdn_chunk_output_cols(int hd) { return hd > 64 ? 128 : 64; }
inline size_t gdn_chunk_output_smem(int hd) {
    const int oc = gdn_chunk_output_cols(hd), ld = gdn_chunk_ld(hd);
    return (size_t)(2 * GDNC_C * ld + oc * ld + GDNC_C * (oc + 8)) * sizeof(bf16) + GDNC_C * sizeof(float);
}

// Above 48 KiB a kernel must opt in to more dynamic shared memory (A100: up to 163 KiB, H100: 227 KiB; the
// largest here, hd 256's, needs about 150 KiB).
template <class K> void gdn_chunk_smem_optin(K* kernel, size_t bytes, int hd) {
    if (bytes <= 48 * 1024) return;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess) {
        fprintf(stderr,
                "gdn_chunk_forward: error: head_dim %d needs %zu bytes of shared memory per block, more than this "
                "GPU allows; use a smaller head_dim\n",
                hd, bytes);
        exit(EXIT_FAILURE);
    }
}

// Why the kernels cannot run a shape (null: they can). gdn_chunk_forward fails loudly on it (a configuration error,
// not data).
inline const char* gdn_chunk_refusal(int B, int T, int h, int hd, long ld, long ldo, const void* q, const void* k,
                                     const void* v, const void* o, const void* scratch) {
    if (hd < 16 || hd > GDNC_MAX_HD || hd % 8 != 0) return "head_dim must be a multiple of 8 in 16..256";
    if (B < 1 || T < 1 || h < 1) return "B, T and h must be positive";
    if (ld % 8 != 0 || ldo % 2 != 0) return "the q/k/v row stride must be a multiple of 8, o's of 2";
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)scratch) % 16 != 0 || (uintptr_t)o % 4 != 0)
        return "q, k, v and the scratch must be 16-byte aligned, o 4-byte";
    return nullptr;
}

template <int HD>
void gdn_chunk_state_run(float* states, float* s_last, const GdncScratch& sc, const bf16* k, const float* s0,
                         const GdncShape& s, cudaStream_t stream) {
    const size_t smem = gdn_chunk_state_smem(s.hd);
    gdn_chunk_smem_optin(gdn_chunk_state_kernel<HD>, smem, s.hd);
    LAUNCH(dim3(s.B * s.h, (s.hdp + 63) / 64), 128, smem, stream, gdn_chunk_state_kernel<HD>)
    (states, s_last, sc, k, s0, s);
    cudaCheck(cudaGetLastError());
}
template <int OC>
void gdn_chunk_output_run(bf16* o, long ldo, const float* states, const GdncScratch& sc, const bf16* q, const bf16* k,
                          const GdncShape& s, cudaStream_t stream) {
    const size_t smem = gdn_chunk_output_smem(s.hd);
    gdn_chunk_smem_optin(gdn_chunk_output_kernel<OC>, smem, s.hd);
    LAUNCH(dim3(s.B * s.h * ((s.hdp + OC - 1) / OC), s.nc), 128, smem, stream, gdn_chunk_output_kernel<OC>)
    (o, ldo, states, sc, q, k, s, 1.0f / sqrtf((float)s.hd));
    cudaCheck(cudaGetLastError());
}

// o (rows of stride ldo, head j at columns j hd) and states (B, h, nc, hd, hd) fp32 (chunk c's starting state) from
// q, k, v (rows of stride ld), beta, g (N, h) fp32; s0: null (S = 0 at every sequence's start) or (B, h, hd, hd)
// fp32 initial states; s_last: null or (B, h, hd, hd) fp32, the state after each sequence's last row, may be s0 (a
// thread writes back the elements of s0 it read). scratch: gdn_chunk_forward_scratch_bytes(B, T, h, hd), 16-aligned.
inline void gdn_chunk_forward(bf16* o, long ldo, float* states, const bf16* q, const bf16* k, const bf16* v, long ld,
                              const float* beta, const float* g, int B, int T, int h, int hd, const float* s0,
                              float* s_last, void* scratch, cudaStream_t stream) {
    if (const char* why = gdn_chunk_refusal(B, T, h, hd, ld, ldo, q, k, v, o, scratch)) {
        fprintf(stderr, "gdn_chunk_forward: error: B=%d T=%d h=%d head_dim=%d ld=%ld ldo=%ld: %s\n", B, T, h, hd, ld,
                ldo, why);
        exit(EXIT_FAILURE);
    }
    const int hdp = (hd + 15) / 16 * 16;
    const GdncShape s{B, T, h, hd, hdp, hdp + 8, (T + GDNC_C - 1) / GDNC_C, ld};
    const GdncScratch sc = gdn_chunk_scratch(scratch, B, T, h, hd);
    const size_t smem = gdn_chunk_prep_smem(hd);
    gdn_chunk_smem_optin(gdn_chunk_prep_kernel, smem, hd);
    LAUNCH(dim3(B * h, s.nc), 128, smem, stream, gdn_chunk_prep_kernel)(sc, k, v, beta, g, s);
    cudaCheck(cudaGetLastError());
    if (hdp <= 64) gdn_chunk_state_run<64>(states, s_last, sc, k, s0, s, stream);
    else if (hdp <= 128) gdn_chunk_state_run<128>(states, s_last, sc, k, s0, s, stream);
    else gdn_chunk_state_run<256>(states, s_last, sc, k, s0, s, stream);
    if (gdn_chunk_output_cols(hd) == 64) gdn_chunk_output_run<64>(o, ldo, states, sc, q, k, s, stream);
    else gdn_chunk_output_run<128>(o, ldo, states, sc, q, k, s, stream);
}
