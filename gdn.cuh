// gdn.cuh: the Gated DeltaNet layer's per-row ops on the GPU, forward and backward, and decoding's one-token state
// update; each matches the ref/gdn.h function it names (docs/model.md, "The Gated DeltaNet layer", defines them).
// h heads of hd = w / h channels, N = B T rows, t a row's position in its own sequence of T; bf16 storage where the
// engine keeps activations, fp32 math, fp32 for the small per-head values (inverse norms, beta, g) and the state.
//   conv   p (N, 3w) [q | k | v] -> u (N, 3w) = silu(causal depthwise conv, kernel 4, of p), q and k parts then
//          L2-normalised per head (r (N, 2h) fp32: the inverse norms of q's heads, then k's). Fused: one pass.
//   gates  ba (N, 2h) -> beta (N, h) = sigmoid(ba[:, :h]), g (N, h) = -exp(a_log) softplus(ba[:, h:] + dt_bias).
//   norm   o, z (N, w) -> y = wn * o_j / rms(o_j) * silu(z_j) per head j (wn (hd) shared by the heads).
//   state  one token per sequence: S = exp(g) S (I - beta k k^T) + beta v k^T (fp32, (hd, hd) per sequence and
//          head, value rows by key columns), o = S q / sqrt(hd).
// Per-head columns: a thread owns 8 channels; a head's ceil(hd / 8) chunks sit on G = gdn_group(hd) consecutive
// lanes (a power of two, at most 32) so that a head's sum is a shuffle within its group. hd <= 256.
// The backwards recompute what is cheap rather than store it (the conv's pre-activation from p's 4 rows) and
// reduce weight gradients without atomics: each block writes fp32 partial sums of its rows, a finish kernel adds
// the blocks' partials in order, so the same launch gives the same bits.
// Does not: run the chunked delta rule (the forward and backward of a whole sequence: gdn_chunk.cuh,
// gdn_chunk_bwd.cuh), apply the projections around these ops (matmul.cuh), or keep the decoder's conv tail (model.cuh
// convolves the cache's tail rows in front of the new ones).
#pragma once

#include "cuda_common.cuh"
#include "kernel_sizes.h"  // GDN_SLICE_ROWS, GDN_GATE_ROWS, gdn_*_scratch_floats: the backwards' scratch
#include "vec.cuh"

constexpr int GDN_MAX_HEAD_DIM = 256;
constexpr int GDN_STATE_WARPS = 8;                                 // the state update: state rows per block, one a warp
constexpr float GDN_L2_EPS_F = 1e-6f, GDN_SOFTPLUS_MAX_F = 20.0f;  // ref::GDN_L2_EPS, ref::GDN_SOFTPLUS_MAX

