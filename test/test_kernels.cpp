// test_kernels.cpp: every bf16 kernel of the CUDA model, forward and backward, against the reference function
// (ref/ops.h, ref/optimizer.h) it must match, on random inputs at several shapes (odd T, B = 1, leading slices
// w < D). Compiled by g++ the kernels run on the CUDA-on-CPU executor (make test); compiled by nvcc
// (make test-executor-native) the same tests run on a GPU. Attention has its own file, test_attention.cpp.
//
// How the tolerances are set. Inputs are bf16 values, and the reference runs in fp32 on exactly those values,
// so the only differences are (a) the kernel's single rounding of each output to bf16: relative 2^-8 at most
// (8 significant bits, 7 of them stored; round to nearest), and (b) fp32 summation order / fast intrinsics: ~1e-7
// relative to the terms summed, which can carry a value near a rounding boundary to the other neighbour. So one
// output can be up to 2^-8 |want| + (b) away. Every check is |got - want| <= rel * |want| + abs * max|want| with
// rel = 2^-8 (the rounding bound) and abs covering (b) where a sum cancels (then |want| can be far below its
// terms); each test states its abs. Outputs that are plain copies are compared bit for bit.
// Where a kernel accumulates (+=: the residual-state gradient in bf16, weight gradients in fp32), the buffer
// starts non-zero so the accumulate branch is the one checked, and the reference adds into the same starting
// values. Weight gradients are fp32 (no rounding to bf16): only (b) remains, checked at relative 1e-5.
// Shapes include rows whose length or stride is not a multiple of 8 elements, so both the 128-bit path and the
// scalar path of vec.cuh run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "adamw.cuh"
#include "adamw_ranges.h"
#include "dataloader.h"
#include "classifier.cuh"
#include "decode.cuh"
#include "embedding.cuh"
#include "gradnorm.cuh"
#include "test/kernel_test_util.h"
#include "test/skip.h"
#include "layernorm.cuh"
#include "ref/init.h"
#include "ref/ops.h"
#include "ref/optimizer.h"
#include "rope.cuh"
#include "swiglu.cuh"

// ------------------------------------------------------------------------------------------------------
// embedding
// ------------------------------------------------------------------------------------------------------

TEST_CASE("embedding forward copies token rows into [0, d) and zeros [d, D)", "[kernels]") {
    struct Shape {
        int B, T, V, d, D;
    };
    for (Shape s : {Shape{1, 7, 11, 12, 20}, Shape{3, 5, 50, 32, 32}, Shape{2, 9, 7, 8, 40}}) {
        const long N = (long)s.B * s.T;
        auto wte = rand_bf16((size_t)s.V * s.d, 1);
        std::vector<int> tok(N);
        for (long n = 0; n < N; n++) tok[n] = (int)((n * 7 + 3) % s.V);
        std::vector<float> want(N * s.D);
        ref::embedding_forward(want.data(), tok.data(), wte.data(), N, s.d, s.D);
        Dev<bf16> dwte(wte), x(N * s.D);
        Dev<int> dtok(tok);
        embedding_forward(x.p, dtok.p, dwte.p, N, s.d, s.D, 0);
        sync();
        CHECK(x.get() == want);  // a copy: bit for bit
    }
}

TEST_CASE("embedding plan groups positions by token and cuts them into segments of at most EMB_SEGMENT", "[kernels]") {
    const std::vector<int> tok = {5, 2, 5, 0, 2, 5, 7};
    EmbeddingPlan e = embedding_plan(tok.data(), (long)tok.size());
    CHECK(e.positions == std::vector<int>{3, 1, 4, 0, 2, 5, 6});
    CHECK(e.seg_start == std::vector<int>{0, 1, 3, 6, 7});  // one segment per token here
    CHECK(e.seg_row == std::vector<int>{0, 2, 5, 7});
    CHECK(e.seg_slot == std::vector<int>{-1, -1, -1, -1});
    CHECK(e.size.multi == 0);
    CHECK(e.size.distinct == 4);
    CHECK(e.size.most == 3);
    // Token 1 at 2 E + 1 positions (three segments, partial rows 0..2), token 3 at E + 1 (two, rows 3 and 4), token 0
    // at E (one: straight into dwte), interleaved.
    const int E = EMB_SEGMENT;
    std::vector<int> t;
    for (int i = 0; i < 2 * E + 1; i++) t.push_back(1), t.push_back(i <= E ? 3 : 1), t.push_back(i < E ? 0 : 1);
    const long N = (long)t.size();
    e = embedding_plan(t.data(), N);
    const int c1 = (int)std::count(t.begin(), t.end(), 1);
    CHECK(e.seg_row == std::vector<int>{0, 1, 1, 1, 1, 1, 3, 3});
    CHECK(e.seg_slot == std::vector<int>{-1, 0, 1, 2, 3, 4, 5, 6});
    CHECK(e.fin_row == std::vector<int>{1, 3});
    CHECK(e.fin_first == std::vector<int>{0, 5, 7});
    CHECK(e.size.most == c1);
    CHECK(e.size.partials <= embedding_partial_rows(N));
    for (size_t s = 0; s + 1 < e.seg_start.size(); s++) {
        const int a = e.seg_start[s], b = e.seg_start[s + 1];
        CHECK(b - a >= 1);
        CHECK(b - a <= E);
        for (int i = a; i < b; i++) CHECK(t[e.positions[i]] == e.seg_row[s]);
        for (int i = a + 1; i < b; i++) CHECK(e.positions[i] > e.positions[i - 1]);
    }
    CHECK(e.seg_start.back() == N);
}

