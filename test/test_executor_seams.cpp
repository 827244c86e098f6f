// test_executor_seams.cpp: the matmul seam the executor replaces, checked against plain loops: matmul() (cuBLASLt
// on a GPU, a CPU GEMM here) for every transpose combination, beta = 0 and 1 and the bias epilogue. The
// collectives seam (comm.cuh) is tested across real MPI ranks in test_comm.cpp. Compiles as CUDA too
// (make test-executor-native).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "matmul.cuh"

namespace {
template <class T> T* to_device(const std::vector<T>& h) {
    T* p;
    cudaCheck(cudaMalloc(&p, h.size() * sizeof(T)));
    cudaCheck(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}
template <class T> std::vector<T> to_host(const T* p, size_t n) {
    std::vector<T> h(n);
    cudaCheck(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
std::vector<bf16> random_bf16(size_t n, unsigned seed) {
    std::vector<bf16> v(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = __float2bfloat16((float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f);
    }
    return v;
}
} // namespace

TEST_CASE("matmul seam matches a naive GEMM for all transposes, beta and bias", "[executor][seam]") {
    const int M = 33, N = 20, K = 47; // odd sizes: no tiling assumption hides an indexing bug
    for (int transA = 0; transA < 2; transA++)
        for (int transB = 0; transB < 2; transB++)
            for (int accumulate = 0; accumulate < 2; accumulate++)
                for (int with_bias = 0; with_bias < 2; with_bias++) {
                    auto A = random_bf16((size_t)M * K, 1 + transA), B = random_bf16((size_t)K * N, 7 + transB);
                    auto bias = random_bf16(N, 11);
                    auto prior = random_bf16((size_t)M * N, 13);
                    std::vector<float> prior_f(prior.begin(), prior.end()), bias_f(bias.begin(), bias.end());
                    bf16 *dA = to_device(A), *dB = to_device(B), *dbias = to_device(bias), *dout = to_device(prior);
                    float *dout_f = to_device(prior_f), *dbias_f = to_device(bias_f);
                    float beta = accumulate ? 1.0f : 0.0f;
                    matmul(dout, dA, dB, with_bias ? dbias : nullptr, M, N, K, transA, transB, beta, 0);
                    matmul(dout_f, dA, dB, with_bias ? dbias_f : nullptr, M, N, K, transA, transB, beta, 0);
                    cudaCheck(cudaDeviceSynchronize());
                    auto out = to_host(dout, (size_t)M * N);
                    auto out_f = to_host(dout_f, (size_t)M * N);
                    int bad = 0;
                    for (int m = 0; m < M; m++)
                        for (int n = 0; n < N; n++) {
                            double want = 0;
                            for (int k = 0; k < K; k++) {
                                float a = transA ? A[(size_t)k * M + m] : A[(size_t)m * K + k];
                                float b = transB ? B[(size_t)n * K + k] : B[(size_t)k * N + n];
                                want += (double)a * b;
                            }
                            if (with_bias) want += (float)bias[n];
                            if (accumulate) want += (float)prior[(size_t)m * N + n];
                            // fp32 output: only summation order differs (K = 47 terms of size < 0.25): 1e-4.
                            // bf16 output: one rounding to 8 significant bits, relative 2^-8, plus the above.
                            bad += std::fabs(out_f[(size_t)m * N + n] - want) > 1e-4;
                            bad += std::fabs((float)out[(size_t)m * N + n] - want) > std::fabs(want) / 256 + 1e-4;
                        }
                    INFO("transA " << transA << " transB " << transB << " beta " << beta << " bias " << with_bias);
                    CHECK(bad == 0);
                    for (void* p : {(void*)dA, (void*)dB, (void*)dbias, (void*)dout, (void*)dout_f, (void*)dbias_f})
                        cudaCheck(cudaFree(p));
                }
}

TEST_CASE("matmul with beta = 0 never reads the output buffer", "[executor][seam]") {
    const int M = 4, N = 4, K = 4;
    std::vector<bf16> one(16, __float2bfloat16(1.0f));
    bf16 *dA = to_device(one), *dB = to_device(one);
    float* out;
    cudaCheck(cudaMalloc(&out, M * N * sizeof(float)));
    cudaCheck(cudaMemset(out, 0xff, M * N * sizeof(float))); // NaN: would poison a read
    matmul(out, dA, dB, (const float*)nullptr, M, N, K, false, false, 0.0f, 0);
    for (float v : to_host(out, M * N)) CHECK(v == 4.0f);
    cudaCheck(cudaFree(dA));
    cudaCheck(cudaFree(dB));
    cudaCheck(cudaFree(out));
}
