// attention.cuh: causal self-attention on tensor cores (FlashAttention-2), forward and backward, with KV groups
// (GQA, MQA) and a sliding window, the layer's shape from its LayerSpec (h heads, kv K/V heads, window W).
//   qkv (B, T, w + 2 kv hd) = [q (h heads) | k (kv heads) | v (kv heads)] after RoPE, hd = w / h; query head hh
//            reads K/V head hh / (h / kv)
//   forward:  out (B, T, w) = softmax_{t - W < j <= t}(scale q_t . k_j) v_j per head (W = 0: j <= t); lse (B, h, T)
//   backward: dqkv (shaped as qkv) assigned, from dout (B, T, w), qkv, out and lse; scratch (B, h, T) fp32 (D below)
// Matches ref::attention_forward (out; the log-sum-exp instead of the probabilities) and ref::attention_backward.
//
// FlashAttention-2 on tensor cores: O(T) memory, online softmax in fp32, P kept in registers; the backward in
// recomputation form, three kernels, no atomics (a rerun repeats bit for bit). Instances for HD 64, 128, 256 and
// a wide one (hd 258..1024); any even hd runs padded to the next multiple of 16 with zero columns that live only
// in shared memory. Key tiles no query of a block sees (after it: causal; before its window) are never loaded,
// nor query tiles outside a key block's viewers (attention_span.h, which the cost model shares); masks run on
// edge tiles only; blocks start longest first across the whole grid. K/V heads are indexed, never copied per
// query head; the dK/dV kernel sums a group's query heads in registers. Backward: D = dout . out; dK, dV per
// key block; dQ per query block: 7 matmuls where an atomic dQ needs 5, the price of determinism. docs/engine.md,
// "Attention", has the long form: the tiles, the fragments, the head dims, windows, groups and why RoPE is not fused.
// Does not: dropout, non-causal masks, an odd head_dim or one above 1024, fused RoPE; one forward block per
// query head (a group's blocks share K/V tiles through L2, not shared memory).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "attention_tiles.cuh"
#include "cuda_common.cuh"
#include "layer_spec.h"
#include "vec.cuh"

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::attention_forward. Grid (B h column chunks, query blocks: att_block), block 32 NW; dynamic shared memory
// (BR + 4 BC) ld bf16: Q, then two stages of K and V. Each warp owns RW = 16 MW query rows: MW m16 tiles that
// share every K and V fragment loaded from shared memory (MW 2 halves the shared-memory reads per mma).
template <class C>
static __global__ void __launch_bounds__(32 * C::NW, 1)
    attention_forward_kernel(bf16* out, float* lse, const bf16* qkv, AttShape s, float scale_log2) {
    constexpr int BR = C::BR, BC = C::BC, NT = 32 * C::NW, NO = C::HD / 8, MW = C::MW, RW = 16 * MW;
    static_assert(BR == RW * C::NW && BC % 16 == 0 && C::HD % 16 == 0, "warps own RW rows; tiles are 16-aligned");
    DYNAMIC_SHARED(bf16, smem);
    const int T = s.T, ld = s.ld;
    bf16* sQ = smem;             // (BR, ld)
    bf16* sKV = smem + BR * ld;  // stage st: K (BC, ld) at sKV + 2 st BC ld, V right after it
    const AttBlock blk = att_block(blockIdx.x, blockIdx.y, s, C::HD, s.h);
    const int nqb = (T + BR - 1) / BR, qb = nqb - 1 - blk.rank;  // the longest rows first
    const int b = blk.b, hh = blk.hh, c0 = blk.c0, q0 = qb * BR;
    const long stride = s.stride;
    const bf16* q_g = qkv + (long)b * T * stride + hh * s.hd;
    const bf16* k_g = qkv + (long)b * T * stride + s.w + hh / (s.h / s.kv) * s.hd;  // the group's K/V head
    const bf16* v_g = k_g + s.kv * s.hd;
    const AttSpan span = att_key_tiles(q0, BR, T, s.window, BC);  // tiles with a key some query of the block sees
    const int kb0 = span.lo, nkb = span.hi;

    att_zero_pad<NT>(smem, BR + 4 * BC, s);
    att_load_tile<BR, NT>(sQ, q_g, stride, q0, s);
    att_load_tile<BC, NT>(sKV + (kb0 & 1) * 2 * BC * ld, k_g, stride, kb0 * BC, s);
    att_load_tile<BC, NT>(sKV + (kb0 & 1) * 2 * BC * ld + BC * ld, v_g, stride, kb0 * BC, s);
    cp_async_commit();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const int r0 = q0 + RW * warp;  // this warp's rows; this thread's are r0 + 16 mm + g (+ 8)
    float o[MW][NO][4] = {};        // O, unnormalised, columns c0 .. c0 + HD
    float m[MW][2], l[MW][2] = {};  // per row: running max (log2 units) and this thread's share of the sum
    UNROLL for (int mm = 0; mm < MW; mm++) m[mm][0] = m[mm][1] = -INFINITY;
    for (int kb = kb0; kb < nkb; kb++) {
        cp_async_wait<0>();
        __syncthreads();  // tile kb has landed for every thread, and every warp is done with tile kb - 1's stage
        if (kb + 1 < nkb) {
            bf16* next = sKV + ((kb + 1) & 1) * 2 * BC * ld;
            att_load_tile<BC, NT>(next, k_g, stride, (kb + 1) * BC, s);
            att_load_tile<BC, NT>(next + BC * ld, v_g, stride, (kb + 1) * BC, s);
        }
        cp_async_commit();
        const int k0 = kb * BC;
        if (r0 >= T || !att_sees(r0, RW, k0, BC, s.window)) continue;  // rows past the end, or no key of theirs here
        const bf16* sK = sKV + (kb & 1) * 2 * BC * ld;
        const bf16* sV = sK + BC * ld;

        float sc[MW][BC / 8][4] = {};
        att_mma_abt<MW, BC / 8>(sc, sQ + RW * warp * ld, ld, sK, ld, s.hdp / 16);
        // The tile straddles the diagonal or the end, or (a window) its first key falls out of the last row's.
        const bool edge = k0 + BC > T || !att_sees_all(r0, RW, k0, BC, s.window);
        UNROLL for (int mm = 0; mm < MW; mm++) {
            float mx[2] = {m[mm][0], m[mm][1]};
            UNROLL for (int nt = 0; nt < BC / 8; nt++) UNROLL for (int i = 0; i < 4; i++) {
                const int row = r0 + 16 * mm + g + 8 * (i / 2), key = k0 + 8 * nt + 2 * t4 + i % 2;
                const bool hidden = key >= T || !att_visible_unsigned(row, key, s.window);
                sc[mm][nt][i] = edge && hidden ? -INFINITY : sc[mm][nt][i] * scale_log2;
                mx[i / 2] = fmaxf(mx[i / 2], sc[mm][nt][i]);
            }
            float base[2];
            UNROLL for (int r = 0; r < 2; r++) {  // a row's 4 threads (t4 = 0..3) share its max
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                base[r] = mx[r] == -INFINITY ? 0.0f : mx[r];  // no key yet: exp2(-inf - 0) = 0, not NaN
                const float corr = fast_exp2(m[mm][r] - base[r]);
                m[mm][r] = mx[r];
                l[mm][r] *= corr;
                UNROLL for (int nt = 0; nt < NO; nt++) o[mm][nt][2 * r] *= corr, o[mm][nt][2 * r + 1] *= corr;
            }
            UNROLL for (int nt = 0; nt < BC / 8; nt++) UNROLL for (int i = 0; i < 4; i++) {
                sc[mm][nt][i] = fast_exp2(sc[mm][nt][i] - base[i / 2]);
                l[mm][i / 2] += sc[mm][nt][i];
            }
        }
        UNROLL for (int kc = 0; kc < BC / 16; kc++) {  // O += P V, P from the registers it was computed in
            uint32_t a[MW][4];
            UNROLL for (int mm = 0; mm < MW; mm++) att_c_to_a(a[mm], sc[mm], kc);
            UNROLL for (int nt = 0; nt < NO; nt += 2) if (c0 + 8 * nt < s.hdp) {
                uint32_t bf[4];
                att_ldb_t(bf, sV + c0 + 8 * nt, ld, 16 * kc);
                UNROLL for (int mm = 0; mm < MW; mm++) {
                    att_mma(o[mm][nt], a[mm], bf);
                    att_mma(o[mm][nt + 1], a[mm], bf + 2);
                }
            }
        }
    }
    cp_async_wait<0>();  // the last group is empty; nothing may be in flight at exit
    if (r0 >= T) return;
    UNROLL for (int mm = 0; mm < MW; mm++) UNROLL for (int r = 0; r < 2; r++) {
        l[mm][r] += __shfl_xor_sync(0xffffffffu, l[mm][r], 1);
        l[mm][r] += __shfl_xor_sync(0xffffffffu, l[mm][r], 2);
        const int row = r0 + 16 * mm + g + 8 * r;
        if (row >= T) continue;
        const float inv = 1.0f / l[mm][r];
        bf16* y = out + ((long)b * T + row) * s.w + hh * s.hd;
        UNROLL for (int nt = 0; nt < NO; nt++) {
            const int col = c0 + 8 * nt + 2 * t4;
            if (col < s.hd) att_store2(y + col, o[mm][nt][2 * r] * inv, o[mm][nt][2 * r + 1] * inv);
        }
        if (t4 == 0 && c0 == 0) lse[(long)blk.bh * T + row] = (m[mm][r] + log2f(l[mm][r])) * ATT_LN2;
    }
}