namespace {
// The GPU's embedding backward on (B T) tokens against ref::embedding_backward, into a non-zero dwte; returns its plan.
EmbeddingPlanSize check_embedding_backward(const std::vector<int>& tok, int V, int d, int ldx, uint64_t seed) {
    const long N = (long)tok.size();
    auto dx = rand_bf16(N * ldx, seed);
    auto g0 = rand_bf16((size_t)V * d, seed + 1);
    std::vector<float> want = g0;
    ref::embedding_backward(want.data(), dx.data(), ldx, tok.data(), N, d);
    EmbeddingPlan e = embedding_plan(tok.data(), N);
    Dev<float> g(g0), partial((size_t)embedding_partial_rows(N) * d);
    Dev<bf16> ddx(dx);
    Dev<int> pos(e.positions), ss(e.seg_start), sr(e.seg_row), sl(e.seg_slot), fr(e.fin_row), ff(e.fin_first);
    embedding_backward(g.p, partial.p, ddx.p, ldx, pos.p, ss.p, sr.p, sl.p, fr.p, ff.p, e.size.segments, e.size.multi,
                       d, 0);
    sync();
    auto got = g.get();
    // Sums of up to N terms in fp32 into fp32 dwte (order differs from the reference: relative 1e-5, abs 1e-6).
    check_close(got, want, 1e-5, 1e-6, "dwte");
    std::vector<char> seen(V, 0);
    for (int x : tok) seen[x] = 1;
    for (int v = 0; v < V; v++)
        if (!seen[v])
            for (int c = 0; c < d; c++) CHECK(got[(size_t)v * d + c] == g0[(size_t)v * d + c]);  // rows untouched
    return e.size;
}
}  // namespace

TEST_CASE("embedding backward sums repeated tokens without atomics and leaves untouched rows alone", "[kernels]") {
    // {2, 33, 3}: two tokens of 33 positions (two segments each); {4, 50, 4}: three tokens of ~67 (three segments).
    struct Shape {
        int B, T, V, d, ldx;
    };
    for (Shape s : {Shape{1, 7, 5, 12, 20}, Shape{3, 11, 9, 40, 40}, Shape{2, 33, 3, 8, 16}, Shape{2, 9, 6, 20, 28},
                    Shape{4, 50, 4, 24, 24}}) {
        INFO("B=" << s.B << " T=" << s.T << " V=" << s.V << " d=" << s.d);
        const long N = (long)s.B * s.T;
        std::vector<int> tok(N);
        for (long n = 0; n < N; n++) tok[n] = (int)((n * n + 1) % (s.V - 1));  // token V-1 never occurs
        check_embedding_backward(tok, s.V, s.d, s.ldx, 2 + s.T);
    }
}

TEST_CASE("embedding backward on a real shard's micro-batch: no block walks more than EMB_SEGMENT positions",
          "[kernels]") {
    // B 16 x T 1024 tokens of the default corpus (real text: the most frequent token is a few % of them). Under the
    // one-block-per-token plan a single block walked all of that token's positions one after another; here every
    // segment holds at most EMB_SEGMENT. The sums run on the executor at d 8 (one thread per block: the plan and the
    // kernels' arithmetic, not speed) against the reference; the figures are printed.
    const char* path = "data/default/default_val_000000.bin";
    FILE* f = fopen(path, "rb");
    if (!f) {
        PRISM_SKIP("default-corpus", path << " not found (bash setup.sh fetches the default corpus): not run");
        return;
    }
    const long N = 16 * 1024;
    std::vector<uint16_t> raw(N);
    fseek(f, (long)SHARD_HEADER_BYTES, SEEK_SET);
    const size_t got = fread(raw.data(), sizeof(uint16_t), raw.size(), f);
    fclose(f);
    REQUIRE(got == raw.size());
    std::vector<int> tok(raw.begin(), raw.end());
    const EmbeddingPlanSize z = check_embedding_backward(tok, GPT2_VOCAB, 8, 8, 41);
    CHECK(z.most > 4 * EMB_SEGMENT);  // real text: a token far above one segment (what this plan exists for)
    CHECK(z.partials <= embedding_partial_rows(N));
    printf(
        "embedding backward, real micro-batch (B 16 x T 1024 of %s): %d distinct tokens, the most frequent %d "
        "times (%.1f%%): longest serial walk of one block %d positions one block per token, %d now (%d blocks + "
        "%d finishing blocks instead of %d)\n",
        path, z.distinct, z.most, 100.0 * z.most / N, z.most, EMB_SEGMENT, z.segments, z.multi, z.distinct);
}

// ------------------------------------------------------------------------------------------------------
// LayerNorm / RMSNorm and the residual add
// ------------------------------------------------------------------------------------------------------

namespace {
struct NormShape {
    long N;
    int w, ldx;
};
const NormShape norm_shapes[] = {{7, 40, 56}, {1, 24, 24}, {33, 96, 96}, {5, 300, 320}, {9, 8, 64}, {130, 64, 72}};
}  // namespace

