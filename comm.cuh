// comm.cuh: the one seam for collectives between ranks on device memory (data-parallel training): a Comm handle
// made from the process group (dist/process_group.h), and the collectives the CUDA engine's data parallelism needs, each queued
// on a stream:
//
//   Comm comm = comm_init(dist);                          // after dist.start(); one NCCL communicator
//   comm_all_reduce_sum(comm, grads, n, stream);          // ZeRO-0: every rank gets the sum (fp32, or the
//                                                         // squared norm in double)
//   comm_reduce_sum(comm, grads + a, n, root, stream);    // ZeRO-1: the sum lands on its owner only, in place
//   comm_all_gather(comm, params, chunk, stream);         // ZeRO-1: rank r's chunk at [r chunk, (r + 1) chunk)
//                                                         // to every rank, in place (bf16 or fp32)
//   comm_group_start(comm); ...; comm_group_end(comm);    // several of them as one launch (NCCL groups)
//   comm_free(comm);
//
// On the GPU these are NCCL (built with -DPRISM_NCCL: the Makefile defines it when it finds NCCL); rank 0 makes
// the unique id and the process group hands it to every rank (MPI_Bcast, or the rendezvous file). NCCL's results
// are the same bits on every rank (each element is reduced once, then copied). Under the CUDA-on-CPU executor
// device memory is host memory, so the collectives are MPI on the buffers themselves (built with -DPRISM_MPI),
// run at once (the executor's streams are synchronous); with one rank every call returns at once.
// Failures: a peer that dies or a network error surfaces as NCCL's asynchronous error, which the watchdog
// (dist/process_group.h) polls; a wait on the GPU that never ends is the watchdog's limit. Either aborts the
// communicator (so the GPU stops waiting) and ends the process.
// Does not: decide what to reduce or when (model.cuh), or use more than one communicator.
#pragma once

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_common.cuh"
#include "dist/process_group.h"

#if defined(__CUDACC__) && defined(PRISM_NCCL)
#include <nccl.h>
#define ncclCheck(status)                                                                                              \
    do {                                                                                                               \
        ncclResult_t s_ = (status);                                                                                    \
        if (s_ != ncclSuccess) {                                                                                       \
            fprintf(stderr, "[NCCL ERROR] at %s:%d: %s\n", __FILE__, __LINE__, ncclGetErrorString(s_));                \
            exit(EXIT_FAILURE);                                                                                        \
        }                                                                                                              \
    } while (0)
#endif

struct Comm {
    int rank = 0;
    int world = 1;
#if defined(__CUDACC__) && defined(PRISM_NCCL)
    ncclComm_t nccl = nullptr;
#endif
};

