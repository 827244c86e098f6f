// model_config.h: what a model is. A ModelConfig is d, V, T, L, an MLP rule, a norm type, tied or untied
// embeddings, and one LayerSpec per layer: {w_l, h_l} and, each defaulting to today's layer, KV heads kv_l (GQA),
// the MLP's hidden size, an attention window, RoPE, the token mixer (softmax attention or Gated DeltaNet), and
// whether the layer has attention and an MLP at all. Uniform,
// Prism (per-layer head counts), Xformer (per-layer widths), OpenELM-style (heads and MLP scaled with depth),
// GQA, local/global and pruned (no-op sub-block) models are the same struct with different LayerSpecs, so every
// other file (reference, kernels, decoders, checkpoints, the Hugging Face export) has one code path.
//
// Also here: the parameter layout and parameter / FLOP / KV-cache / recurrent-state accounting. How a config is built from what the
// user asks for (presets, schedules, the per-layer columns' flags) and validated is model/'s. Pure C++17, no CUDA,
// no I/O.
//
// Sizes: B batch, T sequence, d model (embedding) width, w_l layer width, h_l heads, head_dim = w_l / h_l,
// kv_l K/V heads (h_l a multiple of it), hidden_l the SwiGLU intermediate size, D = max(d, max w_l) the residual
// stream width, V vocabulary, L layers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "layer_spec.h"

enum class NormType : int { LayerNorm = 0, RMSNorm = 1 };

inline const char* norm_name(NormType n) { return n == NormType::LayerNorm ? "layernorm" : "rmsnorm"; }

struct ModelConfig {
    int d = 768;                   // embedding width: the embedding writes [0, d), the output head reads [0, d)
    int V = 50257;                 // vocabulary size (the GPU pads it to Vp internally; checkpoints store V rows)
    int T = 1024;                  // maximum context length
    int h_base = 12;               // the uniform model's head count (Prism: h_L must equal it)
    double mlp_ratio = 8.0 / 3.0;  // SwiGLU hidden_l = mlp_ratio * w_l rounded to a multiple of mlp_multiple
    int mlp_multiple = 32;         //   (8/3 keeps a 3-matrix SwiGLU at the 8 w^2 parameters of a GPT-2 MLP)
    NormType norm = NormType::LayerNorm;
    bool tied = true;               // output head shares the token embedding (V, d)
    bool mup_attn = false;          // attention scale 1/head_dim (muP, Xformer recipe) instead of 1/sqrt(head_dim)
    bool init_width_scale = false;  // scale layer l's init std by sqrt(d / w_l) (Xformer recipe)
    int mup_base_d = 0;             // muP's base width (--param mup, docs/model.md); 0: the standard parameterisation
    double rope_theta = 10000.0;
    double norm_eps = 1e-5;
    std::vector<LayerSpec> layers;  // L entries

    int L() const { return (int)layers.size(); }
    // SwiGLU intermediate size of a layer of width w. Never below one quantum so tiny widths still have an MLP.
    int hidden(int w) const {
        long q = mlp_multiple > 0 ? mlp_multiple : 1;
        long h = std::lround(mlp_ratio * w / (double)q) * q;
        return (int)std::max<long>(h, q);
    }
    // Layer l's SwiGLU intermediate size: its own (--mlp), else the rule's; 0 for a layer without an MLP.
    int hidden_of(int l) const {
        const LayerSpec& s = layers[l];
        return !s.mlp ? 0 : s.hidden ? s.hidden : hidden(s.width);
    }
    // Residual stream width: wide enough for the embedding and for every layer.
    int D() const {
        int m = d;
        for (const auto& s : layers) m = std::max(m, s.width);
        return m;
    }
    // The final norm covers [0, Df). docs/papers.md says [0, w_L); we take max(w_L, d) so that the output head,
    // which reads [0, d), never sees unnormalised coordinates when the last layer is narrower than d
    // (lambda shapes). Identical to the paper whenever w_L >= d, as in every X shape.
    int Df() const { return layers.empty() ? d : std::max(d, layers.back().width); }
    // muP's base_d / d (1 without muP): the output logits' multiplier (the layers' matrices take base_d / w_l,
    // optimizer_rates.h's mup_layer_ratio).
    double mup_width_ratio() const { return mup_base_d ? (double)mup_base_d / d : 1.0; }
    double logit_scale() const { return mup_width_ratio(); }
    bool uniform_widths() const {
        for (const auto& s : layers)
            if (s.width != d) return false;
        return true;
    }
};