// D_t = dout_t . out_t for every (b, head, t) row into Dsum (B, h, T): the sum_j P_tj dP_tj of the softmax
// gradient, from the bf16 output as FlashAttention-2 does. One warp per row, 4 rows per block.
static __global__ void attention_backward_d_kernel(float* Dsum, const bf16* dout, const bf16* out, int B, int T, int w,
                                                   int h) {
    const long row = (long)blockIdx.x * 4 + threadIdx.x / 32;  // ((b h + hh) T + t)
    if (row >= (long)B * h * T) return;                        // whole warps leave together
    const int lane = threadIdx.x % 32, hd = w / h, t = (int)(row % T), hh = (int)(row / T % h);
    const long off = (row / ((long)T * h) * T + t) * w + hh * hd;
    float sum = 0.0f;
    for (int c = 2 * lane; c < hd; c += 64) {  // bf16 pairs: hd is even
        const __nv_bfloat162 dy = *reinterpret_cast<const __nv_bfloat162*>(dout + off + c);
        const __nv_bfloat162 y = *reinterpret_cast<const __nv_bfloat162*>(out + off + c);
        sum += __low2float(dy) * __low2float(y) + __high2float(dy) * __high2float(y);
    }
    sum = warp_sum(sum);
    if (lane == 0) Dsum[row] = sum;
}