TEST_CASE("norm forward matches the reference on leading slices (LayerNorm and RMSNorm)", "[kernels]") {
    // out: one rounding of an fp32 value (abs 1e-5 for rsqrtf and the sums); mean, rstd: fp32 (1e-5 relative).
    for (NormType type : {NormType::LayerNorm, NormType::RMSNorm})
        for (NormShape s : norm_shapes) {
            INFO(norm_name(type) << " N=" << s.N << " w=" << s.w << " ldx=" << s.ldx);
            const bool rms = type == NormType::RMSNorm;
            auto x = rand_bf16(s.N * s.ldx, 4, -0.5f, 1.5f);  // non-zero mean, so the centring matters
            auto g = rand_bf16(s.w, 5, 0.5f, 1.5f), b = rand_bf16(s.w, 6);
            std::vector<float> out(s.N * s.w), mean(s.N), rstd(s.N);
            ref::norm_forward(type, out.data(), mean.data(), rstd.data(), x.data(), s.ldx, g.data(), b.data(), s.N, s.w,
                              1e-5);
            Dev<bf16> dx(x), dg(g), db(b), dout(s.N * s.w);
            Dev<float> dmean(s.N), drstd(s.N);
            norm_forward(rms, dout.p, dmean.p, drstd.p, dx.p, s.ldx, dg.p, rms ? nullptr : db.p, s.N, s.w, 1e-5f, 0);
            sync();
            check_close(dout.get(), out, BF16_REL, 1e-5, "out");
            check_close(dmean.get(), mean, 1e-5, 1e-6, "mean");
            check_close(drstd.get(), rstd, 1e-5, 0, "rstd");
        }
}

TEST_CASE("residual add fused with the next norm equals the add then the norm", "[kernels]") {
    // The residual sum is one fp32 add of two bf16 values rounded once: bit-identical to rounding the reference
    // sum. The norm then reads those bf16 values, so the reference norm is run on the rounded residual state.
    struct Shape {
        long N;
        int D, wy, wn;
    };
    for (NormType type : {NormType::LayerNorm, NormType::RMSNorm})
        for (Shape s : {Shape{5, 64, 32, 48}, Shape{1, 40, 40, 40}, Shape{11, 96, 64, 96}, Shape{3, 72, 72, 24}}) {
            INFO(norm_name(type) << " N=" << s.N << " D=" << s.D << " wy=" << s.wy << " wn=" << s.wn);
            const bool rms = type == NormType::RMSNorm;
            auto x = rand_bf16(s.N * s.D, 7), y = rand_bf16(s.N * s.wy, 8);
            auto g = rand_bf16(s.wn, 9, 0.5f, 1.5f), b = rand_bf16(s.wn, 10);
            std::vector<float> xs = x;
            ref::residual_forward(xs.data(), s.D, y.data(), s.N, s.wy);
            for (float& v : xs) v = float(bf16(v));
            std::vector<float> out(s.N * s.wn), mean(s.N), rstd(s.N);
            ref::norm_forward(type, out.data(), mean.data(), rstd.data(), xs.data(), s.D, g.data(), b.data(), s.N, s.wn,
                              1e-5);
            Dev<bf16> dx(x), dy(y), dxo(s.N * s.D), dg(g), db(b), dout(s.N * s.wn);
            Dev<float> dmean(s.N), drstd(s.N);
            residual_norm_forward(rms, dxo.p, dx.p, dy.p, s.D, s.wy, dout.p, dmean.p, drstd.p, dg.p, db.p, s.N, s.wn,
                                  1e-5f, 0);
            sync();
            CHECK(dxo.get() == xs);
            check_close(dout.get(), out, BF16_REL, 1e-5, "out");
            check_close(drstd.get(), rstd, 1e-5, 0, "rstd");
            // in place (x_out == x_in) gives the same residual state
            residual_norm_forward(rms, dx.p, dx.p, dy.p, s.D, s.wy, dout.p, dmean.p, drstd.p, dg.p, db.p, s.N, s.wn,
                                  1e-5f, 0);
            sync();
            CHECK(dx.get() == xs);
        }
}

TEST_CASE("copy_columns copies the leading w columns bit for bit and leaves the rest of dst alone", "[kernels]") {
    // Both ways the model uses it: out of a wider matrix (head_in = lnf[:, :d]) and into one (dlnf = [dhead | 0]).
    struct Shape {
        long N;
        int w, ld_dst, ld_src;
    };
    for (Shape s : {Shape{7, 24, 24, 40}, Shape{5, 16, 48, 16}, Shape{1, 8, 8, 8}, Shape{13, 32, 40, 96}}) {
        INFO("N=" << s.N << " w=" << s.w << " ld_dst=" << s.ld_dst << " ld_src=" << s.ld_src);
        auto src = rand_bf16(s.N * s.ld_src, 20), dst0 = rand_bf16(s.N * s.ld_dst, 21);
        std::vector<float> want = dst0;
        for (long n = 0; n < s.N; n++)
            for (int c = 0; c < s.w; c++) want[n * s.ld_dst + c] = src[n * s.ld_src + c];
        Dev<bf16> dsrc(src), ddst(dst0);
        copy_columns(ddst.p, s.ld_dst, dsrc.p, s.ld_src, s.N, s.w, 0);
        sync();
        CHECK(ddst.get() == want);
    }
}

