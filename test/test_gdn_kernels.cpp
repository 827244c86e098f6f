// test_gdn_kernels.cpp: gdn.cuh's kernels, forward and backward, against the ref/gdn.h functions they match, at head
// dims 32, 64, 128 and 256 (and 48, where a head's group of lanes is not all busy), B > 1 and T not a multiple of 64
// (so the backwards' slices of 64 rows end mid-slice and a slice of one sequence never reads the next one's rows);
// and the one-token state update over many tokens against the recurrent form's outputs and the chunked form's
// states. On the CUDA-on-CPU executor under make test (nvcc: on a GPU).
//
// Tolerances, as test_kernels.cpp derives them: inputs are bf16 values the reference sees exactly, so a bf16 output
// differs by its one rounding (rel 2^-8 at most, BF16_REL) plus fp32 summation order where a sum cancels
// (abs, relative to max|want|, stated per check); fp32 outputs (inverse norms, gates, weight gradients, the state)
// carry only the order and libm differences (rel 1e-5). A backward reads what the forward stored in bf16 (as the
// engine will), so its reference is given the kernel's own forward outputs: the rounding of the forward is not
// counted twice. Weight gradients accumulate (+=) into non-zero buffers.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "gdn.cuh"
#include "ref/gdn.h"
#include "test/kernel_test_util.h"

namespace {
// 48: a head of 6 chunks of 8 on a group of 8 lanes (idle lanes inside each head's group)
const int gdn_head_dims[] = {32, 48, 64, 128, 256};

// The largest |got - want| relative to max|want|: the figure each check prints.
double max_err(const std::vector<float>& got, const std::vector<float>& want) {
    double m = 0;
    for (size_t i = 0; i < got.size(); i++) m = std::max(m, std::fabs((double)got[i] - want[i]));
    return m / std::max(1e-30f, max_abs(want));
}
// x rounded to bf16 (what the kernels store).
std::vector<float> rounded(std::vector<float> v) {
    for (float& x : v) x = float(bf16(x));
    return v;
}
}  // namespace

TEST_CASE("gdn.cuh's constants are ref/gdn.h's", "[gdn_kernels]") {
    CHECK(GDN_L2_EPS_F == (float)ref::GDN_L2_EPS);
    CHECK(GDN_SOFTPLUS_MAX_F == (float)ref::GDN_SOFTPLUS_MAX);
    CHECK(GDN_CHUNK_ROWS == ref::GDN_CHUNK);  // kernel_sizes.h's, which gdn_chunk*.cuh and memory_plan.h size by
    CHECK(gdn_group(32) == 4);
    CHECK(gdn_group(48) == 8);
    CHECK(gdn_group(256) == 32);
}

