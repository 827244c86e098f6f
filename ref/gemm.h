// ref/gemm.h: the fp32 CPU reference's matrix multiply, the only place the reference multiplies matrices: a
// packed, register-blocked GEMM (gemm) and the two calls the model makes of it, y = x W^T (matmul_forward) and
// its backward (matmul_backward). Templated on the scalar S (float to train, double for gradient checks).
//   gemm            C (M, N) (= or +=) A (M, K) . B (K, N), any strides (a transpose is a stride)
//   matmul_forward  y (N, out) = x (N, in) . W^T, W (out, in) row-major
//   matmul_backward dx (N, in) = dy . W (assigned), dW (out, in) += dy^T . x (accumulated over micro-batches)
// Does not: use BLAS, bf16, or atomics; the result never depends on the thread count (see Determinism below).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ref/parallel.h"

namespace ref {

// C (M, N) (= or +=) A (M, K) . B (K, N) with A(i, k) = A[i * ars + k * acs] and B(k, j) = B[k * brs + j * bcs],
// so transposes are just strides. C is cut into tiles (MC x NC), each computed by one thread: for each block of
// KC k's, the tile's A block is packed into MR-row panels (kept in L2), then each NR-column panel of the B block
// is packed (kept in L1) and swept by an MR x NR microkernel over the A panels, with its tile of C in registers.
// Why GCC vector extensions: without -ffast-math GCC will not vectorise a float reduction, and the plain
// loop version of this microkernel ran at 2 GFLOP/s against 70 for a vector one (one Zen 3 core).
// Vector width: the widest the build targets (64 bytes with AVX-512, else 32: AVX2), the tile fitted to the
// registers it has: AVX2's 16 ymm hold a 6 x 2-vector tile (12 accumulators, 2 B vectors, a broadcast: 8 loads
// for 12 FMAs, the B vectors held in registers by an empty asm; with a 4 x 3 tile GCC folded the B loads into the
// FMAs, 16 loads for 12, and the step's GEMMs ran at 50-67% of the FMA limit instead of 77-93%), AVX-512's 32 zmm
// an 8 x 3-vector one (24 accumulators). The tile decides no element's arithmetic (Determinism, below).
// Determinism: an element of C is the sum over K in blocks of KC (each block summed in order of k by fused
// multiply-adds from 0, then stored to C or added to it); MC and NC only decide which thread computes which
// tile, never the arithmetic, so they adapt to the shape and the thread count while KC is a fixed constant.
// Every element's arithmetic is the same whatever the tile, row or column it falls in (edge tiles compute a
// full, zero-padded tile), so a row of C never depends on the other rows (ref/cpu_decoder.h relies on it).
#if defined(__AVX512F__)
constexpr int GEMM_VBYTES = 64, GEMM_MR = 8, GEMM_NV = 3;
constexpr bool GEMM_PIN_B = false;
#else
constexpr int GEMM_VBYTES = 32, GEMM_MR = 6, GEMM_NV = 2;
#if defined(__AVX__)
constexpr bool GEMM_PIN_B = true;  // a 32-byte vector is a ymm register (a build without AVX has none to name)
#else
constexpr bool GEMM_PIN_B = false;
#endif
#endif
constexpr int GEMM_KC = 256, GEMM_MC = 256, GEMM_NC = 384;
constexpr long kGemmSharedPack = 1L << 22;  // elements: an operand packed once for all tiles is at most 16 MB of floats

template <typename S> struct GemmVec {
    typedef S type __attribute__((vector_size(GEMM_VBYTES)));
    static constexpr int lanes = GEMM_VBYTES / sizeof(S), NR = GEMM_NV * lanes;
};

// C[0:MR, 0:NR] (= or +=) Ap (MR-row panel, kc) . Bp (kc, NR-column panel); C rows of stride ldc.
template <typename S>
inline void gemm_microkernel(long kc, const S* __restrict Ap, const S* __restrict Bp, S* __restrict C, long ldc,
                             bool overwrite) {
    typedef typename GemmVec<S>::type Vs;
    constexpr int Ln = GemmVec<S>::lanes, NR = GemmVec<S>::NR, MR = GEMM_MR, NV = GEMM_NV;
    Vs acc[MR][NV] = {};
    for (long k = 0; k < kc; k++) {
        Vs b[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            std::memcpy(&b[v], Bp + k * NR + v * Ln, sizeof(Vs));
            if constexpr (GEMM_PIN_B) asm("" : "+x"(b[v]));  // in a register, loaded once per k
        }
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            const S ai = Ap[k * MR + i];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[i][v] += ai * b[v];
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            Vs c = acc[i][v];
            if (!overwrite) {
                std::memcpy(&c, C + i * ldc + v * Ln, sizeof(Vs));
                c += acc[i][v];
            }
            std::memcpy(C + i * ldc + v * Ln, &c, sizeof(Vs));
        }
}

// dst[j * ld + i] = src[i * rs + j] for i, j in [0, 8): an 8 x 8 block of floats transposed in registers.
inline void transpose8x8(float* __restrict dst, long ld, const float* __restrict src, long rs) {
    typedef float F __attribute__((vector_size(32)));
    typedef int I __attribute__((vector_size(32)));
    F r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) std::memcpy(&r[i], src + i * rs, sizeof(F));
    for (int i = 0; i < 8; i += 2) {  // interleave pairs of rows
        t[i] = __builtin_shuffle(r[i], r[i + 1], I{0, 8, 1, 9, 4, 12, 5, 13});
        t[i + 1] = __builtin_shuffle(r[i], r[i + 1], I{2, 10, 3, 11, 6, 14, 7, 15});
    }
    for (int i = 0; i < 8; i += 4)  // then pairs of pairs: columns c and c + 4 of four rows
        for (int h = 0; h < 2; h++) {
            u[i + 2 * h] = __builtin_shuffle(t[i + h], t[i + h + 2], I{0, 1, 8, 9, 4, 5, 12, 13});
            u[i + 2 * h + 1] = __builtin_shuffle(t[i + h], t[i + h + 2], I{2, 3, 10, 11, 6, 7, 14, 15});
        }
    for (int c = 0; c < 4; c++) {  // then the 128-bit halves of the two groups of four rows
        const F lo = __builtin_shuffle(u[c], u[c + 4], I{0, 1, 2, 3, 8, 9, 10, 11});
        const F hi = __builtin_shuffle(u[c], u[c + 4], I{4, 5, 6, 7, 12, 13, 14, 15});
        std::memcpy(dst + c * ld, &lo, sizeof(F));
        std::memcpy(dst + (c + 4) * ld, &hi, sizeof(F));
    }
}

