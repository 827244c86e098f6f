// gdn_chunk_bwd.cuh: the backward of the chunked gated delta rule on tensor cores: gdn_chunk_backward computes
// exactly ref::gdn_delta_chunk_backward (ref/gdn.h: the same inputs, outputs and layouts) from the forward's
// per-chunk starting states, with bf16 mma.sync operands and fp32 accumulation; every sequence starts from S = 0.
//
// Notation per (sequence, head, chunk of L <= C = 64 rows), as ref/gdn.h's: G = cumsum(g) in the chunk,
// Gam_ix = exp(G_i - G_x), KK = K K^T, A = strictly lower(diag(beta) (KK o Gam)), T = (I + A)^-1,
// Kb = diag(beta exp(G)) K, Vb = diag(beta) V, W = T Kb, U = T Vb - W S0^T, M = tril(Q K^T o Gam),
// O = (diag(exp(G)) Q S0^T + M U) / sqrt(hd), S1 = exp(G_L) S0 + U^T diag(exp(G_L - G)) K, dO = dout / sqrt(hd).
//
// Three kernels, in the structure of flash-linear-attention's chunked backward (written from the reference here):
//   prep  (grid (the window's chunks, B h)): recomputes the chunk's forward from states[c]: KK, Gam, T (forward
//         substitution in fp32, a thread per column of T, its fp32 column in X), W, U, M; stores T, W, U (bf16) and
//         KK, M (fp32) in the chunk's workspace.
//   state (grid (ceil(hd / 64), B h)): walks the chunks last first, carrying dS (the gradient of the chunk's end
//         state) in fp32 for a tile of 64 value rows (the rows of dS are independent): dU = M^T dO + Kd dS1^T
//         (Kd = diag(exp(G_L - G)) K), then dS0 = exp(G_L) dS1 + (diag(exp(G)) dO)^T Q - dU^T W. Stores every
//         chunk's dS1 and its complete dU.
//   grad  (grid (the window's chunks, B h)): everything else of the chunk, from dS1 and dU: dQ = diag(exp(G)) dO S0
//         + (dM o Gam) K with dM = tril(dO U^T); dW = -dU S0; dT = dU Vb^T + dW Kb^T; dKb = T^T dW, dVb = T^T dU;
//         dA = -T^T dT T^T on A's strictly lower entries -> dKK, dbeta, dG; dK from the four places K enters;
//         dv = diag(beta) dVb; dg = the reverse cumsum of dG inside the chunk.
// Every product is one block-level routine (gcb_gemm): 64 x 64 output tiles, k in slabs of 32 staged as bf16 in
// shared memory, each operand either from an element function (so a transposed, scaled, masked or fp32 operand is
// read in place and rounded to bf16 once) or, where it is bf16 rows contiguous in k (k, q, v, dout, the workspace's
// bf16 matrices; 14 of the 34 operands, none of the state walk's), 8 elements a 16-byte load (GcbRows; element by
// element when hd is not a multiple of 8 or a row is not 16-byte aligned: the same bits), ldmatrix fragments, mma
// m16n8k16, fp32 accumulators; the tile's epilogue is a function of (row, column, value). Scale factors (1 /
// sqrt(hd), exp(G)) are folded into the fp32 operand before its one rounding, never applied to a bf16 input. Sums
// over rows (dG, dbeta, <dS1, S0>) run in a fixed order: no atomics, the same bits for the same launch.
// Intermediates live in a workspace per chunk in the caller's scratch: fp32 where a value is read in fp32
// arithmetic, bf16 (rounded when written, as staging would round it: the same bits) where it is only an mma operand
// (T, dT, W, U, dU, dW); 4 C^2 + 5 C hd + hd^2 floats and 2 C^2 + 4 C hd bf16. The three kernels run over windows of
// chunks (chunks c0 .. c1 - 1 of every sequence and head, the last window first), so the scratch holds one window's
// workspaces and, per (sequence, head), an hd x hd carry: the state walk's dS handed to the window before. A window
// has the fewest chunks that give prep and grad 1024 blocks a launch (all the chunks when there are fewer); the
// state walk keeps its B h ceil(hd / 64) blocks and walks each chunk once in all. The results do not depend on the
// window (a test holds the bits). At the 124M model's shapes (B 16, h 12, hd 64) windows of 6 chunks: 237 MiB
// whatever T (624 MiB at T 1024 and 2.4 GiB at T 4096 with a workspace per chunk); at h 6, hd 128 windows of 11
// chunks, 385.5 MiB. gdn_chunk_backward_scratch_bytes (kernel_sizes.h) gives the bytes. Why 1024 (occupancy from the
// figures below, an estimate: nothing is timed): registers bind, not shared memory; an H100 (sm_90, 132 SMs) holds 4
// prep blocks a SM (528) and 3 grad (396), an A100 (sm_80, 108 SMs) 2 of each (216). At 124M, 1,152 blocks a launch
// are 2.2 waves of prep and 2.9 of grad on the H100 (73% and 97% of the slots of 3 waves busy); a target of 512
// (windows of 3 chunks, 120 MiB) gives 576: 1.1 and 1.5 waves (55% and 73% of 2), and twice the windows (22 at T
// 4096: 66 launches, each ending in a partial wave). The 117 MiB it saves (172 MiB at hd 128) do not pay for that on
// an 80 GB card; on the A100 both targets fill 89% of their waves.
// head_dim: any in 1..256 (the routine masks partial tiles; 48 is tested). 128 threads a block; launch bounds
// (128, 2): with ptxas's default choice (no minimum) sm_80 spilled 28 bytes in prep at 96 registers.
// ptxas -v (nvcc 13.0, -O3), registers / static shared memory / spills:
//   prep   sm_80 255 / 27392 B / 0    sm_90 122 / 27392 B / 0
//   state  sm_80 124 / 10752 B / 0    sm_90 122 / 10752 B / 0
//   grad   sm_80 255 / 28288 B / 0    sm_90 142 / 28288 B / 0
// (prep at sm_80 sits at the (128, 2) bound's 255: writing T's bf16 copy inside the substitution loop spilled 4
// bytes there; it is written after the column's loop instead.)
// Speed: not measured on a GPU yet. This first version is written for correctness: intermediates go through the
// workspace in global memory (L2), the state walk has ceil(hd / 64) blocks per head, and the staging has 16-byte
// loads where a layout allows (above) but no cp.async and no reuse of a staged tile across products.
// Does not: the forward (a header of its own), a non-zero initial state's gradient, or the per-row ops (gdn.cuh).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "attention_tiles.cuh"
#include "cuda_common.cuh"
#include "kernel_sizes.h"
#include "vec.cuh"