TEST_CASE("gdn conv + SiLU + L2 norm, forward and backward, match ref::gdn_conv_* and ref::gdn_l2norm_*",
          "[gdn_kernels]") {
    for (int hd : gdn_head_dims) {
        const int B = 2, T = 67, h = hd == 256 ? 1 : 2, w = h * hd, C = 3 * w;
        const long N = (long)B * T;
        INFO("hd=" << hd << " h=" << h << " B=" << B << " T=" << T);
        auto p = rand_bf16(N * C, 11 + hd), cw = rand_bf16((size_t)C * 4, 12 + hd, -0.8f, 0.8f);
        // reference forward
        std::vector<float> u(N * C), c(N * C), r(N * 2 * h);
        ref::gdn_conv_forward(u.data(), C, c.data(), p.data(), cw.data(), B, T, C);
        ref::gdn_l2norm_forward(u.data(), C, r.data(), u.data(), C, N, h, hd);
        ref::gdn_l2norm_forward(u.data() + w, C, r.data() + N * h, u.data() + w, C, N, h, hd);
        std::vector<float> rr(N * 2 * h);  // the kernel's layout: per row, q's heads then k's
        for (long n = 0; n < N; n++)
            for (int j = 0; j < h; j++) rr[n * 2 * h + j] = r[n * h + j], rr[n * 2 * h + h + j] = r[N * h + n * h + j];
        Dev<bf16> dp_in(p), dcw(cw), du_out(N * C);
        Dev<float> dr(N * 2 * h);
        gdn_conv_forward(du_out.p, dr.p, dp_in.p, dcw.p, B, T, h, hd, 0);
        sync();
        const auto u_got = du_out.get();
        check_close(u_got, u, BF16_REL, 1e-6, "u");  // 4 products summed, a sigmoid and a scale: no cancellation
        check_close(dr.get(), rr, 1e-5, 0, "r");
        // backward, from the kernel's stored u (q, k normalised) and the reference's pre-activation c
        auto du = rand_bf16(N * C, 13 + hd);
        std::vector<float> dx = du, dpw(N * C), dw0 = rand_bf16((size_t)C * 4, 14 + hd), dw = dw0;
        ref::gdn_l2norm_backward(dx.data(), C, du.data(), C, u_got.data(), C, r.data(), N, h, hd);
        ref::gdn_l2norm_backward(dx.data() + w, C, du.data() + w, C, u_got.data() + w, C, r.data() + N * h, N, h, hd);
        ref::gdn_conv_backward(dpw.data(), dw.data(), dx.data(), C, c.data(), p.data(), cw.data(), B, T, C);
        Dev<bf16> ddu(du), ddp(N * C);
        Dev<float> ddw(dw0), scratch(gdn_conv_scratch_floats(B, T, C));
        gdn_conv_backward(ddp.p, ddw.p, ddu.p, du_out.p, dr.p, dp_in.p, dcw.p, B, T, h, hd, scratch.p, 0);
        sync();
        // dp: y . dy over hd and 4 taps summed, both may cancel (abs 1e-5); dw: N-row sums in another order
        check_close(ddp.get(), dpw, BF16_REL, 1e-5, "dp");
        check_close(ddw.get(), dw, 1e-5, 1e-6, "dconv_w");
        printf("gdn conv hd %3d: max err / max|want|: u %.2e  r %.2e  dp %.2e  dconv_w %.2e\n", hd, max_err(u_got, u),
               max_err(dr.get(), rr), max_err(ddp.get(), dpw), max_err(ddw.get(), dw));
    }
}

TEST_CASE("gdn gates beta, g forward and backward match ref::gdn_gates_* (softplus's threshold on both sides)",
          "[gdn_kernels]") {
    const int B = 3, T = 401, h = 5;  // N 1203: two blocks of the backward's 1024 rows
    const long N = (long)B * T;
    auto ba = rand_bf16(N * 2 * h, 21, -4.0f, 4.0f);
    for (long n = 0; n < N; n += 7) ba[n * 2 * h + h + n % h] = 24.0f;  // above GDN_SOFTPLUS_MAX with any dt_bias
    auto a_log = rand_bf16(h, 22), dt_bias = rand_bf16(h, 23);
    std::vector<float> beta(N * h), g(N * h);
    ref::gdn_gates_forward(beta.data(), g.data(), ba.data(), a_log.data(), dt_bias.data(), N, h);
    Dev<bf16> dba_in(ba), da(a_log), ddt(dt_bias);
    Dev<float> dbeta_out(N * h), dg_out(N * h);
    gdn_gates_forward(dbeta_out.p, dg_out.p, dba_in.p, da.p, ddt.p, N, h, 0);
    sync();
    check_close(dbeta_out.get(), beta, 1e-5, 0, "beta");  // fp32 out: libm differences only
    check_close(dg_out.get(), g, 1e-5, 0, "g");
    auto dbeta = rand_bf16(N * h, 24), dg = rand_bf16(N * h, 25);
    std::vector<float> dba(N * 2 * h), da0 = rand_bf16(h, 26), dd0 = rand_bf16(h, 27), dalog = da0, ddtb = dd0;
    ref::gdn_gates_backward(dba.data(), dalog.data(), ddtb.data(), dbeta.data(), dg.data(), ba.data(), beta.data(),
                            g.data(), a_log.data(), dt_bias.data(), N, h);
    Dev<float> ddbeta(dbeta), ddg(dg), dda(da0), dddt(dd0), scratch(gdn_gates_scratch_floats(N, h));
    Dev<bf16> ddba(N * 2 * h);
    gdn_gates_backward(ddba.p, dda.p, dddt.p, ddbeta.p, ddg.p, dba_in.p, dbeta_out.p, dg_out.p, da.p, ddt.p, N, h,
                       scratch.p, 0);
    sync();
    check_close(ddba.get(), dba, BF16_REL, 1e-6, "dba");  // products; 1 - beta near beta = 1 cancels
    check_close(dda.get(), dalog, 1e-5, 1e-6, "da_log");  // N-row sums, another order
    check_close(dddt.get(), ddtb, 1e-5, 1e-6, "ddt_bias");
    printf("gdn gates: max err / max|want|: beta %.2e  g %.2e  dba %.2e  da_log %.2e  ddt_bias %.2e\n",
           max_err(dbeta_out.get(), beta), max_err(dg_out.get(), g), max_err(ddba.get(), dba),
           max_err(dda.get(), dalog), max_err(dddt.get(), ddtb));
}

