// inspect/analysis.h: what `analyze` measures inside a model, per layer, on the fp32 CPU reference (ref/reference.h keeps
// every activation these need). Definitions (docs/inspect.md has them too), for a layer l of
// width w = w_l and h = h_l heads, over S sequences of T tokens (N = S T rows):
//   attention distance   D_{l,k} = mean over queries i of sum_{j <= i} a_ij (i - j), head k's probabilities a
//                        (positions 0-based within the window; mean over all S T queries). The layer's value is
//                        the mean over its heads. All attention on the token itself gives 0; uniform causal
//                        attention a_ij = 1 / (i + 1) gives i / 2 per query, (T - 1) / 4 over a window.
//   the window           a layer of window W (0: global) lets query i see keys j with i - W < j <= i, so its
//                        distances are at most r_i = min(i, W - 1) (global: r_i = i). Over a window of T tokens:
//                        reach R_l = mean over queries of r_i (global: (T - 1) / 2; W <= T: below W - 1);
//                        span use U_l = D_l / R_l in [0, 1], 1/2 for uniform attention over what the layer
//                        sees, near 1 for a layer that reads its farthest visible tokens, near 0 for one that reads
//                        the token itself; near-half mass = the fraction of attention mass on keys at distance
//                        i - j < S / 2, S = min(W, T) (global: T), the nearer half of the layer's span; and, in a
//                        model with windows (the smallest, W_min < T), beyond-local mass = the fraction at
//                        distance >= W_min, the part of a layer's attention that a W_min-window layer could not
//                        give (0 in a layer of window W_min; what a global layer of a local/global model adds).
//                        All per head, the layer's value the mean over its heads. A layer without attention
//                        (--no-attention) has none of these (NaN, shown as "-"), nor has a gdn layer (its mixer,
//                        Gated DeltaNet, forms no attention probabilities; its logit lens, matrix entropy and
//                        SwiGLU density are measured as any layer's); one without an MLP has no SwiGLU density.
//   attention entropy    H_{l,k} = mean over queries i of -sum_j a_ij ln a_ij, in nats (uniform causal attention:
//                        ln(i + 1) per query, ln(T!) / T over a window); the layer's value is its heads' mean.
//   logit lens           the residual stream after layer l (after the embedding for l = 0) read as the model reads
//                        its last one: the final norm over its first Df = max(d, w_L) coordinates, then the head
//                        over the first d of those. Reported: its cross-entropy loss on the next tokens, and top-1
//                        agreement: the fraction of positions whose argmax equals the model's own final argmax.
//                        At l = L it is the model itself (loss = the model's loss, agreement 1).
//   matrix entropy       of the layer's output Z: the stream after layer l over the coordinates the layer writes,
//                        [0, w), as an (N, w) matrix, each column centred (its mean over the N tokens removed).
//                        With its singular values s_1 >= s_2 >= ..., p_i = s_i / sum_j s_j (the normalised
//                        singular-value spectrum) and H = -sum_i p_i ln p_i; reported H / ln r with r = min(N - 1, w),
//                        the largest rank a centred (N, w) matrix can have: 1 when the spectrum is flat over r
//                        directions, 0 when one direction holds everything (exp(H) is Roy and Vetterli's effective
//                        rank). Not the numerical rank: a matrix of rank 1 would divide by ln 1 = 0, and noise
//                        directions would count as used. The numerical rank (singular values above
//                        s_1 max(N, w) 2^-23, numpy's matrix_rank rule at fp32) is reported beside it.
//   SwiGLU density       the fraction of (token, unit) pairs of the layer's SwiGLU output u = silu(x W_gate^T) *
//                        (x W_up^T) with |u| > tau RMS(u), RMS over the same sequence's T x hidden_l values of the
//                        layer, tau = 0.1 by default: scale-free, so layers of different widths and norms compare.
//                        (A Gaussian u gives 0.92; a unit mostly near zero lowers it.)
// The singular values come from the eigenvalues of the centred Gram matrix Z^T Z (w x w, accumulated in double over
// the sequences with a shift for stability), by Householder tridiagonalisation and implicit QL.
// Does not: run on the GPU (the CUDA engine keeps no attention probabilities), or read files (inspect/analyze.cpp does).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention_span.h"
#include "ref/gemm.h"
#include "ref/ops.h"
#include "ref/reference.h"
#include "model_config.h"