TEST_CASE("norm backward matches the reference and accumulates into dx, dg, db", "[kernels]") {
    // dx: fp32 row sums of w terms that cancel (abs 1e-4 of the largest), added to a non-zero dx and rounded once.
    // dg, db: sums over N rows in fp32 (warps, blocks of 64 rows, then blocks: abs 1e-4), added to non-zero fp32
    // dg, db. N = 130: three row blocks; w <= 768: 8 warps per block; w = 2000: 3 (LayerNorm) or 6 (RMSNorm);
    // w = 7000: one warp whose planes need the shared-memory opt-in (56 KB).
    std::vector<NormShape> shapes(std::begin(norm_shapes), std::end(norm_shapes));
    shapes.push_back({5, 2000, 2000}), shapes.push_back({3, 7000, 7000});
    for (NormType type : {NormType::LayerNorm, NormType::RMSNorm})
        for (NormShape s : shapes) {
            INFO(norm_name(type) << " N=" << s.N << " w=" << s.w << " ldx=" << s.ldx);
            const bool ln = type == NormType::LayerNorm, rms = !ln;
            auto x = rand_bf16(s.N * s.ldx, 13, -0.5f, 1.5f);
            auto g = rand_bf16(s.w, 14, 0.5f, 1.5f), b = rand_bf16(s.w, 15);
            auto dout = rand_bf16(s.N * s.w, 16);
            auto dx0 = rand_bf16(s.N * s.ldx, 17), dg0 = rand_bf16(s.w, 18), db0 = rand_bf16(s.w, 19);
            std::vector<float> out(s.N * s.w), mean(s.N), rstd(s.N);
            ref::norm_forward(type, out.data(), mean.data(), rstd.data(), x.data(), s.ldx, g.data(), b.data(), s.N, s.w,
                              1e-5);
            std::vector<float> dx = dx0, dg = dg0, db = db0;
            ref::norm_backward(type, dx.data(), s.ldx, dg.data(), db.data(), dout.data(), x.data(), s.ldx, mean.data(),
                               rstd.data(), g.data(), s.N, s.w);
            Dev<bf16> d_x(x), d_g(g), d_b(b), d_dout(dout), d_dx(dx0), d_out(s.N * s.w);
            Dev<float> d_dg(dg0), d_db(db0);
            Dev<float> d_mean(s.N), d_rstd(s.N), scratch(norm_backward_scratch_floats(s.N, s.w));
            norm_forward(rms, d_out.p, d_mean.p, d_rstd.p, d_x.p, s.ldx, d_g.p, d_b.p, s.N, s.w, 1e-5f, 0);
            norm_backward(rms, d_dx.p, s.ldx, d_dg.p, ln ? d_db.p : nullptr, d_dout.p, d_x.p, s.ldx, d_mean.p, d_rstd.p,
                          d_g.p, s.N, s.w, scratch.p, 0);
            sync();
            check_close(d_dx.get(), dx, BF16_REL, 1e-4, "dx");  // columns [w, ldx) must be unchanged too
            check_close(d_dg.get(), dg, 1e-5, 1e-4, "dg");
            if (ln) check_close(d_db.get(), db, 1e-5, 1e-4, "db");
            else CHECK(d_db.get() == db0);  // RMSNorm has no bias: untouched
        }
}

TEST_CASE("norm backward's shared planes: every warp access hits 32 distinct banks, each column its own word",
          "[kernels]") {
    // The executor does not model banks, so the layout's property is checked directly on norm_plane_index, the one
    // function the kernel indexes its planes with: (a) the row pass, lane L at column 256 j + 8 L + i for fixed i;
    // (b) the block's sum over warps, 32 consecutive columns; (c) a permutation of [0, norm_plane_width(w)).
    for (int w : {8, 24, 300, 768, 1000, 2000, 6144, 7000}) {
        INFO("w=" << w);
        const int wp = norm_plane_width(w);
        std::vector<int> hits(wp, 0);
        for (int c = 0; c < wp; c++) {
            const int at = norm_plane_index(c);
            REQUIRE(at >= 0);
            REQUIRE(at < wp);
            hits[at]++;
        }
        CHECK(std::count(hits.begin(), hits.end(), 1) == wp);
        auto distinct_banks = [](const std::vector<int>& cols) {
            std::vector<int> bank(32, 0);
            for (int c : cols) bank[norm_plane_index(c) % 32]++;
            return *std::max_element(bank.begin(), bank.end()) == 1;
        };
        for (int j = 0; 256 * j < w; j++)
            for (int i = 0; i < 8; i++) {
                std::vector<int> cols;
                for (int L = 0; L < 32; L++)
                    if (256 * j + 8 * L + i < wp) cols.push_back(256 * j + 8 * L + i);
                CHECK(distinct_banks(cols));
            }
        for (int c0 = 0; c0 < wp; c0 += 32) {
            std::vector<int> cols;
            for (int c = c0; c < std::min(wp, c0 + 32); c++) cols.push_back(c);
            CHECK(distinct_banks(cols));
        }
    }
}

// ------------------------------------------------------------------------------------------------------
// RoPE and SwiGLU
// ------------------------------------------------------------------------------------------------------

