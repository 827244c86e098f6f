// cuda_engine_hooks.cuh: the CUDA engine as its tests and dev/bench_model hold it, without its kernels:
// CudaEngineHooks, engine.h's Engine plus what they read beyond it (the gradients, the activation block's size, an
// OpTimer, the compute stream), and the makers of it and of the KV-cache decoder. cuda_engine.cu defines the makers
// and is compiled once per set of flags; the sources that include this header link that object instead of
// compiling every kernel of the engine again (most of such a source's compile time, for nvcc and for g++ alike).
// cuda_engine.cuh's CudaEngine implements it.
// Does not: include a kernel header (cuda_common.cuh's types and the executor's runtime only), or pick between the
// engines (engine.cpp does, for the products).
#pragma once

#include <cstddef>
#include <memory>

#include "cuda_common.cuh"
#include "engine.h"
#include "model_config.h"

class CudaEngineHooks : public Engine {
  public:
    // Bytes of the activation block for the last forward's B x T.
    virtual size_t activation_bytes() const = 0;
    // For tests: the gradients (fp32, unpadded param_layout order) after backward (with several ranks, before
    // clip_grad_norm: the reduction may have begun).
    virtual void get_grads(float* out) const = 0;
    // For dev/bench_model: time every op of the following steps (null: stop), on the stream the ops run on.
    virtual void set_timer(OpTimer* t) = 0;
    // The stream every op of a step is queued on.
    virtual cudaStream_t stream() const = 0;
};

// A CUDA engine on the current device, as `CudaEngine(c, recompute, dp, decoder)` builds it; with_decoder hands it
// inspect/cuda_decoder.cuh's make_cuda_decoder, as cuda_engine.cu's make_gpu_engine does (without it, make_decoder
// throws std::logic_error).
std::unique_ptr<CudaEngineHooks> make_cuda_engine(const ModelConfig& c, bool recompute = false,
                                                  const DataParallel& dp = DataParallel(), bool with_decoder = false);
// inspect/cuda_decoder.cuh's CudaDecoder on bf16 weights in the device layout (memory_plan.h's device_layout: V
// padded to Vp) that the caller uploaded, queuing after `stream`; the weights must outlive it.
std::unique_ptr<Decoder> make_cuda_decoder_on(const ModelConfig& c, const bf16* weights, cudaStream_t stream,
                                              int capacity);
