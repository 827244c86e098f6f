// model/schedules.h: the per-layer schedules a model is built from: head schedules (explicit lists, the Prism
// preset's stages of wide heads) and width schedules (the geometric solver of docs/papers.md for the x shape and
// its v, lambda and 3 siblings, explicit lists), and the list parsing they share. model_config.h builds a
// ModelConfig from them. Pure C++17; errors are ConfigErrors naming what was wrong.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "model/spec.h"
#include "util/errors.h"

// ------------------------------------------------------------------------------------------------------
// Head schedules
// ------------------------------------------------------------------------------------------------------

inline std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// A strict positive integer: "12" ok; "", "1.5", "-3", "12a" are ConfigErrors naming `what`. allow_zero: "0" too.
inline int parse_positive_int(const std::string& tok, const std::string& what, bool allow_zero = false) {
    std::string t = trim(tok);
    if (t.empty()) throw ConfigError(what + ": a number is missing");
    if (t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos)
        throw ConfigError(what + ": '" + tok + "' is not a " + (allow_zero ? "non-negative" : "positive") + " integer");
    int v = std::stoi(t);
    if (v <= 0 && !(allow_zero && v == 0)) throw ConfigError(what + ": '" + tok + "' must be positive");
    return v;
}

// "3x3,6x3,12x6" (value x repeat) and plain "5,5,5" lists, mixed freely. Returns the expanded list. allow_zero:
// 0 is a value (a window list's "global").
inline std::vector<int> parse_layer_list(const std::string& s, const std::string& what, bool allow_zero = false) {
    std::vector<int> out;
    size_t start = 0;
    while (start <= s.size()) {
        size_t comma = s.find(',', start);
        std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        size_t x = item.find_first_of("xX*");
        if (x != std::string::npos && (trim(item.substr(0, x)).empty() || trim(item.substr(x + 1)).empty()))
            throw ConfigError(what + ": '" + item + "' is neither a number nor a run VALUExCOUNT (12x6)");
        if (x == std::string::npos) {
            out.push_back(parse_positive_int(item, what, allow_zero));
        } else {
            int v = parse_positive_int(item.substr(0, x), what, allow_zero);
            int n = parse_positive_int(item.substr(x + 1), what + " repeat count");
            if (out.size() + n > 100000) throw ConfigError(what + ": list is absurdly long");
            out.insert(out.end(), n, v);
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

// The Prism preset as head_dim multipliers of the baseline (4 = four times wider heads, so h_base / 4 heads).
// Two early stages of n = clamp(round(L/4), 2, 4) layers each at 4x and 2x the baseline head_dim (256 and 128
// when the baseline is 64), then h_base to the end. This keeps each step 2 to 4 layers long (staircase rule)
// and leaves L - 2n >= L/2 layers at h_base (baseline preservation). Models with L < 8 get a single 2x stage
// of 2 layers so that the rules still hold. 124M (L 12): 3x3,6x3,12x6; 354M (L 24): 4x4,8x4,16x16.
inline std::vector<int> prism_multipliers(int L) {
    std::vector<int> m;
    if (L < 4) return std::vector<int>(L, 1);
    if (L < 8) {
        m.assign(2, 2);
    } else {
        int n = std::min(4, std::max(2, (int)std::lround(L / 4.0)));
        m.assign(n, 4);
        m.insert(m.end(), n, 2);
    }
    m.insert(m.end(), L - m.size(), 1);
    return m;
}

// ------------------------------------------------------------------------------------------------------
// The other per-layer columns: KV heads (GQA), MLP hidden sizes, attention windows, mixers, layers without
// attention or MLP. Each parser returns one value per layer (0 where the column keeps its default) and throws a one-line
// ConfigError naming the flag, and the layer where one is at fault.
// ------------------------------------------------------------------------------------------------------

// A list like parse_layer_list's, of exactly L entries.
inline std::vector<int> parse_list_of(const std::string& s, int L, const std::string& what, bool allow_zero) {
    std::vector<int> v = parse_layer_list(s, what, allow_zero);
    if ((int)v.size() != L)
        throw ConfigError(what + " has " + std::to_string(v.size()) + " entries but the model has " +
                          std::to_string(L) + " layers; give one per layer (run-length lists like 12x6,4x6 work)");
    return v;
}

// Whether a flag's text is a list of numbers rather than a word: it starts with a digit ("-w X" is a word, an
// unknown one) and holds nothing but digits, commas, runs' x (or X, *) and spaces.
inline bool is_list(const std::string& s) {
    const std::string t = trim(s);
    return !t.empty() && isdigit((unsigned char)t[0]) && t.find_first_not_of("0123456789,xX* ") == std::string::npos;
}

// "A-B" (two decimal numbers, A <= B) after a rule's "name:"; {lo, hi} = the default when there is no ":".
inline std::pair<double, double> parse_range(const std::string& rule, const std::string& name, double lo, double hi,
                                             const std::string& what) {
    if (rule == name) return {lo, hi};
    const std::string r = rule.substr(name.size() + 1);
    const size_t dash = r.find('-');
    char* end = nullptr;
    const std::string a = trim(r.substr(0, dash)), b = dash == std::string::npos ? "" : trim(r.substr(dash + 1));
    const double x = std::strtod(a.c_str(), &end);
    const bool ok_a = !a.empty() && *end == 0;
    const double y = std::strtod(b.c_str(), &end);
    const bool ok_b = !b.empty() && *end == 0;
    if (dash == std::string::npos || !ok_a || !ok_b || !(x > 0 && y >= x && y <= 64))
        throw ConfigError(what + " '" + rule + "': give the range as " + name + ":LO-HI with 0 < LO <= HI <= 64");
    return {x, y};
}

// OpenELM's layer-wise scaling (Mehta et al. 2024, arXiv 2404.14619): layer l of L gets the multiplier
// lo + (hi - lo) l / (L - 1), linear in depth. Its released models use (0.5, 1.0) for the attention's heads
// ("qkv_multipliers") and (0.5, 4.0) for the FFN ("ffn_multipliers"), relative to the model width.
inline double layerwise(double lo, double hi, int l, int L) { return L > 1 ? lo + (hi - lo) * l / (L - 1) : lo; }
static const double kOpenElmHeads[2] = {0.5, 1.0}, kOpenElmFfn[2] = {0.5, 4.0};

// The head count nearest to `target` that divides w with an even head_dim (ties go to the larger count).
inline int nearest_head_count(double target, int w) {
    int best = 0;
    for (int h = 1; h <= w; h++)
        if (w % h == 0 && (w / h) % 2 == 0 && (!best || std::fabs(h - target) <= std::fabs(best - target))) best = h;
    return best;
}

// --kv-heads: uniform (kv_l = h_l) | mqa (one K/V head per layer) | gqa:G (G K/V heads in every layer) | a list.
// heads: the layers' query heads, for the rules; 0 entries (uniform) are resolved by the config.
inline std::vector<int> kv_schedule(const std::string& s, const std::vector<int>& heads) {
    const int L = (int)heads.size();
    if (s == "uniform") return std::vector<int>(L, 0);
    if (s == "mqa") return std::vector<int>(L, 1);
    if (s.compare(0, 4, "gqa:") == 0) return std::vector<int>(L, parse_positive_int(s.substr(4), "--kv-heads gqa:G"));
    if (is_list(s)) return parse_list_of(s, L, "--kv-heads", false);
    throw ConfigError("unknown KV-head schedule '" + s + "'; use uniform, mqa, gqa:G or a list like 12x6,4x6");
}

// --mlp: uniform (the --mlp-ratio rule) | openelm[:LO-HI] (hidden = the layer's multiplier x w_l, to the nearest
// multiple, as OpenELM's FFN scaling) | a list of hidden sizes.
inline std::vector<int> mlp_schedule(const std::string& s, const std::vector<int>& widths, int multiple) {
    const int L = (int)widths.size();
    if (s == "uniform") return std::vector<int>(L, 0);
    if (s == "openelm" || s.compare(0, 8, "openelm:") == 0) {
        const auto r = parse_range(s, "openelm", kOpenElmFfn[0], kOpenElmFfn[1], "--mlp");
        std::vector<int> v(L);
        const long q = std::max(1, multiple);
        for (int l = 0; l < L; l++)
            v[l] = (int)std::max<long>(q, std::lround(layerwise(r.first, r.second, l, L) * widths[l] / q) * q);
        return v;
    }
    if (is_list(s)) return parse_list_of(s, L, "--mlp", false);
    throw ConfigError("unknown MLP schedule '" + s +
                      "'; use uniform, openelm, openelm:LO-HI or a list of hidden sizes");
}

// --window: global | local:W (every layer) | local:W,N:M (N layers of window W, then M global, repeated from layer
// 1) | a list of windows, 0 for a global layer (run-length: 256x5,0).
inline std::vector<int> window_schedule(const std::string& s, int L) {
    if (s == "global") return std::vector<int>(L, 0);
    if (s.compare(0, 6, "local:") == 0) {
        const std::string r = s.substr(6);
        const size_t comma = r.find(',');
        const int W = parse_positive_int(r.substr(0, comma), "--window local:W");
        int n = L, m = 0;
        if (comma != std::string::npos) {
            const std::string ratio = r.substr(comma + 1);
            const size_t colon = ratio.find(':');
            if (colon == std::string::npos)
                throw ConfigError("--window '" + s + "': give the interleave as local:W,N:M (N local, M global)");
            n = parse_positive_int(ratio.substr(0, colon), "--window local:W,N:M's N");
            m = parse_positive_int(ratio.substr(colon + 1), "--window local:W,N:M's M");
        }
        std::vector<int> v(L);
        for (int l = 0; l < L; l++) v[l] = l % (n + m) < n ? W : 0;
        return v;
    }
    if (is_list(s)) return parse_list_of(s, L, "--window", true);
    throw ConfigError("unknown window schedule '" + s + "'; use global, local:W, local:W,N:M or a list (0 = global)");
}

// The words of the mixer column, its value's index: 0 softmax attention, 1 Gated DeltaNet.
static const char* const kMixerWords[] = {"attention", "gdn", nullptr};

// A mixer word's value; a ConfigError naming `what` for another word.
inline int mixer_word(const std::string& word, const std::string& what) {
    for (int v = 0; kMixerWords[v]; v++)
        if (trim(word) == kMixerWords[v]) return v;
    throw ConfigError(what + ": '" + trim(word) + "' is not a mixer; use attention or gdn");
}

// --mixer as written, before the layer count is known: one value per layer for a list of words ("gdnx3,attention",
// run-length as parse_layer_list's, "gdn x3" too), or the rule's {N, M} for attention (N 0), gdn (M 0) and gdn:N:M
// (N gdn layers then M attention, repeated from layer 1: Qwen3-Next's 3:1 is gdn:3:1). is_rule says which.
struct MixerText {
    bool is_rule = false;
    int n = 0, m = 0;
    std::vector<int> list;
};
inline MixerText parse_mixer(const std::string& s) {
    MixerText r;
    const std::string t = trim(s);
    if (t == "attention" || t == "gdn") return r.is_rule = true, r.n = t == "gdn", r.m = t != "gdn", r;
    if (t.compare(0, 4, "gdn:") == 0) {
        const std::string ratio = t.substr(4);
        const size_t colon = ratio.find(':');
        if (colon == std::string::npos)
            throw ConfigError("--mixer '" + s + "': give the interleave as gdn:N:M (N gdn layers, then M attention)");
        r.is_rule = true;
        r.n = parse_positive_int(ratio.substr(0, colon), "--mixer gdn:N:M's N");
        r.m = parse_positive_int(ratio.substr(colon + 1), "--mixer gdn:N:M's M");
        return r;
    }
    if (t.find(',') == std::string::npos && t.find_first_of("xX*") == std::string::npos)
        throw ConfigError("unknown mixer schedule '" + s +
                          "'; use attention, gdn, gdn:N:M (N gdn then M attention) or a list like gdnx3,attention");
    size_t start = 0;
    while (start <= t.size()) {
        const size_t comma = t.find(',', start);
        const std::string item = t.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        // A run is WORDxCOUNT: the last x (or X, *) followed by a number; a word may hold an x itself.
        size_t x = item.find_last_of("xX*");
        const std::string count = x == std::string::npos ? "" : trim(item.substr(x + 1));
        if (count.empty() || count.find_first_not_of("0123456789") != std::string::npos) x = std::string::npos;
        if (x == std::string::npos) {
            r.list.push_back(mixer_word(item, "--mixer"));
        } else {
            if (trim(item.substr(0, x)).empty())
                throw ConfigError("--mixer: '" + item + "' is neither a mixer nor a run WORDxCOUNT (gdnx3)");
            const int v = mixer_word(item.substr(0, x), "--mixer");
            const int n = parse_positive_int(item.substr(x + 1), "--mixer repeat count");
            if (r.list.size() + n > 100000) throw ConfigError("--mixer: list is absurdly long");
            r.list.insert(r.list.end(), n, v);
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return r;
}

// --mixer: the mixer of every one of L layers (0 attention, 1 gdn).
inline std::vector<int> mixer_schedule(const std::string& s, int L) {
    const MixerText r = parse_mixer(s);
    if (!r.is_rule) {
        if ((int)r.list.size() != L)
            throw ConfigError("--mixer has " + std::to_string(r.list.size()) + " entries but the model has " +
                              std::to_string(L) +
                              " layers; give one per layer (run-length lists like gdnx3,attention work)");
        return r.list;
    }
    std::vector<int> v(L);
    for (int l = 0; l < L; l++) v[l] = l % (r.n + r.m) < r.n;
    return v;
}

// --no-attention / --no-mlp / --no-rope: layer numbers from 1, "3,5" or ranges "7-9". Calls fn(first, last, item)
// for each item; a ConfigError naming `what` for an item that is no number or range, or one that runs backwards.
template <class Fn> void for_each_layer_item(const std::string& s, const std::string& what, Fn fn) {
    if (trim(s).empty()) return;
    size_t start = 0;
    while (start <= s.size()) {
        const size_t comma = s.find(',', start);
        const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        const size_t dash = item.find('-');
        auto number = [&](const std::string& t) {
            try {
                return parse_positive_int(t, what);
            } catch (const ConfigError&) {
                throw ConfigError(what + ": '" + item + "' is not a layer number or range (3 or 5-7, layers from 1)");
            }
        };
        const int a = number(item.substr(0, dash));
        const int b = dash == std::string::npos ? a : number(item.substr(dash + 1));
        if (b < a)
            throw ConfigError(what + ": '" + item + "' runs backwards; write " + std::to_string(b) + "-" +
                              std::to_string(a));
        fn(a, b, item);
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
}

// The layers a list names, as a mask of the model's L; a layer beyond L is an error that says the model's own range
// ("--no-rope: '9' is not a layer range within 1..6, the layers of this model (L = 6)").
inline std::vector<bool> layer_set(const std::string& s, int L, const std::string& what) {
    std::vector<bool> m(L, false);
    for_each_layer_item(s, what, [&](int a, int b, const std::string& item) {
        if (b > L)
            throw ConfigError(what + ": '" + item + "' is not a layer range within 1.." + std::to_string(L) +
                              ", the layers of this model (L = " + std::to_string(L) + ")");
        for (int l = a; l <= b; l++) m[l - 1] = true;
    });
    return m;
}

// ------------------------------------------------------------------------------------------------------
// Width schedules: the geometric solver of docs/papers.md, generalised to four shapes.
//   x      shrink geometrically to the bottleneck at layer k, then grow back to w_L = w_1 (the paper's X)
//   3      grow to the peak at layer k, then shrink back to w_L = w_1; the ends are the narrowest
//   v      grow geometrically from w_1 (the narrowest) to w_L
//   lambda shrink geometrically from w_1 to w_L (the narrowest)
// In every shape the narrowest width is `ratio * d` (0.3 d by default) before rounding, and w_1 is chosen so
// that the layer matrices match the uniform model's (docs/papers.md: K sum w_i^2 - waste = K L d^2).
// For x this reproduces the released solver exactly (d 640, L 16, k 12 gives 1152 ... 192 ... 1152).
// ------------------------------------------------------------------------------------------------------

// Relative widths f_i (f_1 = 1) of a shape for the shape parameter e in (0, 1).
inline std::vector<double> shape_factors(const std::string& name, int L, int k, double e) {
    std::vector<double> f(L);
    if (name == "x" || name == "3") {
        // x: e^(i-1) down to layer k, then back up with e^(k-1) r^(L-k) = 1. 3 is the same with 1/e.
        double g = name == "x" ? e : 1.0 / e;
        double r = std::pow(g, -(double)(k - 1) / (double)(L - k));
        for (int i = 0; i < k; i++) f[i] = std::pow(g, i);
        for (int j = 1; j <= L - k; j++) f[k - 1 + j] = f[k - 1] * std::pow(r, j);
    } else {
        double g = name == "lambda" ? e : 1.0 / e;
        for (int i = 0; i < L; i++) f[i] = std::pow(g, i);
    }
    return f;
}

// Solve K w1^2 sum f_i^2 - waste(w1) = K L d^2 for w1 > 0, where waste counts the first layer's QKV input
// columns that only see zeros (3 (w_1 - d) w_1 when w_1 > d) and the last layer's MLP down-projection rows the
// head never reads (E w_L (w_L - d) when w_L > d). Each of the four cases is a quadratic; keep the positive root
// whose case is consistent. Returns 0 when no case is (never seen for sane inputs).
inline double solve_first_width(const std::vector<double>& f, int d, double K, double E) {
    int L = (int)f.size();
    double s = 0;
    for (double x : f) s += x * x;
    double fL = f[L - 1], best = 0;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            double A = K * s - 3.0 * a - E * b * fL * fL;
            double Bq = (3.0 * a + E * b * fL) * d;
            double C = -K * L * (double)d * d;
            double disc = Bq * Bq - 4 * A * C;
            if (disc < 0 || A == 0) continue;
            for (double root : {(-Bq + std::sqrt(disc)) / (2 * A), (-Bq - std::sqrt(disc)) / (2 * A)}) {
                if (root <= 0) continue;
                if ((root > d) == (a == 1) && (root * fL > d) == (b == 1)) best = root;
            }
        }
    return best;
}

// The widths of a shape. K = 4 + 3 * mlp_ratio (attention 4 w^2, SwiGLU 3 w hidden), E = mlp_ratio.
inline std::vector<int> solve_widths(const WidthShape& sh, int d, int L, double mlp_ratio) {
    if (sh.name != "x" && sh.name != "3" && sh.name != "v" && sh.name != "lambda")
        throw ConfigError("unknown width shape '" + sh.name + "'; use uniform, x, v, lambda, 3 or a list of widths");
    if (L < 2) throw ConfigError("width shape '" + sh.name + "' needs at least 2 layers");
    if (!(sh.ratio > 0 && sh.ratio < 1))
        throw ConfigError("bottleneck ratio " + std::to_string(sh.ratio) + " must lie in (0, 1)");
    if (sh.quantum <= 0) throw ConfigError("width quantum must be positive");
    int k = sh.k > 0 ? sh.k : (int)std::lround(sh.turn_frac * L);
    bool turns = sh.name == "x" || sh.name == "3";
    if (turns && (k < 2 || k > L - 1))
        throw ConfigError("turning layer k = " + std::to_string(k) + " must lie in [2, L-1] = [2, " +
                          std::to_string(L - 1) + "]; adjust --turn");
    double K = 4 + 3 * mlp_ratio, E = mlp_ratio, target = sh.ratio * d;
    auto min_width = [&](double e) {
        std::vector<double> f = shape_factors(sh.name, L, k, e);
        return solve_first_width(f, d, K, E) * *std::min_element(f.begin(), f.end());
    };
    // The narrowest width grows with e (e -> 1 is uniform). Halve until at or below the target, then bisect.
    double e = 0.5;
    for (int i = 0; i < 60 && min_width(e) > target; i++) e /= 2;
    double lo = e, hi = 1.0;
    for (int it = 0; it < 80; it++) {
        double mid = 0.5 * (lo + hi), m = min_width(mid);
        if (std::fabs(m - target) / target < 1e-6) break;
        (m > target ? hi : lo) = mid;
    }
    e = 0.5 * (lo + hi);
    std::vector<double> f = shape_factors(sh.name, L, k, e);
    auto rounded = [&](double w1) {
        std::vector<int> w(L);
        for (int i = 0; i < L; i++) w[i] = (int)std::max<long>(1, std::lround(w1 * f[i] / sh.quantum)) * sh.quantum;
        return w;
    };
    // The paper's parameter count of rounded widths, relative to the uniform model's.
    auto match = [&](const std::vector<int>& w) {
        double sum = 0;
        for (int x : w) sum += K * (double)x * x;
        if (w[0] > d) sum -= 3.0 * (w[0] - d) * (double)w[0];
        if (w[L - 1] > d) sum -= E * (double)w[L - 1] * (w[L - 1] - d);
        return sum / (K * L * (double)d * d);
    };
    double w1 = std::round(solve_first_width(f, d, K, E));
    std::vector<int> w = rounded(w1);
    // Rounding every width to the quantum can move the match by a few percent when a few very wide layers
    // dominate (v and lambda shapes at small L). When it misses by more than 1%, and only then, scale the unrounded widths by s in
    // [0.9, 1.1] (steps of 1e-4: each layer crosses its rounding boundary at a different s, so the match moves
    // in steps of one layer's quantum) and keep the closest match. The x shape at the paper's sizes never
    // needs it, so its released widths are reproduced untouched.
    if (std::fabs(match(w) - 1) > 0.01) {
        double best = std::fabs(match(w) - 1);
        for (int i = -1000; i <= 1000; i++) {
            std::vector<int> t = rounded(w1 * (1 + 1e-4 * i));
            if (std::fabs(match(t) - 1) < best) best = std::fabs(match(t) - 1), w = t;
        }
    }
    return w;
}
