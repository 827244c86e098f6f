// ref/gemm.h: the fp32 CPU reference's matrix multiply, the only place the reference multiplies matrices: a
// packed, register-blocked GEMM (gemm) and the two calls the model makes of it, y = x W^T (matmul_forward) and
// its backward (matmul_backward). Templated on the scalar S (float to train, double for gradient checks).
//   gemm            C (M, N) (= or +=) A (M, K) . B (K, N), any strides (a transpose is a stride)
//   matmul_forward  y (N, out) = x (N, in) . W^T, W (out, in) row-major
//   matmul_backward dx (N, in) = dy . W (assigned), dW (out, in) += dy^T . x (accumulated over micro-batches)
// Does not: use BLAS, bf16, or atomics; the result never depends on the thread count (see Determinism below).
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "ref/parallel.h"

namespace ref {

// C (M, N) (= or +=) A (M, K) . B (K, N) with A(i, k) = A[i * ars + k * acs] and B(k, j) = B[k * brs + j * bcs],
// so transposes are just strides. Blocks of B (KC x NC) are packed into NR-column panels (zero padded at the
// edges), blocks of A (MC x KC) into MR-row panels unless A's rows are already contiguous in k, and an
// MR x NR microkernel keeps its tile of C in registers.
// Why GCC vector extensions: without -ffast-math GCC will not vectorise a float reduction, and the plain
// loop version of this microkernel ran at 2 GFLOP/s against 70 for this one (one Zen 3 core).
// Determinism: an element of C is the sum over K in blocks of KC (each block summed in order of k, then added
// to C); MC and NC only decide which thread computes which tile, never the arithmetic, so they may adapt to
// the thread count while KC is a fixed constant.
constexpr int GEMM_MR = 6, GEMM_KC = 256, GEMM_NC = 256;

// C[0:mr, 0:nr] (= or +=) A (mr rows, kc) . Bp (kc, NR panel); NR = two registers of S. A is read in place,
// A(i, k) = A[i * ars + k * acs] (rows past mr re-read row mr - 1; their results are dropped).
template <typename S>
inline void gemm_microkernel(int kc, const S* __restrict A, long ars, long acs, const S* __restrict Bp, S* __restrict C,
                             long ldc, int mr, int nr, bool overwrite) {
    typedef typename Simd<S>::type Vs;
    constexpr int Ln = Simd<S>::lanes, NR = 2 * Ln, MR = GEMM_MR;
    const S* a[MR];
    for (int i = 0; i < MR; i++) a[i] = A + std::min(i, mr - 1) * ars;
    Vs acc[MR][2] = {};
    for (int k = 0; k < kc; k++) {
        Vs b0, b1;
        std::memcpy(&b0, Bp + k * NR, sizeof(Vs));
        std::memcpy(&b1, Bp + k * NR + Ln, sizeof(Vs));
        for (int i = 0; i < MR; i++) {
            const S ai = a[i][k * acs];
            acc[i][0] += ai * b0;
            acc[i][1] += ai * b1;
        }
    }
    if (overwrite)
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++) C[i * ldc + j] = acc[i][j / Ln][j % Ln];
    else
        for (int i = 0; i < mr; i++)
            for (int j = 0; j < nr; j++) C[i * ldc + j] += acc[i][j / Ln][j % Ln];
}

// Packs rows [0, m) x k [0, kc) of X(r, k) = X[r * rs + k * ks] into R-row panels: P[r0 * kc + k * R + (r - r0)],
// zero padded to a multiple of R rows.
template <typename S, int R> void pack_panels(S* P, const S* X, long rs, long ks, long m, long kc) {
    for (long r0 = 0; r0 < m; r0 += R) {
        S* dst = P + r0 * kc;
        const S* src = X + r0 * rs;
        const long nr = std::min<long>(R, m - r0);
        if (nr == R && rs == 1)  // rows contiguous: R consecutive values per k
            for (long k = 0; k < kc; k++)
                for (int i = 0; i < R; i++) dst[k * R + i] = src[k * ks + i];
        else if (nr == R)
            for (long k = 0; k < kc; k++)
                for (int i = 0; i < R; i++) dst[k * R + i] = src[i * rs + k * ks];
        else
            for (long k = 0; k < kc; k++)
                for (int i = 0; i < R; i++) dst[k * R + i] = i < nr ? src[i * rs + k * ks] : S(0);
    }
}

template <typename S>
void gemm(long M, long N, long K, const S* A, long ars, long acs, const S* B, long brs, long bcs, S* C, long ldc,
          bool accumulate) {
    constexpr int MR = GEMM_MR, NR = 2 * Simd<S>::lanes, KC = GEMM_KC, NC = GEMM_NC;
    // Tile rows MC: as many as keep the A block (MC x KC) within ~256 KB of L2 (fewer tiles repack B less),
    // and when N gives too few column tiles, an M split into a multiple of the thread count so no thread idles.
    const long nt = (N + NC - 1) / NC, threads = omp_get_max_threads();
    const long mc_max = std::max<long>(4, 262144 / (std::max<long>(1, std::min<long>(K, KC)) * sizeof(S)) / MR) * MR;
    long MC = std::min(mc_max, (M + MR - 1) / MR * MR);
    if (nt < 4 * threads) {
        long parts = threads;
        while ((M + parts - 1) / parts > mc_max) parts += threads;
        MC = std::max<long>(MR, ((M + parts - 1) / parts + MR - 1) / MR * MR);
    }
    const long mt = (M + MC - 1) / MC;
#pragma omp parallel if (M * N * K >= 32 * OMP_MIN_WORK)
    {
        // this thread's packed blocks, kept between calls (a fresh 450 KB vector per call cost page faults)
        static thread_local std::vector<S> Ap, Bp;
        Ap.resize(std::max<size_t>(Ap.size(), (size_t)MC * KC));
        Bp.resize(std::max<size_t>(Bp.size(), (size_t)KC * NC));
#pragma omp for schedule(dynamic, 1)
        for (long tile = 0; tile < mt * nt; tile++) {
            const long i0 = (tile / nt) * MC, j0 = (tile % nt) * NC;
            const long mc = std::min(MC, M - i0), nc = std::min<long>(NC, N - j0);
            if (K == 0 && !accumulate)
                for (long i = 0; i < mc; i++) std::fill_n(C + (i0 + i) * ldc + j0, nc, S(0));
            for (long k0 = 0; k0 < K; k0 += KC) {
                const long kc = std::min<long>(KC, K - k0);
                // A rows contiguous in k are read in place (6 streams; packing them cost more than it saved),
                // anything else (the transposed dy of a weight gradient) is packed into MR-row panels
                const bool pack_a = acs != 1;
                if (pack_a) pack_panels<S, MR>(Ap.data(), A + i0 * ars + k0 * acs, ars, acs, mc, kc);
                pack_panels<S, NR>(Bp.data(), B + j0 * bcs + k0 * brs, bcs, brs, nc, kc);
                for (long jp = 0; jp < nc; jp += NR)  // B panel stays in L1 while the A block streams from L2
                    for (long ip = 0; ip < mc; ip += MR)
                        gemm_microkernel<S>((int)kc, pack_a ? Ap.data() + ip * kc : A + (i0 + ip) * ars + k0,
                                            pack_a ? 1 : ars, pack_a ? MR : 1, Bp.data() + jp * kc,
                                            C + (i0 + ip) * ldc + j0 + jp, ldc, (int)std::min<long>(MR, mc - ip),
                                            (int)std::min<long>(NR, nc - jp), !accumulate && k0 == 0);
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
