// dist/shard.h: ZeRO-1's partition of a flat vector of n elements (parameters, gradients, AdamW state) among
// `world` ranks. The vector is padded to world x S elements, S = ceil(n / world) rounded up to `align`, and
// rank r holds [r S, (r + 1) S): its real elements are [begin, end), the rest of its S is padding (zeros that
// are never updated). Equal shard sizes are what reduce-scatter and all-gather need (MPI_Reduce_scatter_block,
// ncclReduceScatter, ncclAllGather); any world size works, and layers of different shapes are no concern:
// nothing is cut at tensor boundaries, because the update takes each element's weight decay from the tensor it
// belongs to (ref::adamw_update; the CUDA engine's per-range table).
//
//   n = 10, world = 3, align = 1:  S = 4, rank 0 [0, 4), rank 1 [4, 8), rank 2 [8, 10) + 2 padding
//   n = 5, world = 3, align = 4:   S = 4, rank 0 [0, 4), rank 1 [4, 5) + 3 padding, rank 2 only padding
//
// Does not: know what the vector holds, or where its tensors are.
#pragma once

#include <algorithm>
#include <cstddef>

struct Shard {
    size_t size = 0;            // S: elements per rank, padding included
    size_t offset = 0;          // rank x S: where this rank's S elements start in the padded vector
    size_t begin = 0, end = 0;  // this rank's real elements [begin, end) of the vector; end - begin <= size
};

inline Shard shard_of(size_t n, int world, int rank, size_t align = 1) {
    Shard s;
    s.size = (n + world - 1) / world;
    s.size = (s.size + align - 1) / align * align;
    s.offset = (size_t)rank * s.size;
    s.begin = std::min(n, s.offset);
    s.end = std::min(n, s.begin + s.size);
    return s;
}

// The CUDA engine's ZeRO-1 shards of its device vector: 128-element multiples keep every shard 256-byte aligned
// (128-bit loads, NCCL's fast paths). memory_plan.h sizes the GPU's memory with the same function.
constexpr size_t ZERO_SHARD_ALIGN = 128;
inline Shard zero_shard(size_t n, int world, int rank) { return shard_of(n, world, rank, ZERO_SHARD_ALIGN); }
