// studies/stats.h: the statistics a study's comparison needs, honest at small n: the mean and sample standard
// deviation of a few seeds, Student's t distribution (its CDF and quantiles, from Boost.Math: Debian libboost-dev,
// header only), and the difference of two groups over the seeds they share, with the variance of that difference
// modelled as V(n) = A / n + B (A: what averages out over seeds; B: what every seed shares, the eval set's own
// sampling error), its 95% t interval where one is estimable (else the reason why not), the smallest effect the
// study could detect (two-sided 95%, 80% power) and the seeds needed to detect a given effect.
// Three ways to fill A and B, one per kind of data (each states itself in Comparison::method):
//   - seeds only (validation losses): A = the sample variance of the per-seed differences, B = 0;
//   - paired per example (two runs' per-example results on the same examples, every seed): crossed random effects;
//   - eval.json's standard errors (no per-example results): unpaired and conservative.
// Does not: read files or know about runs (inspect/report_groups.h groups the runs, and passes numbers in).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <boost/math/distributions/students_t.hpp>

namespace stats {

inline double mean(const std::vector<double>& v) {
    if (v.empty()) return NAN;
    double s = 0;
    for (double x : v) s += x;
    return s / v.size();
}

// The sample variance (n - 1 in the denominator); NaN below two values.
inline double variance(const std::vector<double>& v) {
    if (v.size() < 2) return NAN;
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return s / (v.size() - 1);
}

// The sample standard deviation (n - 1 in the denominator); NaN below two values.
inline double stddev(const std::vector<double>& v) { return std::sqrt(variance(v)); }

namespace detail {
// Out-of-domain arguments give NaN rather than an exception: a report prints "-" for a group it cannot judge.
using Policy =
    boost::math::policies::policy<boost::math::policies::domain_error<boost::math::policies::ignore_error>,
                                  boost::math::policies::overflow_error<boost::math::policies::ignore_error>>;
inline boost::math::students_t_distribution<double, Policy> t(double df) {
    return boost::math::students_t_distribution<double, Policy>(df);
}
}  // namespace detail

// P(T <= t) for Student's t with df degrees of freedom (df > 0, infinity the normal's; NaN otherwise).
inline double t_cdf(double t, double df) {
    if (!(df > 0) || std::isnan(t)) return NAN;
    return boost::math::cdf(detail::t(df), t);
}

// The p-quantile of Student's t with df degrees of freedom (p in (0, 1), df > 0, infinity the normal's; NaN
// otherwise).
inline double t_quantile(double p, double df) {
    if (!(p > 0 && p < 1) || !(df > 0)) return NAN;
    return boost::math::quantile(detail::t(df), p);
}

// Satterthwaite's effective degrees of freedom of a sum of independent variance estimates v_k, each with df_k:
// (sum v_k)^2 / sum (v_k^2 / df_k). A term with infinite df (a known variance) adds nothing to the denominator;
// zero terms are left out; all zero: NaN.
struct DfTerm {
    double v, df;
};
inline double satterthwaite(const std::vector<DfTerm>& terms) {
    double num = 0, den = 0;
    bool any = false;
    for (const DfTerm& t : terms) {
        if (!std::isfinite(t.v) || !(t.df > 0)) return NAN;
        if (t.v == 0) continue;
        any = true, num += t.v;
        if (std::isfinite(t.df)) den += t.v * t.v / t.df;
    }
    if (!any) return NAN;
    return den > 0 ? num * num / den : std::numeric_limits<double>::infinity();
}

// The variance of a mean difference over n seeds, V(n) = A / n + B. A: the variance of one seed's difference that
// more seeds average out (estimated with n - 1 df); B: the variance every seed shares (the eval set's examples,
// the same for every seed), which more seeds do not reduce, with dfB degrees of freedom (infinite when B = 0).
struct Spread {
    double A = NAN, B = 0, dfB = std::numeric_limits<double>::infinity();
    double variance(double n) const { return A / n + B; }
    // Satterthwaite over (A / n, n - 1) and (B, dfB): n - 1 exactly when B = 0.
    double df(double n) const { return satterthwaite({{A / n, n - 1}, {B, dfB}}); }
    // The smallest true difference a two-sided 95% test over n seeds detects with 80% power, in the normal
    // approximation to the noncentral t: (t_{0.975, df} + t_{0.80, df}) sqrt(V(n)). NaN below two seeds, or
    // where the spread is not estimable (A NaN or 0: nothing says how much the seeds vary).
    double detectable(double n) const {
        if (!(n >= 2) || !(A > 0) || !std::isfinite(B)) return NAN;
        const double d = df(n);
        return (t_quantile(0.975, d) + t_quantile(0.80, d)) * std::sqrt(variance(n));
    }
};

// How many seeds (pairs of runs, one per arm) detect `effect`: the smallest n >= 2 with detectable(n) <= |effect|.
// kNotEstimable where detectable is NaN; beyond kMaxSeeds, kUnreachable where there is a shared part B (A / n is
// nothing by then: the eval set is too small for the effect, whatever the seeds) and kMaxSeeds + 1 where not.
// Scanned one by one to 1000 (the df of a small B can make detectable(n) rise and fall there), then by bisection,
// where V(n) has all but reached B and detectable(n) falls with n.
constexpr long kNotEstimable = -1, kUnreachable = 0, kMaxSeeds = 1000000;
inline long seeds_needed(const Spread& s, double effect) {
    effect = std::fabs(effect);
    if (!(effect > 0) || std::isnan(s.detectable(2))) return kNotEstimable;
    for (long n = 2; n <= 1000; n++)
        if (s.detectable(n) <= effect) return n;
    if (s.detectable(kMaxSeeds) > effect) return s.B > 0 ? kUnreachable : kMaxSeeds + 1;
    long lo = 1000, hi = kMaxSeeds;  // detectable(lo) > effect >= detectable(hi)
    while (hi - lo > 1) {
        const long mid = lo + (hi - lo) / 2;
        (s.detectable(mid) <= effect ? hi : lo) = mid;
    }
    return hi;
}

// The difference a - b of two groups over the seeds both have: its mean, the spread V(n), the 95% t interval
// mean +- t_{0.975, df(n)} sqrt(V(n)) where one is estimable, else `why` says what stands in the way, and the
// smallest effect detectable at this n.
struct Comparison {
    int n = 0;          // seeds paired
    long examples = 0;  // eval examples per run (0: not an eval, or unknown)
    double mean = NAN;
    double sd = NAN;  // the per-seed differences' sample standard deviation
    Spread spread;
    double se = NAN, df = NAN, t975 = NAN, lo = NAN, hi = NAN;  // se = sqrt(V(n))
    double detectable = NAN;                                    // spread.detectable(n)
    std::string method;  // how the variance was estimated, without n ("95% t interval over seeds, paired by seed")
    std::string why;     // why no interval is shown ("" when one is)
};

// The interval's two conditions: three seeds or more (with two, the spread rests on one degree of freedom: a t
// interval is 12.7 standard errors wide, or zero wide when both seeds agree), and a spread over seeds that is not
// zero (A > 0: a zero spread says nothing about how much the seeds vary).
inline void finish(Comparison& c) {
    const double n = c.n;
    const double v = c.n >= 2 ? c.spread.variance(n) : c.n == 1 ? c.spread.B : NAN;
    c.se = v > 0 ? std::sqrt(v) : NAN;  // NaN where nothing is known (one seed of a validation loss)
    if (c.n == 0) c.why = "no common seed";
    else if (c.n == 1)
        c.why = "n 1: one seed, its spread not estimable" +
                std::string(c.spread.B > 0 ? " (the eval's sampling error alone is the SE)" : "");
    else if (!std::isfinite(c.mean) || std::isnan(c.spread.A)) c.why = "not estimable (a value is NaN)";
    else {
        if (c.n == 2) c.why = "n 2: too few seeds for an interval";
        if (c.spread.A == 0)
            c.why += std::string(c.why.empty() ? "" : "; ") + "zero spread over seeds: interval not estimable";
    }
    if (c.n >= 2) c.detectable = c.spread.detectable(n);
    if (!c.why.empty()) return;
    c.df = c.spread.df(n);
    c.t975 = t_quantile(0.975, c.df);
    c.lo = c.mean - c.t975 * c.se, c.hi = c.mean + c.t975 * c.se;
}

// The sample variance of per-seed differences, 0 where they agree to 9 significant digits: losses are logged to 6
// decimals, and 6.40 - 6.45 and 6.25 - 6.30 differ in their last bits only (a "spread" of 1e-16 is no spread).
inline double seed_variance(const std::vector<double>& d) {
    double most = 0;
    for (double x : d) most = std::max(most, std::fabs(x));
    const double v = variance(d);
    return std::sqrt(v) <= 1e-9 * most ? 0.0 : v;
}

// Seeds only: d_s = a_s - b_s per seed; A = var_s(d_s), B = 0; df n - 1. (Validation losses: the validation tokens
// are the same for every run, and no per-token losses are logged to add their sampling error.)
inline Comparison seeds_only(const std::vector<double>& d) {
    Comparison c;
    c.n = (int)d.size(), c.mean = mean(d), c.sd = stddev(d);
    c.spread.A = seed_variance(d);
    c.method = "95% t interval over seeds, paired by seed (df n - 1)";
    finish(c);
    return c;
}

// Paired per example: x[s][i] = c_A,s,i - c_B,s,i, the two arms' per-example results (1 or 0 for an accuracy) on
// example i with seed s, the same N >= 2 examples for every seed. d_s = mean_i x[s][i]; the estimate is their
// mean over the n seeds. Model (crossed random effects): x_si = delta + a_s + b_i + e_si, with the seed's
// effect a (variance s_a^2), the example's b (s_b^2: how much more one arm gets some examples right) and the
// rest e (s_e^2), so Var(mean) = s_a^2 / n + s_b^2 / N + s_e^2 / (n N): the examples are the same for every
// seed, so their part s_b^2 / N does not shrink with seeds. From the two-way table's mean squares
//   MS_seed = N var_s(d_s), MS_example = n var_i(D_i) (D_i = mean_s x[s][i]),
//   MS_rest = sum_si (x_si - d_s - D_i + mean)^2 / ((n - 1)(N - 1)),
// the unbiased estimates, each component cut at zero (the usual truncation):
//   A = s_a^2 + s_e^2 / N = max(MS_seed, MS_rest) / N          (df n - 1, conservatively)
//   B = s_b^2 / N         = max(0, MS_example - MS_rest) / (n N) (df N - 1, MS_example's)
// so V(n) = A / n + B, and two seeds whose means agree still have A > 0 when their examples disagree. (B's df is
// not Satterthwaite's for the difference of two mean squares: that one collapses towards 1 where they are close,
// i.e. where B is near zero and matters least, and would then decide alone that no number of seeds suffices.)
// With one seed: A is unknown, and B = var_i(x_i) / N (the paired sampling variance of that seed's difference).
inline Comparison paired_by_example(const std::vector<std::vector<double>>& x) {
    Comparison c;
    c.n = (int)x.size();
    c.method =
        "95% t interval, paired by seed and by example: V = A/n + B, A from the seeds' spread, B the eval "
        "examples' shared sampling variance (crossed random effects; Satterthwaite df)";
    const size_t N = x.empty() ? 0 : x[0].size();
    c.examples = (long)N;
    bool same = N >= 2;
    for (const std::vector<double>& xs : x) same &= xs.size() == N;
    if (!same) {  // the caller pairs the examples; this is its bug, not the user's
        c.why = "not estimable (the runs' examples differ)";
        return c;
    }
    std::vector<double> d(x.size()), D(N, 0.0);
    for (size_t s = 0; s < x.size(); s++) {
        d[s] = mean(x[s]);
        for (size_t i = 0; i < N; i++) D[i] += x[s][i] / x.size();
    }
    c.mean = mean(d), c.sd = stddev(d);
    const double n = x.size(), Nd = N;
    if (x.size() == 1) {
        c.spread.B = variance(x[0]) / Nd, c.spread.dfB = Nd - 1;
    } else {
        const double ms_seed = Nd * variance(d), ms_ex = n * variance(D);
        double rest = 0;
        for (size_t s = 0; s < x.size(); s++)
            for (size_t i = 0; i < N; i++) {
                const double r = x[s][i] - d[s] - D[i] + c.mean;
                rest += r * r;
            }
        const double ms_rest = rest / ((n - 1) * (Nd - 1));
        c.spread.A = std::max(ms_seed, ms_rest) / Nd;
        if (ms_ex > ms_rest) c.spread.B = (ms_ex - ms_rest) / (n * Nd), c.spread.dfB = Nd - 1;
    }
    finish(c);
    return c;
}

// eval.json's standard errors, no per-example results: d_s as above, v_s = se_A,s^2 + se_B,s^2 the seed's
// sampling variance with the two runs taken as independent (unpaired: their errors on the same examples are
// usually positively correlated, so this overstates it), and that variance counted as shared by every seed:
//   A = var_s(d_s) (df n - 1), B = mean_s(v_s) (df examples - 1, examples >= 2),
// which overstates Var(mean) by up to s_e^2 / N (A already holds the seed-specific part of it): conservative.
inline Comparison with_std_errors(const std::vector<double>& d, const std::vector<double>& v, long examples) {
    Comparison c;
    c.n = (int)d.size(), c.mean = mean(d), c.sd = stddev(d), c.examples = examples;
    c.method =
        "95% t interval, paired by seed: V = A/n + B, A from the seeds' spread, B the mean of each seed's "
        "se_A^2 + se_B^2 from eval.json (not every run has usable samples.jsonl: unpaired per example, "
        "conservative; Satterthwaite df)";
    c.spread.A = seed_variance(d), c.spread.B = mean(v), c.spread.dfB = examples - 1.0;
    if (v.size() != d.size() || !(c.spread.B >= 0) || examples < 2) {  // the caller checks; its bug otherwise
        c.spread.B = NAN;
        c.why = "not estimable (no standard error for every run)";
        return c;
    }
    finish(c);
    return c;
}

// The difference a - b over the keys (seeds) both have, seeds only (finite values only).
template <typename K> Comparison paired_difference(const std::map<K, double>& a, const std::map<K, double>& b) {
    std::vector<double> d;
    for (const auto& [k, x] : a) {
        auto it = b.find(k);
        if (it != b.end() && std::isfinite(x) && std::isfinite(it->second)) d.push_back(x - it->second);
    }
    return seeds_only(d);
}

}  // namespace stats
