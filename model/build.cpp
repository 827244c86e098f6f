// model/build.cpp: the bodies of model/spec.h's functions, and validate_config's (declared in model_config.h).
#include "model/spec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/layer_columns.h"

ModelConfig preset_sizes(const ModelSpec& s, int& L) {
    const Preset& p = find_preset(s.preset);
    ModelConfig c;
    c.d = s.d ? s.d : p.d;
    c.T = s.T ? s.T : p.T;
    c.V = s.V ? s.V : 50257;
    c.h_base = s.h_base ? s.h_base : p.h_base;
    c.mlp_ratio = s.mlp_ratio > 0 ? s.mlp_ratio : p.mlp_ratio;
    if (s.mlp_multiple) c.mlp_multiple = s.mlp_multiple;
    c.norm = s.norm.empty() ? p.norm : parse_norm(s.norm);
    c.tied = s.untied < 0 ? p.tied : s.untied == 0;
    c.mup_attn = p.xformer_recipe;
    c.init_width_scale = p.xformer_recipe;
    if (s.param != "sp" && s.param != "mup")
        throw ConfigError("unknown parameterisation '" + s.param + "'; use sp or mup");
    if (s.mup_base_d && s.param != "mup")
        throw ConfigError("--mup-base-d applies only with --param mup; add --param mup or drop it");
    if (s.param == "mup") {  // muP (docs/model.md): attention 1/head_dim, logits x base_d / d, base_d the preset's d
        c.mup_attn = true;
        c.mup_base_d = s.mup_base_d ? s.mup_base_d : p.d;
    }
    L = s.L ? s.L : p.L;
    for (int v : {c.d, L, c.h_base, c.T, c.V, s.head_dim, s.mlp_multiple})
        if (v < 0) throw ConfigError("sizes must be positive");
    if (L <= 0) throw ConfigError("L (--layers) must be positive");
    if (L > 10000) throw ConfigError("L (--layers) is out of range");
    return c;
}

std::vector<int> build_widths(const ModelSpec& s, const ModelConfig& c, int L) {
    if (s.widths == "uniform") return std::vector<int>(L, c.d);
    if (s.widths == "x" || s.widths == "v" || s.widths == "lambda" || s.widths == "3") {
        WidthShape sh = s.shape;
        sh.name = s.widths;
        // Every width a multiple of what the head rule needs (a fixed head_dim, or h_base heads of even head_dim),
        // so that no solved width is refused below: lcm(quantum, that).
        const long need = s.head_dim > 0 ? s.head_dim : 2L * c.h_base, q = sh.quantum;
        long g = q, b = need;
        while (b) g %= b, std::swap(g, b);
        if (q / g * need > 65536)
            throw ConfigError("width quantum " + std::to_string(q) + " and the head rule's " + std::to_string(need) +
                              " have no common multiple below 65536");
        sh.quantum = (int)(q / g * need);
        return solve_widths(sh, c.d, L, c.mlp_ratio);
    }
    if (!is_list(s.widths))
        throw ConfigError("unknown width schedule '" + s.widths + "'; use uniform, x, v, lambda, 3 or a list");
    std::vector<int> w = parse_layer_list(s.widths, "width schedule");
    if ((int)w.size() != L)
        throw ConfigError("width schedule has " + std::to_string(w.size()) + " entries but the model has " +
                          std::to_string(L) + " layers; give one width per layer");
    for (int l = 0; l < L; l++)
        if (w[l] % s.shape.quantum != 0 && w[l] != c.d)
            throw ConfigError("layer " + std::to_string(l + 1) + ": width " + std::to_string(w[l]) +
                              " is not a multiple of the width quantum " + std::to_string(s.shape.quantum) +
                              "; round it or set --width-quantum");
    return w;
}

std::vector<int> base_heads(const ModelSpec& s, const ModelConfig& c, const std::vector<int>& w) {
    std::vector<int> base(w.size(), c.h_base);
    for (size_t l = 0; l < w.size() && s.head_dim > 0; l++) {
        if (w[l] % s.head_dim != 0)
            throw ConfigError("layer " + std::to_string(l + 1) + ": width " + std::to_string(w[l]) +
                              " is not a multiple of --head-dim " + std::to_string(s.head_dim));
        base[l] = w[l] / s.head_dim;
    }
    return base;
}

