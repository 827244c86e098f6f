// matmul.cuh: the only place matmuls happen. One function, matmul(), over row-major matrices:
//
//   out (M, N) = alpha op(A) (M, K) @ op(B) (K, N)  [+ bias (N), broadcast over rows]  + beta * out
//
// A is stored (M, K), or (K, M) when transA; B is stored (K, N), or (N, K) when transB. Inputs are bf16,
// accumulation is fp32, out (and bias) is bf16 or float. beta = 0 assigns (out is not read, so it may hold
// garbage or NaN), beta = 1 accumulates (weight gradients over micro-batches into the fp32 gradient buffer).
// lda, ldb, ldc (0: packed) are the row strides of the stored A, B and out, so a leading slice of a wider
// matrix is read or written in place: the model reads the residual-stream gradient's leading w columns and the
// final norm's leading d columns that way, instead of copying them into a compact buffer first.
// Examples with x (B*T, d) and a Linear weight w (n_out, d): y = x @ w^T is matmul(y, x, w, ..., BT, n_out,
// d, false, true, 0); dx = dy @ w is matmul(dx, dy, w, ..., BT, d, n_out, false, false, 0); dw += dy^T @ x is
// matmul(dw, dy, x, ..., n_out, d, BT, true, false, 1). alpha (default 1) is the head's logit multiplier (muP).
//
// On the GPU this is one cuBLASLt call (column-major underneath: we compute out^T = op(B)^T op(A)^T, which is
// the same memory). The operation descriptor, the three layouts and the algorithm cuBLASLt's heuristic picks
// are built once per shape (M, N, K, transposes, strides, output type, bias) and cached: the heuristic query
// costs tens of microseconds of host time, a step has ~250 matmuls of ~30 shapes. The 32 MiB workspace is
// allocated once. Under the CUDA-on-CPU executor it is a CPU GEMM with the same transposes, strides, beta and
// bias, accumulating in fp32 and rounding once to the output type, as cuBLASLt does; only the summation order
// differs.
// Does not: batch, fuse activations (the model has no bias or GELU to fuse; SwiGLU is its own kernel), or take
// fp32 inputs.
#pragma once

#include "cuda_common.cuh"

#ifdef __CUDACC__
#include <cublasLt.h>

#include <map>
#include <tuple>

inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "[cuBLAS ERROR] %d at %s:%d\n", (int)status, file, line);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)

// One cached shape: what cublasLtMatmul needs besides the pointers.
struct MatmulPlan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t first, second, result;
    cublasLtMatmulAlgo_t algo;
};
// M, N, K, transA, transB, lda, ldb, ldc, output is fp32, has bias
using MatmulKey = std::tuple<int, int, int, bool, bool, int, int, int, bool, bool>;

struct MatmulContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 32 << 20;  // what cuBLASLt wants for its fastest Hopper kernels
    std::map<MatmulKey, MatmulPlan> plans;
};
inline MatmulContext& matmul_context() {
    static MatmulContext ctx;
    if (!ctx.handle) {
        cublasCheck(cublasLtCreate(&ctx.handle));
        cudaCheck(cudaMalloc(&ctx.workspace, ctx.workspace_bytes));
    }
    return ctx;
}

// Builds the plan of one shape: descriptor, layouts (stored shapes, column-major: B is (N, K) ld ldb, or (K, N)
// when transposed; A likewise with M; out (N, M) ld ldc) and the heuristic's first algorithm.
inline MatmulPlan matmul_plan(const MatmulKey& key) {
    const auto [M, N, K, transA, transB, lda, ldb, ldc, out_f32, has_bias] = key;
    MatmulContext& ctx = matmul_context();
    MatmulPlan p;
    cublasCheck(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // cuBLASLt's first operand is our B, its second our A (column-major view of row-major memory).
    cublasOperation_t op_first = transB ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
    cublasLtEpilogue_t epilogue = has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    const cudaDataType_t out_type = out_f32 ? CUDA_R_32F : CUDA_R_16BF;
    if (has_bias)
        cublasCheck(
            cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &out_type, sizeof(out_type)));
    cublasCheck(transB ? cublasLtMatrixLayoutCreate(&p.first, CUDA_R_16BF, K, N, ldb)
                       : cublasLtMatrixLayoutCreate(&p.first, CUDA_R_16BF, N, K, ldb));
    cublasCheck(transA ? cublasLtMatrixLayoutCreate(&p.second, CUDA_R_16BF, M, K, lda)
                       : cublasLtMatrixLayoutCreate(&p.second, CUDA_R_16BF, K, M, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p.result, out_type, N, M, ldc));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ctx.workspace_bytes, sizeof(ctx.workspace_bytes)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(ctx.handle, p.desc, p.first, p.second, p.result, p.result, pref, 1,
                                               &heuristic, &found));
    if (found == 0) {
        fprintf(stderr, "matmul: cuBLASLt has no algorithm for M=%d N=%d K=%d transA=%d transB=%d bias=%d\n", M, N, K,
                transA, transB, has_bias);
        exit(EXIT_FAILURE);
    }
    p.algo = heuristic.algo;
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    return p;
}

template <class Tout>
void matmul(Tout* out, const bf16* A, const bf16* B, const Tout* bias, int M, int N, int K, bool transA, bool transB,
            float beta, cudaStream_t stream, int lda = 0, int ldb = 0, int ldc = 0, float alpha = 1.0f) {
    MatmulContext& ctx = matmul_context();
    if (!lda) lda = transA ? M : K;
    if (!ldb) ldb = transB ? K : N;
    if (!ldc) ldc = N;
    const MatmulKey key{M, N, K, transA, transB, lda, ldb, ldc, sizeof(Tout) == 4, bias != nullptr};
    auto it = ctx.plans.find(key);
    if (it == ctx.plans.end()) it = ctx.plans.emplace(key, matmul_plan(key)).first;
    const MatmulPlan& p = it->second;
    if (bias)  // the pointer is per call; everything else about the shape is cached
        cublasCheck(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    cublasCheck(cublasLtMatmul(ctx.handle, p.desc, &alpha, B, p.first, A, p.second, &beta, out, p.result, out, p.result,
                               &p.algo, ctx.workspace, ctx.workspace_bytes, stream));
}

#else  // the CUDA-on-CPU executor: a plain GEMM with the same contract

#include <vector>

template <class Tout>
void matmul(Tout* out, const bf16* A, const bf16* B, const Tout* bias, int M, int N, int K, bool transA, bool transB,
            float beta, cudaStream_t stream, int lda = 0, int ldb = 0, int ldc = 0, float alpha = 1.0f) {
    cuda_cpu::note_stream(stream);
    if (!lda) lda = transA ? M : K;
    if (!ldb) ldb = transB ? K : N;
    if (!ldc) ldc = N;
    // op(A) as (M, K) and op(B)^T as (N, K), both in fp32, so every output is one contiguous dot product.
    std::vector<float> a((size_t)M * K), bt((size_t)N * K);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            a[(size_t)m * K + k] = float(transA ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k]);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            bt[(size_t)n * K + k] = float(transB ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n]);
#pragma omp parallel for schedule(static)
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            const float* x = &a[(size_t)m * K];
            const float* y = &bt[(size_t)n * K];
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += x[k] * y[k];
            acc *= alpha;  // exact for alpha 1
            if (bias) acc += float(bias[n]);
            Tout& o = out[(size_t)m * ldc + n];
            if (beta != 0.0f) acc += beta * float(o);  // beta == 0 never reads out, like cuBLAS
            o = Tout(acc);
        }
    }
}

#endif
