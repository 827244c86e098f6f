// attention_span.h: which keys a query sees (the visibility rule, defined here once), which tiles the flash
// attention kernels (attention.cuh) visit under it, and the tile shapes of their instances: written once for the
// CPU reference (ref/ops.h), both decoders (ref/cpu_decoder.h, inspect/cuda_decoder.cuh), analyze (inspect/analysis.h),
// the kernels, the test that counts their tensor-core instructions (test/test_attention.cpp) and the cost model
// (run/cost_model.h), which includes no CUDA. hf/modeling_prism.py's visible() is the rule in PyTorch.
//   att_visible   key j is visible to query i iff i - W < j <= i (W = 0: j <= i, plain causal): the rule
//   att_first_key the rule as a range: query i sees keys [att_first_key(i, W), i]
//   att_visible_unsigned  the kernels' one-compare form (W = ATT_NO_WINDOW for global)
//   att_sees      some query of a row range sees some key of a key range: the test every skip in the kernels uses
//   att_sees_all  every query of a row range sees every key of a key range: a tile that needs no mask
//   att_*_tiles   the key tiles a query block loads (forward, dQ), the query tiles a key block loads (dK/dV)
//   att_visits    per (sequence, head), the tiles each kernel computes, found by walking its loops with the same
//                 tests; the cost model turns them into FLOPs
// test/test_attention_span.cpp checks every form against att_visible over all small (query, key, window).
// Does not: include CUDA, or launch anything.
#pragma once

#if defined(__CUDACC__)
#define ATT_SPAN_FN __host__ __device__ inline
#else
#define ATT_SPAN_FN inline
#endif

// The visibility rule: key j is visible to query i iff i - W < j <= i; W <= 0 is global (plain causal: j <= i).
ATT_SPAN_FN bool att_visible(long i, long j, long W) { return j <= i && (W <= 0 || i - j < W); }
// Query i's visible keys are [att_first_key(i, W), i].
ATT_SPAN_FN long att_first_key(long i, long W) { return W > 0 && i - W + 1 > 0 ? i - W + 1 : 0; }

// A global layer's window in the kernels: beyond any T (a grid holds at most 65535 tiles of 128: T < 2^23), so the
// window tests hold without a branch and without overflow, and the kernels keep no flag in a register (the HD 128
// dQ and dK/dV instances are at 255).
constexpr int ATT_NO_WINDOW = 1 << 30;
// att_visible in the kernels' form, for W >= 1 (a global layer's W is ATT_NO_WINDOW) and 0 <= i, j < 2^23: one
// unsigned compare, 0 <= i - j < W, a key after the query wrapping to a huge distance.
ATT_SPAN_FN bool att_visible_unsigned(int i, int j, int W) { return (unsigned)(i - j) < (unsigned)W; }

// Tile shapes of one kernel instance: HD output columns in registers per warp row, BR query rows, BC key rows, NW
// warps; the forward and dQ kernels give each warp MW m16 tiles of query rows (BR = 16 MW NW), the dK/dV
// kernel MW m16 tiles of keys.
template <int HD_, int BR_, int BC_, int NW_, int MW_ = 1> struct AttTiles {
    static constexpr int HD = HD_, BR = BR_, BC = BC_, NW = NW_, MW = MW_;
};

// The instances: tile shapes per HD for registers (ptxas: no spills at sm_80 / sm_90, make test) and shared
// memory (bytes at the largest hd of each instance in attention.cuh's attention_*_smem comment). Wide: hd 258..1024.
struct AttForward64 : AttTiles<64, 128, 64, 4, 2> {};
struct AttForward128 : AttTiles<128, 128, 32, 4, 2> {};
struct AttForward256 : AttTiles<256, 64, 32, 4> {};
struct AttForwardWide : AttTiles<256, 32, 16, 2> {};
struct AttDq64 : AttTiles<64, 128, 32, 4, 2> {};
struct AttDq128 : AttTiles<128, 128, 32, 4, 2> {};
struct AttDq256 : AttTiles<256, 64, 32, 4> {};
struct AttDqWide : AttTiles<256, 16, 16, 1> {};
struct AttDkv64 : AttTiles<64, 64, 64, 4, 2> {};
struct AttDkv128 : AttTiles<128, 64, 64, 4, 2> {};
struct AttDkv256 : AttTiles<256, 32, 64, 8> {};
struct AttDkvWide : AttTiles<256, 16, 16, 2> {};

// Some query of rows [q0, q0 + nq) sees some key of [k0, k0 + nk) (rows and keys past T are the callers'
// business): the earliest query reaches back to k0 + nk - 1 within the window, and the latest is not before k0.
ATT_SPAN_FN bool att_sees(int q0, int nq, int k0, int nk, int W) {
    return q0 + nq - 1 >= k0 && (W <= 0 || q0 <= k0 + nk - 1 + W - 1);
}

// Every query of rows [q0, q0 + nq) sees every key of [k0, k0 + nk): the last key is not after the first query,
// and the first key is within the last query's window.
ATT_SPAN_FN bool att_sees_all(int q0, int nq, int k0, int nk, int W) {
    return k0 + nk - 1 <= q0 && (W <= 0 || k0 > q0 + nq - 1 - W);
}