// Packs rows [0, m) x k [0, kc) of X(r, k) = X[r * rs + k * ks] into R-row panels: P[r0 * kc + k * R + (r - r0)],
// zero padded to a multiple of R rows.
template <typename S, int R> void pack_panels(S* __restrict P, const S* X, long rs, long ks, long m, long kc) {
    for (long r0 = 0; r0 < m; r0 += R) {
        S* __restrict dst = P + r0 * kc;
        const S* src = X + r0 * rs;
        const long nr = std::min<long>(R, m - r0);
        if (nr == R && rs == 1)  // rows contiguous: R consecutive values per k
            for (long k = 0; k < kc; k++) std::memcpy(dst + k * R, src + k * ks, R * sizeof(S));
        else if (nr == R && ks == 1) {  // k contiguous (a transpose): 8 rows at a time, each read in order of k
            long i = 0;
            if constexpr (sizeof(S) == 4 && R % 8 == 0)
                for (; i < R; i += 8) {
                    long k = 0;
                    for (; k + 8 <= kc; k += 8) transpose8x8(dst + k * R + i, R, src + i * rs + k, rs);
                    for (; k < kc; k++)
                        for (int ii = 0; ii < 8; ii++) dst[k * R + i + ii] = src[(i + ii) * rs + k];
                }
            for (; i < R; i++)
                for (long k = 0; k < kc; k++) dst[k * R + i] = src[i * rs + k];
        } else
            for (long k = 0; k < kc; k++)
                for (int i = 0; i < R; i++) dst[k * R + i] = i < nr ? src[i * rs + k * ks] : S(0);
    }
}

// A thread's packing buffer, kept between calls (a fresh vector per call cost page faults), 64-byte aligned:
// 0 and 1 a tile's A and B panels, 2 and 3 the operands packed once for every tile (the calling thread's).
template <typename S> S* gemm_buffer(int which, size_t n) {
    static thread_local std::vector<S> buf[4];
    std::vector<S>& b = buf[which];
    if (b.size() < n + 64 / sizeof(S)) b.resize(n + 64 / sizeof(S));
    return (S*)(((uintptr_t)b.data() + 63) & ~(uintptr_t)63);
}

