// test_stats.cpp: studies/stats.h and the statistics of report's group tables. The t distribution against
// published tables and scipy; every formula at its corners (no seed in common, one seed, two, three, a zero spread,
// NaN); the variance V(n) = A/n + B of a difference (seeds only, paired per example, eval.json's standard errors),
// the smallest detectable effect and the seeds needed, against hand computations and, where scipy is installed
// (PRISM_PYTHON, else python3), against an implementation of the same formulas on scipy's t distribution; and the
// report page of a synthetic study (n 2 and n 3, samples.jsonl and eval.json) saying what it knows and what not.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "run/run_record.h"
#include "studies/stats.h"
#include "test/skip.h"
#include "test/test_util.h"
#include "test/train_util.h"
#include "util/fs.h"
#include "util/io.h"
#include "util/json.h"

namespace {

// The interpreter that may have scipy: $PRISM_PYTHON, else python3.
std::string python() {
    const char* p = getenv("PRISM_PYTHON");
    return p && *p ? p : "python3";
}

// scipy importable by python()? If not, the test says so (PRISM_SKIP: counted as skipped, or failed where
// PRISM_REQUIRE names scipy) and skips its comparison.
bool have_scipy() {
    const Result r = sh(python() + " -c 'import scipy.stats, numpy'");
    if (r.rc != 0)
        PRISM_SKIP("scipy", "scipy not importable by " << python() << " (set PRISM_PYTHON), comparison skipped: "
                                                       << r.out.substr(0, r.out.find('\n')));
    return r.rc == 0;
}

double t975(double df) { return stats::t_quantile(0.975, df); }
double t80(double df) { return stats::t_quantile(0.80, df); }

}  // namespace

TEST_CASE("the t distribution's quantiles and CDF match published tables", "[stats]") {
    // Two-sided 95% critical values t_{0.975, df} (any statistics table) and one-sided 95% ones.
    const std::vector<std::pair<int, double>> t975 = {{1, 12.7062}, {2, 4.3027},  {3, 3.1824},  {4, 2.7764},
                                                      {5, 2.5706},  {10, 2.2281}, {30, 2.0423}, {120, 1.9799}};
    for (const auto& [df, t] : t975) {
        INFO("df " << df);
        CHECK(stats::t_quantile(0.975, df) == Approx(t).margin(5e-5));
        CHECK(stats::t_cdf(t, df) == Approx(0.975).margin(1e-5));
        CHECK(stats::t_cdf(-t, df) == Approx(0.025).margin(1e-5));
    }
    CHECK(stats::t_quantile(0.95, 2) == Approx(2.9200).margin(5e-5));
    CHECK(stats::t_quantile(0.95, 10) == Approx(1.8125).margin(5e-5));
    CHECK(stats::t_quantile(0.025, 4) == Approx(-2.7764).margin(5e-5));
    // One-sided 80% (the power term): t_{0.80, df} from the same tables.
    CHECK(stats::t_quantile(0.80, 1) == Approx(1.3764).margin(5e-5));
    CHECK(stats::t_quantile(0.80, 2) == Approx(1.0607).margin(5e-5));
    CHECK(stats::t_quantile(0.80, 10) == Approx(0.8791).margin(5e-5));
    CHECK(stats::t_cdf(1, 1) == Approx(0.75).margin(1e-12));               // Cauchy: 1/2 + atan(1)/pi
    CHECK(stats::t_quantile(0.975, 1e6) == Approx(1.95996).margin(5e-5));  // the normal's
    const double inf = std::numeric_limits<double>::infinity();
    CHECK(stats::t_quantile(0.975, inf) == Approx(1.959963985).epsilon(1e-9));  // the normal's, exactly
    CHECK(stats::t_quantile(0.80, inf) == Approx(0.841621234).epsilon(1e-9));
    // Outside the domain: NaN, never an exception.
    CHECK(std::isnan(stats::t_quantile(0.975, 0)));
    CHECK(std::isnan(stats::t_quantile(0.975, NAN)));
    CHECK(std::isnan(stats::t_quantile(1, 3)));
    CHECK(std::isnan(stats::t_cdf(NAN, 3)));
}

TEST_CASE("the t distribution matches scipy's where scipy is installed", "[stats]") {
    // scipy.stats.t is an independent implementation (Cephes' incomplete beta); without scipy this is skipped.
    if (!have_scipy()) return;
    const Result r = sh(python() +
                        " -c 'import scipy.stats as s\n"
                        "for df in (1, 1.5, 2, 3, 7, 30, 1000):\n"
                        "    for t in (-40, -5, -1, 0, 0.5, 2, 10):\n"
                        "        print(\"cdf\", df, t, repr(float(s.t.cdf(t, df))))\n"
                        "    for p in (1e-6, 0.025, 0.3, 0.5, 0.8, 0.9, 0.975, 0.9999):\n"
                        "        print(\"ppf\", df, p, repr(float(s.t.ppf(p, df))))'");
    REQUIRE(r.rc == 0);
    int n = 0;
    std::istringstream in(r.out);
    std::string what;
    double df, x, want;
    while (in >> what >> df >> x >> want) {
        INFO(what << "(" << x << ", df " << df << "), scipy " << want);
        // scipy's quantile (stdtrit) is good to ~1e-9 (its own CDF puts Boost's nearer p), and its median is 1e-16.
        if (what == "cdf") CHECK(stats::t_cdf(x, df) == Approx(want).epsilon(1e-11).margin(1e-300));
        else CHECK(stats::t_quantile(x, df) == Approx(want).epsilon(1e-8).margin(1e-15));
        n++;
    }
    CHECK(n == 7 * 15);
}