namespace analysis {

// ======================================================================================================
// attention: distance and entropy
// ======================================================================================================

// Sums over query rows of one head: distance += sum_j a_ij (i - j), entropy += -sum_j a_ij ln a_ij (0 ln 0 = 0),
// reach += r_i, near += the mass at 2 (i - j) < S, beyond += the mass at i - j >= W_min (see the top).
struct AttentionSums {
    double distance = 0, entropy = 0, reach = 0, near = 0, beyond = 0;
    long queries = 0;
    double mean_distance() const { return queries ? distance / queries : NAN; }
    double mean_entropy() const { return queries ? entropy / queries : NAN; }
    double mean_reach() const { return queries ? reach / queries : NAN; }
    double span_use() const { return reach > 0 ? distance / reach : NAN; }  // sum D_i / sum r_i = D / R
    double near_mass() const { return queries ? near / queries : NAN; }
};

// att (T, T): row i = query i's probabilities over keys j <= i (entries past i are ignored); window: the layer's
// (0: global); local_window: W_min of the model (0: none; then `beyond` stays 0 and means nothing).
template <typename S>
void add_attention(AttentionSums& sums, const S* att, int T, int window = 0, int local_window = 0) {
    const long span = window > 0 ? std::min(window, T) : T;
    for (int i = 0; i < T; i++) {
        const S* a = att + (size_t)i * T;
        double dist = 0, ent = 0, near = 0, beyond = 0;
        for (int j = 0; j <= i; j++) {
            dist += (double)a[j] * (i - j);
            if (a[j] > 0) ent -= (double)a[j] * std::log((double)a[j]);
            if (2L * (i - j) < span) near += a[j];
            if (local_window > 0 && i - j >= local_window) beyond += a[j];
        }
        sums.distance += dist, sums.entropy += ent, sums.near += near, sums.beyond += beyond, sums.queries++;
        sums.reach += i - att_first_key(i, window);  // the farthest key query i sees
    }
}

// ======================================================================================================
// matrix entropy
// ======================================================================================================

// Eigenvalues of the symmetric n x n matrix a (row-major; destroyed), ascending. Householder reduction to
// tridiagonal form, then the QL algorithm with implicit Wilkinson shifts (Numerical Recipes' tred2 and tqli,
// without eigenvectors): O(n^3), 1e-15 relative on the largest eigenvalue.
inline std::vector<double> symmetric_eigenvalues(std::vector<double> a, int n) {
    std::vector<double> d(n), e(n);
    auto A = [&](int i, int j) -> double& { return a[(size_t)i * n + j]; };
    for (int i = n - 1; i > 0; i--) {
        const int l = i - 1;
        double h = 0, scale = 0;
        if (l > 0) {
            for (int k = 0; k < i; k++) scale += std::fabs(A(i, k));
            if (scale == 0) {
                e[i] = A(i, l);
            } else {
                for (int k = 0; k < i; k++) A(i, k) /= scale, h += A(i, k) * A(i, k);
                double f = A(i, l), g = f >= 0 ? -std::sqrt(h) : std::sqrt(h);
                e[i] = scale * g;
                h -= f * g;
                A(i, l) = f - g;
                f = 0;
                for (int j = 0; j < i; j++) {
                    g = 0;
                    for (int k = 0; k <= j; k++) g += A(j, k) * A(i, k);
                    for (int k = j + 1; k < i; k++) g += A(k, j) * A(i, k);
                    e[j] = g / h;
                    f += e[j] * A(i, j);
                }
                const double hh = f / (h + h);
                for (int j = 0; j < i; j++) {
                    f = A(i, j);
                    e[j] = g = e[j] - hh * f;
                    for (int k = 0; k <= j; k++) A(j, k) -= f * e[k] + g * A(i, k);
                }
            }
        } else {
            e[i] = A(i, l);
        }
        d[i] = h;
    }
    for (int i = 0; i < n; i++) d[i] = A(i, i);
    for (int i = 1; i < n; i++) e[i - 1] = e[i];
    if (n > 0) e[n - 1] = 0;
    const double eps = 2.220446049250313e-16;
    for (int l = 0; l < n; l++) {
        int iter = 0, m;
        do {
            for (m = l; m < n - 1; m++)
                if (std::fabs(e[m]) <= eps * (std::fabs(d[m]) + std::fabs(d[m + 1]))) break;
            if (m != l) {
                if (iter++ == 60) throw std::runtime_error("matrix entropy: the eigenvalue iteration did not converge");
                double g = (d[l + 1] - d[l]) / (2.0 * e[l]), r = std::hypot(g, 1.0);
                g = d[m] - d[l] + e[l] / (g + (g >= 0 ? std::fabs(r) : -std::fabs(r)));
                double s = 1, c = 1, p = 0;
                int i;
                for (i = m - 1; i >= l; i--) {
                    double f = s * e[i], b = c * e[i];
                    e[i + 1] = (r = std::hypot(f, g));
                    if (r == 0) {
                        d[i + 1] -= p;
                        e[m] = 0;
                        break;
                    }
                    s = f / r, c = g / r;
                    g = d[i + 1] - p;
                    r = (d[i] - g) * s + 2.0 * c * b;
                    d[i + 1] = g + (p = s * r);
                    g = c * r - b;
                }
                if (r == 0 && i >= l) continue;
                d[l] -= p;
                e[l] = g;
                e[m] = 0;
            }
        } while (m != l);
    }
    std::sort(d.begin(), d.end());
    return d;
}

// The centred Gram matrix Z^T Z of rows added in blocks: sums of (x - shift) and (x - shift)(x - shift)^T in
// double, shift = the first row added (centring is shift-invariant, and the shift keeps a large common offset, a
// stream's typical state, from cancelling digits).
class Gram {
  public:
    explicit Gram(int w) : w_(w), shift_(w), sum_(w, 0.0), g_((size_t)w * w, 0.0) {}
    // rows (n, ld): columns [0, w) of each.
    template <typename S> void add(const S* rows, long n, long ld) {
        if (n <= 0) return;
        if (n_ == 0)
            for (int c = 0; c < w_; c++) shift_[c] = rows[c];
        std::vector<double> x((size_t)n * w_);
        for (long r = 0; r < n; r++)
            for (int c = 0; c < w_; c++) {
                x[(size_t)r * w_ + c] = (double)rows[r * ld + c] - shift_[c];
                sum_[c] += x[(size_t)r * w_ + c];
            }
        ref::gemm<double>(w_, w_, n, x.data(), 1, w_, x.data(), w_, 1, g_.data(), w_, true);  // g += x^T x
        n_ += n;
    }
    long rows() const { return n_; }
    int width() const { return w_; }
    // Z^T Z of the centred rows: g - sum sum^T / n.
    std::vector<double> centred() const {
        std::vector<double> c(g_);
        for (int i = 0; i < w_; i++)
            for (int j = 0; j < w_; j++) c[(size_t)i * w_ + j] -= sum_[i] * sum_[j] / (double)n_;
        return c;
    }

