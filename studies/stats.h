// studies/stats.h: the statistics a study's comparison needs, computed here rather than tabled: the mean and
// sample standard deviation of a few seeds, Student's t distribution (its CDF through the regularized
// incomplete beta function, its quantiles by bisection on the CDF), and the paired difference of two groups
// over the seeds they share, with a two-sided 95% interval mean +- t_{0.975, n-1} sd / sqrt(n).
//   I_x(a, b)         regularized incomplete beta: the continued fraction of its standard expansion, evaluated
//                     by the modified Lentz method, on whichever of x and 1 - x converges fast
//   t_cdf(t, df)      P(T <= t) = 1 - I_{df / (df + t^2)}(df / 2, 1 / 2) / 2 for t >= 0, symmetric below
//   t_quantile(p, df) the t with t_cdf(t, df) = p, to 1e-12 relative (bisection on a bracket that doubles)
// Does not: read files or know about runs (report.cpp groups the runs, and passes numbers in).
#pragma once

#include <cmath>
#include <map>
#include <vector>

namespace stats {

inline double mean(const std::vector<double>& v) {
    if (v.empty()) return NAN;
    double s = 0;
    for (double x : v) s += x;
    return s / v.size();
}

// The sample standard deviation (n - 1 in the denominator); NaN below two values.
inline double stddev(const std::vector<double>& v) {
    if (v.size() < 2) return NAN;
    const double m = mean(v);
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::sqrt(s / (v.size() - 1));
}

// The continued fraction of I_x(a, b) (valid and fast for x < (a + 1) / (a + b + 2)).
inline double beta_fraction(double a, double b, double x) {
    const double tiny = 1e-300;
    double c = 1, d = 1 - (a + b) * x / (a + 1);
    if (std::fabs(d) < tiny) d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 10000; m++) {
        // The even step d_{2m}, then the odd step d_{2m+1} of the expansion.
        const double even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
        d = 1 + even * d, c = 1 + even / c;
        if (std::fabs(d) < tiny) d = tiny;
        if (std::fabs(c) < tiny) c = tiny;
        d = 1 / d, h *= d * c;
        const double odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
        d = 1 + odd * d, c = 1 + odd / c;
        if (std::fabs(d) < tiny) d = tiny;
        if (std::fabs(c) < tiny) c = tiny;
        d = 1 / d;
        const double delta = d * c;
        h *= delta;
        if (std::fabs(delta - 1) < 1e-15) break;
    }
    return h;
}

// I_x(a, b) for x in [0, 1], a, b > 0.
inline double incomplete_beta(double a, double b, double x) {
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) +
                                  b * std::log1p(-x));
    if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(a, b, x) / a;
    return 1 - front * beta_fraction(b, a, 1 - x) / b;  // I_x(a, b) = 1 - I_{1-x}(b, a)
}

inline double t_cdf(double t, double df) {
    const double tail = 0.5 * incomplete_beta(df / 2, 0.5, df / (df + t * t));  // P(T > |t|)
    return t >= 0 ? 1 - tail : tail;
}

// The p-quantile of Student's t with df degrees of freedom (p in (0, 1)).
inline double t_quantile(double p, double df) {
    if (!(p > 0 && p < 1) || !(df > 0)) return NAN;
    if (p < 0.5) return -t_quantile(1 - p, df);
    if (p == 0.5) return 0;
    double lo = 0, hi = 1;
    while (t_cdf(hi, df) < p && hi < 1e300) lo = hi, hi *= 2;
    for (int i = 0; i < 400 && hi - lo > 1e-12 * hi; i++) {
        const double mid = 0.5 * (lo + hi);
        (t_cdf(mid, df) < p ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
}

// The difference a - b over the keys (seeds) both have: n, its mean and sd, and the 95% t interval
// (NaN bounds when n < 2: one pair has no spread to estimate).
struct Paired {
    int n = 0;
    double mean = NAN, sd = NAN, lo = NAN, hi = NAN, t975 = NAN;
};
template <typename K>
Paired paired_difference(const std::map<K, double>& a, const std::map<K, double>& b) {
    std::vector<double> d;
    for (const auto& [k, x] : a) {
        auto it = b.find(k);
        if (it != b.end() && std::isfinite(x) && std::isfinite(it->second)) d.push_back(x - it->second);
    }
    Paired p;
    p.n = (int)d.size();
    p.mean = mean(d);
    p.sd = stddev(d);
    if (p.n >= 2) {
        p.t975 = t_quantile(0.975, p.n - 1);
        const double half = p.t975 * p.sd / std::sqrt((double)p.n);
        p.lo = p.mean - half, p.hi = p.mean + half;
    }
    return p;
}

}  // namespace stats