TEST_CASE("Satterthwaite's degrees of freedom", "[stats]") {
    const double inf = std::numeric_limits<double>::infinity();
    CHECK(stats::satterthwaite({{2.0, 4}}) == Approx(4));            // one term: its own df
    CHECK(stats::satterthwaite({{2.0, 4}, {0.0, 1}}) == Approx(4));  // a zero term adds nothing
    // (1 + 3)^2 / (1/2 + 9/10) = 16 / 1.4
    CHECK(stats::satterthwaite({{1.0, 2}, {3.0, 10}}) == Approx(16 / 1.4));
    CHECK(std::isinf(stats::satterthwaite({{1.0, inf}})));
    CHECK(stats::satterthwaite({{1.0, inf}, {1.0, 3}}) == Approx(4.0 / (1.0 / 3)));
    CHECK(std::isnan(stats::satterthwaite({{0.0, 3}})));
    CHECK(std::isnan(stats::satterthwaite({{NAN, 3}})));
    CHECK(std::isnan(stats::satterthwaite({{1.0, 0}})));
    stats::Spread s;
    s.A = 0.5;  // B = 0: df n - 1 exactly
    CHECK(s.df(2) == Approx(1));
    CHECK(s.df(7) == Approx(6));
}

TEST_CASE("a difference over seeds alone: no seed or one or two or three; a zero spread; NaN", "[stats]") {
    // No seed in common, and the pairing: only the keys both have, only finite values.
    stats::Comparison none = stats::paired_difference(std::map<int, double>{{1, 1}}, std::map<int, double>{{2, 1}});
    CHECK(none.n == 0);
    CHECK(none.why == "no common seed");
    CHECK(std::isnan(none.mean));
    CHECK(std::isnan(none.se));
    stats::Comparison p =
        stats::paired_difference(std::map<int, double>{{1, 2.0}, {2, 3.0}, {3, 4.5}, {9, 7}, {5, NAN}},
                                 std::map<int, double>{{1, 1.0}, {2, 1.5}, {3, 3.0}, {4, 0}, {5, 1}});
    REQUIRE(p.n == 3);
    CHECK(p.mean == Approx(4.0 / 3));
    const double sd = std::sqrt(((1 - 4.0 / 3) * (1 - 4.0 / 3) + 2 * (1.5 - 4.0 / 3) * (1.5 - 4.0 / 3)) / 2);
    CHECK(p.sd == Approx(sd));
    CHECK(p.why.empty());
    CHECK(p.se == Approx(sd / std::sqrt(3.0)));
    CHECK(p.df == Approx(2));
    CHECK(p.hi - p.mean == Approx(4.3027 * sd / std::sqrt(3.0)).epsilon(1e-4));
    CHECK(p.mean - p.lo == Approx(4.3027 * sd / std::sqrt(3.0)).epsilon(1e-4));
    // Detectable at 95%/80%: (t_{0.975, 2} + t_{0.80, 2}) sd / sqrt(3), the tabled 4.3027 + 1.0607.
    CHECK(p.detectable == Approx((4.3027 + 1.0607) * sd / std::sqrt(3.0)).epsilon(1e-4));
    CHECK(p.method.find("95% t interval over seeds, paired by seed") != std::string::npos);

    // One seed: a difference, no spread, no standard error, nothing detectable.
    stats::Comparison one = stats::seeds_only({0.25});
    CHECK(one.n == 1);
    CHECK(one.mean == 0.25);
    CHECK(one.why == "n 1: one seed, its spread not estimable");
    CHECK(std::isnan(one.se));
    CHECK(std::isnan(one.lo));
    CHECK(std::isnan(one.detectable));
    CHECK(stats::seeds_needed(one.spread, 0.1) == stats::kNotEstimable);

    // Two seeds: a standard error and what it could detect (t with 1 df), but no interval.
    stats::Comparison two = stats::seeds_only({0.1, 0.3});
    CHECK(two.why == "n 2: too few seeds for an interval");
    CHECK(std::isnan(two.lo));
    CHECK(std::isnan(two.hi));
    CHECK(two.se == Approx(std::sqrt(0.02) / std::sqrt(2.0)));  // sd = sqrt(0.02)
    CHECK(two.detectable == Approx((12.7062 + 1.3764) * 0.1).epsilon(1e-4));

    // The case: two seeds whose differences are equal: no zero-width interval, and it says why.
    stats::Comparison same2 = stats::seeds_only({-0.0625, -0.0625});
    CHECK(same2.why == "n 2: too few seeds for an interval; zero spread over seeds: interval not estimable");
    CHECK(std::isnan(same2.lo));
    CHECK(std::isnan(same2.detectable));
    // Three equal differences: zero spread, also when they differ in the last bits only (losses logged to 6
    // decimals: 6.40 - 6.45 is not 6.25 - 6.30 in binary).
    for (const std::vector<double>& d : {std::vector<double>{0.5, 0.5, 0.5}, {6.40 - 6.45, 6.25 - 6.30, 6.35 - 6.40}}) {
        stats::Comparison z = stats::seeds_only(d);
        INFO(d[0] << " " << d[1] << " " << d[2]);
        CHECK(z.why == "zero spread over seeds: interval not estimable");
        CHECK(std::isnan(z.lo));
        CHECK(std::isnan(z.se));
        CHECK(std::isnan(z.detectable));
        CHECK(stats::seeds_needed(z.spread, 0.01) == stats::kNotEstimable);
    }
    // Identical runs: every difference 0.
    CHECK(stats::seeds_only({0, 0, 0}).why == "zero spread over seeds: interval not estimable");
    // A NaN that reaches the statistics (seeds_only is given it): not estimable, and no interval.
    stats::Comparison nan = stats::seeds_only({0.1, NAN, 0.2});
    CHECK(nan.why == "not estimable (a value is NaN)");
    CHECK(std::isnan(nan.lo));
    CHECK(std::isnan(nan.detectable));
}