TEST_CASE("rope forward and backward rotate q and k pairs like the reference, v untouched", "[kernels]") {
    // a cos - b sin in fp32 (abs 1e-6 of the largest for the cancellation), one rounding. The table is the
    // reference's own double -> float values, so only the rounding differs.
    struct Shape {
        int B, T, w, h;
    };
    for (Shape s : {Shape{1, 7, 8, 4} /*hd 2*/, Shape{2, 5, 16, 2} /*8*/, Shape{1, 9, 36, 3} /*12*/,
                    Shape{2, 3, 36, 2} /*18*/, Shape{1, 5, 120, 2} /*60*/, Shape{1, 33, 64, 1} /*64*/,
                    Shape{1, 4, 144, 2} /*72*/, Shape{1, 3, 256, 2} /*128*/, Shape{1, 3, 256, 1} /*256*/}) {
        INFO("B=" << s.B << " T=" << s.T << " w=" << s.w << " h=" << s.h);
        const long N = (long)s.B * s.T;
        auto qkv = rand_bf16(N * 3 * s.w, 20);
        Dev<float> table(rope_table(s.T, s.w / s.h, 10000.0));
        for (int dir = 0; dir < 2; dir++) {
            std::vector<float> want = qkv;
            if (dir == 0) ref::rope_forward(want.data(), s.B, s.T, s.w, s.h, 10000.0);
            else ref::rope_backward(want.data(), s.B, s.T, s.w, s.h, 10000.0);
            Dev<bf16> d(qkv);
            if (dir == 0) rope_forward(d.p, table.p, s.B, s.T, s.w, s.h, 0);
            else rope_backward(d.p, table.p, s.B, s.T, s.w, s.h, 0);
            sync();
            auto got = d.get();
            check_close(got, want, BF16_REL, 1e-6, dir == 0 ? "rope forward" : "rope backward");
            for (long n = 0; n < N; n++)
                for (int c = 2 * s.w; c < 3 * s.w; c++) CHECK(got[n * 3 * s.w + c] == qkv[n * 3 * s.w + c]);
        }
    }
}

TEST_CASE("rope forward and backward rotate the query heads and the K heads of a KV-grouped qkv, v untouched",
          "[kernels]") {
    // qkv rows [q (h hd) | k (kv hd) | v (kv hd)]: GQA and MQA, row widths that are no multiple of 8 (hd 2, 6, 18),
    // and kv = h (the (w, h) overload's rows of 3 w), against ref::rope_rotate with the same AttnShape.
    struct Shape {
        int B, T, h, kv, hd;
    };
    for (Shape s : {Shape{1, 7, 4, 2, 2}, Shape{2, 5, 3, 1, 6}, Shape{1, 9, 4, 1, 18}, Shape{2, 3, 8, 2, 64},
                    Shape{1, 5, 6, 3, 128}, Shape{1, 4, 2, 2, 72}}) {
        INFO("B=" << s.B << " T=" << s.T << " h=" << s.h << " kv=" << s.kv << " hd=" << s.hd);
        LayerSpec ls{s.h * s.hd, s.h};
        ls.kv_heads = s.kv;
        const long N = (long)s.B * s.T, ld = ls.qkv_rows(), rot = ls.width + ls.kv_width();
        auto qkv = rand_bf16(N * ld, 21);
        Dev<float> table(rope_table(s.T, s.hd, 10000.0));
        for (int dir = 0; dir < 2; dir++) {
            std::vector<float> want = qkv;
            const ref::AttnShape a = ref::AttnShape::of(ls);
            if (dir == 0) ref::rope_forward(want.data(), s.B, s.T, a, 10000.0);
            else ref::rope_backward(want.data(), s.B, s.T, a, 10000.0);
            Dev<bf16> d(qkv);
            if (dir == 0) rope_forward(d.p, table.p, s.B, s.T, ls, 0);
            else rope_backward(d.p, table.p, s.B, s.T, ls, 0);
            sync();
            auto got = d.get();
            check_close(got, want, BF16_REL, 1e-6, dir == 0 ? "rope forward" : "rope backward");
            for (long n = 0; n < N; n++)
                for (long c = rot; c < ld; c++) CHECK(got[n * ld + c] == qkv[n * ld + c]);
        }
    }
}

TEST_CASE("swiglu forward and backward match the reference", "[kernels]") {
    // expf vs std::exp (a few ulp) and one rounding per output.
    for (auto [N, hid] : {std::pair<long, int>{7, 32}, {1, 96}, {15, 64}}) {
        auto in = rand_bf16(N * 2 * hid, 21, -6.0f, 6.0f), dout = rand_bf16(N * hid, 22);
        std::vector<float> out(N * hid), din(N * 2 * hid);
        ref::swiglu_forward(out.data(), in.data(), N, hid);
        ref::swiglu_backward(din.data(), dout.data(), in.data(), N, hid);
        Dev<bf16> d_in(in), d_dout(dout), d_out(N * hid), d_din(N * 2 * hid);
        swiglu_forward(d_out.p, d_in.p, N, hid, 0);
        swiglu_backward(d_din.p, d_dout.p, d_in.p, N, hid, 0);
        sync();
        check_close(d_out.get(), out, BF16_REL, 1e-6, "out");
        check_close(d_din.get(), din, BF16_REL, 1e-6, "din");
    }
}

// ------------------------------------------------------------------------------------------------------
// classifier
// ------------------------------------------------------------------------------------------------------