// Checks that hold for every model that can run: positive sizes, then every layer column's bounds and rule (h_l
// divides w_l, even head_dim: RoPE rotates pairs, ...). Used on built configs and on configs read back from
// checkpoints and config.json. Defined in model/build.cpp, over model/layer_columns.h's table.
void validate_config(const ModelConfig& c);

// Every scalar of a ModelConfig (its layers are model/layer_columns.h's), declared once: its name, its model.bin
// header word (a double takes two: docs/formats.md), its bounds, and how to read and write it as a double.
// model.bin's header (run/checkpoint.h) and a resume's identity check (run/run.h's model_difference) loop over it, so
// a field added here joins both; test/test_checkpoints.cpp fails when ModelConfig gains a field it does not hold.
struct ModelScalar {
    const char* name;
    int word;
    bool is_double;
    double lo, hi;
    double (*get)(const ModelConfig&);
    void (*set)(ModelConfig&, double);
};

inline const std::vector<ModelScalar>& model_scalars() {
    using C = ModelConfig;
    static const std::vector<ModelScalar> s = {
        {"d", 2, false, 1, 65536, [](const C& c) { return (double)c.d; }, [](C& c, double v) { c.d = (int)v; }},
        {"V", 3, false, 1, 1 << 24, [](const C& c) { return (double)c.V; }, [](C& c, double v) { c.V = (int)v; }},
        {"T", 4, false, 1, 1 << 20, [](const C& c) { return (double)c.T; }, [](C& c, double v) { c.T = (int)v; }},
        {"h_base", 6, false, 1, 65536, [](const C& c) { return (double)c.h_base; },
         [](C& c, double v) { c.h_base = (int)v; }},
        {"norm", 7, false, 0, 1, [](const C& c) { return (double)(int)c.norm; },
         [](C& c, double v) { c.norm = (NormType)(int)v; }},
        {"tied", 8, false, 0, 1, [](const C& c) { return (double)c.tied; }, [](C& c, double v) { c.tied = v != 0; }},
        {"mup_attn", 9, false, 0, 1, [](const C& c) { return (double)c.mup_attn; },
         [](C& c, double v) { c.mup_attn = v != 0; }},
        {"init_width_scale", 10, false, 0, 1, [](const C& c) { return (double)c.init_width_scale; },
         [](C& c, double v) { c.init_width_scale = v != 0; }},
        {"mlp_multiple", 11, false, 1, 65536, [](const C& c) { return (double)c.mlp_multiple; },
         [](C& c, double v) { c.mlp_multiple = (int)v; }},
        {"mup_base_d", 29, false, 0, 65536, [](const C& c) { return (double)c.mup_base_d; },
         [](C& c, double v) { c.mup_base_d = (int)v; }},
        {"mlp_ratio", 16, true, 1e-3, 64, [](const C& c) { return c.mlp_ratio; },
         [](C& c, double v) { c.mlp_ratio = v; }},
        {"rope_theta", 18, true, 1, 1e12, [](const C& c) { return c.rope_theta; },
         [](C& c, double v) { c.rope_theta = v; }},
        {"norm_eps", 20, true, 1e-20, 1, [](const C& c) { return c.norm_eps; }, [](C& c, double v) { c.norm_eps = v; }},
    };
    return s;
}