constexpr int GCB_C = GDN_CHUNK_ROWS;  // rows of a chunk (ref::GDN_CHUNK)
constexpr int GCB_THREADS = 128;       // 4 warps, each 16 rows of a 64 x 64 output tile
constexpr int GCB_KS = 32;             // k slab staged per step
constexpr int GCB_LDS = GCB_KS + 8;    // staged row stride (bf16): 80 bytes, 16-byte aligned ldmatrix rows
constexpr int GCB_MAX_HEAD_DIM = 256;

// The chunk's workspace, per (b h, chunk), gdn_chunk_bwd_ws_floats(hd) 4-byte words apart: fp32 where a value is
// read in fp32 arithmetic (a row sum, a dot, an accumulation, a scale before its rounding), bf16 where it is only
// ever an mma operand (stored already rounded as staging would round it: the same bits). The bf16 arrays start
// 16 bytes apart from the chunk's start; dS1 comes last.
struct GcbWs {
    float *KK, *M, *X, *dA;            // C x C, fp32
    float *dQ, *dK, *UdS, *dKb, *dVb;  // C x hd, fp32
    bf16 *T, *dT;                      // C x C, bf16
    bf16 *W, *U, *dU, *dW;             // C x hd, bf16
    float* dS1;                        // hd x hd, fp32: the gradient of the chunk's end state
};
__host__ __device__ inline GcbWs gcb_ws(float* base, int hd) {
    const long cc = (long)GCB_C * GCB_C, ch = (long)GCB_C * hd;
    GcbWs w;
    w.KK = base, w.M = base + cc, w.X = base + 2 * cc, w.dA = base + 3 * cc;
    float* p = base + 4 * cc;
    w.dQ = p, w.dK = p + ch, w.UdS = p + 2 * ch, w.dKb = p + 3 * ch, w.dVb = p + 4 * ch;
    bf16* b = reinterpret_cast<bf16*>(p + 5 * ch);
    w.T = b, w.dT = b + cc;
    b += 2 * cc;
    w.W = b, w.U = b + ch, w.dU = b + 2 * ch, w.dW = b + 3 * ch;
    w.dS1 = reinterpret_cast<float*>(b + 4 * ch);
    return w;
}

// ---------------------------------------------------------------------------------------------------------
// the block's product
// ---------------------------------------------------------------------------------------------------------

// An operand read from bf16 rows contiguous in k: f(row, k) gives the address of element (row, k) and a scale (or
// a null address: the row is zero), the element being s * p[0], rounded to bf16 (s = 1: the element itself). With
// vec (every such address 16-byte aligned at k a multiple of 8, and any seam between two arrays on a multiple of 8)
// the staging reads 8 elements with one 16-byte load; without, one element at a time from the same addresses.
struct GcbRow {
    const bf16* p;
    float s;
};
template <class F> struct GcbRows {
    F f;
    bool vec;
};
template <class F> __device__ __forceinline__ GcbRows<F> gcb_rows(bool vec, F f) { return GcbRows<F>{f, vec}; }

