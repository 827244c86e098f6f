// swiglu.cuh: the SwiGLU activation, forward and backward.
//   forward:  in (N, 2 hid) = [gate | up] -> out (N, hid) = silu(gate) * up, silu(g) = g * sigmoid(g)
//   backward: din (N, 2 hid) assigned: dgate = dout * up * sig * (1 + g (1 - sig)), dup = dout * silu(g)
// Elementwise, fp32 math on bf16 storage. sigmoid is 1 / (1 + exp(-g)): for g -> -inf exp overflows to inf and
// sig to 0, silu to -0, which is the right limit (no NaN), so no clamping is needed.
// Does not: fuse with the matmuls around it (cuBLASLt epilogues cannot express a gated product).
#pragma once

#include "cuda_common.cuh"

// ---------------------------------------------------------------------------------------------------------
// kernels
// ---------------------------------------------------------------------------------------------------------

// Matches ref::swiglu_forward. One thread per output element.
static __global__ void swiglu_forward_kernel(bf16* out, const bf16* in, long N, int hid) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * hid) return;
    const long n = i / hid;
    const int c = (int)(i % hid);
    const float g = __bfloat162float(in[n * 2 * hid + c]), u = __bfloat162float(in[n * 2 * hid + hid + c]);
    out[i] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
}

// Matches ref::swiglu_backward. One thread per (n, c) writes both halves of din.
static __global__ void swiglu_backward_kernel(bf16* din, const bf16* dout, const bf16* in, long N, int hid) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * hid) return;
    const long n = i / hid;
    const int c = (int)(i % hid);
    const float g = __bfloat162float(in[n * 2 * hid + c]), u = __bfloat162float(in[n * 2 * hid + hid + c]);
    const float dy = __bfloat162float(dout[i]);
    const float sig = 1.0f / (1.0f + expf(-g));
    din[n * 2 * hid + c] = __float2bfloat16(dy * u * sig * (1.0f + g * (1.0f - sig)));
    din[n * 2 * hid + hid + c] = __float2bfloat16(dy * g * sig);
}

// ---------------------------------------------------------------------------------------------------------
// launchers
// ---------------------------------------------------------------------------------------------------------

// out (N, hid), in (N, 2 hid).
inline void swiglu_forward(bf16* out, const bf16* in, long N, int hid, cudaStream_t stream) {
    const int block = 256;
    LAUNCH((unsigned)((N * hid + block - 1) / block), block, 0, stream, swiglu_forward_kernel)(out, in, N, hid);
    cudaCheck(cudaGetLastError());
}

// din (N, 2 hid) assigned, dout (N, hid), in (N, 2 hid) the forward's input. din must not alias in.
inline void swiglu_backward(bf16* din, const bf16* dout, const bf16* in, long N, int hid, cudaStream_t stream) {
    const int block = 256;
    LAUNCH((unsigned)((N * hid + block - 1) / block), block, 0, stream, swiglu_backward_kernel)(din, dout, in, N, hid);
    cudaCheck(cudaGetLastError());
}
