// matmul.cuh: the only place matmuls happen. One function, matmul(), over row-major matrices:
//
//   out (M, N) = op(A) (M, K) @ op(B) (K, N)  [+ bias (N), broadcast over rows]  + beta * out
//
// A is stored (M, K), or (K, M) when transA; B is stored (K, N), or (N, K) when transB. Inputs are bf16,
// accumulation is fp32, out (and bias) is bf16 or float. beta = 0 assigns (out is not read, so it may hold
// garbage or NaN), beta = 1 accumulates (weight gradients over micro-batches, residual adds).
// Examples with x (B*T, d) and a Linear weight w (n_out, d): y = x @ w^T is matmul(y, x, w, ..., BT, n_out,
// d, false, true, 0); dx = dy @ w is matmul(dx, dy, w, ..., BT, d, n_out, false, false, 0); dw += dy^T @ x is
// matmul(dw, dy, x, ..., n_out, d, BT, true, false, 1).
//
// On the GPU this is one cuBLASLt call (column-major underneath: we compute out^T = op(B)^T op(A)^T, which is
// the same memory). Under the CUDA-on-CPU executor it is a CPU GEMM with the same transposes, beta and bias,
// accumulating in fp32 and rounding once to the output type, as cuBLASLt does; only the summation order differs.
// Does not: batch, fuse activations, or take fp32 inputs.
#pragma once

#include "cuda_common.cuh"

#ifdef __CUDACC__
#include <cublasLt.h>

inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "[cuBLAS ERROR] %d at %s:%d\n", (int)status, file, line);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)

struct MatmulContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 32 << 20; // what cuBLASLt wants for its fastest Hopper kernels
};
inline MatmulContext& matmul_context() {
    static MatmulContext ctx;
    if (!ctx.handle) {
        cublasCheck(cublasLtCreate(&ctx.handle));
        cudaCheck(cudaMalloc(&ctx.workspace, ctx.workspace_bytes));
    }
    return ctx;
}
template <class T> constexpr cudaDataType_t cuda_type() { return sizeof(T) == 4 ? CUDA_R_32F : CUDA_R_16BF; }

template <class Tout>
void matmul(Tout* out, const bf16* A, const bf16* B, const Tout* bias, int M, int N, int K, bool transA, bool transB,
            float beta, cudaStream_t stream) {
    MatmulContext& ctx = matmul_context();
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // cuBLASLt's first operand is our B, its second our A (column-major view of row-major memory).
    cublasOperation_t op_first = transB ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
    cublasLtEpilogue_t epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias) {
        cudaDataType_t bias_type = cuda_type<Tout>();
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    cublasLtMatrixLayout_t first, second, result;
    // Stored shapes, column-major: B is (N, K) ld N, or (K, N) ld K when transposed; A likewise with M.
    cublasCheck(transB ? cublasLtMatrixLayoutCreate(&first, CUDA_R_16BF, K, N, K)
                       : cublasLtMatrixLayoutCreate(&first, CUDA_R_16BF, N, K, N));
    cublasCheck(transA ? cublasLtMatrixLayoutCreate(&second, CUDA_R_16BF, M, K, M)
                       : cublasLtMatrixLayoutCreate(&second, CUDA_R_16BF, K, M, K));
    cublasCheck(cublasLtMatrixLayoutCreate(&result, cuda_type<Tout>(), N, M, N));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ctx.workspace_bytes, sizeof(ctx.workspace_bytes)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(ctx.handle, desc, first, second, result, result, pref, 1, &heuristic, &found));
    if (found == 0) {
        fprintf(stderr, "matmul: cuBLASLt has no algorithm for M=%d N=%d K=%d transA=%d transB=%d bias=%d\n", M, N, K,
                transA, transB, bias != nullptr);
        exit(EXIT_FAILURE);
    }
    const float alpha = 1.0f;
    cublasCheck(cublasLtMatmul(ctx.handle, desc, &alpha, B, first, A, second, &beta, out, result, out, result,
                               &heuristic.algo, ctx.workspace, ctx.workspace_bytes, stream));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(first));
    cublasCheck(cublasLtMatrixLayoutDestroy(second));
    cublasCheck(cublasLtMatrixLayoutDestroy(result));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
}

#else // the CUDA-on-CPU executor: a plain GEMM with the same contract

#include <vector>

template <class Tout>
void matmul(Tout* out, const bf16* A, const bf16* B, const Tout* bias, int M, int N, int K, bool transA, bool transB,
            float beta, cudaStream_t stream) {
    (void)stream;
    // op(A) as (M, K) and op(B)^T as (N, K), both in fp32, so every output is one contiguous dot product.
    std::vector<float> a((size_t)M * K), bt((size_t)N * K);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) a[(size_t)m * K + k] = float(transA ? A[(size_t)k * M + m] : A[(size_t)m * K + k]);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) bt[(size_t)n * K + k] = float(transB ? B[(size_t)n * K + k] : B[(size_t)k * N + n]);
#pragma omp parallel for schedule(static)
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            const float* x = &a[(size_t)m * K];
            const float* y = &bt[(size_t)n * K];
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += x[k] * y[k];
            if (bias) acc += float(bias[n]);
            Tout& o = out[(size_t)m * N + n];
            if (beta != 0.0f) acc += beta * float(o); // beta == 0 never reads out, like cuBLAS
            o = Tout(acc);
        }
    }
}

#endif