// The communicator of dist's ranks (every rank calls it). On the GPU the watchdog then polls NCCL's asynchronous
// errors and aborts the communicator when it fires; with the environment rendezvous (no MPI), dist's host
// collectives (losses, barriers) are installed here, over NCCL.
inline Comm comm_init(Dist& dist) {
    Comm c;
    c.rank = dist.rank, c.world = dist.world;
    if (c.world == 1) return c;
#if defined(__CUDACC__) && defined(PRISM_NCCL)
    ncclUniqueId id;
    if (c.rank == 0) ncclCheck(ncclGetUniqueId(&id));
    dist.share_id(&id, sizeof id);
    {
        Watchdog::Wait w("the creation of the NCCL communicator (ncclCommInitRank)");
        ncclCheck(ncclCommInitRank(&c.nccl, c.world, id, c.rank));
    }
    dist.remove_id();
    ncclComm_t nccl = c.nccl;
    Watchdog::get().add_poll([nccl] {
        ncclResult_t e = ncclSuccess;
        if (ncclCommGetAsyncError(nccl, &e) != ncclSuccess || e == ncclSuccess || e == ncclInProgress)
            return std::string();
        return std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(e) +
               " (a peer process died or the network failed); ending the job";
    });
    Watchdog::get().on_fire([nccl] { ncclCommAbort(nccl); });
    if (!dist.over_mpi()) {  // the rendezvous: host values travel through a small device buffer
        double* scratch = nullptr;
        cudaCheck(cudaMalloc(&scratch, 64 * sizeof(double)));
        dist.device_sum = [nccl, scratch](double* x, int n) {
            for (int at = 0; at < n; at += 64) {
                const int k = std::min(64, n - at);
                cudaCheck(cudaMemcpy(scratch, x + at, k * sizeof(double), cudaMemcpyHostToDevice));
                ncclCheck(ncclAllReduce(scratch, scratch, k, ncclFloat64, ncclSum, nccl, 0));
                cudaCheck(cudaMemcpy(x + at, scratch, k * sizeof(double), cudaMemcpyDeviceToHost));
            }
        };
        dist.device_barrier = [&dist] {
            double one = 1;
            dist.device_sum(&one, 1);
        };
    }
#elif defined(__CUDACC__)
    throw DistError(std::to_string(c.world) +
                    " GPU ranks need NCCL, and this build has none; install NCCL (Debian: "
                    "libnccl-dev, or the CUDA toolkit's) and rebuild: make says whether it found it");
#elif !defined(PRISM_MPI)
    throw DistError(std::to_string(c.world) + " ranks on the executor need MPI; build with -DPRISM_MPI");
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

// ---------------------------------------------------------------------------------------------------------
// NCCL
// ---------------------------------------------------------------------------------------------------------
#if defined(__CUDACC__) && defined(PRISM_NCCL)

template <class T> ncclDataType_t nccl_type();
template <> inline ncclDataType_t nccl_type<float>() { return ncclFloat; }
template <> inline ncclDataType_t nccl_type<double>() { return ncclFloat64; }
template <> inline ncclDataType_t nccl_type<bf16>() { return ncclBfloat16; }

template <class T> void comm_all_reduce_sum(const Comm& c, T* buf, size_t n, cudaStream_t stream) {
    if (c.world > 1) ncclCheck(ncclAllReduce(buf, buf, n, nccl_type<T>(), ncclSum, c.nccl, stream));
}
template <class T> void comm_reduce_sum(const Comm& c, T* buf, size_t n, int root, cudaStream_t stream) {
    if (c.world > 1) ncclCheck(ncclReduce(buf, buf, n, nccl_type<T>(), ncclSum, root, c.nccl, stream));
}
template <class T> void comm_all_gather(const Comm& c, T* buf, size_t chunk, cudaStream_t stream) {
    if (c.world > 1) ncclCheck(ncclAllGather(buf + (size_t)c.rank * chunk, buf, chunk, nccl_type<T>(), c.nccl, stream));
}
inline void comm_group_start(const Comm& c) {
    if (c.world > 1) ncclCheck(ncclGroupStart());
}
inline void comm_group_end(const Comm& c) {
    if (c.world > 1) ncclCheck(ncclGroupEnd());
}

// ---------------------------------------------------------------------------------------------------------
// a GPU build without NCCL: comm_init guarantees one rank
// ---------------------------------------------------------------------------------------------------------
#elif defined(__CUDACC__)

template <class T> void comm_all_reduce_sum(const Comm&, T*, size_t, cudaStream_t) {}
template <class T> void comm_reduce_sum(const Comm&, T*, size_t, int, cudaStream_t) {}
template <class T> void comm_all_gather(const Comm&, T*, size_t, cudaStream_t) {}
inline void comm_group_start(const Comm&) {}
inline void comm_group_end(const Comm&) {}

// ---------------------------------------------------------------------------------------------------------
// the executor: device memory is host memory, MPI on it at once
// ---------------------------------------------------------------------------------------------------------
#else

#ifdef PRISM_MPI
inline MPI_Datatype mpi_type(float*) { return MPI_FLOAT; }
inline MPI_Datatype mpi_type(double*) { return MPI_DOUBLE; }
inline void comm_mpi_check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) throw DistError(std::string(what) + " failed (did another rank die?)");
}
#endif

// bf16 travels as fp32 (MPI has no bf16): summed in fp32 and rounded once, as NCCL rounds at each hop (the same
// for two ranks).
template <class T> void comm_all_reduce_sum(const Comm& c, T* buf, size_t n, cudaStream_t stream) {
    if (c.world == 1) return;
#ifdef PRISM_MPI
    Watchdog::Wait w("an all-reduce (comm.cuh)");
    if constexpr (std::is_same<T, bf16>::value) {
        std::vector<float> f(buf, buf + n);
        comm_all_reduce_sum(c, f.data(), n, stream);
        for (size_t i = 0; i < n; i++) buf[i] = bf16(f[i]);
    } else {
        comm_mpi_check(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(buf), MPI_SUM, MPI_COMM_WORLD),
                       "MPI_Allreduce");
    }
#endif
    (void)buf, (void)n, (void)stream;
}
template <class T> void comm_reduce_sum(const Comm& c, T* buf, size_t n, int root, cudaStream_t) {
    if (c.world == 1) return;
#ifdef PRISM_MPI
    Watchdog::Wait w("a reduce (comm.cuh)");
    comm_mpi_check(
        MPI_Reduce(c.rank == root ? MPI_IN_PLACE : buf, buf, (int)n, mpi_type(buf), MPI_SUM, root, MPI_COMM_WORLD),
        "MPI_Reduce");
#endif
    (void)buf, (void)n, (void)root;
}
template <class T> void comm_all_gather(const Comm& c, T* buf, size_t chunk, cudaStream_t) {
    if (c.world == 1) return;
#ifdef PRISM_MPI
    Watchdog::Wait w("an all-gather (comm.cuh)");
    const int bytes = (int)(chunk * sizeof(T));  // bf16 too: a gather only copies
    comm_mpi_check(MPI_Allgather(MPI_IN_PLACE, bytes, MPI_BYTE, buf, bytes, MPI_BYTE, MPI_COMM_WORLD), "MPI_Allgather");
#endif
    (void)buf, (void)chunk;
}
inline void comm_group_start(const Comm&) {}
inline void comm_group_end(const Comm&) {}

#endif