TEST_CASE("the seeds needed to detect an effect", "[stats]") {
    stats::Spread s;
    s.A = 0.02 * 0.02;  // a per-seed sd of 0.02 nats, nothing shared
    // The smallest n with (t_{0.975, n-1} + t_{0.80, n-1}) 0.02 / sqrt(n) <= 0.014, by a plain scan here.
    long want = 2;
    while ((t975(want - 1) + t80(want - 1)) * 0.02 / std::sqrt((double)want) > 0.014) want++;
    CHECK(want > 10);
    CHECK(stats::seeds_needed(s, 0.014) == want);
    CHECK(stats::seeds_needed(s, -0.014) == want);  // a decrease is as detectable
    CHECK(s.detectable(want) <= 0.014);
    CHECK(s.detectable(want - 1) > 0.014);
    // Beyond the scan (bisection): still the smallest.
    const long big = stats::seeds_needed(s, 0.001);
    CHECK(big > 1000);
    CHECK(s.detectable(big) <= 0.001);
    CHECK(s.detectable(big - 1) > 0.001);
    CHECK(stats::seeds_needed(s, 1e-7) == stats::kMaxSeeds + 1);
    CHECK(stats::seeds_needed(s, 10) == 2);  // already at two seeds
    CHECK(stats::seeds_needed(s, 0) == stats::kNotEstimable);
    CHECK(stats::seeds_needed(s, NAN) == stats::kNotEstimable);
    // A shared part B (the eval examples) that no number of seeds removes: an effect under its floor is out of reach.
    s.B = 0.01 * 0.01, s.dfB = 99;
    const double floor = (t975(99) + t80(99)) * 0.01;
    CHECK(stats::seeds_needed(s, floor * 0.999) == stats::kUnreachable);
    const long n = stats::seeds_needed(s, floor * 1.5);
    CHECK(n >= 2);
    CHECK(s.detectable(n) <= floor * 1.5);
    if (n > 2) CHECK(s.detectable(n - 1) > floor * 1.5);
    // Not estimable: no spread, or an unknown one.
    stats::Spread zero;
    zero.A = 0;
    CHECK(stats::seeds_needed(zero, 0.1) == stats::kNotEstimable);
    CHECK(stats::seeds_needed(stats::Spread(), 0.1) == stats::kNotEstimable);
}

namespace {

// The two-way table's mean squares, by sums of squares (SS_total = SS_seed + SS_example + SS_rest checked).
struct Anova {
    double ms_seed, ms_ex, ms_rest;
};
Anova anova(const std::vector<std::vector<double>>& x) {
    const size_t n = x.size(), N = x[0].size();
    double g = 0;
    for (const auto& r : x)
        for (double v : r) g += v / (n * N);
    double ss_total = 0, ss_seed = 0, ss_ex = 0;
    for (size_t s = 0; s < n; s++) {
        double m = 0;
        for (double v : x[s]) m += v / N, ss_total += (v - g) * (v - g);
        ss_seed += N * (m - g) * (m - g);
    }
    for (size_t i = 0; i < N; i++) {
        double m = 0;
        for (size_t s = 0; s < n; s++) m += x[s][i] / n;
        ss_ex += n * (m - g) * (m - g);
    }
    const double ss_rest = ss_total - ss_seed - ss_ex;
    return {ss_seed / (n - 1), ss_ex / (N - 1), ss_rest / ((n - 1) * (N - 1))};
}

// A run's 0/1 results on 16 examples from a bit mask (bit i: example i right).
std::vector<double> bits(unsigned mask, int N = 16) {
    std::vector<double> v;
    for (int i = 0; i < N; i++) v.push_back((mask >> i) & 1);
    return v;
}
std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> d;
    for (size_t i = 0; i < a.size(); i++) d.push_back(a[i] - b[i]);
    return d;
}

}  // namespace