TEST_CASE("softmax cross-entropy ignores padded columns and masked targets; the fused pass writes dlogits",
          "[kernels]") {
    // lse: fp32 sum of V exps vs the reference's double (relative 1e-6 of ~log V): abs 1e-4 on lse and loss.
    // dlogits: (exp(l - lse) - onehot) * dloss in fp32, one rounding; abs 1e-5 covers the lse difference.
    // V = 100, 257: rows end in a partial 8-column chunk; padded columns hold NaN, so any read of them shows.
    struct Shape {
        int B, T, V, Vp;
    };
    for (Shape s : {Shape{1, 7, 100, 128}, Shape{3, 5, 64, 64}, Shape{2, 3, 257, 384}}) {
        INFO("B=" << s.B << " T=" << s.T << " V=" << s.V << " Vp=" << s.Vp);
        const long N = (long)s.B * s.T;
        auto logits = rand_bf16(N * s.V, 25, -4.0f, 4.0f);
        std::vector<float> padded(N * s.Vp, NAN);
        for (long n = 0; n < N; n++)
            for (int v = 0; v < s.V; v++) padded[n * s.Vp + v] = logits[n * s.V + v];
        std::vector<int> targets(N);
        for (long n = 0; n < N; n++) targets[n] = n % 3 == 1 ? -1 : (int)((n * 37) % s.V);
        std::vector<float> probs(N * s.V), lse(N), losses(N);
        long count = ref::softmax_crossentropy_forward(probs.data(), lse.data(), losses.data(), logits.data(),
                                                       targets.data(), N, s.V);
        const float dloss = 0.75f / count;
        ref::softmax_crossentropy_backward(probs.data(), probs.data(), targets.data(), N, s.V, dloss);
        // forward (inference): lse and losses, logits untouched
        Dev<bf16> d_logits(padded);
        Dev<int> d_targets(targets);
        Dev<float> d_lse(N), d_losses(N);
        softmax_crossentropy_forward(d_losses.p, d_lse.p, d_logits.p, d_targets.p, N, s.V, s.Vp, 0);
        sync();
        check_close(d_lse.get(), lse, 0, 1e-4 / max_abs(lse), "lse");
        check_close(d_losses.get(), losses, 0, 1e-4 / max_abs(losses), "losses");
        auto kept = d_logits.get();
        for (size_t i = 0; i < kept.size(); i++)
            CHECK((kept[i] == float(bf16(padded[i])) || (std::isnan(kept[i]) && std::isnan(padded[i]))));
        Dev<float> d_logp(N);
        target_logprobs(d_logp.p, d_logits.p, d_lse.p, d_targets.p, N, s.Vp, 0);
        sync();
        std::vector<float> neg_losses(N);
        for (long n = 0; n < N; n++) neg_losses[n] = -losses[n];
        check_close(d_logp.get(), neg_losses, 0, 1e-4 / max_abs(losses), "logprobs");
        // fused (training): the same losses, dlogits in place of the logits, zeros in padded columns and masked rows
        Dev<float> d_losses2(N);
        softmax_crossentropy_fused(d_losses2.p, d_logits.p, d_targets.p, N, s.V, s.Vp, dloss, 0);
        sync();
        check_close(d_losses2.get(), losses, 0, 1e-4 / max_abs(losses), "fused losses");
        auto got = d_logits.get();
        std::vector<float> g, pad;
        for (long n = 0; n < N; n++) {
            for (int v = 0; v < s.V; v++) g.push_back(got[n * s.Vp + v]);
            for (int v = s.V; v < s.Vp; v++) pad.push_back(got[n * s.Vp + v]);
        }
        check_close(g, probs, BF16_REL, 1e-5, "dlogits");
        CHECK(pad == std::vector<float>(pad.size(), 0.0f));
        // inference: no targets, losses 0, lse still computed
        Dev<bf16> d_logits2(padded);
        softmax_crossentropy_forward(d_losses.p, d_lse.p, d_logits2.p, nullptr, N, s.V, s.Vp, 0);
        sync();
        check_close(d_lse.get(), lse, 0, 1e-4 / max_abs(lse), "lse without targets");
        CHECK(d_losses.get() == std::vector<float>(N, 0.0f));
    }
}

TEST_CASE("loss sum adds the scaled sum of the per-position losses on the device, in double", "[kernels]") {
    for (long N : {1L, 1000L, 5000L}) {
        auto l = rand_bf16(N, 27, 0.0f, 8.0f);
        double want = 0;
        for (float x : l) want += x;
        Dev<float> d_l(l);
        Dev<double> acc(std::vector<double>{0.5});
        loss_sum(acc.p, d_l.p, N, 0.25, 0);
        loss_sum(acc.p, d_l.p, N, 0.25, 0);
        sync();
        CHECK(acc.raw()[0] == Approx(0.5 + 0.5 * want).epsilon(1e-12));
    }
}

// ------------------------------------------------------------------------------------------------------
// optimizer: global norm and AdamW
// ------------------------------------------------------------------------------------------------------

TEST_CASE("global gradient norm is the reference norm and bit-identical across runs", "[kernels]") {
    // fp32 partial sums of squares (positive terms: relative error ~1e-6), final sum in double. The gradients are
    // the fp32 buffer; n = 1000 + 3 and 300001 end in a partial 4-float access.
    for (size_t n : {(size_t)1, (size_t)1003, (size_t)300001}) {
        std::vector<float> g = rand_bf16(n, 26);
        for (size_t i = 0; i < n; i++) g[i] *= 1.0f + 1e-3f * (float)(i % 7);  // not bf16-exact: fp32 matters
        const double want = ref::grad_norm(g.data(), n);
        Dev<float> d(g);
        Dev<double> out(1);
        Dev<float> partial(GRADNORM_BLOCKS);
        grad_norm_squared(out.p, d.p, n, partial.p, 0);
        sync();
        const double got = out.raw()[0];
        CHECK(std::sqrt(got) == Approx(want).epsilon(1e-5));
        grad_norm_squared(out.p, d.p, n, partial.p, 0);
        sync();
        const double again = out.raw()[0];
        CHECK(std::memcmp(&got, &again, sizeof(double)) == 0);
    }
}