// The lanes of one head: the smallest power of two holding ceil(hd / 8) chunks of 8 channels.
__host__ __device__ inline int gdn_group(int hd) {
    int g = 1;
    while (g < (hd + 7) / 8) g *= 2;
    return g;
}
// Threads of a row of nh heads, rounded up to whole warps (the padding lanes compute nothing but shuffle along).
inline int gdn_row_threads(int nh, int hd) { return (nh * gdn_group(hd) + 31) / 32 * 32; }

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// The sum of v over the G lanes of this lane's group (G a power of two dividing 32; every lane of the warp calls).
__device__ inline float gdn_group_sum(float v, int G) {
    for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ inline float gdn_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

// This thread's head (of nh) and chunk: its columns are head * hd + col .. + k - 1 (k = 0: a padding lane).
struct GdnLane {
    int head, col, k;
};
__device__ inline GdnLane gdn_lane(int x, int nh, int hd) {
    const int G = gdn_group(hd), head = x / G, col = 8 * (x % G);
    return {head, col, head < nh ? in_row(hd, col, 8) : 0};
}

// Matches ref::gdn_conv_forward followed by ref::gdn_l2norm_forward on the q and k parts. Threads: x over the 3 h
// heads of [q | k | v] (gdn_row_threads), y over rows.
static __global__ void gdn_conv_forward_kernel(bf16* u, float* r, const bf16* p, const bf16* cw, long N, int T, int h,
                                               int hd) {
    const long n = (long)blockIdx.x * blockDim.y + threadIdx.y;
    if (n >= N) return;  // uniform across a warp: a warp is one row
    const int C = 3 * h * hd, t = (int)(n % T);
    const GdnLane l = gdn_lane(threadIdx.x, 3 * h, hd);
    const int c = l.head * hd + l.col;
    float x[8], wv[32], c8[8] = {};
    if (l.k > 0)
        for (int m = 0; m < 4; m++) load8(wv + 8 * m, cw + (long)c * 4 + 8 * m, in_row(4 * l.k, 8 * m, 8));
    UNROLL
    for (int k = 0; k < 4; k++) {
        if (t - 3 + k < 0 || l.k == 0) continue;
        load8(x, p + (n - 3 + k) * C + c, l.k);
        UNROLL
        for (int e = 0; e < 8; e++) c8[e] += wv[4 * e + k] * x[e];
    }
    float ss = 0.0f;
    UNROLL
    for (int e = 0; e < 8; e++) {
        c8[e] = c8[e] * gdn_sigmoidf(c8[e]);
        ss += c8[e] * c8[e];
    }
    ss = gdn_group_sum(ss, gdn_group(hd));
    if (l.head < 2 * h) {  // q and k: L2-normalised
        const float inv = 1.0f / sqrtf(ss + GDN_L2_EPS_F);
        UNROLL
        for (int e = 0; e < 8; e++) c8[e] *= inv;
        if (l.col == 0) r[n * 2 * h + l.head] = inv;
    }
    if (l.k > 0) store8(u + n * C + c, c8, l.k);
}

// Matches ref::gdn_l2norm_backward on the q and k parts, then ref::gdn_conv_backward: dp assigned, dw's partial sums
// into partial[slice][C][4]. One block (threads as the forward's x) per slice of GDN_SLICE_ROWS rows of one sequence
// (grid (slices, B)); each thread walks its rows in order with the last 4 inputs and the last 4 pre-activation
// gradients in registers: dp_s needs dc_{s..s+3}, so the walk runs 3 rows past the slice (dc = 0 past T).
static __global__ void gdn_conv_backward_kernel(bf16* dp, float* partial, const bf16* du, const bf16* u, const float* r,
                                                const bf16* p, const bf16* cw, int T, int h, int hd) {
    const int C = 3 * h * hd, t0 = blockIdx.x * GDN_SLICE_ROWS, t1 = min(T, t0 + GDN_SLICE_ROWS), G = gdn_group(hd);
    const long base = (long)blockIdx.y * T;  // the sequence's first row
    const GdnLane l = gdn_lane(threadIdx.x, 3 * h, hd);
    const int c = l.head * hd + l.col;
    float wv[32] = {}, pw[4][8] = {}, dcw[4][8] = {}, acc[32] = {}, x[8], y[8];
    if (l.k > 0)
        for (int m = 0; m < 4; m++) load8(wv + 8 * m, cw + (long)c * 4 + 8 * m, in_row(4 * l.k, 8 * m, 8));
    for (int k = 1; k < 4; k++)  // p_{t0-3 .. t0-1}
        if (t0 - 4 + k >= 0 && l.k > 0) load8(pw[k], p + (base + t0 - 4 + k) * C + c, l.k);
    for (int t = t0; t < t1 + 3; t++) {
        UNROLL
        for (int k = 0; k < 3; k++) UNROLL
        for (int e = 0; e < 8; e++) pw[k][e] = pw[k + 1][e], dcw[k][e] = dcw[k + 1][e];
        if (t < T) {  // uniform across the block
            const long n = base + t;
            load8(pw[3], p + n * C + c, l.k), load8(x, du + n * C + c, l.k), load8(y, u + n * C + c, l.k);
            float yd = 0.0f;
            UNROLL
            for (int e = 0; e < 8; e++) yd += y[e] * x[e];
            yd = gdn_group_sum(yd, G);
            if (l.head < 2 * h) {  // dx = r (dy - y (y . dy))
                const float inv = r[n * 2 * h + l.head];
                UNROLL
                for (int e = 0; e < 8; e++) x[e] = inv * (x[e] - y[e] * yd);
            }
            UNROLL
            for (int e = 0; e < 8; e++) {
                float cc = 0.0f;
                UNROLL
                for (int k = 0; k < 4; k++) cc += wv[4 * e + k] * pw[k][e];
                const float s = gdn_sigmoidf(cc);
                dcw[3][e] = x[e] * s * (1.0f + cc * (1.0f - s));
            }
            if (t < t1) UNROLL
            for (int e = 0; e < 8; e++) UNROLL
            for (int k = 0; k < 4; k++) acc[4 * e + k] += dcw[3][e] * pw[k][e];
        } else {
            UNROLL
            for (int e = 0; e < 8; e++) pw[3][e] = 0.0f, dcw[3][e] = 0.0f;
        }
        if (t - 3 >= t0) {  // dp_{t-3} = sum_k w_k dc_{t-k}
            float d[8];
            UNROLL
            for (int e = 0; e < 8; e++) {
                d[e] = 0.0f;
                UNROLL
                for (int k = 0; k < 4; k++) d[e] += wv[4 * e + k] * dcw[3 - k][e];
            }
            if (l.k > 0) store8(dp + (base + t - 3) * C + c, d, l.k);
        }
    }
    if (l.k == 0) return;
    float* out = partial + ((long)blockIdx.y * gridDim.x + blockIdx.x) * C * 4 + (long)c * 4;
    for (int m = 0; m < 4 * l.k; m++) out[m] = acc[m];
}

// dst[i] += the sum over the slices s (in order) of partial[s * n + i], i < n; one thread per i.
static __global__ void gdn_finish_kernel(float* dst, const float* partial, int slices, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.0f;
    for (int k = 0; k < slices; k++) s += partial[(long)k * n + i];
    dst[i] += s;
}

// Matches ref::gdn_gates_forward; one thread per (row, head).
static __global__ void gdn_gates_forward_kernel(float* beta, float* g, const bf16* ba, const bf16* a_log,
                                                const bf16* dt_bias, long N, int h) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * h) return;
    const long n = i / h;
    const int j = (int)(i % h);
    beta[i] = gdn_sigmoidf(__bfloat162float(ba[n * 2 * h + j]));
    const float x = __bfloat162float(ba[n * 2 * h + h + j]) + __bfloat162float(dt_bias[j]);
    g[i] = -expf(__bfloat162float(a_log[j])) * (x > GDN_SOFTPLUS_MAX_F ? x : log1pf(expf(x)));
}

