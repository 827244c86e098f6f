// test/grad_check.h: the finite-difference gradient check the reference's tests share (test_ref_ops.cpp op by op,
// test_reference.cpp for whole models): random inputs, central differences in double, and the tolerance.
//
// Tolerance of every finite-difference comparison (grad_close): central differences in double with step
// h = 1e-5 have truncation error h^2/6 |f'''| ~ 2e-11 |f'''| and roundoff ~ 1e-16 |f| / h ~ 1e-11 |f|; for
// these small problems |f| and |f'''| are O(1..10), so the numerical derivative is good to ~1e-10 (the largest
// error seen over all checks is 8.5e-11). We accept |analytic - numeric| <= 1e-8 + 1e-6 |numeric|:
// 100x above that, yet a wrong gradient (a missing term, factor or sign) is off by O(|g|), and the checked
// gradients are O(1e-3..1) (check_all and check_model_gradients assert that, so no check passes by comparing
// two zeros). Even a term as small as a norm's eps (1e-5 relative to unit variance) would show.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ref/init.h"

inline std::vector<double> randn(size_t n, uint64_t seed, double std = 1.0) {
    ref::Rng r(seed);
    std::vector<double> v(n);
    for (auto& x : v) x = std * r.normal();
    return v;
}

inline bool grad_close(double analytic, double numeric) {
    return std::fabs(analytic - numeric) <= 1e-8 + 1e-6 * std::fabs(numeric);
}

// d f / d x by central differences; x is restored.
template <class F> inline double central_diff(double& x, F&& f, double h = 1e-5) {
    const double x0 = x;
    x = x0 + h;
    const double fp = f();
    x = x0 - h;
    const double fm = f();
    x = x0;
    return (fp - fm) / (2 * h);
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}

// Checks analytic[i] against the numerical derivative of f w.r.t. x[i] for every i.
template <class F>
inline void check_all(const char* what, std::vector<double>& x, const std::vector<double>& analytic, F&& f) {
    double maxabs = 0;
    for (size_t i = 0; i < x.size(); i++) {
        const double num = central_diff(x[i], f);
        INFO(what << "[" << i << "] analytic " << analytic[i] << " numeric " << num);
        CHECK(grad_close(analytic[i], num));
        maxabs = std::max(maxabs, std::fabs(num));
    }
    INFO(what << ": every gradient is ~0, the check would be vacuous");
    CHECK(maxabs > 1e-3);
}