namespace {
// One AdamW range per tensor, decayed where the tensor is a matrix: the kernel's contract, without the merging
// of neighbours the model does (adamw_ranges.h's adamw_ranges, tested in test_model_cuda.cpp).
std::vector<AdamWRange> ranges_per_tensor(const ParamLayout& layout) {
    std::vector<AdamWRange> r;
    for (const ParamTensor& t : layout.tensors) r.push_back({t.offset, t.numel(), t.is_matrix});
    return r;
}
}  // namespace

TEST_CASE("adamw tracks the reference over steps, decays matrices only, rounds params from master", "[kernels]") {
    // The same fp32 operations as ref::adamw_step on the same values; only contraction into FMAs differs
    // (relative 1e-6). grads are fp32, and the clip factor (computed on the device from a squared norm) is
    // applied to the reference's gradients as ref::clip_grad_norm does.
    ModelConfig c;
    c.d = 16, c.V = 10, c.T = 8, c.h_base = 2;
    c.layers = {{16, 2}, {32, 4}};
    for (NormType type : {NormType::LayerNorm, NormType::RMSNorm}) {
        c.norm = type;
        const ParamLayout layout = param_layout(c);
        const size_t P = layout.total;
        std::vector<float> params(P);
        ref::init_params(params.data(), c, layout, 7);
        for (float& p : params) p = float(bf16(p));  // start from bf16-exact master weights
        ref::AdamWState<float> st(P);
        OptimizerHyper hp;
        Dev<float> master(params), m(std::vector<float>(P, 0.0f)), v(std::vector<float>(P, 0.0f)), grads(P);
        Dev<bf16> p16(params);
        const auto ranges = adamw_launch_ranges(ranges_per_tensor(layout));
        Dev<AdamWLaunchRange> d_ranges(ranges);
        for (int step = 1; step <= 3; step++) {
            std::vector<float> g = rand_bf16(P, 100 + step, -0.1f, 0.1f);
            for (size_t i = 0; i < P; i++) g[i] *= 1.0f + 1e-3f * (float)(i % 5);
            grads.upload(g);
            // the clipped branch on step 2: max_norm half the norm; step 3: clipping on but not active
            const double norm = ref::grad_norm(g.data(), P), max_norm = step == 2 ? 0.5 * norm : 2 * norm;
            Dev<double> stats(std::vector<double>{2.5, norm * norm});  // {the step's loss, squared norm}
            if (step >= 2) ref::clip_grad_norm(g.data(), P, max_norm);
            const double lr = 1e-3 * step;
            ref::adamw_step(params.data(), g.data(), st, layout, lr, hp);
            adamw_step(p16.p, master.p, m.p, v.p, grads.p, d_ranges.p, (int)ranges.size(), ranges.back().first_block,
                       step, lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, step >= 2 ? stats.p : nullptr, max_norm,
                       0);
            sync();
            check_close(master.get(), params, 1e-5, 1e-7, "master");
            check_close(m.get(), st.m, 1e-5, 1e-7, "m");
            check_close(v.get(), st.v, 1e-5, 1e-7, "v");
        }
        auto mw = master.get(), pw = p16.get();
        for (size_t i = 0; i < P; i++) CHECK(pw[i] == float(bf16(mw[i])));
    }
}

