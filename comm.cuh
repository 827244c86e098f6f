// comm.cuh: the one seam for collectives between ranks (data-parallel training): a Comm handle and an in-place
// sum all-reduce of a float or bf16 buffer in device memory.
//
//   Comm comm = comm_init();                 // after MPI_Init when built with -DPRISM_MPI; else one rank
//   comm_all_reduce_sum(comm, grads, n, stream);
//   comm_free(comm);
//
// On the GPU the all-reduce is NCCL (built with -DPRISM_NCCL, ranks found through MPI, which broadcasts the
// NCCL id). Under the CUDA-on-CPU executor device memory is host memory, so the all-reduce is MPI_Allreduce on
// the buffer itself when built with -DPRISM_MPI, and a no-op for a single rank otherwise. bf16 buffers are
// summed in fp32 and rounded once (NCCL rounds at each hop; identical for two ranks).
// Does not: reduce-scatter / all-gather (ZeRO-1 will add them here), or use more than one communicator.
#pragma once

#include <vector>

#include "cuda_common.cuh"

#ifdef PRISM_MPI
#include <mpi.h>
#endif
#if defined(__CUDACC__) && defined(PRISM_NCCL)
#include <nccl.h>
#define ncclCheck(status)                                                                                      \
    do {                                                                                                        \
        ncclResult_t s_ = (status);                                                                             \
        if (s_ != ncclSuccess) {                                                                                \
            fprintf(stderr, "[NCCL ERROR] at %s:%d: %s\n", __FILE__, __LINE__, ncclGetErrorString(s_));        \
            exit(EXIT_FAILURE);                                                                                 \
        }                                                                                                       \
    } while (0)
#endif

struct Comm {
    int rank = 0;
    int world = 1;
#if defined(__CUDACC__) && defined(PRISM_NCCL)
    ncclComm_t nccl = nullptr;
#endif
};

inline Comm comm_init() {
    Comm c;
#ifdef PRISM_MPI
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c.world);
#endif
#if defined(__CUDACC__) && defined(PRISM_NCCL) && defined(PRISM_MPI)
    ncclUniqueId id;
    if (c.rank == 0) ncclCheck(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclCheck(ncclCommInitRank(&c.nccl, c.world, id, c.rank));
#elif defined(__CUDACC__)
    if (c.world > 1) {
        fprintf(stderr, "comm_init: %d ranks but this build has no NCCL; rebuild with NCCL (make detects it)\n", c.world);
        exit(EXIT_FAILURE);
    }
#endif
    return c;
}

inline void comm_free(Comm& c) {
#if defined(__CUDACC__) && defined(PRISM_NCCL)
    if (c.nccl) ncclCheck(ncclCommDestroy(c.nccl));
    c.nccl = nullptr;
#endif
    (void)c;
}

#if defined(__CUDACC__) && defined(PRISM_NCCL)
inline void comm_all_reduce_sum(const Comm& c, float* buf, size_t n, cudaStream_t stream) {
    if (c.world > 1) ncclCheck(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, c.nccl, stream));
}
inline void comm_all_reduce_sum(const Comm& c, bf16* buf, size_t n, cudaStream_t stream) {
    if (c.world > 1) ncclCheck(ncclAllReduce(buf, buf, n, ncclBfloat16, ncclSum, c.nccl, stream));
}
#elif defined(__CUDACC__) // a GPU build without NCCL: comm_init guarantees one rank
inline void comm_all_reduce_sum(const Comm&, float*, size_t, cudaStream_t) {}
inline void comm_all_reduce_sum(const Comm&, bf16*, size_t, cudaStream_t) {}
#else // the executor: device memory is host memory
inline void comm_all_reduce_sum(const Comm& c, float* buf, size_t n, cudaStream_t) {
#ifdef PRISM_MPI
    if (c.world > 1) MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
#endif
    (void)c, (void)buf, (void)n;
}
inline void comm_all_reduce_sum(const Comm& c, bf16* buf, size_t n, cudaStream_t stream) {
    if (c.world == 1) return;
    std::vector<float> f(buf, buf + n);
    comm_all_reduce_sum(c, f.data(), n, stream);
    for (size_t i = 0; i < n; i++) buf[i] = bf16(f[i]);
}
#endif
