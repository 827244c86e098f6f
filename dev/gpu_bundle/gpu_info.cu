// dev/gpu_bundle/gpu_info.cu: the GPU bundle's first stage (run.sh): which device, driver and runtime this machine
// has, and whether the bundle's code runs on it, in one line: a probe kernel, and the code the driver loaded for it
// (cudaFuncGetAttributes): the bundle's machine code for an architecture the device runs (sm_80 code on an 8.6 or
// 8.9 device, say), or, on a device newer than any the bundle has machine code for (sm_100, sm_120), its PTX
// JIT-compiled by the driver for the device ("JIT-compiled from compute_90 PTX for sm_100": a binary version that
// differs from the PTX version it came from). Exit status: 0 a usable GPU; 3 no GPU (no driver, or no device); 4 the
// driver is older than the runtime the bundle was built with; 5 the device has no code in the bundle (older than
// sm_80) or another CUDA error.
#include <cstdio>

#include <cuda_runtime.h>

static __global__ void probe_kernel(int* out) { *out = 42; }

int main() {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);  // 0: no driver installed
    cudaRuntimeGetVersion(&runtime);
    const auto ver = [](int v, char* buf) { snprintf(buf, 16, "%d.%d", v / 1000, v % 1000 / 10); };
    char dv[16], rv[16];
    ver(driver, dv), ver(runtime, rv);
    if (driver == 0) {
        printf("no GPU: no NVIDIA driver (runtime %s built in)\n", rv);
        return 3;
    }
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaErrorInsufficientDriver || driver < runtime) {
        printf(
            "driver too old: it supports CUDA %s, the bundle's runtime is CUDA %s: update the driver, or build the "
            "bundle with a CUDA %s toolkit (make gpu-bundle NVCC=...)\n",
            dv, rv, dv);
        return 4;
    }
    if (err == cudaErrorNoDevice || (err == cudaSuccess && n == 0)) {
        printf("no GPU: the driver (CUDA %s) sees no device\n", dv);
        return 3;
    }
    if (err != cudaSuccess) {
        printf("CUDA error before any device: %s (driver CUDA %s, runtime %s)\n", cudaGetErrorString(err), dv, rv);
        return 5;
    }
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
        printf("CUDA error reading device 0's properties (driver CUDA %s, runtime %s)\n", dv, rv);
        return 5;
    }
    printf("%s, compute capability %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB; driver CUDA %s, runtime %s; %d device(s)",
           p.name, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0, p.l2CacheSize / 1048576.0,
           dv, rv, n);
    int* d = nullptr;
    int h = 0;
    cudaError_t e = cudaMalloc(&d, sizeof(int));
    if (e == cudaSuccess) {
        probe_kernel<<<1, 1>>>(d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
        printf("; NO CODE for sm_%d%d in the bundle: its kernels need sm_80 or newer (bf16 tensor cores, cp.async)\n",
               p.major, p.minor);
        return 5;
    }
    if (e != cudaSuccess || h != 42) {
        printf("; a probe kernel failed: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "wrong result");
        return 5;
    }
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, probe_kernel) != cudaSuccess) {
        printf("; a probe kernel ran (which code the driver loaded for it is unknown)\n");
        return 0;
    }
    if (a.binaryVersion != a.ptxVersion)
        printf(
            "; a probe kernel ran, JIT-compiled from compute_%d PTX for sm_%d (no machine code in the bundle for "
            "this GPU: expect a slower first launch; make gpu-bundle GPU_BUNDLE_ARCH=\"80 90 %d%d\" builds it)\n",
            a.ptxVersion, a.binaryVersion, p.major, p.minor);
    else printf("; a probe kernel ran (the bundle's sm_%d machine code)\n", a.binaryVersion);
    return 0;
}