// Stage rows r0 .. r0 + 63 (those < R) by k0 .. k0 + GCB_KS - 1 (those < K) of an operand into s (GCB_LDS a row),
// zero outside; an element function is op(row, k), or op(k, row) with KFirst (b's (k, n)). The element loop is
// unrolled by 2 (two loads in flight, as when a's and b's elements shared one loop): nvcc's own choice (4) took
// the state walk from 122 to 190 registers and spilled 4 bytes in prep at sm_80.
#ifdef __CUDACC__
#define GCB_UNROLL2 _Pragma("unroll 2")
#else
#define GCB_UNROLL2
#endif
template <bool KFirst, class F> __device__ __forceinline__ void gcb_stage(bf16* s, F op, int R, int r0, int K, int k0) {
    GCB_UNROLL2 for (int e = threadIdx.x; e < 64 * GCB_KS; e += GCB_THREADS) {
        const int r = e / GCB_KS, kk = e % GCB_KS, k = k0 + kk;
        float x = 0.0f;
        if (k < K && r0 + r < R) x = KFirst ? op(k, r0 + r) : op(r0 + r, k);
        s[r * GCB_LDS + kk] = __float2bfloat16(x);
    }
}
template <bool KFirst, class F>
__device__ __forceinline__ void gcb_stage(bf16* s, GcbRows<F> op, int R, int r0, int K, int k0) {
    if (!op.vec) {
        auto one = [&](int r, int k) {
            const GcbRow x = op.f(r, k);
            return x.p ? x.s * __bfloat162float(*x.p) : 0.0f;
        };
        gcb_stage<false>(s, one, R, r0, K, k0);
        return;
    }
    for (int e = threadIdx.x; e < 64 * GCB_KS / 8; e += GCB_THREADS) {
        const int r = e / (GCB_KS / 8), kk = 8 * (e % (GCB_KS / 8)), k = k0 + kk;
        GcbRow x{nullptr, 1.0f};
        if (k < K && r0 + r < R) x = op.f(r0 + r, k);
        bf16 v[8];
        if (x.p) {
            memcpy(v, __builtin_assume_aligned((const void*)x.p, 16), 16);
            if (x.s != 1.0f) UNROLL for (int i = 0; i < 8; i++) v[i] = __float2bfloat16(x.s * __bfloat162float(v[i]));
        } else {
            UNROLL for (int i = 0; i < 8; i++) v[i] = __float2bfloat16(0.0f);
        }
        memcpy(__builtin_assume_aligned((void*)(s + r * GCB_LDS + kk), 16), v, 16);
    }
}

// out(m, n) = sum_k a(m, k) b(k, n) for m < M, n < N, k < K, handed to epi(m, n, value) once per element by the
// thread that holds it. a and b are element functions returning fp32 (rounded to bf16 here, once), or GcbRows
// (a's rows m, b's rows n); the whole block calls with the same arguments. Starts and ends with a barrier: the
// caller's writes are visible to a and b, and epi's to what follows.
template <class FA, class FB, class FE>
__device__ __forceinline__ void gcb_gemm(bf16* sa, bf16* sb, int M, int N, int K, FA a, FB b, FE epi) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    for (int m0 = 0; m0 < M; m0 += 64)
        for (int n0 = 0; n0 < N; n0 += 64) {
            float acc[8][4] = {};
            for (int k0 = 0; k0 < K; k0 += GCB_KS) {
                __syncthreads();  // the previous slab is consumed (and the caller's writes are visible)
                gcb_stage<false>(sa, a, M, m0, K, k0);
                gcb_stage<true>(sb, b, N, n0, K, k0);
                __syncthreads();
                UNROLL for (int kc = 0; kc < GCB_KS / 16; kc++) {
                    uint32_t af[4];
                    att_lda(af, sa + 16 * warp * GCB_LDS, GCB_LDS, 16 * kc);
                    UNROLL for (int nt = 0; nt < 8; nt += 2) {
                        uint32_t bfr[4];
                        att_ldb(bfr, sb + 8 * nt * GCB_LDS, GCB_LDS, 16 * kc);
                        att_mma(acc[nt], af, bfr);
                        att_mma(acc[nt + 1], af, bfr + 2);
                    }
                }
            }
            UNROLL for (int nt = 0; nt < 8; nt++) UNROLL for (int i = 0; i < 4; i++) {
                const int m = m0 + 16 * warp + g + 8 * (i / 2), n = n0 + 8 * nt + 2 * t4 + i % 2;
                if (m < M && n < N) epi(m, n, acc[nt][i]);
            }
        }
    __syncthreads();
}