// Matches ref::gdn_gates_backward: dba assigned, and per block (GDN_GATE_ROWS rows of head blockIdx.y) the sums
// of dg g (da_log's) and of dba[:, h + j] (ddt_bias's, unrounded) into partial[block][j][2]. 256 threads.
static __global__ void gdn_gates_backward_kernel(bf16* dba, float* partial, const float* dbeta, const float* dg,
                                                 const bf16* ba, const float* beta, const float* g, const bf16* a_log,
                                                 const bf16* dt_bias, long N, int h) {
    SHARED(float[32], scratch);
    const int j = blockIdx.y;
    const float ea = expf(__bfloat162float(a_log[j])), dtb = __bfloat162float(dt_bias[j]);
    float sa = 0.0f, sd = 0.0f;
    for (int m = threadIdx.x; m < GDN_GATE_ROWS; m += blockDim.x) {
        const long n = (long)blockIdx.x * GDN_GATE_ROWS + m;
        if (n >= N) break;
        const float b = beta[n * h + j], x = __bfloat162float(ba[n * 2 * h + h + j]) + dtb;
        dba[n * 2 * h + j] = __float2bfloat16(dbeta[n * h + j] * b * (1.0f - b));
        const float d = dg[n * h + j] * -ea * (x > GDN_SOFTPLUS_MAX_F ? 1.0f : gdn_sigmoidf(x));
        dba[n * 2 * h + h + j] = __float2bfloat16(d);
        sa += dg[n * h + j] * g[n * h + j];
        sd += d;
    }
    sa = block_reduce<SumOp>(sa, scratch);
    sd = block_reduce<SumOp>(sd, scratch);
    if (threadIdx.x == 0)
        partial[((long)blockIdx.x * h + j) * 2] = sa, partial[((long)blockIdx.x * h + j) * 2 + 1] = sd;
}

// da_log[j] += the blocks' sums of dg g, ddt_bias[j] += those of dba's g half, in block order; one thread per j.
static __global__ void gdn_gates_finish_kernel(float* da_log, float* ddt_bias, const float* partial, int blocks,
                                               int h) {
    const int j = threadIdx.x;
    if (j >= h) return;
    float sa = 0.0f, sd = 0.0f;
    for (int b = 0; b < blocks; b++) sa += partial[((long)b * h + j) * 2], sd += partial[((long)b * h + j) * 2 + 1];
    da_log[j] += sa, ddt_bias[j] += sd;
}