// ------------------------------------------------------------------------------------------------------
// Parameter layout: one flat block, in this order (checkpoints, the reference and the GPU model all use it).
// Matrices are row-major (out, in) so that y = x W^T, as in PyTorch and llm.c.
//   wte       (V, d)              token embedding (and the output head when tied)
//   per layer l = 0..L-1, with w = w_l, hid = hidden_l, kw = kv_l * head_dim (= w without GQA):
//     ln1_w   (w)                 pre-attention norm weight
//     ln1_b   (w)                 pre-attention norm bias (LayerNorm only)
//     wqkv    (w + 2 kw, w)       rows [0,w) q, [w,w+kw) k, [w+kw,w+2kw) v; head j owns rows j*head_dim..+head_dim
//                                 of its part; query head j reads K/V head j / (h_l / kv_l)
//     wo      (w, w)              attention output projection (a residual output projection)
//                                 (ln1_*, wqkv and wo are absent from a layer without attention)
//     a gdn layer (mixer 1, docs/model.md), with h = h_l, hd = w / h, in place of the attention tensors above:
//     ln1_w, ln1_b (w) as attention's, then
//     wqkv    (3w, w)             rows [0,w) q, [w,2w) k, [2w,3w) v; head j owns rows j*hd..+hd of each part
//     conv_w  (3w, 4)             the causal depthwise convolution over time: channel ch's 4 taps, oldest first
//     wz      (w, w)              the output gate's projection
//     wba     (2h, w)             rows [0,h) beta's, [h,2h) the decay's (one per head)
//     a_log   (h)                 log A: the decay's scale
//     dt_bias (h)                 the decay's softplus bias
//     onorm_w (hd)                the gated RMSNorm's weight, shared by the heads
//     wo      (w, w)              output projection (a residual output projection)
//     ln2_w   (w)                 (ln2_*, wfc and wproj are absent from a layer without an MLP)
//     ln2_b   (w)                 (LayerNorm only)
//     wfc     (2 hid, w)          rows [0,hid) gate, [hid,2hid) up: SwiGLU(x) = silu(x Wg^T) * (x Wu^T)
//     wproj   (w, hid)            MLP down projection (a residual output projection)
//   lnf_w     (Df)                final norm weight
//   lnf_b     (Df)                (LayerNorm only)
//   lm_head   (V, d)              untied output head only
// ------------------------------------------------------------------------------------------------------
struct ParamTensor {
    std::string name;   // e.g. "h3.wqkv"
    size_t offset;      // in elements, into the flat block
    size_t rows, cols;  // cols == 1 for vectors
    bool is_matrix;     // AdamW weight decay applies to matrices (embeddings included), never to norms
    int layer;          // -1 for wte / lnf / lm_head
    size_t numel() const { return rows * cols; }
};

struct LayerOffsets {  // SIZE_MAX: a tensor the layer does not have (ln*_b for RMSNorm, conv_w.. in attention)
    size_t ln1_w = SIZE_MAX, ln1_b = SIZE_MAX, wqkv = SIZE_MAX, wo = SIZE_MAX, ln2_w = SIZE_MAX, ln2_b = SIZE_MAX,
           wfc = SIZE_MAX, wproj = SIZE_MAX;
    size_t conv_w = SIZE_MAX, wz = SIZE_MAX, wba = SIZE_MAX, a_log = SIZE_MAX, dt_bias = SIZE_MAX,
           onorm_w = SIZE_MAX;  // a gdn layer's own
    // Every field, for code that moves them all (memory_plan.h's device layout).
    template <class F> void each(F f) {
        for (size_t* o :
             {&ln1_w, &ln1_b, &wqkv, &wo, &ln2_w, &ln2_b, &wfc, &wproj, &conv_w, &wz, &wba, &a_log, &dt_bias, &onorm_w})
            f(*o);
    }
};

struct ParamLayout {
    std::vector<ParamTensor> tensors;
    size_t wte = 0, lnf_w = 0, lnf_b = SIZE_MAX, lm_head = SIZE_MAX;
    std::vector<LayerOffsets> layer;
    size_t total = 0;
};

inline ParamLayout param_layout(const ModelConfig& c) {
    ParamLayout p;
    auto add = [&](const std::string& name, size_t rows, size_t cols, bool matrix, int layer) {
        size_t off = p.total;
        p.tensors.push_back({name, off, rows, cols, matrix, layer});
        p.total += rows * cols;
        return off;
    };
    bool ln = c.norm == NormType::LayerNorm;
    p.wte = add("wte", c.V, c.d, true, -1);
    for (int l = 0; l < c.L(); l++) {
        const LayerSpec& s = c.layers[l];
        size_t w = s.width, hid = c.hidden_of(l);
        std::string h = "h" + std::to_string(l) + ".";
        LayerOffsets o;
        if (s.attention) {
            o.ln1_w = add(h + "ln1_w", w, 1, false, l);
            o.ln1_b = ln ? add(h + "ln1_b", w, 1, false, l) : SIZE_MAX;
        }
        if (s.softmax()) o.wqkv = add(h + "wqkv", s.qkv_rows(), w, true, l);
        if (s.gdn()) {
            const size_t nh = s.heads;
            o.wqkv = add(h + "wqkv", 3 * w, w, true, l);
            o.conv_w = add(h + "conv_w", 3 * w, 4, true, l);
            o.wz = add(h + "wz", w, w, true, l);
            o.wba = add(h + "wba", 2 * nh, w, true, l);
            o.a_log = add(h + "a_log", nh, 1, false, l);
            o.dt_bias = add(h + "dt_bias", nh, 1, false, l);
            o.onorm_w = add(h + "onorm_w", s.head_dim(), 1, false, l);
        }
        if (s.attention) o.wo = add(h + "wo", w, w, true, l);
        if (s.mlp) {
            o.ln2_w = add(h + "ln2_w", w, 1, false, l);
            o.ln2_b = ln ? add(h + "ln2_b", w, 1, false, l) : SIZE_MAX;
            o.wfc = add(h + "wfc", 2 * hid, w, true, l);
            o.wproj = add(h + "wproj", w, hid, true, l);
        }
        p.layer.push_back(o);
    }
    p.lnf_w = add("lnf_w", c.Df(), 1, false, -1);
    if (ln) p.lnf_b = add("lnf_b", c.Df(), 1, false, -1);
    if (!c.tied) p.lm_head = add("lm_head", c.V, c.d, true, -1);
    return p;
}

