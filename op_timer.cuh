// op_timer.cuh: OpTimer, told the end of every op of a training step on the stream it ran on, under
// run/cost_model.h's op names. model.cuh's CudaModel tells it (the model's ops and the engine's); dev/bench_model
// records an event per op, test_model_cuda.cpp lists the names against the cost model's.
// Does not: time anything itself (its implementations do).
#pragma once

#include "cuda_common.cuh"  // cudaStream_t

struct OpTimer {
    virtual ~OpTimer() = default;
    virtual void mark(const char* op, cudaStream_t stream) = 0;
};