TEST_CASE("adamw at per-tensor rates tracks the reference's, on the whole block and on ZeRO-1 shards", "[kernels]") {
    // adamw_ranges merges tensors of one kind and one rate; a shard's ranges keep theirs. Layer 1 at lr x 0 stays
    // exactly; every other tensor tracks ref::adamw_step at the same rates as the unit-rate test above does.
    ModelConfig c;
    c.d = 16, c.V = 10, c.T = 8, c.h_base = 2, c.tied = false;
    c.layers = {{16, 2}, {32, 4}, {16, 2}};
    const ParamLayout layout = param_layout(c);
    const size_t P = layout.total;
    OptimizerMultipliers mult;
    mult.layer_lr = {1.0, 0.0, 0.5}, mult.layer_wd = {2.0, 1.0, 0.0};
    mult.group_lr[(int)ParamGroup::head] = 3.0;
    const std::vector<TensorRate> rates = tensor_rates(layout, mult);
    std::vector<float> init(P);
    ref::init_params(init.data(), c, layout, 7);
    for (float& p : init) p = float(bf16(p));
    for (int world : {1, 2, 3}) {
        std::vector<float> params = init;
        ref::AdamWState<float> st(P);
        OptimizerHyper hp;
        hp.weight_decay = 0.2;
        const std::vector<AdamWRange> all = adamw_ranges(layout, rates);
        std::vector<float> got = init;
        std::vector<std::vector<float>> master, m, v;  // each rank's state of its shard
        std::vector<Shard> shards;
        for (int r = 0; r < world; r++) {
            shards.push_back(zero_shard(P, world, r));  // the engine's: 128-aligned (the kernel's 128-bit accesses)
            const Shard& sh = shards.back();
            master.push_back(std::vector<float>(init.begin() + sh.begin, init.begin() + sh.end));
            m.push_back(std::vector<float>(sh.end - sh.begin, 0.0f)), v.push_back(m.back());
        }
        for (int step = 1; step <= 3; step++) {
            const std::vector<float> g = rand_bf16(P, 200 + step, -0.1f, 0.1f);
            const double lr = 1e-2 * step;
            ref::adamw_step(params.data(), g.data(), st, layout, lr, hp, rates);
            for (int r = 0; r < world; r++) {
                const Shard& sh = shards[r];
                if (sh.begin == sh.end) continue;
                const auto ranges = adamw_launch_ranges(world == 1 ? all : shard_ranges(all, sh.begin, sh.end));
                Dev<AdamWLaunchRange> d_ranges(ranges);
                Dev<float> dm(master[r]), dmo(m[r]), dv(v[r]), grads(g);
                Dev<bf16> p16(init);
                adamw_step(p16.p, dm.p, dmo.p, dv.p, grads.p, d_ranges.p, (int)ranges.size(), ranges.back().first_block,
                           step, lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, nullptr, 0.0, 0);
                sync();
                master[r] = dm.get(), m[r] = dmo.get(), v[r] = dv.get();
                std::copy(master[r].begin(), master[r].end(), got.begin() + sh.begin);
            }
            INFO("world " << world << ", step " << step);
            check_close(got, params, 1e-5, 1e-7, "master");
        }
        for (const ParamTensor& t : layout.tensors) {
            const bool frozen = t.layer == 1;
            INFO(t.name);
            CHECK(std::equal(got.begin() + t.offset, got.begin() + t.offset + t.numel(), init.begin() + t.offset) ==
                  frozen);
        }
    }
    // Merging: one range per run of tensors of one kind and one rate, covering the block once.
    const std::vector<AdamWRange> all = adamw_ranges(layout, rates);
    size_t covered = 0;
    for (size_t i = 0; i < all.size(); i++) {
        covered += all[i].n;
        if (i > 0 && all[i - 1].offset + all[i - 1].n == all[i].offset)
            CHECK(!(all[i - 1].decay == all[i].decay && all[i - 1].rate == all[i].rate));
    }
    CHECK(covered == P);
}

TEST_CASE("adamw skips a step whose loss or gradient norm is not finite, writing nothing", "[kernels]") {
    ModelConfig c;
    c.d = 8, c.V = 6, c.T = 4, c.h_base = 2;
    c.layers = {{8, 2}};
    const ParamLayout layout = param_layout(c);
    const size_t P = layout.total;
    const std::vector<float> w = rand_bf16(P, 7, -0.5f, 0.5f), mom = rand_bf16(P, 8, 0.0f, 0.01f);
    const auto ranges = adamw_launch_ranges(ranges_per_tensor(layout));
    Dev<AdamWLaunchRange> d_ranges(ranges);
    const double nan = std::nan(""), inf = INFINITY;
    for (std::vector<double> bad : {std::vector<double>{nan, 1.0}, {inf, 1.0}, {2.0, nan}, {2.0, inf}}) {
        Dev<float> master(w), m(mom), v(mom), grads(rand_bf16(P, 9, -0.1f, 0.1f));
        Dev<bf16> p16(w);
        Dev<double> stats(bad);
        adamw_step(p16.p, master.p, m.p, v.p, grads.p, d_ranges.p, (int)ranges.size(), ranges.back().first_block, 1,
                   1e-3, 0.9, 0.95, 1e-8, 0.1, stats.p, 1.0, 0);
        sync();
        INFO("loss " << bad[0] << ", squared norm " << bad[1]);
        CHECK(master.get() == w);
        CHECK(m.get() == mom);
        CHECK(v.get() == mom);
        const std::vector<float> p = p16.get();
        CHECK(std::equal(p.begin(), p.end(), w.begin(), [](float a, float b) { return a == float(bf16(b)); }));
    }
}

TEST_CASE("adamw with zero gradients decays exactly the matrices", "[kernels]") {
    ModelConfig c;
    c.d = 8, c.V = 6, c.T = 4, c.h_base = 2;
    c.layers = {{8, 2}};
    const ParamLayout layout = param_layout(c);
    const size_t P = layout.total;
    std::vector<float> ones(P, 1.0f);
    Dev<float> master(ones), m(std::vector<float>(P, 0.0f)), v(std::vector<float>(P, 0.0f));
    Dev<float> grads(std::vector<float>(P, 0.0f));
    Dev<bf16> p16(ones);
    const auto ranges = adamw_launch_ranges(ranges_per_tensor(layout));
    Dev<AdamWLaunchRange> d_ranges(ranges);
    const double lr = 0.5, wd = 0.1;
    adamw_step(p16.p, master.p, m.p, v.p, grads.p, d_ranges.p, (int)ranges.size(), ranges.back().first_block, 1, lr,
               0.9, 0.95, 1e-8, wd, nullptr, 0.0, 0);
    sync();
    auto got = master.get();
    for (const ParamTensor& t : layout.tensors)
        for (size_t i = 0; i < t.numel(); i++) {
            INFO(t.name);
            CHECK(got[t.offset + i] == (t.is_matrix ? (float)(1.0 - lr * wd) : 1.0f));
        }
}