template <typename S>
void gemm(long M, long N, long K, const S* A, long ars, long acs, const S* B, long brs, long bcs, S* C, long ldc,
          bool accumulate) {
    constexpr int MR = GEMM_MR, NR = GemmVec<S>::NR, KC = GEMM_KC;
    if (M <= 0 || N <= 0) return;
    // Tiles: up to MC x NC, then more and narrower (N first: a small M is the training step's usual case) until
    // there are enough for every thread, in a multiple of the thread count while they are few.
    const long threads = omp_get_max_threads();
    long mt = (M + GEMM_MC - 1) / GEMM_MC, nt = (N + GEMM_NC - 1) / GEMM_NC;
    const long nt_max = (N + NR - 1) / NR, mt_max = (M + MR - 1) / MR;
    while (mt * nt < 8 * threads && (mt * nt) % threads != 0) {
        if (nt < nt_max && (N + nt) / (nt + 1) >= 2 * NR) nt++;
        else if (mt < mt_max && (M + mt) / (mt + 1) >= 2 * MR) mt++;
        else break;
    }
    const long MC = ((M + mt - 1) / mt + MR - 1) / MR * MR, NC = ((N + nt - 1) / nt + NR - 1) / NR * NR;
    mt = (M + MC - 1) / MC, nt = (N + NC - 1) / NC;
    // An operand that several tiles would pack alike (A in every column of tiles, B in every row), when small, is
    // packed once for all of them, before the tiles: k-block kb's panels at kb * (rows padded) * KC. (Packing is
    // the same copy either way; a panel's rows past a tile's end are computed and dropped, as before.)
    const long Mp = (M + MR - 1) / MR * MR, Np = (N + NR - 1) / NR * NR, nkb = (K + KC - 1) / KC;
    const bool shareA = nt > 1 && Mp * K <= kGemmSharedPack, shareB = mt > 1 && Np * K <= kGemmSharedPack;
    S* SA = shareA ? gemm_buffer<S>(2, (size_t)Mp * K) : nullptr;  // the calling thread's
    S* SB = shareB ? gemm_buffer<S>(3, (size_t)Np * K) : nullptr;
    const long pa = shareA ? nkb * (Mp / MR) : 0, pb = shareB ? nkb * (Np / NR) : 0;
#pragma omp parallel if (M * N * K >= 32 * OMP_MIN_WORK)
    {
#pragma omp for schedule(static)
        for (long t = 0; t < pa + pb; t++) {
            const bool a = t < pa;  // t: A's panels first (k-block by k-block), then B's
            const long u = a ? t : t - pa, per = a ? Mp / MR : Np / NR, kb = u / per, k0 = kb * KC;
            const long kc = std::min<long>(KC, K - k0), r0 = (u % per) * (a ? MR : NR);
            if (a)
                pack_panels<S, MR>(SA + kb * Mp * KC + r0 * kc, A + r0 * ars + k0 * acs, ars, acs,
                                   std::min<long>(MR, M - r0), kc);
            else
                pack_panels<S, NR>(SB + kb * Np * KC + r0 * kc, B + r0 * bcs + k0 * brs, bcs, brs,
                                   std::min<long>(NR, N - r0), kc);
        }
        S* Ap = gemm_buffer<S>(0, (size_t)MC * KC);
        S* Bp = gemm_buffer<S>(1, (size_t)KC * NR);
        S edge[MR * NR];  // an edge tile's full result, before its valid part is stored
#pragma omp for schedule(dynamic, 1)
        for (long tile = 0; tile < mt * nt; tile++) {
            const long i0 = (tile / nt) * MC, j0 = (tile % nt) * NC;
            const long mc = std::min(MC, M - i0), nc = std::min(NC, N - j0);
            if (K == 0 && !accumulate)
                for (long i = 0; i < mc; i++) std::fill_n(C + (i0 + i) * ldc + j0, nc, S(0));
            for (long k0 = 0; k0 < K; k0 += KC) {
                const long kc = std::min<long>(KC, K - k0);
                const bool overwrite = !accumulate && k0 == 0;
                const S* At = shareA ? SA + (k0 / KC) * Mp * KC + i0 * kc : Ap;  // the tile's A panels
                if (!shareA) pack_panels<S, MR>(Ap, A + i0 * ars + k0 * acs, ars, acs, mc, kc);
                for (long jp = 0; jp < nc; jp += NR) {
                    const S* Bt = shareB ? SB + (k0 / KC) * Np * KC + (j0 + jp) * kc : Bp;
                    if (!shareB)
                        pack_panels<S, NR>(Bp, B + (j0 + jp) * bcs + k0 * brs, bcs, brs, std::min<long>(NR, nc - jp),
                                           kc);
                    const long nr = std::min<long>(NR, nc - jp);
                    for (long ip = 0; ip < mc; ip += MR) {
                        const long mr = std::min<long>(MR, mc - ip);
                        S* c = C + (i0 + ip) * ldc + j0 + jp;
                        if (mr == MR && nr == NR) {
                            gemm_microkernel<S>(kc, At + ip * kc, Bt, c, ldc, overwrite);
                            continue;
                        }
                        gemm_microkernel<S>(kc, At + ip * kc, Bt, edge, NR, true);
                        for (long i = 0; i < mr; i++)
                            for (long j = 0; j < nr; j++)
                                c[i * ldc + j] = overwrite ? edge[i * NR + j] : c[i * ldc + j] + edge[i * NR + j];
                    }
                }
            }
        }
    }
}

// y (N, out) = x (N, in) . W^T, W (out, in). x rows have stride ldx, y rows stride ldy.
template <typename S> void matmul_forward(S* y, long ldy, const S* x, long ldx, const S* W, long N, int in, int out) {
    gemm<S>(N, out, in, x, ldx, 1, W, 1, in, y, ldy, false);
}

// dx (N, in) = dy . W (assigned; skipped when dx is null), dW (out, in) += dy^T . x (summed over the N rows).
template <typename S>
void matmul_backward(S* dx, long lddx, S* dW, const S* dy, long lddy, const S* x, long ldx, const S* W, long N, int in,
                     int out) {
    if (dx) gemm<S>(N, in, out, dy, lddy, 1, W, in, 1, dx, lddx, false);
    gemm<S>(out, in, N, dy, 1, lddy, x, ldx, 1, dW, in, true);
}

}  // namespace ref