// Whether some layer's mixer is Gated DeltaNet.
inline bool has_gdn(const ModelConfig& c) {
    return std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& s) { return s.gdn(); });
}

// The uniform model a schedule is compared with: same d, L, T, V, MLP rule, norm and head; every layer d wide
// with h_base heads.
inline ModelConfig uniform_baseline(const ModelConfig& c) {
    ModelConfig u = c;
    for (auto& s : u.layers) s = {c.d, c.h_base};
    return u;
}

// ------------------------------------------------------------------------------------------------------
// Accounting. FLOPs are forward FLOPs per token (multiply-add = 2): every matmul, plus attention's QK^T and AV
// over the keys a query attends to, counted as the full square: T keys at context T for a global layer (4 T w_l
// per layer, the convention of PaLM's MFU formula and llm.c; causal masking halves the useful part), min(W, T)
// for a layer of window W. GQA does not change them (every query head still scores every key it attends to).
// Training FLOPs are 3x forward. KV-cache bytes are for bf16 K and V: 2 * 2 * kv_l * head_dim per layer per
// token cached (w_l without GQA, 0 without attention); at context T a window layer caches only its last
// min(W, T) tokens, so `kv_cache_bytes` (one sequence of T tokens) is where a window saves.
// A gdn layer (docs/model.md has its formulas) caches no keys: its matmuls (wqkv, wz, wba, wo: 5 w^2 + 2 h w) count
// as matrices, the conv (24 w per token) and the chunked delta rule (h (6 hd^2 + 10 C hd + 2/3 C^2) per token, C =
// min(64, T) the chunk) as its mixing FLOPs, and its recurrent state (fp32 S, h hd^2, and the conv's bf16 last 3
// inputs, 3 x 3w) as `state_bytes` per sequence, constant in T.
//
// Two counts, because the Xformer paper matches parameters after discounting "dead" weights: the first layer's
// input columns beyond d of its first matrix (inputs the embedding never writes: wqkv's, or wfc's in a layer
// without attention) and the last layer's output rows beyond d of its last matrix (outputs the head never reads:
// wproj's, or wo's in a layer without an MLP; a gdn first layer's wqkv, wz and wba all read the normed stream
// [0, w_1), so all three have dead input columns). `matched_params` and `flops_per_token` discount them as the paper
// does; `params` and `dense_flops_per_token` count everything a dense implementation stores and executes (use
// these for memory and MFU). For models with w_1, w_L <= d (uniform, Prism) the two counts are equal.
// ------------------------------------------------------------------------------------------------------

struct LayerCost {
    int width, heads, kv_heads, head_dim, hidden, window;  // window 0: global
    bool attention, mlp;
    int mixer;                     // 0 softmax attention, 1 gdn (LayerSpec::mixer)
    long long params;              // every tensor the layer has: norms, matrices, a gdn layer's conv and vectors
    long long matrix_params;       // the matmuls: wqkv + wo + wfc + wproj, and a gdn layer's wz + wba
    long long dead_params;         // of those, discounted by the paper's count (first and last layer only)
    double mixing_flops;           // per token, beyond the matmuls: attention's 4 keys w, keys = T or min(W, T);
                                   // a gdn layer's conv and chunked delta rule
    double flops_per_token;        // 2 (matrix_params - dead_params) + mixing_flops
    double dense_flops_per_token;  // 2 matrix_params + mixing_flops
    long long kv_bytes_per_token;  // per token cached (0 in a gdn layer)
    long long kv_cache_bytes;      // one sequence at context T: kv_bytes_per_token x keys
    long long state_bytes;         // one sequence's recurrent state, constant in T (a gdn layer's; 0 otherwise)
};

