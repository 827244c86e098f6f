// studies/stats.h: the statistics a study's comparison needs: the mean and sample standard deviation of a few seeds,
// Student's t distribution (its CDF and quantiles, from Boost.Math: Debian libboost-dev, header only), and the
// paired difference of two groups over the seeds they share, with a two-sided 95% interval
// mean +- t_{0.975, n-1} sd / sqrt(n).
// Does not: read files or know about runs (report.cpp groups the runs, and passes numbers in).
#pragma once

#include <cmath>
#include <map>
#include <vector>

#include <boost/math/distributions/students_t.hpp>

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

namespace detail {
// Out-of-domain arguments give NaN rather than an exception: a report prints "nan" for a group it cannot judge.
using Policy =
    boost::math::policies::policy<boost::math::policies::domain_error<boost::math::policies::ignore_error>,
                                  boost::math::policies::overflow_error<boost::math::policies::ignore_error>>;
inline boost::math::students_t_distribution<double, Policy> t(double df) {
    return boost::math::students_t_distribution<double, Policy>(df);
}
}  // namespace detail

// P(T <= t) for Student's t with df degrees of freedom (df > 0; NaN otherwise).
inline double t_cdf(double t, double df) {
    if (!(df > 0) || std::isnan(t)) return NAN;
    return boost::math::cdf(detail::t(df), t);
}

// The p-quantile of Student's t with df degrees of freedom (p in (0, 1), df > 0; NaN otherwise).
inline double t_quantile(double p, double df) {
    if (!(p > 0 && p < 1) || !(df > 0)) return NAN;
    return boost::math::quantile(detail::t(df), p);
}

// The difference a - b over the keys (seeds) both have: n, its mean and sd, and the 95% t interval
// (NaN bounds when n < 2: one pair has no spread to estimate).
struct Paired {
    int n = 0;
    double mean = NAN, sd = NAN, lo = NAN, hi = NAN, t975 = NAN;
};
template <typename K> Paired paired_difference(const std::map<K, double>& a, const std::map<K, double>& b) {
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