// dQ of ref::attention_backward. Grid (B h column chunks, query blocks: att_block), block 32 NW; dynamic shared memory
// (2 BR + 4 BC) ld bf16: Q, dO, then two stages of K and V; then 2 BR fp32 (lse, D). Each warp owns RW = 16 MW
// query rows, as in the forward: its MW m16 tiles share every K and V fragment.
template <class C>
static __global__ void __launch_bounds__(32 * C::NW, 1)
    attention_backward_dq_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* Dsum,
                                 AttShape s, float scale, float scale_log2) {
    constexpr int BR = C::BR, BC = C::BC, NT = 32 * C::NW, NO = C::HD / 8, MW = C::MW, RW = 16 * MW;
    static_assert(BR == RW * C::NW && BC % 16 == 0 && C::HD % 16 == 0, "warps own RW rows; tiles are 16-aligned");
    DYNAMIC_SHARED(bf16, smem);
    const int T = s.T, ld = s.ld;
    bf16* sQ = smem;                 // (BR, ld)
    bf16* sdO = smem + BR * ld;      // (BR, ld)
    bf16* sKV = smem + 2 * BR * ld;  // stage st: K (BC, ld) at sKV + 2 st BC ld, V right after it
    const AttBlock blk = att_block(blockIdx.x, blockIdx.y, s, C::HD, s.h);
    const int nqb = (T + BR - 1) / BR, qb = nqb - 1 - blk.rank;
    const int b = blk.b, hh = blk.hh, c0 = blk.c0, q0 = qb * BR;
    const long stride = s.stride;
    const bf16* q_g = qkv + (long)b * T * stride + hh * s.hd;
    const bf16* k_g = qkv + (long)b * T * stride + s.w + hh / (s.h / s.kv) * s.hd;  // the group's K/V head
    const bf16* v_g = k_g + s.kv * s.hd;
    const AttSpan span = att_key_tiles(q0, BR, T, s.window, BC);
    const int kb0 = span.lo, nkb = span.hi;

    att_zero_pad<NT>(smem, 2 * BR + 4 * BC, s);
    att_load_tile<BR, NT>(sQ, q_g, stride, q0, s);
    att_load_tile<BR, NT>(sdO, dout + (long)b * T * s.w + hh * s.hd, s.w, q0, s);
    att_load_tile<BC, NT>(sKV + (kb0 & 1) * 2 * BC * ld, k_g, stride, kb0 * BC, s);
    att_load_tile<BC, NT>(sKV + (kb0 & 1) * 2 * BC * ld + BC * ld, v_g, stride, kb0 * BC, s);
    cp_async_commit();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const int r0 = q0 + RW * warp;  // this warp's rows; this thread's are r0 + 16 mm + g (+ 8)
    // Per row of the block: lse in log2 units at sLD[row - q0], D at sLD[BR + row - q0]. In shared memory, not
    // registers: the HD 128 instance is at 255 (read after the loop's first barrier).
    float* sLD = reinterpret_cast<float*>(smem + (2 * BR + 4 * BC) * ld);
    if (t4 == 0) UNROLL for (int mm = 0; mm < MW; mm++) UNROLL for (int r = 0; r < 2; r++) {
            const int row = r0 + 16 * mm + g + 8 * r;
            sLD[row - q0] = row < T ? lse[(long)blk.bh * T + row] * ATT_LOG2E : 0.0f;
            sLD[BR + row - q0] = row < T ? Dsum[(long)blk.bh * T + row] : 0.0f;
        }
    float dq[MW][NO][4] = {};
    for (int kb = kb0; kb < nkb; kb++) {
        cp_async_wait<0>();
        __syncthreads();
        if (kb + 1 < nkb) {
            bf16* next = sKV + ((kb + 1) & 1) * 2 * BC * ld;
            att_load_tile<BC, NT>(next, k_g, stride, (kb + 1) * BC, s);
            att_load_tile<BC, NT>(next + BC * ld, v_g, stride, (kb + 1) * BC, s);
        }
        cp_async_commit();
        const int k0 = kb * BC;
        if (r0 >= T || !att_sees(r0, RW, k0, BC, s.window)) continue;
        const bf16* sK = sKV + (kb & 1) * 2 * BC * ld;
        const bf16* sV = sK + BC * ld;

        float sc[MW][BC / 8][4] = {}, dp[MW][BC / 8][4] = {};
        att_mma_abt<MW, BC / 8>(sc, sQ + RW * warp * ld, ld, sK, ld, s.hdp / 16);   // S = Q K^T
        att_mma_abt<MW, BC / 8>(dp, sdO + RW * warp * ld, ld, sV, ld, s.hdp / 16);  // dP = dO V^T
        UNROLL for (int mm = 0; mm < MW; mm++) UNROLL for (int nt = 0; nt < BC / 8; nt++) {
            UNROLL for (int i = 0; i < 4; i++) {
                const int row = r0 + 16 * mm + g + 8 * (i / 2), key = k0 + 8 * nt + 2 * t4 + i % 2;
                // Rows < T: a key >= T is after the row, so hidden; rows >= T are never stored.
                const bool hidden = !att_visible_unsigned(row, key, s.window);
                const float p = hidden ? 0.0f : fast_exp2(sc[mm][nt][i] * scale_log2 - sLD[row - q0]);
                sc[mm][nt][i] = p * (dp[mm][nt][i] - sLD[BR + row - q0]);  // dS / scale
            }
        }
        UNROLL for (int kc = 0; kc < BC / 16; kc++) {  // dQ += dS K
            uint32_t a[MW][4];
            UNROLL for (int mm = 0; mm < MW; mm++) att_c_to_a(a[mm], sc[mm], kc);
            UNROLL for (int nt = 0; nt < NO; nt += 2) if (c0 + 8 * nt < s.hdp) {
                uint32_t bf[4];
                att_ldb_t(bf, sK + c0 + 8 * nt, ld, 16 * kc);
                UNROLL for (int mm = 0; mm < MW; mm++) {
                    att_mma(dq[mm][nt], a[mm], bf);
                    att_mma(dq[mm][nt + 1], a[mm], bf + 2);
                }
            }
        }
    }
    cp_async_wait<0>();
    UNROLL for (int mm = 0; mm < MW; mm++) UNROLL for (int r = 0; r < 2; r++) {
        const int row = r0 + 16 * mm + g + 8 * r;
        if (row >= T) continue;
        bf16* dy = dqkv + ((long)b * T + row) * stride + hh * s.hd;
        UNROLL for (int nt = 0; nt < NO; nt++) {
            const int col = c0 + 8 * nt + 2 * t4;
            if (col < s.hd) att_store2(dy + col, dq[mm][nt][2 * r] * scale, dq[mm][nt][2 * r + 1] * scale);
        }
    }
}