struct AttSpan {
    int lo, hi;  // tiles [lo, hi)
};
// The key tiles (BC keys each) of T keys that hold a key some query of rows [q0, q0 + nq) sees: up to the tile of
// the last query (causal), from the tile of the first query's first visible key q0 - W + 1 (a window).
ATT_SPAN_FN AttSpan att_key_tiles(int q0, int nq, int T, int W, int BC) {
    const int all = (T + BC - 1) / BC, last = (q0 + nq - 1) / BC + 1;
    const int lo = W > 0 && q0 - W + 1 > 0 ? (q0 - W + 1) / BC : 0;
    return AttSpan{lo, last < all ? last : all};
}
// The query tiles (BR queries each) of T queries that hold a query seeing some key of [k0, k0 + nk): from the tile
// of k0 (causal), up to the tile of the last key's last viewer k0 + nk - 1 + W - 1 (a window).
ATT_SPAN_FN AttSpan att_query_tiles(int k0, int nk, int T, int W, int BR) {
    const int all = (T + BR - 1) / BR;
    if (W <= 0) return AttSpan{k0 / BR, all};
    const long last = (long)k0 + nk - 1 + W - 1;
    return AttSpan{k0 / BR, last / BR + 1 < all ? (int)(last / BR + 1) : all};
}

// The tiles one (sequence, query head) costs each kernel, walking the kernels' loops with their own tests:
//   fwd, dq   (warp rows RW = 16 MW) x (key tile BC) products computed; fwd_loaded: key tiles loaded by the blocks
//   dkv_a     phase A's (RW keys) x (BR / QS queries) products (S^T and dP^T); counted per query head of a group
//   dkv_b     phase B's (RW keys) x (16 queries) steps, each over HD / QS columns of dK and dV
//   dkv_loaded: query tiles loaded by the key blocks, per query head of a group
// and the (query, key) products those tiles span (fwd_pairs .. dkv_b_pairs: tiles x their rows x their keys),
// masked parts included: what the tensor cores execute.
struct AttVisits {
    long fwd = 0, fwd_loaded = 0, dq = 0, dkv_a = 0, dkv_b = 0, dkv_loaded = 0;
    double fwd_pairs = 0, dq_pairs = 0, dkv_a_pairs = 0, dkv_b_pairs = 0;
};
template <class F, class Q, class KV> AttVisits att_visits_of(int T, int W) {
    AttVisits v;
    constexpr int RWF = 16 * F::MW, RWQ = 16 * Q::MW;
    for (int q0 = 0; q0 < T; q0 += F::BR) {
        const AttSpan sp = att_key_tiles(q0, F::BR, T, W, F::BC);
        v.fwd_loaded += sp.hi - sp.lo;
        for (int r0 = q0; r0 < q0 + F::BR && r0 < T; r0 += RWF)
            for (int kb = sp.lo; kb < sp.hi; kb++) v.fwd += att_sees(r0, RWF, kb * F::BC, F::BC, W);
    }
    for (int q0 = 0; q0 < T; q0 += Q::BR) {
        const AttSpan sp = att_key_tiles(q0, Q::BR, T, W, Q::BC);
        for (int r0 = q0; r0 < q0 + Q::BR && r0 < T; r0 += RWQ)
            for (int kb = sp.lo; kb < sp.hi; kb++) v.dq += att_sees(r0, RWQ, kb * Q::BC, Q::BC, W);
    }
    constexpr int RW = 16 * KV::MW, KG = KV::BC / RW, QS = KV::NW / KG, BRW = KV::BR / QS;
    for (int k0 = 0; k0 < T; k0 += KV::BC) {
        const AttSpan sp = att_query_tiles(k0, KV::BC, T, W, KV::BR);
        v.dkv_loaded += sp.hi - sp.lo;
        for (int qb = sp.lo; qb < sp.hi; qb++)
            for (int kk = k0; kk < k0 + KV::BC; kk += RW) {
                for (int qq = qb * KV::BR; qq < (qb + 1) * KV::BR; qq += BRW)
                    v.dkv_a += kk < T && att_sees(qq, BRW, kk, RW, W);
                for (int q = qb * KV::BR; q < (qb + 1) * KV::BR && q < T; q += 16)
                    v.dkv_b += att_sees(q, 16, kk, RW, W);
            }
    }
    v.fwd_pairs = (double)v.fwd * RWF * F::BC, v.dq_pairs = (double)v.dq * RWQ * Q::BC;
    v.dkv_a_pairs = (double)v.dkv_a * RW * BRW, v.dkv_b_pairs = (double)v.dkv_b * RW * 16;
    return v;
}
// The instances attention.cuh runs for head_dim hd.
inline AttVisits att_visits(int hd, int T, int W) {
    if (hd <= 64) return att_visits_of<AttForward64, AttDq64, AttDkv64>(T, W);
    if (hd <= 128) return att_visits_of<AttForward128, AttDq128, AttDkv128>(T, W);
    if (hd <= 256) return att_visits_of<AttForward256, AttDq256, AttDkv256>(T, W);
    return att_visits_of<AttForwardWide, AttDqWide, AttDkvWide>(T, W);
}