TEST_CASE("a zero-shot difference paired per example: seed variance and the eval set's sampling variance", "[stats]") {
    // Three seeds of two arms on the same 16 examples.
    const std::vector<std::vector<double>> x = {minus(bits(0x01FF), bits(0x00FF)), minus(bits(0x3FF0), bits(0x0FF0)),
                                                minus(bits(0xF03F), bits(0xF00F))};
    const stats::Comparison c = stats::paired_by_example(x);
    const Anova a = anova(x);
    const double n = 3, N = 16;
    CHECK(c.n == 3);
    CHECK(c.examples == 16);
    CHECK(c.mean == Approx((1 + 2 + 2) / 48.0));
    CHECK(c.spread.A == Approx(std::max(a.ms_seed, a.ms_rest) / N));
    CHECK(c.spread.B == Approx(std::max(0.0, a.ms_ex - a.ms_rest) / (n * N)));
    CHECK(c.se == Approx(std::sqrt(c.spread.A / n + c.spread.B)));
    CHECK(c.why.empty());
    CHECK(c.hi - c.lo == Approx(2 * t975(c.df) * c.se));
    CHECK(c.method.find("paired by seed and by example") != std::string::npos);
    // Var(mean) = s_a^2/n + s_b^2/N + s_e^2/(nN) has an unbiased estimate (MS_seed + MS_ex - MS_rest) / (nN):
    // the truncated one is it, where neither component is cut.
    if (a.ms_seed >= a.ms_rest && a.ms_ex >= a.ms_rest)
        CHECK(c.se * c.se == Approx((a.ms_seed + a.ms_ex - a.ms_rest) / (n * N)));

    // Seeds whose means agree (each -1/16, the numbers) but whose examples disagree: the per-example
    // disagreement says how much a seed's mean varies, so the interval is neither zero-wide nor absent.
    std::vector<std::vector<double>> same = {minus(bits(0x007F), bits(0x00FF)), minus(bits(0x0FE0), bits(0x0FF0)),
                                             minus(bits(0xE00F), bits(0xF00F))};
    for (const auto& r : same) CHECK(stats::mean(r) == -0.0625);
    const stats::Comparison s3 = stats::paired_by_example(same);
    CHECK(s3.sd == 0);
    CHECK(s3.why.empty());
    CHECK(s3.spread.A > 0);
    CHECK(s3.hi - s3.lo > 0.05);
    // Two of them: a standard error, too few seeds for an interval.
    same.pop_back();
    const stats::Comparison s2 = stats::paired_by_example(same);
    CHECK(s2.why == "n 2: too few seeds for an interval");
    const Anova a2 = anova(same);
    CHECK(s2.se == Approx(std::sqrt((std::max(a2.ms_seed, a2.ms_rest) + std::max(0.0, a2.ms_ex - a2.ms_rest)) / 32)));
    CHECK(s2.se > 0.04);  // not zero: the examples say the seeds vary
    CHECK(std::isnan(s2.lo));
    // One seed: its paired sampling variance var_i(x_i) / N alone, and no interval.
    same.pop_back();
    const stats::Comparison s1 = stats::paired_by_example(same);
    CHECK(s1.why == "n 1: one seed, its spread not estimable (the eval's sampling error alone is the SE)");
    CHECK(s1.se == Approx(std::sqrt(stats::variance(same[0]) / 16)));
    CHECK(std::isnan(s1.detectable));
    // Runs that agree on every example: nothing varies, nothing is estimable.
    const stats::Comparison z = stats::paired_by_example({bits(0), bits(0), bits(0)});
    CHECK(z.why == "zero spread over seeds: interval not estimable");
    CHECK(std::isnan(z.se));
    // Examples that differ between seeds (the caller's bug): not estimable rather than wrong.
    CHECK(stats::paired_by_example({bits(0, 16), bits(0, 15)}).why == "not estimable (the runs' examples differ)");
    CHECK(stats::paired_by_example({}).n == 0);
}

TEST_CASE("the per-example variance covers the truth where seeds alone do not: a simulation", "[stats]") {
    // Data drawn from the model itself, x_si = delta + a_s + b_i + e_si (normal; sds 0.05, 0.5, 0.3 on N = 50
    // examples and n = 3 seeds: the examples' shared part dominates, as on a small eval set), 4000 times: the
    // estimated V is on average the variance of the mean, and the 95% interval holds delta about 95% of the time;
    // the seeds' spread alone (what report did before) misses the examples' part and falls well short.
    uint64_t r = 99;
    auto uniform = [&r]() {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        return ((r >> 11) + 0.5) / (double)(1ull << 53);
    };
    auto normal = [&]() { return std::sqrt(-2 * std::log(uniform())) * std::cos(2 * M_PI * uniform()); };
    const int n = 3, N = 50, reps = 4000;
    const double delta = 0.1, sa = 0.05, sb = 0.5, se = 0.3;
    double sum_v = 0, sum_m = 0, sum_m2 = 0;
    int covered = 0, covered_seeds = 0, no_interval = 0;
    for (int k = 0; k < reps; k++) {
        std::vector<double> b(N);
        for (double& x : b) x = sb * normal();
        std::vector<std::vector<double>> x(n, std::vector<double>(N));
        std::vector<double> d;
        for (auto& row : x) {
            const double a = sa * normal();
            for (int i = 0; i < N; i++) row[i] = delta + a + b[i] + se * normal();
            d.push_back(stats::mean(row));
        }
        const stats::Comparison c = stats::paired_by_example(x), s = stats::seeds_only(d);
        no_interval += !c.why.empty();
        sum_v += c.se * c.se, sum_m += c.mean, sum_m2 += c.mean * c.mean;
        covered += c.lo <= delta && delta <= c.hi;
        covered_seeds += s.lo <= delta && delta <= s.hi;
    }
    CHECK(no_interval == 0);
    const double var_mean = (sum_m2 - sum_m * sum_m / reps) / (reps - 1);
    const double truth = sa * sa / n + sb * sb / N + se * se / (n * N);
    CHECK(var_mean == Approx(truth).epsilon(0.1));  // the simulation itself
    // On average V is the truth or a little above: each component is cut at zero, which only adds.
    CHECK(sum_v / reps > 0.95 * truth);
    CHECK(sum_v / reps < 1.2 * truth);
    CHECK(covered / (double)reps > 0.94);
    CHECK(covered / (double)reps < 0.99);
    CHECK(covered_seeds / (double)reps < 0.88);  // 0.82: its SE leaves out the examples' part
}