std::vector<int> build_heads(const ModelSpec& s, const std::vector<int>& base, const std::vector<int>& w) {
    const int L = (int)base.size();
    std::vector<int> h(L);
    if (s.heads == "uniform") return base;
    if (s.heads == "prism") {
        std::vector<int> m = prism_multipliers(L);
        for (int l = 0; l < L; l++) {
            if (base[l] % m[l] != 0)
                throw ConfigError("prism preset: layer " + std::to_string(l + 1) + " needs " + std::to_string(base[l]) +
                                  " / " + std::to_string(m[l]) + " heads, which is not whole; give -s as a list");
            h[l] = base[l] / m[l];
        }
    } else if (s.heads == "openelm" || s.heads.compare(0, 8, "openelm:") == 0) {
        // OpenELM's head scaling at Prism's fixed layer width: heads grow linearly with depth from LO to HI times
        // the baseline, each rounded to the nearest count that divides w_l with an even head_dim.
        const auto r = parse_range(s.heads, "openelm", kOpenElmHeads[0], kOpenElmHeads[1], "head schedule");
        for (int l = 0; l < L; l++) h[l] = nearest_head_count(layerwise(r.first, r.second, l, L) * base[l], w[l]);
    } else if (is_list(s.heads)) {
        h = parse_layer_list(s.heads, "head schedule");
        if ((int)h.size() != L)
            throw ConfigError("head schedule has " + std::to_string(h.size()) + " entries but the model has " +
                              std::to_string(L) + " layers; give one head count per layer (e.g. 3x3,6x3,12x6)");
    } else {
        throw ConfigError("unknown head schedule '" + s.heads +
                          "'; use uniform, prism, openelm, openelm:LO-HI or a list like 3x3,6x3,12x6");
    }
    return h;
}

std::string layers_text(const std::vector<int>& ls) {
    std::string t = ls.size() == 1 ? "layer " : "layers ";
    for (size_t i = 0; i < ls.size(); i++) t += (i ? ", " : "") + std::to_string(ls[i] + 1);
    return t;
}

void model_warnings(const ModelConfig& c, std::vector<std::string>& warnings) {
    std::vector<int> global, narrow;
    int narrowest = 1 << 30;
    for (int l = 0; l < c.L(); l++) {
        const LayerSpec& ls = c.layers[l];
        if (!ls.attention) continue;
        if (ls.window >= c.T) global.push_back(l);
        // Heads narrower than 16 barely learn (at head_dim 2 to 4 a tiny model's attention stays uniform).
        if (ls.head_dim() < 16) narrow.push_back(l), narrowest = std::min(narrowest, ls.head_dim());
    }
    if (!global.empty()) {
        int lo = 1 << 30, hi = 0;
        for (int l : global) lo = std::min(lo, c.layers[l].window), hi = std::max(hi, c.layers[l].window);
        warnings.push_back(layers_text(global) +
                           (lo == hi ? ": window " + std::to_string(lo) + " is"
                                     : ": windows " + std::to_string(lo) + " to " + std::to_string(hi) + " are") +
                           " not below T = " + std::to_string(c.T) + ", so " +
                           (global.size() > 1 ? "they attend" : "the layer attends") + " globally");
    }
    if (!narrow.empty())
        warnings.push_back(layers_text(narrow) + ": head_dim below 16 (down to " + std::to_string(narrowest) +
                           "); such narrow heads learn little: use fewer heads (--heads, -s) or --head-dim");
    if (std::none_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& s) { return s.attention; }))
        warnings.push_back(
            "no layer has attention (--no-attention covers every layer): no token sees another, so "
            "the model predicts from the current token alone");
}

void check_head_schedule(const ModelSpec& s, const std::vector<int>& base, const std::vector<int>& h,
                         std::vector<std::string>& warnings) {
    const int L = (int)h.size();
    // A head schedule that is the uniform one (-s prism below 4 layers) would be compared with itself unawares.
    if (h == base)
        warnings.push_back("head schedule '" + s.heads +
                           "' gives every layer its baseline heads: this is the uniform "
                           "model" +
                           (s.heads == "prism" ? " (the Prism schedule needs 4 or more layers; this model has " +
                                                     std::to_string(L) + ")"
                                               : std::string()));
    auto rel = [&](int l) { return (double)h[l] / base[l]; };
    for (int l = 1; l < L; l++)
        if (rel(l) < rel(l - 1) && !s.allow_ablation)
            throw ConfigError("head schedule decreases at layer " + std::to_string(l + 1) + " (" +
                              std::to_string(h[l - 1]) + " -> " + std::to_string(h[l]) +
                              "); Prism needs h_1 <= ... <= h_L (pass --allow-ablation to run it anyway)");
    if (h[L - 1] != base[L - 1] && !s.allow_ablation)
        throw ConfigError("head schedule ends at " + std::to_string(h[L - 1]) + " heads but h_base is " +
                          std::to_string(base[L - 1]) + "; Prism needs h_L = h_base (pass --allow-ablation)");
    // The paper's design rules are Prism's; a rule of another paper (openelm) is not held to them.
    if (s.heads.compare(0, 7, "openelm") == 0) return;
    int at_base = 0;
    for (int l = 0; l < L; l++) at_base += h[l] == base[l];
    if (2 * at_base < L)
        warnings.push_back("design rule: only " + std::to_string(at_base) + " of " + std::to_string(L) +
                           " layers use h_base; the paper keeps at least L/2");
    // Staircase: every run of equal heads before the final h_base run lasts 2 to 4 layers.
    for (int a = 0; a < L;) {
        int b = a;
        while (b < L && h[b] == h[a] && base[b] == base[a]) b++;
        if (b < L && (b - a < 2 || b - a > 4))
            warnings.push_back("design rule: layers " + std::to_string(a + 1) + ".." + std::to_string(b) + " hold " +
                               std::to_string(h[a]) + " heads for " + std::to_string(b - a) +
                               " layers; the paper holds each step for 2 to 4");
        a = b;
    }
}

