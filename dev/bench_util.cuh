// dev/bench_util.cuh: what the kernel benchmarks (bench_attention.cpp, bench_gdn.cpp) share: their list flags, the
// event timer and the upload of a host vector.
// Does not: pick shapes, count FLOPs or print tables (each benchmark's own).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_common.cuh"

// "64,128,256": a list of positive integers; anything else is one line naming `tool` and exit status 2.
inline std::vector<int> int_list(const std::string& s, const char* tool) {
    std::vector<int> v;
    size_t start = 0;
    while (start <= s.size()) {
        const size_t comma = s.find(',', start);
        const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        char* end = nullptr;
        const long x = strtol(item.c_str(), &end, 10);
        if (item.empty() || *end || x <= 0 || x > 1L << 30) {
            fprintf(stderr, "%s: error: '%s' is not a list of positive integers (e.g. 64,128,256)\n", tool, s.c_str());
            exit(2);
        }
        v.push_back((int)x);
        start = comma == std::string::npos ? s.size() + 1 : comma + 1;
    }
    return v;
}

// Mean ms of fn over reps runs, after one warm-up run.
template <class F> double time_ms(F fn, int reps) {
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    fn();
    cudaCheck(cudaEventRecord(a, 0));
    for (int i = 0; i < reps; i++) fn();
    cudaCheck(cudaEventRecord(b, 0));
    cudaCheck(cudaEventSynchronize(b));
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, a, b));
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    return ms / reps;
}

// A device copy of h (cudaMalloc'd; the benchmark frees it).
template <class T> T* upload(const std::vector<T>& h) {
    T* p = nullptr;
    cudaCheck(cudaMalloc(&p, std::max<size_t>(h.size(), 1) * sizeof(T)));
    cudaCheck(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}