TEST_CASE("a zero-shot difference from eval.json's standard errors: unpaired and conservative", "[stats]") {
    const std::vector<double> d = {0.02, 0.05, -0.01}, v = {0.001, 0.0012, 0.0008};
    const stats::Comparison c = stats::with_std_errors(d, v, 100);
    CHECK(c.spread.A == Approx(stats::variance(d)));
    CHECK(c.spread.B == Approx(0.001));
    CHECK(c.spread.dfB == 99);
    CHECK(c.se == Approx(std::sqrt(stats::variance(d) / 3 + 0.001)));
    const double a = stats::variance(d) / 3, df = (a + 0.001) * (a + 0.001) / (a * a / 2 + 0.001 * 0.001 / 99);
    CHECK(c.df == Approx(df));
    CHECK(c.hi == Approx(c.mean + t975(df) * c.se));
    CHECK(c.method.find("unpaired per example") != std::string::npos);
    // One seed: its sampling error alone; the two equal differences: no interval, and why.
    CHECK(stats::with_std_errors({0.1}, {0.004}, 16).se == Approx(std::sqrt(0.004)));
    const stats::Comparison two = stats::with_std_errors({-0.0625, -0.0625}, {0.03, 0.03}, 16);
    CHECK(two.why == "n 2: too few seeds for an interval; zero spread over seeds: interval not estimable");
    CHECK(two.se == Approx(std::sqrt(0.03)));
    CHECK(std::isnan(two.lo));
    // Missing standard errors or examples: not estimable, never a number made up.
    CHECK(stats::with_std_errors(d, {0.001}, 100).why == "not estimable (no standard error for every run)");
    CHECK(stats::with_std_errors(d, v, 1).why == "not estimable (no standard error for every run)");
}