// dK and dV of ref::attention_backward. Grid (B h column chunks, key blocks: att_block), block 32 NW. Dynamic shared
// memory: K, V (BC, ld) bf16; two stages of Q, dO (BR, ld) bf16; P^T, dS^T (BC, BR + 8) bf16; two stages of lse,
// D (BR) fp32. Warps: KG = BC / RW groups of RW = 16 MW keys (MW m16 tiles sharing every Q and dO fragment); in
// phase A each computes P^T, dS^T for its keys and 1 / QS of the BR queries, in phase B dK, dV for its keys and
// 1 / QS of the HD columns.
template <class C>
static __global__ void __launch_bounds__(32 * C::NW, 1)
    attention_backward_dkv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* Dsum,
                                  AttShape s, float scale, float scale_log2) {
    constexpr int BR = C::BR, BC = C::BC, NT = 32 * C::NW, MW = C::MW, RW = 16 * MW, KG = BC / RW;
    constexpr int QS = C::NW / KG, BRW = BR / QS, HDW = C::HD / QS, NO = HDW / 8, LDP = BR + 8;
    static_assert(BC % RW == 0 && C::NW % KG == 0 && BR % (8 * QS) == 0 && BR % 16 == 0 && HDW % 16 == 0,
                  "tiles split evenly");
    DYNAMIC_SHARED(bf16, smem);
    const int T = s.T, ld = s.ld;
    bf16* sK = smem;                  // (BC, ld)
    bf16* sV = smem + BC * ld;        // (BC, ld)
    bf16* sQdO = smem + 2 * BC * ld;  // stage st: Q (BR, ld) at sQdO + 2 st BR ld, dO right after it
    bf16* sP = sQdO + 4 * BR * ld;    // (BC, LDP): P^T
    bf16* sdS = sP + BC * LDP;        // (BC, LDP): dS^T / scale
    float* sLD = reinterpret_cast<float*>(sdS + BC * LDP);  // stage st: lse at sLD + 2 st BR, D right after it
    const AttBlock blk = att_block(blockIdx.x, blockIdx.y, s, C::HD, s.kv);  // blk.hh: the K/V head
    const int k0 = blk.rank * BC, b = blk.b, c0 = blk.c0, group = s.h / s.kv;
    const AttSpan span = att_query_tiles(k0, BC, T, s.window, BR);  // query blocks with a query that sees a key here
    const int qb0 = span.lo, nq = span.hi - span.lo, steps = group * nq;  // every query head of the group in turn
    const long stride = s.stride;
    const bf16* k_g = qkv + (long)b * T * stride + s.w + blk.hh * s.hd;
    // Step i: query head hq = the group's (i / nq)-th, query block qb0 + i % nq. Its Q, dO, lse and D into stage st.
    auto load_step = [&](int i, int st) {
        const int hq = blk.hh * group + i / nq, q0 = (qb0 + i % nq) * BR;
        bf16* stage = sQdO + st * 2 * BR * ld;
        att_load_tile<BR, NT>(stage, qkv + (long)b * T * stride + hq * s.hd, stride, q0, s);
        att_load_tile<BR, NT>(stage + BR * ld, dout + (long)b * T * s.w + hq * s.hd, s.w, q0, s);
        att_load_rows<BR, NT>(sLD + st * 2 * BR, lse + ((long)b * s.h + hq) * T, q0, T);
        att_load_rows<BR, NT>(sLD + st * 2 * BR + BR, Dsum + ((long)b * s.h + hq) * T, q0, T);
    };

    att_zero_pad<NT>(smem, 2 * BC + 4 * BR, s);
    att_load_tile<BC, NT>(sK, k_g, stride, k0, s);
    att_load_tile<BC, NT>(sV, k_g + s.kv * s.hd, stride, k0, s);
    load_step(0, 0);
    cp_async_commit();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    const int kg = warp % KG, part = warp / KG;  // key group; query slice (phase A) and column slice (phase B)
    const int kr = RW * kg, kk = k0 + kr;        // this warp's first key, within the block and absolute
    const int cw = c0 + part * HDW;              // this warp's first dK, dV column (phase B)
    float dk[MW][NO][4] = {}, dv[MW][NO][4] = {};
    // dK and dV sum over the group's query heads here, in registers, in a fixed order: no atomics, and K and V
    // are read once per group.
    for (int i = 0; i < steps; i++) {
        const int st = i & 1, q0 = (qb0 + i % nq) * BR;
        cp_async_wait<0>();
        __syncthreads();  // stage st has landed; every warp is done with the other stage and with sP, sdS
        if (i + 1 < steps) load_step(i + 1, st ^ 1);
        cp_async_commit();
        const bf16* sQ = sQdO + st * 2 * BR * ld;
        const bf16* sdO = sQ + BR * ld;
        const float* sL = sLD + st * 2 * BR;
        const float* sD = sL + BR;

        // Phase A: P^T and dS^T for keys kk .. kk + RW - 1 and queries qq .. qq + BRW - 1.
        const int ql = part * BRW, qq = q0 + ql;  // ql: the slice's first query within the block
        float pt[MW][BRW / 8][4] = {}, dpt[MW][BRW / 8][4] = {};
        const bool any = kk < T && att_sees(qq, BRW, kk, RW, s.window);  // else P^T = dS^T = 0
        if (any) {
            att_mma_abt<MW, BRW / 8>(pt, sK + kr * ld, ld, sQ + ql * ld, ld, s.hdp / 16);    // S^T = K Q^T
            att_mma_abt<MW, BRW / 8>(dpt, sV + kr * ld, ld, sdO + ql * ld, ld, s.hdp / 16);  // dP^T = V dO^T
        }
        UNROLL for (int mm = 0; mm < MW; mm++) UNROLL for (int nt = 0; nt < BRW / 8; nt++) {
            UNROLL for (int i = 0; i < 4; i += 2) {  // rows g (i = 0) and g + 8 (i = 2) of m tile mm
                const int key = kk + 16 * mm + g + 4 * i;
                float p[2], ds[2];
                UNROLL for (int e = 0; e < 2; e++) {
                    const int q = ql + 8 * nt + 2 * t4 + e;
                    const bool masked = !any || q0 + q >= T || !att_visible_unsigned(q0 + q, key, s.window);
                    p[e] = masked ? 0.0f : fast_exp2(pt[mm][nt][i + e] * scale_log2 - sL[q] * ATT_LOG2E);
                    ds[e] = p[e] * (dpt[mm][nt][i + e] - sD[q]);
                }
                const int at = (kr + 16 * mm + g + 4 * i) * LDP + ql + 8 * nt + 2 * t4;
                att_store2(sP + at, p[0], p[1]);
                att_store2(sdS + at, ds[0], ds[1]);
            }
        }
        __syncthreads();  // P^T, dS^T complete

        // Phase B: dV += P^T dO and dK += dS^T Q for keys kk .. kk + RW - 1, columns cw .. cw + HDW - 1.
        UNROLL for (int kc = 0; kc < BR / 16; kc++) {
            if (q0 + 16 * kc >= T) break;
            if (!att_sees(q0 + 16 * kc, 16, kk, RW, s.window))
                continue;  // none of these queries sees these keys: P = 0
            uint32_t ap[MW][4], ads[MW][4];
            UNROLL for (int mm = 0; mm < MW; mm++) {
                att_lda(ap[mm], sP + (kr + 16 * mm) * LDP, LDP, 16 * kc);
                att_lda(ads[mm], sdS + (kr + 16 * mm) * LDP, LDP, 16 * kc);
            }
            UNROLL for (int nt = 0; nt < NO; nt += 2) if (cw + 8 * nt < s.hdp) {
                uint32_t bf[4];
                att_ldb_t(bf, sdO + cw + 8 * nt, ld, 16 * kc);
                UNROLL for (int mm = 0; mm < MW; mm++) {
                    att_mma(dv[mm][nt], ap[mm], bf);
                    att_mma(dv[mm][nt + 1], ap[mm], bf + 2);
                }
                att_ldb_t(bf, sQ + cw + 8 * nt, ld, 16 * kc);
                UNROLL for (int mm = 0; mm < MW; mm++) {
                    att_mma(dk[mm][nt], ads[mm], bf);
                    att_mma(dk[mm][nt + 1], ads[mm], bf + 2);
                }
            }
        }
    }
    cp_async_wait<0>();
    UNROLL for (int mm = 0; mm < MW; mm++) UNROLL for (int r = 0; r < 2; r++) {
        const int key = kk + 16 * mm + g + 8 * r;
        if (key >= T) continue;
        bf16* gk = dqkv + ((long)b * T + key) * stride + s.w + blk.hh * s.hd;
        UNROLL for (int nt = 0; nt < NO; nt++) {
            const int col = cw + 8 * nt + 2 * t4;
            if (col < s.hd) {
                att_store2(gk + col, dk[mm][nt][2 * r] * scale, dk[mm][nt][2 * r + 1] * scale);
                att_store2(gk + s.kv * s.hd + col, dv[mm][nt][2 * r], dv[mm][nt][2 * r + 1]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// The instances (AttForward64 .. AttDkvWide) are attention_span.h's, where the cost model reads them too.

// Dynamic shared memory of each kernel for a row stride ld (hdp + 8). At the largest hd of each instance:
//   forward  64: 54 KiB   128: 68 KiB   256: 99 KiB    wide: 149 KiB at hd 776, 194 KiB at 1024
//   dQ       64: 55 KiB   128: 103 KiB  256: 133 KiB   wide: 149 KiB at hd 776, 194 KiB at 1024
//   dK, dV   64: 73 KiB   128: 121 KiB  256: 143 KiB   wide: 150 KiB at hd 776, 195 KiB at 1024
template <class C> size_t attention_forward_smem(int ld) { return (size_t)(C::BR + 4 * C::BC) * ld * sizeof(bf16); }
template <class C> size_t attention_dq_smem(int ld) {
    return (size_t)(2 * C::BR + 4 * C::BC) * ld * sizeof(bf16) + 2 * C::BR * sizeof(float);
}
template <class C> size_t attention_dkv_smem(int ld) {
    return (size_t)((2 * C::BC + 4 * C::BR) * ld + 2 * C::BC * (C::BR + 8)) * sizeof(bf16) + 4 * C::BR * sizeof(float);
}

// Validates the shape and picks the copy width. Fails loudly: these are configuration errors, not data.
inline AttShape attention_shape(int B, int T, const LayerSpec& ls, const void* a, const void* b) {
    const int w = ls.width, h = ls.heads, kv = ls.kv(), hd = h > 0 ? w / h : 0;
    if (h <= 0 || w % h != 0 || hd % 2 != 0 || hd < 2 || hd > ATT_MAX_HEAD_DIM) {
        fprintf(stderr, "attention: w=%d h=%d gives head_dim %d; the kernel needs an even head_dim in 2..%d\n", w, h,
                hd, ATT_MAX_HEAD_DIM);
        exit(EXIT_FAILURE);
    }
    if (kv <= 0 || h % kv != 0 || ls.window < 0) {
        fprintf(stderr, "attention: h=%d kv=%d window=%d: the kernel needs kv dividing h and a window >= 0\n", h, kv,
                ls.window);
        exit(EXIT_FAILURE);
    }
    const uintptr_t align = (uintptr_t)a | (uintptr_t)b;
    if (align % 4) {
        fprintf(stderr, "attention: qkv / dout must be 4-byte aligned (cudaMalloc gives 256)\n");
        exit(EXIT_FAILURE);
    }
    int vec = 8;
    while (vec > 2 && (hd % vec || align % (2 * vec))) vec /= 2;
    const int hdp = (hd + 15) / 16 * 16;
    return AttShape{B, T, w, h, hd, kv, ls.window > 0 ? ls.window : ATT_NO_WINDOW, ls.qkv_rows(), hdp, hdp + 8, vec};
}

// What running hd > 256 on the wide instance costs, in tensor-core work relative to the same FLOPs at a
// specialised instance: the forward recomputes S (hdp wide) in each of the n = ceil(hdp / 256) column chunks,
// (n S + PV) / (S + PV) = (n + 1) / 2; the dQ and dK/dV kernels recompute S and dP: (2 n + 1) / 3 and
// (2 n + 2) / 4. hd 776 (n 4): 2.5x forward, 3x dQ, 2.5x dK/dV, before the smaller tiles' own overhead.
inline double attention_wide_cost(int hd) {
    const int n = ((hd + 15) / 16 * 16 + 255) / 256;
    return hd <= 256 ? 1.0 : (n + 1) / 2.0;
}

// Above 48 KiB a kernel must opt in to more dynamic shared memory: up to 227 KiB on H100 / H200, 163 KiB on
// A100, where head dims above 848 (the wide instance keeps whole rows) do not fit.
template <class K> void attention_smem_optin(K* kernel, size_t bytes, int hd) {
    if (bytes <= 48 * 1024) return;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess) {
        fprintf(stderr,
                "attention: head_dim %d needs %zu bytes of shared memory per block, more than this GPU "
                "allows (A100: 163 KiB, H100: 227 KiB); use a smaller head_dim\n",
                hd, bytes);
        exit(EXIT_FAILURE);
    }
}

template <class C>
void attention_forward_run(bf16* out, float* lse, const bf16* qkv, const AttShape& s, float scale,
                           cudaStream_t stream) {
    const size_t smem = attention_forward_smem<C>(s.ld);
    attention_smem_optin(attention_forward_kernel<C>, smem, s.hd);
    const dim3 grid = att_grid(s, C::HD, (s.T + C::BR - 1) / C::BR, s.h);
    LAUNCH(grid, 32 * C::NW, smem, stream, attention_forward_kernel<C>)(out, lse, qkv, s, scale * ATT_LOG2E);
    cudaCheck(cudaGetLastError());
}

template <class Q, class KV>
void attention_backward_run(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv, const float* lse,
                            const AttShape& s, float scale, cudaStream_t stream) {
    const size_t smem_q = attention_dq_smem<Q>(s.ld), smem_kv = attention_dkv_smem<KV>(s.ld);
    attention_smem_optin(attention_backward_dq_kernel<Q>, smem_q, s.hd);
    attention_smem_optin(attention_backward_dkv_kernel<KV>, smem_kv, s.hd);
    const dim3 grid_kv = att_grid(s, KV::HD, (s.T + KV::BC - 1) / KV::BC, s.kv);
    LAUNCH(grid_kv, 32 * KV::NW, smem_kv, stream, attention_backward_dkv_kernel<KV>)
    (dqkv, dout, qkv, lse, scratch, s, scale, scale * ATT_LOG2E);
    cudaCheck(cudaGetLastError());
    const dim3 grid_q = att_grid(s, Q::HD, (s.T + Q::BR - 1) / Q::BR, s.h);
    LAUNCH(grid_q, 32 * Q::NW, smem_q, stream, attention_backward_dq_kernel<Q>)
    (dqkv, dout, qkv, lse, scratch, s, scale, scale * ATT_LOG2E);
    cudaCheck(cudaGetLastError());
}

// out (B, T, w), lse (B, h, T) fp32, qkv (B, T, ls.qkv_rows()): h = ls.heads query heads over ls.kv() K/V heads,
// ls.window the sliding window (0: global). scale = 1 / sqrt(hd), or 1 / hd (muP).
inline void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, const LayerSpec& ls, float scale,
                              cudaStream_t stream) {
    const AttShape s = attention_shape(B, T, ls, qkv, qkv);
    if (B == 0 || T == 0) return;
    if (s.hd <= 64) attention_forward_run<AttForward64>(out, lse, qkv, s, scale, stream);
    else if (s.hd <= 128) attention_forward_run<AttForward128>(out, lse, qkv, s, scale, stream);
    else if (s.hd <= 256) attention_forward_run<AttForward256>(out, lse, qkv, s, scale, stream);
    else attention_forward_run<AttForwardWide>(out, lse, qkv, s, scale, stream);
}

// dqkv (B, T, ls.qkv_rows()) assigned; dout (B, T, w); qkv, out and lse from the forward; scratch (B, h, T) fp32.
inline void attention_backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv, const bf16* out,
                               const float* lse, int B, int T, const LayerSpec& ls, float scale, cudaStream_t stream) {
    const AttShape s = attention_shape(B, T, ls, qkv, dout);
    if (B == 0 || T == 0) return;
    const long rows = (long)B * s.h * T;
    LAUNCH((unsigned)((rows + 3) / 4), 128, 0, stream, attention_backward_d_kernel)(scratch, dout, out, B, T, s.w, s.h);
    cudaCheck(cudaGetLastError());
    if (s.hd <= 64) attention_backward_run<AttDq64, AttDkv64>(dqkv, scratch, dout, qkv, lse, s, scale, stream);
    else if (s.hd <= 128) attention_backward_run<AttDq128, AttDkv128>(dqkv, scratch, dout, qkv, lse, s, scale, stream);
    else if (s.hd <= 256) attention_backward_run<AttDq256, AttDkv256>(dqkv, scratch, dout, qkv, lse, s, scale, stream);
    else attention_backward_run<AttDqWide, AttDkvWide>(dqkv, scratch, dout, qkv, lse, s, scale, stream);
}

// Plain multi-head attention over qkv (B, T, 3 w), h heads, global: LayerSpec {w, h}.
inline void attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int w, int h, float scale,
                              cudaStream_t stream) {
    attention_forward(out, lse, qkv, B, T, LayerSpec{w, h}, scale, stream);
}
inline void attention_backward(bf16* dqkv, float* scratch, const bf16* dout, const bf16* qkv, const bf16* out,
                               const float* lse, int B, int T, int w, int h, float scale, cudaStream_t stream) {
    attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, LayerSpec{w, h}, scale, stream);
}