// Matches ref::gdn_gated_norm_forward. Threads: x over the h heads (gdn_row_threads), y over rows.
static __global__ void gdn_norm_forward_kernel(bf16* y, float* r, const bf16* o, const bf16* z, const bf16* wn, long N,
                                               int h, int hd, float eps) {
    const long n = (long)blockIdx.x * blockDim.y + threadIdx.y;
    if (n >= N) return;
    const int w = h * hd;
    const GdnLane l = gdn_lane(threadIdx.x, h, hd);
    const long off = n * w + l.head * hd + l.col;
    float ov[8] = {}, zv[8] = {}, wv[8] = {};
    if (l.k > 0) load8(ov, o + off, l.k), load8(zv, z + off, l.k), load8(wv, wn + l.col, l.k);
    float ss = 0.0f;
    UNROLL
    for (int e = 0; e < 8; e++) ss += ov[e] * ov[e];
    const float inv = 1.0f / sqrtf(gdn_group_sum(ss, gdn_group(hd)) / hd + eps);
    UNROLL
    for (int e = 0; e < 8; e++) ov[e] = wv[e] * (ov[e] * inv) * (zv[e] * gdn_sigmoidf(zv[e]));
    if (l.k > 0) store8(y + off, ov, l.k);
    if (l.k > 0 && l.col == 0) r[n * h + l.head] = inv;
}

// Matches ref::gdn_gated_norm_backward: d_o, dz assigned; dwn's partial sums into partial[block][hd]. One block
// (threads as the forward's x) per GDN_SLICE_ROWS rows, walked in order; the heads' sums are added in head order
// through shared memory (dynamic: blockDim.x x 8 floats).
static __global__ void gdn_norm_backward_kernel(bf16* d_o, bf16* dz, float* partial, const bf16* dy, const bf16* o,
                                                const bf16* z, const float* r, const bf16* wn, long N, int h, int hd) {
    DYNAMIC_SHARED(float, sums);
    const int w = h * hd, G = gdn_group(hd);
    const GdnLane l = gdn_lane(threadIdx.x, h, hd);
    float wv[8] = {}, acc[8] = {}, dv[8], ov[8], zv[8];
    if (l.k > 0) load8(wv, wn + l.col, l.k);
    const long n0 = (long)blockIdx.x * GDN_SLICE_ROWS, n1 = n0 + GDN_SLICE_ROWS < N ? n0 + GDN_SLICE_ROWS : N;
    for (long n = n0; n < n1; n++) {
        const long off = n * w + l.head * hd + l.col;
        load8(dv, dy + off, l.k), load8(ov, o + off, l.k), load8(zv, z + off, l.k);
        const float inv = l.k > 0 ? r[n * h + l.head] : 0.0f;
        float m = 0.0f;
        UNROLL
        for (int e = 0; e < 8; e++) m += dv[e] * wv[e] * zv[e] * gdn_sigmoidf(zv[e]) * (ov[e] * inv);
        m = gdn_group_sum(m, G) / hd;
        UNROLL
        for (int e = 0; e < 8; e++) {
            const float s = gdn_sigmoidf(zv[e]), on = ov[e] * inv;
            acc[e] += dv[e] * on * (zv[e] * s);
            ov[e] = inv * (dv[e] * wv[e] * zv[e] * s - on * m);
            zv[e] = dv[e] * wv[e] * on * s * (1.0f + zv[e] * (1.0f - s));
        }
        if (l.k > 0) store8(d_o + off, ov, l.k), store8(dz + off, zv, l.k);
    }
    UNROLL
    for (int e = 0; e < 8; e++) sums[threadIdx.x * 8 + e] = acc[e];
    __syncthreads();
    if ((int)threadIdx.x >= G) return;
    const GdnLane l0 = gdn_lane(threadIdx.x, h, hd);  // head 0's lane of this chunk
    for (int e = 0; e < l0.k; e++) {
        float s = 0.0f;
        for (int j = 0; j < h; j++) s += sums[(j * G + threadIdx.x) * 8 + e];
        partial[(long)blockIdx.x * hd + l0.col + e] = s;
    }
}