TEST_CASE("the intervals and detectable effects and seeds needed match an implementation on scipy", "[stats]") {
    // The same formulas written in numpy on scipy's t distribution (an independent t: Cephes), on data made here.
    if (!have_scipy()) return;
    char tmpl[] = "/tmp/prism_stats_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    uint64_t r = 12345;
    auto next = [&r]() { return (r = r * 6364136223846793005ull + 1442695040888963407ull) >> 11; };
    auto uniform = [&]() { return (double)next() / (double)(1ull << 53); };
    auto matrix = [&](int n, int N, double pa, double pb) {
        std::vector<std::vector<double>> x(n, std::vector<double>(N));
        std::vector<double> easy(N);
        for (double& e : easy) e = uniform() - 0.5;  // examples differ in difficulty, as real ones do
        for (auto& row : x)
            for (int i = 0; i < N; i++) row[i] = (uniform() < pa + easy[i] * 0.6) - (uniform() < pb + easy[i] * 0.6);
        return x;
    };
    struct Case {
        std::string name;
        stats::Comparison c;
        double effect;
        std::string data;  // the input as Python literals
    };
    std::vector<Case> cases;
    auto list = [](const std::vector<double>& v) {
        std::string s = "[";
        for (double x : v) s += json::number(x, "%.17g") + ",";
        return s + "]";
    };
    std::vector<double> d5;
    for (int i = 0; i < 5; i++) d5.push_back(0.01 + 0.02 * uniform());
    cases.push_back({"seeds5", stats::seeds_only(d5), 0.014, "{'d': " + list(d5) + "}"});
    cases.push_back({"seeds3", stats::seeds_only({0.031, -0.002, 0.017}), 0.0005, "{'d': [0.031, -0.002, 0.017]}"});
    for (auto [n, N] : {std::pair<int, int>{3, 40}, {2, 40}, {4, 200}, {1, 30}}) {
        const auto x = matrix(n, N, 0.55, 0.5);
        std::string s = "{'x': [";
        for (const auto& row : x) s += list(row) + ",";
        cases.push_back(
            {"examples" + std::to_string(n) + "x" + std::to_string(N), stats::paired_by_example(x), 0.03, s + "]}"});
    }
    const std::vector<double> dd = {0.02, 0.05, -0.01, 0.03}, vv = {0.001, 0.0012, 0.0008, 0.0011};
    cases.push_back({"stderr4", stats::with_std_errors(dd, vv, 250), 0.2,
                     "{'d': " + list(dd) + ", 'v': " + list(vv) + ", 'N': 250}"});
    cases.push_back({"stderr4_out_of_reach", stats::with_std_errors(dd, vv, 250), 0.05,
                     "{'d': " + list(dd) + ", 'v': " + list(vv) + ", 'N': 250}"});

    std::string py =
        "import numpy as np\n"
        "from scipy import stats as st\n"
        "def tq(p, df): return float(st.t.ppf(p, df))\n"
        "def sat(terms):\n"
        "    terms = [(v, f) for v, f in terms if v > 0]\n"
        "    return sum(v for v, f in terms) ** 2 / sum(v * v / f for v, f in terms if np.isfinite(f))\n"
        "def spread(c):\n"
        "    if 'x' in c:\n"
        "        X = np.array(c['x'], dtype=float); n, N = X.shape\n"
        "        if n == 1: return None, X[0].var(ddof=1) / N, N - 1, X.mean(), n\n"
        "        ds, Di, g = X.mean(1), X.mean(0), X.mean()\n"
        "        ms_s, ms_x = N * ds.var(ddof=1), n * Di.var(ddof=1)\n"
        "        ms_r = ((X - ds[:, None] - Di[None, :] + g) ** 2).sum() / ((n - 1) * (N - 1))\n"
        "        B = max(0.0, ms_x - ms_r) / (n * N)\n"
        "        dfB = N - 1 if B > 0 else np.inf\n"
        "        return max(ms_s, ms_r) / N, B, dfB, g, n\n"
        "    d = np.array(c['d']); n = len(d)\n"
        "    if 'v' in c: return d.var(ddof=1), np.mean(c['v']), c['N'] - 1, d.mean(), n\n"
        "    return d.var(ddof=1), 0.0, np.inf, d.mean(), n\n"
        "def mde(A, B, dfB, n):\n"
        "    df = sat([(A / n, n - 1), (B, dfB)])\n"
        "    return (tq(0.975, df) + tq(0.8, df)) * np.sqrt(A / n + B)\n"
        "def need(A, B, dfB, e):\n"
        "    m = np.arange(2, 20000, dtype=float); a = A / m\n"
        "    df = (a + B) ** 2 / (a * a / (m - 1) + (B * B / dfB if B > 0 else 0.0))\n"
        "    ok = np.nonzero((st.t.ppf(0.975, df) + st.t.ppf(0.8, df)) * np.sqrt(a + B) <= e)[0]\n"
        "    return int(m[ok[0]]) if len(ok) else 0\n"
        "def show(name, c, e):\n"
        "    A, B, dfB, mean, n = spread(c)\n"
        "    print(name, 'mean', repr(float(mean)))\n"
        "    if A is None:\n"
        "        print(name, 'se', repr(float(np.sqrt(B)))); return\n"
        "    se, df = np.sqrt(A / n + B), sat([(A / n, n - 1), (B, dfB)])\n"
        "    print(name, 'A', repr(float(A))); print(name, 'B', repr(float(B))); print(name, 'se', repr(float(se)))\n"
        "    print(name, 'mde', repr(float(mde(A, B, dfB, n)))); print(name, 'need', need(A, B, dfB, e))\n"
        "    if n >= 3:\n"
        "        print(name, 'df', repr(float(df)))\n"
        "        print(name, 'lo', repr(float(mean - tq(0.975, df) * se)))\n"
        "        print(name, 'hi', repr(float(mean + tq(0.975, df) * se)))\n";
    for (const Case& c : cases)
        py += "show('" + c.name + "', " + c.data + ", " + json::number(c.effect, "%.17g") + ")\n";
    write_atomically(dir + "/check.py", {{py.data(), py.size()}});
    const Result out = sh(python() + " " + dir + "/check.py");
    INFO(out.out);
    REQUIRE(out.rc == 0);
    std::istringstream in(out.out);
    std::string name, what;
    double want;
    std::map<std::string, int> seen;
    while (in >> name >> what >> want) {
        const Case* c = nullptr;
        for (const Case& k : cases)
            if (k.name == name) c = &k;
        REQUIRE(c);
        INFO(name << " " << what << ": scipy's " << want);
        seen[what]++;
        const stats::Comparison& k = c->c;
        // Sums in another order (numpy's pairwise ones) differ in the last bits; scipy's quantiles to ~1e-9.
        if (what == "mean") CHECK(k.mean == Approx(want).epsilon(1e-12).margin(1e-15));
        else if (what == "A") CHECK(k.spread.A == Approx(want).epsilon(1e-10));
        else if (what == "B") CHECK(k.spread.B == Approx(want).epsilon(1e-10).margin(1e-300));
        else if (what == "se") CHECK(k.se == Approx(want).epsilon(1e-10));
        else if (what == "df") CHECK(k.df == Approx(want).epsilon(1e-10));
        else if (what == "lo") CHECK(k.lo == Approx(want).epsilon(1e-8));
        else if (what == "hi") CHECK(k.hi == Approx(want).epsilon(1e-8));
        else if (what == "mde") CHECK(k.detectable == Approx(want).epsilon(1e-8));
        else if (what == "need") {
            const long n = stats::seeds_needed(k.spread, c->effect);
            CHECK(n == (want == 0 ? stats::kUnreachable : (long)want));
        } else FAIL("unexpected line " << what);
    }
    CHECK(seen["mean"] == (int)cases.size());
    CHECK(seen["need"] == (int)cases.size() - 1);  // every case but the one seed's
    CHECK(seen["lo"] == 6);                        // the cases of three seeds or more
    sh("rm -rf '" + dir + "'");
}

