// ref/parallel.h: the two parallelism knobs every part of the fp32 CPU reference shares (ref/gemm.h, ref/ops.h,
// ref/optimizer.h): the work size below which a loop stays on one OpenMP thread, and the 32-byte SIMD vector
// type of GCC's vector extensions that the GEMM microkernel and the softmax's vectorised exp compute in.
// Does not: change any result. Both only decide how work is spread, never the order of an element's sum.
#pragma once

#include <omp.h>

namespace ref {

// Loops over less work than this run on one thread (`omp parallel if`): waking the team costs microseconds,
// more than a small op, and the finite-difference tests run thousands of tiny forwards. Results do not
// depend on it (nothing depends on the thread count).
constexpr long OMP_MIN_WORK = 4096;

template <typename S> struct Simd {
    typedef S type __attribute__((vector_size(32)));  // 8 floats or 4 doubles (one AVX register)
    static constexpr int lanes = 32 / sizeof(S);
};

}  // namespace ref