  private:
    int w_;
    long n_ = 0;
    std::vector<double> shift_, sum_, g_;
};

struct SpectrumEntropy {
    double entropy = NAN;     // H in nats
    double normalized = NAN;  // H / ln r (NaN when r < 2)
    long rank_bound = 0;      // r = min(N - 1, w)
    long numerical_rank = 0;  // singular values above s_1 max(N, w) 2^-23
};

// From the eigenvalues of Z^T Z (the squared singular values; tiny negative rounding clamped to 0), N rows.
inline SpectrumEntropy spectrum_entropy(const std::vector<double>& eig, long N) {
    SpectrumEntropy r;
    const long w = (long)eig.size();
    r.rank_bound = std::min(N - 1, w);
    std::vector<double> s;
    for (double x : eig) s.push_back(std::sqrt(std::max(0.0, x)));
    const double s1 = s.empty() ? 0 : *std::max_element(s.begin(), s.end());
    double total = 0;
    for (double x : s) total += x;
    for (double x : s) r.numerical_rank += s1 > 0 && x > s1 * (double)std::max(N, w) * 0x1.0p-23;
    if (total <= 0) return r;
    double H = 0;
    for (double x : s)
        if (x > 0) H -= x / total * std::log(x / total);
    r.entropy = H;
    if (r.rank_bound >= 2) r.normalized = H / std::log((double)r.rank_bound);
    return r;
}

inline SpectrumEntropy matrix_entropy(const Gram& g) {
    return spectrum_entropy(symmetric_eigenvalues(g.centred(), g.width()), g.rows());
}

// ======================================================================================================
// one model over S sequences
// ======================================================================================================

struct LayerStats {
    int layer = 0, width = 0, heads = 0;    // layer 1..L (0: the embedding, logit lens only)
    int kv_heads = 0, window = 0;           // the layer's K/V heads and window (0: global)
    bool attention = true, mlp = true;      // false: the sub-block is absent (its statistics NaN / empty)
    std::vector<double> distance, entropy;  // per head
    std::vector<double> span_use, near_mass, beyond_local;  // per head
    double distance_mean = NAN, entropy_mean = NAN;
    double reach = NAN;  // R_l: the mean farthest visible distance (the same for every head)
    double span_use_mean = NAN, near_mass_mean = NAN, beyond_local_mean = NAN;
    double lens_loss = NAN, lens_top1 = NAN;
    SpectrumEntropy matrix;
    double density = NAN;
};

struct ModelStats {
    double loss = NAN;  // the model's own mean loss over the S T targets
    long sequences = 0, tokens = 0;
    int local_window = 0;            // W_min: the smallest window below T of a layer with attention (0: none)
    std::vector<LayerStats> layers;  // [0] the embedding (lens only), then layers 1..L
};

// Runs the model (fp32 reference, B = 1) on `sequences` windows from next(inputs, targets) (T tokens each) and
// measures every layer. density_tau: the SwiGLU threshold (see the top).
inline ModelStats analyze_model(const ModelConfig& c, const std::vector<float>& params, int sequences, int T,
                                double density_tau, const std::function<void(int*, int*)>& next) {
    const int L = c.L(), D = c.D(), Df = c.Df(), d = c.d, V = c.V;
    const ParamLayout layout = param_layout(c);
    ref::RefModel<float> rm(c);
    rm.params = params;
    const float* Wout = rm.params.data() + (c.tied ? layout.wte : layout.lm_head);
    auto P = [&](size_t off) -> const float* { return off == SIZE_MAX ? nullptr : rm.params.data() + off; };

    int local_window = 0;  // W_min (a window of T or more is global over these windows)
    for (const LayerSpec& s : c.layers)
        if (s.softmax() && s.window > 0 && s.window < T && (!local_window || s.window < local_window))
            local_window = s.window;
    std::vector<std::vector<AttentionSums>> att(L);
    std::vector<Gram> grams;
    for (int l = 0; l < L; l++) {
        if (c.layers[l].softmax()) att[l].resize(c.layers[l].heads);  // a gdn layer has no probabilities
        grams.emplace_back(c.layers[l].width);
    }
    std::vector<double> lens_loss(L + 1, 0.0), density_hits(L, 0.0), density_total(L, 0.0);
    std::vector<long> lens_agree(L + 1, 0);
    double loss_sum = 0;
    std::vector<int> in(T), tg(T), final_top(T);
    std::vector<float> lnf((size_t)T * Df), mean(T), rstd(T), logits((size_t)T * V), lse(T), losses(T);
    for (int s = 0; s < sequences; s++) {
        next(in.data(), tg.data());
        loss_sum += rm.forward(in.data(), tg.data(), 1, T);
        for (int t = 0; t < T; t++) {
            const float* l = rm.logits() + (size_t)t * V;
            final_top[t] = (int)(std::max_element(l, l + V) - l);
        }
        for (int l = 0; l < L; l++) {
            const int hid = c.hidden_of(l);
            for (size_t k = 0; k < att[l].size(); k++)
                add_attention(att[l][k], rm.attention(l) + k * T * T, T, c.layers[l].window, local_window);
            grams[l].add(rm.residual_state(2 * l + 2), T, D);
            if (!c.layers[l].mlp) continue;  // no SwiGLU output to measure
            const float* u = rm.swiglu_out(l);
            double ss = 0;
            for (size_t i = 0; i < (size_t)T * hid; i++) ss += (double)u[i] * u[i];
            const double thr = density_tau * std::sqrt(ss / ((double)T * hid));
            for (size_t i = 0; i < (size_t)T * hid; i++) density_hits[l] += std::fabs(u[i]) > thr;
            density_total[l] += (double)T * hid;
        }
        for (int l = 0; l <= L; l++) {  // the lens after the embedding (l = 0) and after each layer
            ref::norm_forward(c.norm, lnf.data(), mean.data(), rstd.data(), rm.residual_state(2 * l), D,
                              P(layout.lnf_w), P(layout.lnf_b), T, Df, c.norm_eps);
            ref::matmul_forward(logits.data(), V, lnf.data(), Df, Wout, T, d, V);
            ref::scale_forward(logits.data(), (long)T * V, c.logit_scale());  // the head's multiplier (muP)
            ref::softmax_crossentropy_forward((float*)nullptr, lse.data(), losses.data(), logits.data(), tg.data(), T,
                                              V);
            lens_loss[l] += ref::mean_loss(losses.data(), tg.data(), T);
            for (int t = 0; t < T; t++) {
                const float* lg = logits.data() + (size_t)t * V;
                lens_agree[l] += (int)(std::max_element(lg, lg + V) - lg) == final_top[t];
            }
        }
    }
    ModelStats m;
    m.sequences = sequences, m.tokens = (long)sequences * T, m.loss = loss_sum / sequences;
    m.local_window = local_window;
    m.layers.resize(L + 1);
    for (int l = 0; l <= L; l++) {
        LayerStats& ls = m.layers[l];
        ls.layer = l;
        ls.lens_loss = lens_loss[l] / sequences;
        ls.lens_top1 = (double)lens_agree[l] / m.tokens;
        if (l == 0) continue;
        const LayerSpec& spec = c.layers[l - 1];
        ls.width = spec.width, ls.heads = spec.heads, ls.kv_heads = spec.kv(), ls.window = spec.window;
        ls.attention = spec.attention, ls.mlp = spec.mlp;
        const std::vector<AttentionSums>& heads = att[l - 1];
        auto mean = [&](const std::vector<double>& v) {
            double sum = 0;
            for (double x : v) sum += x;
            return v.empty() ? NAN : sum / v.size();
        };
        for (const AttentionSums& a : heads) {
            ls.distance.push_back(a.mean_distance()), ls.entropy.push_back(a.mean_entropy());
            ls.span_use.push_back(a.span_use()), ls.near_mass.push_back(a.near_mass());
            if (local_window) ls.beyond_local.push_back(a.beyond / a.queries);
        }
        ls.distance_mean = mean(ls.distance), ls.entropy_mean = mean(ls.entropy);
        ls.span_use_mean = mean(ls.span_use), ls.near_mass_mean = mean(ls.near_mass);
        ls.beyond_local_mean = mean(ls.beyond_local);
        if (!heads.empty()) ls.reach = heads[0].mean_reach();
        ls.matrix = matrix_entropy(grams[l - 1]);
        if (spec.mlp) ls.density = density_hits[l - 1] / density_total[l - 1];
    }
    return m;
}

}  // namespace analysis