struct Accounting {
    std::vector<LayerCost> layers;
    long long params = 0;          // everything: embeddings, layers, final norm, head
    long long layer_params = 0;    // all layer tensors
    long long matched_params = 0;  // as the Xformer paper counts: layer matrices minus dead weights
    double flops_per_token = 0;    // forward, paper count, including the output head's 2 d V
    double dense_flops_per_token = 0;
    long long kv_bytes_per_token = 0;
    long long kv_cache_bytes = 0;  // one sequence at context T
    long long state_bytes = 0;     // one sequence's recurrent state (gdn layers), constant in T
    double avg_width = 0;
};

// Layer l's costs (its own tensors, and the dead weights of the first and last layer, which depend on d and L).
inline LayerCost layer_cost(const ModelConfig& c, int l) {
    const int L = c.L(), norm_vecs = c.norm == NormType::LayerNorm ? 2 : 1;
    const LayerSpec& s = c.layers[l];
    const bool gdn = s.gdn();
    long long w = s.width, hid = c.hidden_of(l), qkv = gdn ? 3 * w : s.attention ? s.qkv_rows() : 0;
    const long long keys = !s.softmax() ? 0 : s.window ? std::min(s.window, c.T) : c.T;
    const long long nh = s.heads, hd = s.head_dim();
    LayerCost lc;
    lc.width = (int)w;
    lc.heads = s.heads;
    lc.kv_heads = s.kv();
    lc.head_dim = s.head_dim();
    lc.hidden = (int)hid;
    lc.window = s.window;
    lc.attention = s.attention, lc.mlp = s.mlp, lc.mixer = s.mixer;
    // The matrices that read the normed stream [0, w) (the first layer's dead input columns are theirs): wqkv, and
    // a gdn layer's wz (w rows) and wba (2 h rows) too.
    const long long in_rows = qkv + (gdn ? w + 2 * nh : 0);
    const long long attn = s.attention ? in_rows * w + w * w : 0, mlp = 3 * w * hid;
    lc.matrix_params = attn + mlp;
    // A gdn layer's conv (3w x 4), a_log and dt_bias (h each), onorm_w (hd).
    const long long gdn_vectors = gdn ? 12 * w + 2 * nh + hd : 0;
    lc.params = lc.matrix_params + gdn_vectors + ((int)s.attention + (int)s.mlp) * norm_vecs * w;
    lc.dead_params = 0;
    if (l == 0 && w > c.d) lc.dead_params += (s.attention ? in_rows : 2 * hid) * (w - c.d);
    if (l == L - 1 && w > c.d) lc.dead_params += (s.mlp ? hid : w) * (w - c.d);
    const double C = std::min(64, c.T);  // the chunk of the chunked delta rule
    lc.mixing_flops = gdn ? 24.0 * w + nh * (6.0 * hd * hd + 10.0 * C * hd + 2.0 / 3.0 * C * C) : 4.0 * keys * w;
    lc.flops_per_token = 2.0 * (lc.matrix_params - lc.dead_params) + lc.mixing_flops;
    lc.dense_flops_per_token = 2.0 * lc.matrix_params + lc.mixing_flops;
    lc.kv_bytes_per_token = s.softmax() ? 2 * 2 * (long long)s.kv_width() : 0;
    lc.kv_cache_bytes = lc.kv_bytes_per_token * keys;
    lc.state_bytes = gdn ? 4 * nh * hd * hd + 2 * 3 * 3 * w : 0;
    return lc;
}

inline Accounting account(const ModelConfig& c) {
    Accounting a;
    a.params = (long long)param_layout(c).total;
    const int L = c.L();
    for (int l = 0; l < L; l++) {
        const LayerCost lc = layer_cost(c, l);
        a.layers.push_back(lc);
        a.layer_params += lc.params;
        a.matched_params += lc.matrix_params - lc.dead_params;
        a.flops_per_token += lc.flops_per_token;
        a.dense_flops_per_token += lc.dense_flops_per_token;
        a.kv_bytes_per_token += lc.kv_bytes_per_token;
        a.kv_cache_bytes += lc.kv_cache_bytes;
        a.state_bytes += lc.state_bytes;
        a.avg_width += (double)lc.width / L;
    }
    a.flops_per_token += 2.0 * c.d * c.V;
    a.dense_flops_per_token += 2.0 * c.d * c.V;
    return a;
}