// The chunk's gates into shared memory: sG = G (cumsum of g in order, as the reference), seG = exp(G), sB = beta;
// rows >= L hold G_{L-1} and beta 0. sGam (C x C, optional) = exp(G_i - G_x) for x <= i < L, else 0.
__device__ __forceinline__ void gcb_gates(float* sG, float* seG, float* sB, float* sGam, const float* g,
                                          const float* beta, long n0, int h, int L) {
    if (threadIdx.x == 0) {
        float run = 0.0f;
        for (int i = 0; i < GCB_C; i++) {
            if (i < L) run += g[(n0 + i) * h];
            sG[i] = run;
            sB[i] = i < L ? beta[(n0 + i) * h] : 0.0f;
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < GCB_C; i += blockDim.x) seG[i] = expf(sG[i]);
    if (sGam)
        for (int e = threadIdx.x; e < GCB_C * GCB_C; e += blockDim.x) {
            const int i = e / GCB_C, x = e % GCB_C;
            sGam[e] = x <= i && i < L ? expf(sG[i] - sG[x]) : 0.0f;
        }
    __syncthreads();
}

__device__ inline float gcb_f(bf16 x) { return __bfloat162float(x); }

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// The chunk's forward, recomputed: T, KK, M (C x C), W, U (C x hd) into its workspace. Grid (the window's chunks
// from c0, B h); the workspaces: nw per (b, head), wsf floats each; states from chunk c0 on (the caller offsets it:
// one register less, and sm_80 spilled 4 bytes without that).
static __global__ void __launch_bounds__(GCB_THREADS, 2)
    gdn_chunk_bwd_prep_kernel(float* ws, long wsf, int nw, const float* states, const bf16* q, const bf16* k,
                              const bf16* v, long ld, const float* beta, const float* g, int T, int h, int hd, int nc,
                              int c0) {
    SHARED(uint4[2 * 64 * GCB_LDS / 8], stage_);  // 16-byte aligned rows
    bf16* const stage = reinterpret_cast<bf16*>(stage_);
    SHARED(float[GCB_C], sG_);
    float* const sG = sG_;
    SHARED(float[GCB_C], seG_);
    float* const seG = seG_;
    SHARED(float[GCB_C], sB_);
    float* const sB = sB_;
    SHARED(float[GCB_C * GCB_C], sGam_);
    float* const sGam = sGam_;
    const int c = c0 + blockIdx.x, bh = blockIdx.y, j = bh % h;
    const long n0 = (long)(bh / h) * T + (long)c * GCB_C, col = (long)j * hd, hd2 = (long)hd * hd;
    const int L = min(GCB_C, T - c * GCB_C);
    const GcbWs w = gcb_ws(ws + ((long)bh * nw + blockIdx.x) * wsf, hd);
    const float* S0 = states + ((long)bh * nc + blockIdx.x) * hd2;  // states: from chunk c0 on
    const bf16* Q = q + n0 * ld + col;
    const bf16* K = k + n0 * ld + col;
    const bf16* V = v + n0 * ld + col;
    bf16 *sa = stage, *sb = stage + 64 * GCB_LDS;
    // 16-byte loads of 8 bf16: q, k, v rows and the workspace's bf16 rows (GcbRows)
    const bool vin = hd % 8 == 0 && ld % 8 == 0 && aligned16(q) && aligned16(k) && aligned16(v);
    const bool vws = hd % 8 == 0 && aligned16(ws);
    const auto krows = gcb_rows(vin, [=](int i, int x) { return GcbRow{i < L ? K + i * ld + x : nullptr, 1.0f}; });
    gcb_gates(sG, seG, sB, sGam, g + j, beta + j, n0, h, L);

    // KK = K K^T
    gcb_gemm(sa, sb, GCB_C, GCB_C, hd, krows, krows, [=](int i, int x, float s) { w.KK[i * GCB_C + x] = s; });
    // T = (I + A)^-1 by forward substitution, thread x owning column x: T_ix = [i = x] - sum_{x <= l < i} A_il T_lx,
    // A_il = beta_i Gam_il KK_il (the reference's terms in its order; T_lx = 0 for l < x)
    if (threadIdx.x < GCB_C) {
        const int x = threadIdx.x;
        for (int i = 0; i < GCB_C; i++) {
            float t = i == x ? 1.0f : 0.0f;
            if (i < L)
                for (int l = x; l < i; l++) t -= sB[i] * sGam[i * GCB_C + l] * w.KK[i * GCB_C + l] * w.X[l * GCB_C + x];
            w.X[i * GCB_C + x] = i < L && x <= i ? t : 0.0f;
        }
        for (int i = 0; i < GCB_C; i++) w.T[i * GCB_C + x] = __float2bfloat16(w.X[i * GCB_C + x]);
    }
    // W = T Kb
    gcb_gemm(
        sa, sb, GCB_C, hd, GCB_C,
        gcb_rows(vws,
                 [=](int i, int l) {
                     return GcbRow{w.T + i * GCB_C + l, 1.0f};
                 }),
        [=](int l, int x) { return l < L ? sB[l] * seG[l] * gcb_f(K[l * ld + x]) : 0.0f; },
        [=](int i, int x, float s) { w.W[i * hd + x] = __float2bfloat16(s); });
    // U = T Vb - W S0^T: one product over k = [the chunk's rows | the key columns]
    gcb_gemm(
        sa, sb, GCB_C, hd, GCB_C + hd,
        gcb_rows(vws,
                 [=](int i, int kk) {
                     return GcbRow{kk < GCB_C ? w.T + i * GCB_C + kk : w.W + i * hd + kk - GCB_C, 1.0f};
                 }),
        [=](int kk, int r) {
            return kk < GCB_C ? (kk < L ? sB[kk] * gcb_f(V[kk * ld + r]) : 0.0f) : -S0[r * hd + kk - GCB_C];
        },
        [=](int i, int r, float s) { w.U[i * hd + r] = __float2bfloat16(s); });
    // M = tril(Q K^T o Gam)
    gcb_gemm(sa, sb, GCB_C, GCB_C, hd,
             gcb_rows(vin,
                      [=](int i, int x) {
                          return GcbRow{i < L ? Q + i * ld + x : nullptr, 1.0f};
                      }),
             krows, [=](int i, int x, float s) { w.M[i * GCB_C + x] = s * sGam[i * GCB_C + x]; });
}

// dS over the window's chunks c0 .. c1 - 1, last first, for value rows r0 .. r0 + 63 of one (b, head): each
// chunk's dS1 and dU into its workspace. The last chunk's dS1 is 0 (c1 = nc) or the carry, which the window's
// first chunk then overwrites with its dS0 (for the window before; c0 > 0). Grid (ceil(hd / 64), B h).
static __global__ void __launch_bounds__(GCB_THREADS, 2)
    gdn_chunk_bwd_state_kernel(float* ws, long wsf, int nw, float* carry, const bf16* dout, long lddo, const bf16* q,
                               const bf16* k, long ld, const float* g, int T, int h, int hd, int nc, int c0, int c1,
                               float scale) {
    SHARED(uint4[2 * 64 * GCB_LDS / 8], stage_);  // 16-byte aligned rows
    bf16* const stage = reinterpret_cast<bf16*>(stage_);
    SHARED(float[GCB_C], sG_);
    float* const sG = sG_;
    SHARED(float[GCB_C], seG_);
    float* const seG = seG_;
    SHARED(float[GCB_C], sB_);
    float* const sB = sB_;
    const int bh = blockIdx.y, j = bh % h, r0 = blockIdx.x * 64, R = min(64, hd - r0);
    const long col = (long)j * hd;
    bf16 *sa = stage, *sb = stage + 64 * GCB_LDS;
    float* const cy = carry + (long)bh * hd * hd + (long)r0 * hd;  // this block's rows of the carry
    {
        float* dS = gcb_ws(ws + ((long)bh * nw + c1 - 1 - c0) * wsf, hd).dS1 + (long)r0 * hd;
        for (int e = threadIdx.x; e < R * hd; e += GCB_THREADS) dS[e] = c1 == nc ? 0.0f : cy[e];
    }
    for (int c = c1 - 1; c >= c0; c--) {
        const long n0 = (long)(bh / h) * T + (long)c * GCB_C;
        const int L = min(GCB_C, T - c * GCB_C);
        const GcbWs w = gcb_ws(ws + ((long)bh * nw + c - c0) * wsf, hd);
        const bf16* Q = q + n0 * ld + col;
        const bf16* K = k + n0 * ld + col;
        const bf16* dO = dout + n0 * lddo + col + r0;
        gcb_gates(sG, seG, sB, nullptr, g + j, g + j, n0, h, L);  // (sB unused)
        const float GL = sG[L - 1], eL = seG[L - 1];
        const float* dS1 = w.dS1 + (long)r0 * hd;
        // dU[:, r0 ..] = M^T dO + Kd dS1^T, over k = [the chunk's rows | the key columns]; dO's scale on M
        gcb_gemm(
            sa, sb, GCB_C, R, GCB_C + hd,
            [=](int i, int kk) {
                if (kk < GCB_C) return scale * w.M[kk * GCB_C + i];
                return i < L ? expf(GL - sG[i]) * gcb_f(K[i * ld + kk - GCB_C]) : 0.0f;
            },
            [=](int kk, int r) {
                if (kk < GCB_C) return kk < L ? gcb_f(dO[kk * lddo + r]) : 0.0f;
                return dS1[(long)r * hd + kk - GCB_C];
            },
            [=](int i, int r, float s) { w.dU[i * hd + r0 + r] = __float2bfloat16(s); });
        if (c == 0) break;
        // dS0 = exp(G_L) dS1 + dout^T (diag(scale exp(G)) Q) - dU^T W
        float* dS0 = c > c0 ? gcb_ws(ws + ((long)bh * nw + c - 1 - c0) * wsf, hd).dS1 + (long)r0 * hd : cy;
        gcb_gemm(
            sa, sb, R, hd, 2 * GCB_C,
            [=](int r, int kk) {
                if (kk < GCB_C) return kk < L ? gcb_f(dO[kk * lddo + r]) : 0.0f;
                return -gcb_f(w.dU[(kk - GCB_C) * hd + r0 + r]);
            },
            [=](int kk, int x) {
                if (kk < GCB_C) return kk < L ? scale * seG[kk] * gcb_f(Q[kk * ld + x]) : 0.0f;
                return gcb_f(w.W[(kk - GCB_C) * hd + x]);
            },
            [=](int r, int x, float s) { dS0[(long)r * hd + x] = s + eL * dS1[(long)r * hd + x]; });
    }
}

// Everything else of one chunk, from its dS1 and dU: dq, dk, dv (bf16), dbeta, dg (fp32) of its rows.
// Grid (the window's chunks from c0, B h), as the prep kernel's.
static __global__ void __launch_bounds__(GCB_THREADS, 2)
    gdn_chunk_bwd_grad_kernel(bf16* dq, bf16* dk, bf16* dv, long ldd, float* dbeta, float* dg, float* ws, long wsf,
                              int nw, const float* states, const bf16* dout, long lddo, const bf16* q, const bf16* k,
                              const bf16* v, long ld, const float* beta, const float* g, int T, int h, int hd, int nc,
                              int c0, float scale) {
    SHARED(uint4[2 * 64 * GCB_LDS / 8], stage_);  // 16-byte aligned rows
    bf16* const stage = reinterpret_cast<bf16*>(stage_);
    SHARED(float[GCB_C], sG_);
    float* const sG = sG_;
    SHARED(float[GCB_C], seG_);
    float* const seG = seG_;
    SHARED(float[GCB_C], sB_);
    float* const sB = sB_;
    SHARED(float[GCB_C * GCB_C], sGam_);
    float* const sGam = sGam_;
    SHARED(float[GCB_C], sdG_);
    float* const sdG = sdG_;
    SHARED(float[GCB_C], sdb_);
    float* const sdb = sdb_;
    SHARED(float[GCB_C], sdd_);
    float* const sdd = sdd_;
    SHARED(float[32], red_);
    float* const red = red_;
    const int c = c0 + blockIdx.x, bh = blockIdx.y, j = bh % h;
    const long n0 = (long)(bh / h) * T + (long)c * GCB_C, col = (long)j * hd, hd2 = (long)hd * hd;
    const int L = min(GCB_C, T - c * GCB_C);
    const GcbWs w = gcb_ws(ws + ((long)bh * nw + blockIdx.x) * wsf, hd);
    const float* S0 = states + ((long)bh * nc + blockIdx.x) * hd2;  // states: from chunk c0 on
    const bf16* Q = q + n0 * ld + col;
    const bf16* K = k + n0 * ld + col;
    const bf16* V = v + n0 * ld + col;
    const bf16* dO = dout + n0 * lddo + col;
    bf16 *sa = stage, *sb = stage + 64 * GCB_LDS;
    constexpr int C = GCB_C;
    // 16-byte loads of 8 bf16: q, k, v and dout rows and the workspace's bf16 rows (GcbRows)
    const bool vin = hd % 8 == 0 && ld % 8 == 0 && aligned16(q) && aligned16(k) && aligned16(v);
    const bool vdo = hd % 8 == 0 && lddo % 8 == 0 && aligned16(dout);
    const bool vws = hd % 8 == 0 && aligned16(ws);
    gcb_gates(sG, seG, sB, sGam, g + j, beta + j, n0, h, L);
    const float GL = sG[L - 1], eL = seG[L - 1];
    auto kf = [=](int i, int x) { return i < L ? gcb_f(K[i * ld + x]) : 0.0f; };  // K(i, x), zero past L
    const auto dorows = gcb_rows(vdo, [=](int i, int r) { return GcbRow{i < L ? dO + i * lddo + r : nullptr, 1.0f}; });
    const auto urows = gcb_rows(vws, [=](int i, int r) { return GcbRow{w.U + i * hd + r, 1.0f}; });

    // O's inter-chunk term: dQ = diag(scale exp(G)) dout S0
    gcb_gemm(
        sa, sb, C, hd, hd, dorows, [=](int r, int x) { return S0[(long)r * hd + x]; },
        [=](int i, int x, float s) { w.dQ[i * hd + x] = scale * seG[i] * s; });
    // its dG_i = exp(G_i) dO_i . (S0 q_i) = q_i . dQ_i; and dM = tril(dO U^T) into X
    if (threadIdx.x < C) {
        const int i = threadIdx.x;
        float s = 0.0f;
        if (i < L)
            for (int x = 0; x < hd; x++) s += gcb_f(Q[i * ld + x]) * w.dQ[i * hd + x];
        sdG[i] = s, sdb[i] = 0.0f;
    }
    gcb_gemm(sa, sb, C, C, hd, dorows, urows,
             [=](int i, int x, float s) { w.X[i * C + x] = x <= i ? scale * s : 0.0f; });
    // the mask's decay: dG_i += sum_x dM_ix M_ix - sum_y dM_yi M_yi; then X = dM o Gam = d(Q K^T)
    if (threadIdx.x < C) {
        const int i = threadIdx.x;
        float s = sdG[i];
        for (int x = 0; x < i; x++) s += w.X[i * C + x] * w.M[i * C + x];
        for (int y = i + 1; y < C; y++) s -= w.X[y * C + i] * w.M[y * C + i];
        sdG[i] = s;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < C * C; e += GCB_THREADS) w.X[e] *= sGam[e];
    // dQ += dQK K, dK = dQK^T Q
    gcb_gemm(
        sa, sb, C, hd, C, [=](int i, int x) { return w.X[i * C + x]; }, kf,
        [=](int i, int x, float s) { w.dQ[i * hd + x] += s; });
    gcb_gemm(
        sa, sb, C, hd, C, [=](int x, int i) { return w.X[i * C + x]; },
        [=](int i, int y) { return i < L ? gcb_f(Q[i * ld + y]) : 0.0f; },
        [=](int x, int y, float s) { w.dK[x * hd + y] = s; });
    // S1 = exp(G_L) S0 + U^T Kd: dG_{L-1} += exp(G_L) <dS1, S0>; UdS = U dS1
    {
        float s = 0.0f;
        for (long e = threadIdx.x; e < hd2; e += GCB_THREADS) s += w.dS1[e] * S0[e];
        s = block_sum(s, red);
        if (threadIdx.x == 0) sdG[L - 1] += eL * s;
    }
    gcb_gemm(
        sa, sb, C, hd, hd, urows, [=](int r, int x) { return w.dS1[(long)r * hd + x]; },
        [=](int i, int x, float s) { w.UdS[i * hd + x] = s; });
    // dd_i = UdS_i . Kd_i: dG_{L-1} += dd_i, dG_i -= dd_i; dK_i += exp(G_L - G_i) UdS_i
    if (threadIdx.x < C) {
        const int i = threadIdx.x;
        float s = 0.0f;
        if (i < L) {
            const float dcy = expf(GL - sG[i]);
            for (int x = 0; x < hd; x++) {
                s += w.UdS[i * hd + x] * (dcy * gcb_f(K[i * ld + x]));
                w.dK[i * hd + x] += dcy * w.UdS[i * hd + x];
            }
        }
        sdd[i] = s;
    }
    // U = T Vb - W S0^T: dW = -dU S0
    gcb_gemm(
        sa, sb, C, hd, hd,
        gcb_rows(vws,
                 [=](int i, int r) {
                     return GcbRow{w.dU + i * hd + r, 1.0f};
                 }),
        [=](int r, int x) { return S0[(long)r * hd + x]; },
        [=](int i, int x, float s) { w.dW[i * hd + x] = __float2bfloat16(-s); });
    // W = T Kb, U = T Vb: dT = dU Vb^T + dW Kb^T (strictly lower), dKb = T^T dW, dVb = T^T dU
    gcb_gemm(
        sa, sb, C, C, 2 * hd,
        gcb_rows(vws,
                 [=](int i, int kk) {
                     return GcbRow{kk < hd ? w.dU + i * hd + kk : w.dW + i * hd + kk - hd, 1.0f};
                 }),
        gcb_rows(vin,
                 [=](int x, int kk) {
                     if (x >= L) return GcbRow{nullptr, 0.0f};
                     return kk < hd ? GcbRow{V + x * ld + kk, sB[x]} : GcbRow{K + x * ld + kk - hd, sB[x] * seG[x]};
                 }),
        [=](int i, int x, float s) { w.dT[i * C + x] = __float2bfloat16(x < i ? s : 0.0f); });
    gcb_gemm(
        sa, sb, C, 2 * hd, C, [=](int i, int l) { return gcb_f(w.T[l * C + i]); },
        [=](int l, int x) { return gcb_f(x < hd ? w.dW[l * hd + x] : w.dU[l * hd + x - hd]); },
        [=](int i, int x, float s) {
            if (x < hd) w.dKb[i * hd + x] = s;
            else w.dVb[i * hd + x - hd] = s;
        });
    // T = (I + A)^-1: dA = -T^T dT T^T (X = T^T dT, then dA = -X T^T on the strictly lower entries)
    gcb_gemm(
        sa, sb, C, C, C, [=](int i, int l) { return gcb_f(w.T[l * C + i]); },
        [=](int l, int x) { return gcb_f(w.dT[l * C + x]); }, [=](int i, int x, float s) { w.X[i * C + x] = s; });
    gcb_gemm(
        sa, sb, C, C, C, [=](int i, int l) { return w.X[i * C + l]; },
        gcb_rows(vws,
                 [=](int x, int l) {
                     return GcbRow{w.T + x * C + l, 1.0f};
                 }),
        [=](int i, int x, float s) { w.dA[i * C + x] = x < i ? -s : 0.0f; });
    // A = diag(beta) (KK o Gam) strictly lower: with da = dA_ix, e = Gam_ix: dKK_ix = da beta_i e,
    // dbeta_i += da e KK_ix, dG_i += dKK_ix KK_ix, dG_x -= dKK_ix KK_ix
    if (threadIdx.x < C) {
        const int i = threadIdx.x;
        float sb_ = sdb[i], sg = sdG[i];
        for (int x = 0; x < i; x++) {
            const float da = w.dA[i * C + x], e = sGam[i * C + x], kk = w.KK[i * C + x];
            const float dkk = da * sB[i] * e;
            sb_ += da * e * kk;
            sg += dkk * kk;
            w.dA[i * C + x] = dkk;
        }
        sdb[i] = sb_, sdG[i] = sg;
    }
    __syncthreads();
    if (threadIdx.x < C) {
        const int x = threadIdx.x;
        float sg = sdG[x];
        for (int i = x + 1; i < C; i++) sg -= w.dA[i * C + x] * w.KK[i * C + x];
        sdG[x] = sg;
    }
    // dK += (dKK + dKK^T) K
    gcb_gemm(
        sa, sb, C, hd, C, [=](int i, int x) { return w.dA[i * C + x] + w.dA[x * C + i]; }, kf,
        [=](int i, int x, float s) { w.dK[i * hd + x] += s; });
    // Kb = diag(beta exp(G)) K, Vb = diag(beta) V
    if (threadIdx.x < C) {
        const int i = threadIdx.x;
        float tk = 0.0f, tv = 0.0f;
        if (i < L)
            for (int x = 0; x < hd; x++)
                tk += w.dKb[i * hd + x] * gcb_f(K[i * ld + x]), tv += w.dVb[i * hd + x] * gcb_f(V[i * ld + x]);
        sdb[i] += seG[i] * tk + tv;
        sdG[i] += sB[i] * seG[i] * tk;
    }
    for (int e = threadIdx.x; e < L * hd; e += GCB_THREADS) {
        const int i = e / hd, x = e % hd;
        const long o = (n0 + i) * ldd + col + x;
        dq[o] = __float2bfloat16(w.dQ[i * hd + x]);
        dk[o] = __float2bfloat16(w.dK[i * hd + x] + sB[i] * seG[i] * w.dKb[i * hd + x]);
        dv[o] = __float2bfloat16(sB[i] * w.dVb[i * hd + x]);
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // the state's dd terms, then G = cumsum(g): dg_i = sum_{x >= i} dG_x
        float tot = 0.0f;
        for (int i = 0; i < L; i++) tot += sdd[i], sdG[i] -= sdd[i];
        sdG[L - 1] += tot;
        float run = 0.0f;
        for (int i = L - 1; i >= 0; i--) {
            run += sdG[i];
            dg[(n0 + i) * h + j] = run;
            dbeta[(n0 + i) * h + j] = sdb[i];
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// launcher
// ---------------------------------------------------------------------------------------------------------

// gdn_chunk_backward with windows of nw chunks (any nw >= 1; the results do not depend on it) and scratch of
// gdn_chunk_bwd_scratch_bytes_window(B, h, hd, nw) bytes: the windows run last first, each its three kernels.
inline void gdn_chunk_backward_windows(bf16* dq, bf16* dk, bf16* dv, long ldd, float* dbeta, float* dg,
                                       const bf16* dout, long lddo, const float* states, const bf16* q, const bf16* k,
                                       const bf16* v, long ld, const float* beta, const float* g, int B, int T, int h,
                                       int hd, int nw, void* scratch, cudaStream_t stream) {
    if (h <= 0 || hd < 1 || hd > GCB_MAX_HEAD_DIM || B < 0 || T < 0 || nw < 1) {
        fprintf(stderr,
                "gdn_chunk_backward: error: B=%d T=%d h=%d head_dim=%d window=%d: needs head_dim in 1..%d, h >= 1, "
                "window >= 1\n",
                B, T, h, hd, nw, GCB_MAX_HEAD_DIM);
        exit(EXIT_FAILURE);
    }
    if (B == 0 || T == 0) return;
    const int nc = (T + GCB_C - 1) / GCB_C;
    float* ws = static_cast<float*>(scratch);
    const long wsf = gdn_chunk_bwd_ws_floats(hd);
    float* carry = ws + (long)B * h * nw * wsf;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int c0 = (nc - 1) / nw * nw; c0 >= 0; c0 -= nw) {
        const int c1 = min(nc, c0 + nw);
        LAUNCH(dim3(c1 - c0, B * h), GCB_THREADS, 0, stream, gdn_chunk_bwd_prep_kernel)
        (ws, wsf, nw, states + (long)c0 * hd * hd, q, k, v, ld, beta, g, T, h, hd, nc, c0);
        cudaCheck(cudaGetLastError());
        LAUNCH(dim3((hd + 63) / 64, B * h), GCB_THREADS, 0, stream, gdn_chunk_bwd_state_kernel)
        (ws, wsf, nw, carry, dout, lddo, q, k, ld, g, T, h, hd, nc, c0, c1, scale);
        cudaCheck(cudaGetLastError());
        LAUNCH(dim3(c1 - c0, B * h), GCB_THREADS, 0, stream, gdn_chunk_bwd_grad_kernel)
        (dq, dk, dv, ldd, dbeta, dg, ws, wsf, nw, states + (long)c0 * hd * hd, dout, lddo, q, k, v, ld, beta, g, T, h,
         hd, nc, c0, scale);
        cudaCheck(cudaGetLastError());
    }
}

// dq, dk, dv (rows of stride ldd) and dbeta, dg (B T, h) assigned from dout (rows of stride lddo); states the
// forward's (B, h, chunks, hd, hd) starting states; q, k, v rows of stride ld (head j at columns j hd); scratch:
// gdn_chunk_backward_scratch_bytes(B, T, h, hd) bytes (kernel_sizes.h: windows of gdn_chunk_bwd_window chunks).
inline void gdn_chunk_backward(bf16* dq, bf16* dk, bf16* dv, long ldd, float* dbeta, float* dg, const bf16* dout,
                               long lddo, const float* states, const bf16* q, const bf16* k, const bf16* v, long ld,
                               const float* beta, const float* g, int B, int T, int h, int hd, void* scratch,
                               cudaStream_t stream) {
    const int nw = gdn_chunk_bwd_window(B, T, h);
    gdn_chunk_backward_windows(dq, dk, dv, ldd, dbeta, dg, dout, lddo, states, q, k, v, ld, beta, g, B, T, h, hd,
                               nw ? nw : 1, scratch, stream);
}
