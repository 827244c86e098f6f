// schedules.h: the per-layer schedules a model is built from: head schedules (explicit lists, the Prism
// preset's stages of wide heads) and width schedules (the geometric solver of docs/papers.md for the x shape and
// its v, lambda and 3 siblings, explicit lists), and the list parsing they share. model_config.h builds a
// ModelConfig from them. Pure C++17; errors are ConfigErrors naming what was wrong.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "errors.h"

// ------------------------------------------------------------------------------------------------------
// Head schedules
// ------------------------------------------------------------------------------------------------------

inline std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// A strict positive integer: "12" ok; "", "1.5", "-3", "12a" are ConfigErrors naming `what`.
inline int parse_positive_int(const std::string& tok, const std::string& what) {
    std::string t = trim(tok);
    if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos)
        throw ConfigError(what + ": '" + tok + "' is not a positive integer");
    int v = std::stoi(t);
    if (v <= 0) throw ConfigError(what + ": '" + tok + "' must be positive");
    return v;
}

// "3x3,6x3,12x6" (value x repeat) and plain "5,5,5" lists, mixed freely. Returns the expanded list.
inline std::vector<int> parse_layer_list(const std::string& s, const std::string& what) {
    std::vector<int> out;
    size_t start = 0;
    while (start <= s.size()) {
        size_t comma = s.find(',', start);
        std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        size_t x = item.find_first_of("xX*");
        if (x == std::string::npos) {
            out.push_back(parse_positive_int(item, what));
        } else {
            int v = parse_positive_int(item.substr(0, x), what);
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
// Width schedules: the geometric solver of docs/papers.md, generalised to four shapes.
//   x      shrink geometrically to the bottleneck at layer k, then grow back to w_L = w_1 (the paper's X)
//   3      grow to the peak at layer k, then shrink back to w_L = w_1; the ends are the narrowest
//   v      grow geometrically from w_1 (the narrowest) to w_L
//   lambda shrink geometrically from w_1 to w_L (the narrowest)
// In every shape the narrowest width is `ratio * d` (0.3 d by default) before rounding, and w_1 is chosen so
// that the layer matrices match the uniform model's (docs/papers.md: K sum w_i^2 - waste = K L d^2).
// For x this reproduces the released solver exactly (d 640, L 16, k 12 gives 1152 ... 192 ... 1152).
// ------------------------------------------------------------------------------------------------------

struct WidthShape {
    std::string name = "x";   // x, 3, v, lambda
    double turn_frac = 0.75;  // k = round(turn_frac * L) when k == 0
    int k = 0;                // 1-indexed turning layer (x and 3)
    double ratio = 0.3;       // narrowest width / d
    int quantum = 32;         // widths are rounded to multiples of this
};

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
