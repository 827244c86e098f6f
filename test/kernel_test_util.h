// kernel_test_util.h: what the kernel tests share (test_kernels.cpp, test_attention.cpp): device buffers filled
// from host vectors, bf16-exact random inputs, a tolerance check that names the worst element, and a checked sync.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_common.cuh"
#include "ref/init.h"

const double BF16_REL = 1.0 / 256;  // 2^-8: bf16's relative rounding error at most (8 significant bits)

// A device buffer from / to host vectors. Float host data is rounded to bf16 when T is bf16.
template <class T> struct Dev {
    T* p = nullptr;
    size_t n = 0;
    explicit Dev(size_t count) : n(count) { cudaCheck(cudaMalloc(&p, (n ? n : 1) * sizeof(T))); }
    template <class U> explicit Dev(const std::vector<U>& h) : Dev(h.size()) { upload(h); }
    Dev(const Dev&) = delete;
    ~Dev() { cudaFree(p); }
    template <class U> void upload(const std::vector<U>& h) {
        std::vector<T> t(h.begin(), h.end());
        cudaCheck(cudaMemcpy(p, t.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<float> get() const {  // as floats (bf16 -> float is exact)
        std::vector<T> t(n);
        cudaCheck(cudaMemcpy(t.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return std::vector<float>(t.begin(), t.end());
    }
    std::vector<T> raw() const {
        std::vector<T> t(n);
        cudaCheck(cudaMemcpy(t.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return t;
    }
};

// Uniform values in [lo, hi), rounded to bf16 so host and device see the same numbers.
inline std::vector<float> rand_bf16(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    ref::Rng rng(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = float(bf16(lo + (hi - lo) * (float)rng.uniform()));
    return v;
}

inline float max_abs(const std::vector<float>& v) {
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
}

// Counts elements outside rel * |want| + abs * max|want| and reports the worst one.
inline void check_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                        const std::string& what) {
    REQUIRE(got.size() == want.size());
    const double scale = max_abs(want);
    size_t bad = 0, worst = 0;
    double worst_ratio = 0;
    for (size_t i = 0; i < got.size(); i++) {
        const double tol = rel * std::fabs(want[i]) + abs * scale + 1e-30;
        const double err = std::fabs((double)got[i] - want[i]);
        const double ratio = std::isfinite(got[i]) ? err / tol : INFINITY;
        if (ratio > 1) bad++;
        if (ratio > worst_ratio || !(ratio == ratio)) worst_ratio = ratio, worst = i;
    }
    INFO(what << ": " << bad << " of " << got.size() << " outside tolerance; worst at " << worst << ": got "
              << got[worst] << " want " << want[worst] << " (" << worst_ratio << " x tol)");
    CHECK(bad == 0);
}

inline void sync() {
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaDeviceSynchronize());
}