TEST_CASE("gdn gated RMSNorm forward and backward match ref::gdn_gated_norm_*", "[gdn_kernels]") {
    for (int hd : gdn_head_dims) {
        const int B = 2, T = 67, h = 3, w = h * hd;
        const long N = (long)B * T;
        const double eps = 1e-5;
        INFO("hd=" << hd << " h=" << h);
        auto o = rand_bf16(N * w, 31 + hd), z = rand_bf16(N * w, 32 + hd, -3.0f, 3.0f);
        auto wn = rand_bf16(hd, 33 + hd, 0.5f, 1.5f);
        std::vector<float> y(N * w), r(N * h);
        ref::gdn_gated_norm_forward(y.data(), r.data(), o.data(), z.data(), wn.data(), N, h, hd, eps);
        Dev<bf16> d_o(o), dz_in(z), dwn(wn), dy_out(N * w);
        Dev<float> dr(N * h);
        gdn_norm_forward(dy_out.p, dr.p, d_o.p, dz_in.p, dwn.p, N, h, hd, (float)eps, 0);
        sync();
        check_close(dy_out.get(), y, BF16_REL, 1e-6, "y");  // products of a sum of squares: no cancellation
        check_close(dr.get(), r, 1e-5, 0, "r");
        auto dy = rand_bf16(N * w, 34 + hd);
        std::vector<float> d_ow(N * w), dzw(N * w), g0 = rand_bf16(hd, 35 + hd), gw = g0;
        ref::gdn_gated_norm_backward(d_ow.data(), dzw.data(), gw.data(), dy.data(), o.data(), z.data(), r.data(),
                                     wn.data(), N, h, hd);
        Dev<bf16> ddy(dy), dd_o(N * w), ddz(N * w);
        Dev<float> dg(g0), scratch(gdn_norm_scratch_floats(N, hd));
        gdn_norm_backward(dd_o.p, ddz.p, dg.p, ddy.p, d_o.p, dz_in.p, dr.p, dwn.p, N, h, hd, scratch.p, 0);
        sync();
        check_close(dd_o.get(), d_ow, BF16_REL, 1e-5, "d_o");  // dy wn silu(z) - on m: cancels
        check_close(ddz.get(), dzw, BF16_REL, 1e-6, "dz");     // a product
        check_close(dg.get(), gw, 1e-5, 1e-6, "donorm_w");     // N h terms, another order
        printf("gdn gated norm hd %3d: max err / max|want|: y %.2e  r %.2e  d_o %.2e  dz %.2e  donorm_w %.2e\n", hd,
               max_err(dy_out.get(), y), max_err(dr.get(), r), max_err(dd_o.get(), d_ow), max_err(ddz.get(), dzw),
               max_err(dg.get(), gw));
    }
}