ModelConfig build_config(const ModelSpec& s, std::vector<std::string>& warnings) {
    int L = 0;
    ModelConfig c = preset_sizes(s, L);
    check_layer_flags(s, L);  // every column's flag text, as the flag parser checks it, and its length
    const std::vector<int> w = build_widths(s, c, L), base = base_heads(s, c, w), h = build_heads(s, base, w);
    // The other columns, each from its flag (model/layer_columns.h).
    c.layers.resize(L);
    for (int l = 0; l < L; l++) c.layers[l] = {w[l], h[l]};
    build_layer_columns(s, c);
    validate_config(c);
    if (!s.match.empty()) match_parameters(c, s.match);
    model_warnings(c, warnings);
    if (s.heads != "uniform") check_head_schedule(s, base, h, warnings);
    return c;
}

void match_parameters(ModelConfig& c, const std::string& column) {
    if (column != "mlp") throw ConfigError("unknown --match column '" + column + "'; use mlp (the MLP hidden sizes)");
    const long long target = account(uniform_baseline(c)).matched_params;
    std::vector<int> h0(c.L(), 0);
    for (int l = 0; l < c.L(); l++) h0[l] = c.hidden_of(l);
    if (std::all_of(h0.begin(), h0.end(), [](int h) { return h == 0; }))
        throw ConfigError("--match mlp: no layer has an MLP to scale; drop --match or keep an MLP (--no-mlp)");
    const long q = std::max(1, c.mlp_multiple);
    auto apply = [&](double f) {
        for (int l = 0; l < c.L(); l++)
            if (h0[l])
                c.layers[l].hidden = (int)std::min<long>(1 << 20, std::max<long>(q, std::lround(f * h0[l] / q) * q));
        return account(c).matched_params;
    };
    double lo = 1e-3, hi = 1e3;
    if (apply(lo) > target)
        throw ConfigError("--match mlp: even MLPs of " + std::to_string(q) +
                          " leave the layers above the uniform model's parameters; match another way");
    if (apply(hi) < target)
        throw ConfigError("--match mlp: the MLPs would need more than 2^20 hidden units to match the uniform model");
    for (int i = 0; i < 100; i++) {  // the smallest f whose count reaches the target (the count grows with f)
        const double mid = std::sqrt(lo * hi);
        (apply(mid) >= target ? hi : lo) = mid;
    }
    const long long below = apply(lo), above = apply(hi);
    long long now = apply(target - below <= above - target ? lo : hi);
    // Equal hidden sizes cross their rounding boundaries together (a step of L layers); from the last layer back,
    // move a layer's hidden one multiple up or down while that brings the count closer (each stays within one
    // multiple of the factor's). The count changes by that layer's own (layer_cost): linear in L, not quadratic.
    auto matched = [&](int l) {
        const LayerCost lc = layer_cost(c, l);
        return lc.matrix_params - lc.dead_params;
    };
    for (int l = c.L() - 1; l >= 0; l--) {
        if (!h0[l]) continue;
        for (int step : {(int)q, -(int)q}) {
            const int was = c.layers[l].hidden;
            if (was + step < q || was + step > 1 << 20) continue;
            const long long before = matched(l);
            c.layers[l].hidden = was + step;
            const long long next = now - before + matched(l);
            if (std::llabs(next - target) < std::llabs(now - target)) {
                now = next;
                break;
            }
            c.layers[l].hidden = was;
        }
    }
    validate_config(c);  // --plan shows the match reached
}
void validate_config(const ModelConfig& c) {
    auto pos = [](long v, const char* what) {
        if (v <= 0) throw ConfigError(std::string(what) + " must be positive, got " + std::to_string(v));
    };
    pos(c.d, "d");
    pos(c.V, "V (vocabulary)");
    pos(c.T, "T (sequence length)");
    pos(c.L(), "L (layers)");
    pos(c.h_base, "h_base (--heads)");
    if (c.mup_base_d < 0 || c.mup_base_d > 65536) throw ConfigError("--mup-base-d must lie in [1, 65536]");
    if (!(c.mlp_ratio >= 1e-3 && c.mlp_ratio <= 64)) throw ConfigError("--mlp-ratio must lie in [0.001, 64]");
    if (c.d > 65536 || c.V > 1 << 24 || c.T > 1 << 20)
        throw ConfigError("model sizes out of range (d <= 65536, V <= 2^24, T <= 2^20)");
    validate_layer_columns(c);  // every column's bounds and rule (above)
}