namespace {

// A run directory as train_prism and study leave it (train_util.h's write_recorded_run), with an eval.json of piqa
// on 16 examples (bit i of mask: example i right), with `samples` its samples.jsonl too (eval_zeroshot
// --log-samples).
void write_study_run(const std::string& dir, const std::string& heads, int seed, const std::vector<double>& vals,
                     int mask, bool samples) {
    write_recorded_run(dir, heads, {{"--seed", std::to_string(seed)}}, vals);
    int right = 0;
    std::string lines;
    for (int i = 0; i < 16; i++) {
        const int acc = (mask >> i) & 1;
        right += acc;
        lines += "{\"task\": \"piqa\", \"index\": " + std::to_string(i) +
                 ", \"label\": 0, \"acc\": " + std::to_string(acc) + ", \"loglik\": [-1.5, -2.25]}\n";
    }
    const double p = right / 16.0;
    char b[256];
    snprintf(b, sizeof b,
             "{\"step\": %zu, \"results\": [{\"task\": \"piqa\", \"examples\": 16, \"acc\": %.10g, \"acc_stderr\": "
             "%.10g}]}\n",
             5 * vals.size(), p, std::sqrt(p * (1 - p) / 15));
    write_atomically(dir + "/eval.json", {{b, strlen(b)}});
    if (samples) write_atomically(dir + "/samples.jsonl", {{lines.data(), lines.size()}});
}

double num(const json::Value& o, const char* k) {
    const json::Value& v = json::field(o, k);
    return v.kind == json::Value::Number ? std::strtod(v.str.c_str(), nullptr) : NAN;
}

// groups[label].quantities[q].vs_baseline of report --json.
const json::Value& vs(const json::Value& js, const std::string& label, const std::string& q) {
    for (const json::Value& g : json::field(js, "groups").arr)
        if (json::str_field(g, "label") == label)
            return json::field(json::field(json::field(g, "quantities"), q), "vs_baseline");
    FAIL("no group " << label);
    throw 0;
}

}  // namespace