TEST_CASE("gdn one-token state update over many tokens matches the recurrent form's outputs and the chunked states",
          "[gdn_kernels]") {
    for (int hd : gdn_head_dims) {
        // Two chunks and a part for hd <= 128; one chunk and a part at 256 (the executor's time: hd^2 per token).
        const int B = 2, h = hd == 256 ? 1 : 2, T = hd == 256 ? 70 : 131, w = h * hd, C = 3 * w;
        const long N = (long)B * T;
        INFO("hd=" << hd << " h=" << h << " tokens=" << T);
        // q, k normalised as the model's are (then rounded: the kernel and the reference read the same values)
        auto qkv = rand_bf16(N * C, 41 + hd);
        std::vector<float> r(N * h);
        ref::gdn_l2norm_forward(qkv.data(), C, r.data(), qkv.data(), C, N, h, hd);
        ref::gdn_l2norm_forward(qkv.data() + w, C, r.data(), qkv.data() + w, C, N, h, hd);
        qkv = rounded(qkv);
        auto ba = rand_bf16(N * 2 * h, 42 + hd, -3.0f, 3.0f), a_log = rand_bf16(h, 43 + hd, -2.0f, 0.5f);
        auto dt_bias = rand_bf16(h, 44 + hd);
        std::vector<float> beta(N * h), g(N * h), o(N * w);
        ref::gdn_gates_forward(beta.data(), g.data(), ba.data(), a_log.data(), dt_bias.data(), N, h);
        ref::gdn_delta_recurrent_forward(o.data(), w, qkv.data(), qkv.data() + w, qkv.data() + 2 * w, C, beta.data(),
                                         g.data(), B, T, ref::GdnShape{h, hd});
        std::vector<float> o_chunk(N * w), states(B * h * ref::gdn_chunks(T) * hd * hd);
        ref::gdn_delta_chunk_forward(o_chunk.data(), w, states.data(), qkv.data(), qkv.data() + w, qkv.data() + 2 * w,
                                     C, beta.data(), g.data(), B, T, ref::GdnShape{h, hd});
        const long hd2 = (long)hd * hd;
        Dev<bf16> dqkv(qkv), dout(N * w);
        Dev<float> dbeta(beta), dg(g), S(std::vector<float>(B * h * hd2, 0.0f));
        double worst_state = 0;
        for (int t = 0; t < T; t++) {  // token t of every sequence: rows b T + t
            gdn_state_step(S.p, dout.p + (long)t * w, (long)T * w, dqkv.p + (long)t * C, (long)T * C, dbeta.p + t * h,
                           dg.p + t * h, (long)T * h, B, h, hd, 0);
            if ((t + 1) % ref::GDN_CHUNK != 0) continue;
            sync();
            const long ci = (t + 1) / ref::GDN_CHUNK;  // the chunked form's state at the start of chunk ci
            std::vector<float> want(B * h * hd2);
            for (long bh = 0; bh < B * h; bh++)
                std::copy_n(&states[(bh * ref::gdn_chunks(T) + ci) * hd2], hd2, &want[bh * hd2]);
            const auto got = S.get();
            INFO("state after " << t + 1 << " tokens");
            // fp32 both sides; the chunked form's products differ in order from the recurrent steps
            check_close(got, want, 1e-4, 1e-5, "S");
            worst_state = std::max(worst_state, max_err(got, want));
        }
        sync();
        // o: one bf16 rounding of an fp32 dot over hd that can cancel, from a state carried through T steps
        check_close(dout.get(), o, BF16_REL, 1e-5, "o");
        printf("gdn state update hd %3d, %d tokens: max err / max|want|: o %.2e  S %.2e\n", hd, T,
               max_err(dout.get(), o), worst_state);
    }
}