// The recurrent form for one token: matches ref::gdn_delta_recurrent_forward's step. Warp per state row r (a value
// channel) of one (sequence b, head j); grid (rows / GDN_STATE_WARPS, h, B). Lane l owns the row's columns l, l + 32,
// ...: s = exp(g) s; s += beta (v_r - s . k) k; o_r = s . q / sqrt(hd).
static __global__ void gdn_state_step_kernel(float* S, bf16* o, long ldo, const bf16* qkv, long ld, const float* beta,
                                             const float* g, long ldg, int h, int hd) {
    const int lane = threadIdx.x % 32, row = blockIdx.x * GDN_STATE_WARPS + threadIdx.x / 32, j = blockIdx.y;
    const long b = blockIdx.z;
    if (row >= hd) return;  // uniform across a warp
    const int w = h * hd;
    const bf16* q = qkv + b * ld + j * hd;
    float* s = S + ((b * h + j) * hd + row) * (long)hd;
    const float a = expf(g[b * ldg + j]), bt = beta[b * ldg + j], vr = __bfloat162float(q[2 * w + row]);
    float sv[GDN_MAX_HEAD_DIM / 32], kv[GDN_MAX_HEAD_DIM / 32], qv[GDN_MAX_HEAD_DIM / 32];
    float sk = 0.0f;
    UNROLL
    for (int m = 0; m < GDN_MAX_HEAD_DIM / 32; m++) {
        const int c = lane + 32 * m;
        const bool in = c < hd;
        sv[m] = in ? a * s[c] : 0.0f;
        kv[m] = in ? __bfloat162float(q[w + c]) : 0.0f;
        qv[m] = in ? __bfloat162float(q[c]) : 0.0f;
        sk += sv[m] * kv[m];
    }
    const float d = bt * (vr - warp_sum(sk));
    float sq = 0.0f;
    UNROLL
    for (int m = 0; m < GDN_MAX_HEAD_DIM / 32; m++) {
        sv[m] += d * kv[m];
        sq += sv[m] * qv[m];
        if (lane + 32 * m < hd) s[lane + 32 * m] = sv[m];
    }
    sq = warp_sum(sq);
    if (lane == 0) o[b * ldo + j * hd + row] = __float2bfloat16(sq / sqrtf((float)hd));
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// The per-head kernels' one shape rule. Fails loudly: a configuration error, not data.
inline void gdn_check_shape(const char* op, int h, int hd) {
    if (h <= 0 || hd < 1 || hd > GDN_MAX_HEAD_DIM || 3 * h * gdn_group(hd) > 1024) {
        fprintf(stderr, "%s: h=%d head_dim=%d: the GDN kernels need head_dim in 1..%d and 3 h x %d lanes <= 1024\n", op,
                h, hd, GDN_MAX_HEAD_DIM, gdn_group(hd));
        exit(EXIT_FAILURE);
    }
}
inline dim3 gdn_row_block(int nh, int hd) {
    const int x = gdn_row_threads(nh, hd);
    return dim3(x, x >= 256 ? 1 : 256 / x);
}

// u (B T, 3w) = silu(conv(p)) with q and k L2-normalised per head; r (B T, 2h) their inverse norms; cw (3w, 4).
inline void gdn_conv_forward(bf16* u, float* r, const bf16* p, const bf16* cw, int B, int T, int h, int hd,
                             cudaStream_t stream) {
    gdn_check_shape("gdn_conv_forward", h, hd);
    const long N = (long)B * T;
    const dim3 block = gdn_row_block(3 * h, hd);
    LAUNCH((unsigned)((N + block.y - 1) / block.y), block, 0, stream, gdn_conv_forward_kernel)
    (u, r, p, cw, N, T, h, hd);
    cudaCheck(cudaGetLastError());
}

// dp (B T, 3w) assigned from du (the gradient of u); dcw (3w, 4) fp32 +=; u, r the forward's outputs, p its
// input; scratch: gdn_conv_scratch_floats(B, T, 3w) floats. dp must not alias du, u or p.
inline void gdn_conv_backward(bf16* dp, float* dcw, const bf16* du, const bf16* u, const float* r, const bf16* p,
                              const bf16* cw, int B, int T, int h, int hd, float* scratch, cudaStream_t stream) {
    gdn_check_shape("gdn_conv_backward", h, hd);
    const int slices = (T + GDN_SLICE_ROWS - 1) / GDN_SLICE_ROWS, C = 3 * h * hd;
    LAUNCH(dim3(slices, B), gdn_row_threads(3 * h, hd), 0, stream, gdn_conv_backward_kernel)
    (dp, scratch, du, u, r, p, cw, T, h, hd);
    cudaCheck(cudaGetLastError());
    LAUNCH((4 * C + 255) / 256, 256, 0, stream, gdn_finish_kernel)(dcw, scratch, slices * B, 4 * C);
    cudaCheck(cudaGetLastError());
}

// beta, g (N, h) fp32 from ba (N, 2h); a_log, dt_bias (h).
inline void gdn_gates_forward(float* beta, float* g, const bf16* ba, const bf16* a_log, const bf16* dt_bias, long N,
                              int h, cudaStream_t stream) {
    LAUNCH((unsigned)((N * h + 255) / 256), 256, 0, stream, gdn_gates_forward_kernel)
    (beta, g, ba, a_log, dt_bias, N, h);
    cudaCheck(cudaGetLastError());
}

// dba (N, 2h) assigned; da_log, ddt_bias (h) fp32 +=; scratch: gdn_gates_scratch_floats(N, h) floats.
inline void gdn_gates_backward(bf16* dba, float* da_log, float* ddt_bias, const float* dbeta, const float* dg,
                               const bf16* ba, const float* beta, const float* g, const bf16* a_log,
                               const bf16* dt_bias, long N, int h, float* scratch, cudaStream_t stream) {
    const int blocks = (int)((N + GDN_GATE_ROWS - 1) / GDN_GATE_ROWS);
    LAUNCH(dim3(blocks, h), 256, 0, stream, gdn_gates_backward_kernel)
    (dba, scratch, dbeta, dg, ba, beta, g, a_log, dt_bias, N, h);
    cudaCheck(cudaGetLastError());
    LAUNCH(1, (h + 31) / 32 * 32, 0, stream, gdn_gates_finish_kernel)(da_log, ddt_bias, scratch, blocks, h);
    cudaCheck(cudaGetLastError());
}

// y (N, w) and r (N, h) fp32 from o, z (N, w) and wn (hd).
inline void gdn_norm_forward(bf16* y, float* r, const bf16* o, const bf16* z, const bf16* wn, long N, int h, int hd,
                             float eps, cudaStream_t stream) {
    gdn_check_shape("gdn_norm_forward", h, hd);
    const dim3 block = gdn_row_block(h, hd);
    LAUNCH((unsigned)((N + block.y - 1) / block.y), block, 0, stream, gdn_norm_forward_kernel)
    (y, r, o, z, wn, N, h, hd, eps);
    cudaCheck(cudaGetLastError());
}

// d_o, dz (N, w) assigned from dy; dwn (hd) fp32 +=; scratch: gdn_norm_scratch_floats(N, hd) floats.
inline void gdn_norm_backward(bf16* d_o, bf16* dz, float* dwn, const bf16* dy, const bf16* o, const bf16* z,
                              const float* r, const bf16* wn, long N, int h, int hd, float* scratch,
                              cudaStream_t stream) {
    gdn_check_shape("gdn_norm_backward", h, hd);
    const int blocks = (int)((N + GDN_SLICE_ROWS - 1) / GDN_SLICE_ROWS), x = gdn_row_threads(h, hd);
    LAUNCH(blocks, x, (size_t)x * 8 * sizeof(float), stream, gdn_norm_backward_kernel)
    (d_o, dz, scratch, dy, o, z, r, wn, N, h, hd);
    cudaCheck(cudaGetLastError());
    LAUNCH((hd + 255) / 256, 256, 0, stream, gdn_finish_kernel)(dwn, scratch, blocks, hd);
    cudaCheck(cudaGetLastError());
}

// One token of B sequences: S (B, h, hd, hd) fp32 updated in place; o (sequence b's row at o + b ldo, w columns)
// from qkv (row at qkv + b ld: [q | k | v], q and k normalised), beta and g (at b ldg, h each).
inline void gdn_state_step(float* S, bf16* o, long ldo, const bf16* qkv, long ld, const float* beta, const float* g,
                           long ldg, int B, int h, int hd, cudaStream_t stream) {
    gdn_check_shape("gdn_state_step", h, hd);
    const dim3 grid((hd + GDN_STATE_WARPS - 1) / GDN_STATE_WARPS, h, B);
    LAUNCH(grid, 32 * GDN_STATE_WARPS, 0, stream, gdn_state_step_kernel)(S, o, ldo, qkv, ld, beta, g, ldg, h, hd);
    cudaCheck(cudaGetLastError());
}