TEST_CASE("report's group tables: intervals at n 3; why none at n 2 or a zero spread; detectable effects",
          "[stats][report]") {
    char tmpl[] = "/tmp/prism_stats_report_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    // uniform (the baseline) and prism with seeds 1-3 and samples.jsonl; heads 1_2 with seeds 1-2 and eval.json
    // alone, whose piqa differences are -1/16 for both seeds (the zero-width interval).
    const std::vector<std::vector<double>> u = {{6.9, 6.5, 6.30}, {6.8, 6.45, 6.28}, {7.0, 6.6, 6.40}};
    const std::vector<std::vector<double>> p = {{6.85, 6.25, 6.27}, {6.8, 6.23, 6.29}, {6.9, 6.35, 6.36}};
    const std::vector<std::vector<double>> x = {{6.95, 6.6, 6.35}, {6.9, 6.5, 6.34}};
    const int um[3] = {0x00FF, 0x0FF0, 0xF00F}, pm[3] = {0x01FF, 0x3FF0, 0xF03F}, xm[2] = {0x007F, 0x0FE0};
    for (int s = 0; s < 3; s++) {
        write_study_run(dir + "/uniform-s" + std::to_string(s + 1), "uniform", s + 1, u[s], um[s], true);
        write_study_run(dir + "/prism-s" + std::to_string(s + 1), "prism", s + 1, p[s], pm[s], true);
        if (s < 2) write_study_run(dir + "/x-s" + std::to_string(s + 1), "1_2", s + 1, x[s], xm[s], false);
    }
    const Result r = sh("./report " + dir + " -o " + dir + "/r.html --json " + dir + "/r.json --effect 0.014 " +
                        "--effect-acc 0.05");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    const json::Value js = json::parse(read_text(dir + "/r.json"));
    const std::string html = read_text(dir + "/r.html");

    // final val loss, prism - uniform over 3 seeds: the t interval, computed here from the logs' numbers.
    const std::vector<double> d = {6.27 - 6.30, 6.29 - 6.28, 6.36 - 6.40};
    const double m = stats::mean(d), sd = stats::stddev(d), se = sd / std::sqrt(3.0);
    const json::Value& fin = vs(js, "heads prism", "final val loss");
    CHECK(json::int_field(fin, "n") == 3);
    CHECK(num(fin, "se") == Approx(se).epsilon(1e-6));
    CHECK(num(fin, "lo") == Approx(m - 4.302653 * se).epsilon(1e-5));
    CHECK(num(fin, "hi") == Approx(m + 4.302653 * se).epsilon(1e-5));
    CHECK(json::field(fin, "no_interval").kind == json::Value::Null);
    const double mde = (4.302653 + 1.060660) * se;  // t_{0.975, 2} + t_{0.80, 2}
    CHECK(num(fin, "detectable") == Approx(mde).epsilon(1e-5));
    long need = 2;
    while ((t975(need - 1) + t80(need - 1)) * sd / std::sqrt((double)need) > 0.014) need++;
    CHECK(json::int_field(fin, "seeds_needed") == need);
    char line[160];
    snprintf(line, sizeof line, "±%.4f nats; seeds for 0.014: %ld", mde, need);
    CHECK(r.out.find(line) != std::string::npos);
    CHECK(html.find(line) != std::string::npos);
    snprintf(line, sizeof line, "[%+.4f, %+.4f]", m - 4.302653 * se, m + 4.302653 * se);
    CHECK(r.out.find(line) != std::string::npos);
    CHECK(r.out.find("95% t interval over seeds, paired by seed (df n - 1)") != std::string::npos);

    // best val loss, prism: the three differences are all -0.05: no interval, and why; nothing detectable.
    const json::Value& best = vs(js, "heads prism", "best val loss");
    CHECK(json::str_field(best, "no_interval") == "zero spread over seeds: interval not estimable");
    CHECK(json::field(best, "lo").kind == json::Value::Null);
    CHECK(json::field(best, "seeds_needed").kind == json::Value::Null);
    CHECK(r.out.find("not estimable (zero spread); seeds for 0.014: not estimable") != std::string::npos);

    // final val loss, heads 1_2 over 2 seeds: a standard error and what it could detect, no interval.
    const json::Value& two = vs(js, "heads 1_2", "final val loss");
    CHECK(json::int_field(two, "n") == 2);
    CHECK(json::str_field(two, "no_interval") == "n 2: too few seeds for an interval");
    CHECK(num(two, "se") == Approx(0.005).epsilon(1e-4));  // the differences 0.05 and 0.06: sd / sqrt(2)
    CHECK(num(two, "detectable") == Approx((12.706205 + 1.376382) * 0.005).epsilon(1e-4));
    CHECK(html.find("n 2: too few seeds for an interval") != std::string::npos);

    // piqa acc, heads 1_2: no samples, so eval.json's standard errors, unpaired; -0.0625 twice: no interval.
    const json::Value& x2 = vs(js, "heads 1_2", "piqa acc");
    CHECK(num(x2, "mean") == -0.0625);
    CHECK(json::str_field(x2, "no_interval") ==
          "n 2: too few seeds for an interval; zero spread over seeds: interval not estimable");
    const double se_u = std::sqrt(0.25 / 15), se_x = std::sqrt(7.0 / 16 * 9.0 / 16 / 15);
    CHECK(num(x2, "se") == Approx(std::sqrt(se_u * se_u + se_x * se_x)).epsilon(1e-6));  // ~0.18: not zero
    CHECK(json::str_field(x2, "method").find("unpaired per example") != std::string::npos);
    // piqa acc, prism: samples.jsonl everywhere: paired per example, with the crossed design's variance.
    const json::Value& p3 = vs(js, "heads prism", "piqa acc");
    std::vector<std::vector<double>> ex;
    for (int s = 0; s < 3; s++) ex.push_back(minus(bits(pm[s]), bits(um[s])));
    const Anova a = anova(ex);
    const double v3 = (std::max(a.ms_seed, a.ms_rest) + std::max(0.0, a.ms_ex - a.ms_rest)) / (3 * 16);
    CHECK(num(p3, "se") == Approx(std::sqrt(v3)).epsilon(1e-6));
    CHECK(json::int_field(p3, "examples") == 16);
    CHECK(json::str_field(p3, "method").find("paired by seed and by example") != std::string::npos);
    CHECK(json::field(p3, "no_interval").kind == json::Value::Null);
    // Two methods in one table: numbered, and each stated once under it.
    CHECK(r.out.find("− baseline: [1] 95% t interval, paired by seed and by example") != std::string::npos);
    CHECK(r.out.find("; [2] 95% t interval, paired by seed: V = A/n + B") != std::string::npos);
    CHECK(html.find("<h3>piqa acc (fraction of examples)</h3>") != std::string::npos);
    CHECK(html.find("<th>detectable at 95%/80%</th>") != std::string::npos);

    // A samples.jsonl that is not eval.json's (an example missing), or not JSON Lines: a warning naming it, and
    // that comparison falls back to eval.json's standard errors.
    Result w;
    const std::string s3 = dir + "/prism-s3/samples.jsonl";
    const std::string text = read_text(s3);
    const std::string fewer = text.substr(0, text.rfind('\n') + 1);
    write_atomically(s3, {{fewer.data(), fewer.size()}});
    w = sh("./report " + dir + " -o " + dir + "/r.html --json " + dir + "/r.json");
    INFO(w.out);
    CHECK(w.rc == 0);
    CHECK(w.out.find("report: warning: " + s3 +
                     ": piqa acc: 15 examples with mean 0.6, but eval.json has 16 with 0.625; eval.json's standard "
                     "errors are used instead") != std::string::npos);
    CHECK(json::str_field(vs(json::parse(read_text(dir + "/r.json")), "heads prism", "piqa acc"), "method")
              .find("unpaired") != std::string::npos);
    write_atomically(s3, {{"{\"task\": \"piqa\"}\n", 17}});
    w = sh("./report " + dir + " -o " + dir + "/r.html");
    CHECK(w.rc == 0);
    CHECK(w.out.find(s3 + ": line 1 is not a scored example (missing field \"index\")") != std::string::npos);
    CHECK(read_text(dir + "/r.html").find("line 1 is not a scored example") != std::string::npos);

    // The flags' bounds, one line each.
    for (const char* bad : {"--effect-acc 2", "--effect -1", "--effect x"}) {
        const Result e = sh("./report " + dir + " -o " + dir + "/r.html " + bad);
        INFO(bad << ": " << e.out);
        CHECK(e.rc != 0);
        CHECK(e.out.find("error: --effect") != std::string::npos);
        CHECK(std::count(e.out.begin(), e.out.end(), '\n') == 1);
    }
    sh("rm -rf '" + dir + "'");
}
