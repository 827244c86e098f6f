// adamw_ranges.h: ZeRO-1's partition of the optimizer's vectors among the ranks (Shard, first below), and the ranges
// adamw.cuh's one launch updates, built on the host. A layout's (adamw_ranges: consecutive tensors of one kind, decayed
// matrices or undecayed norm weights and biases, at one rate (optimizer_rates.h), merged into one range, about 4 per
// layer), a ZeRO-1 shard's part of them (shard_ranges: each part keeps its range's rate), and the table the kernel
// reads (adamw_launch_ranges: each range's first block of the launch).
// The engine builds them once, at construction.
// Does not: touch the device (the engine uploads the table).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "adamw_launch.h"     // AdamWLaunchRange, ADAMW_BLOCK, ADAMW_PER_THREAD
#include "model_config.h"     // ParamLayout
#include "optimizer_rates.h"  // TensorRate

// ZeRO-1's partition of a flat vector of n elements (parameters, gradients, AdamW state) among
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
// Shard does not know what the vector holds, or where its tensors are.

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

struct AdamWRange {
    size_t offset, n;         // elements of the flat parameter block (params, grads)
    bool decay;               // matrices (and embeddings) decay, norms do not
    size_t state = SIZE_MAX;  // index of element `offset` in master, m, v (SIZE_MAX: offset, the unsharded case)
    TensorRate rate = {};     // its tensors' multipliers of the lr and the weight decay
};
// A layout's ranges: consecutive tensors of the same kind (decayed matrices, or undecayed norm weights and biases)
// and the same rate (rates: one per tensor, optimizer_rates.h; empty: 1 for all) merged into one range (about 4 per
// layer, one launch for all).
// Gaps between tensors (the 128-element alignment of device_layout) are left out: they stay zero.
inline std::vector<AdamWRange> adamw_ranges(const ParamLayout& layout, const std::vector<TensorRate>& rates = {}) {
    std::vector<AdamWRange> r;
    for (size_t k = 0; k < layout.tensors.size(); k++) {
        const ParamTensor& t = layout.tensors[k];
        const TensorRate rate = rates.empty() ? TensorRate() : rates.at(k);
        if (!r.empty() && r.back().decay == t.is_matrix && r.back().rate == rate &&
            r.back().offset + r.back().n == t.offset)
            r.back().n += t.numel();
        else r.push_back({t.offset, t.numel(), t.is_matrix, SIZE_MAX, rate});
    }
    return r;
}

// The ranges' parts inside [begin, end), for a ZeRO-1 shard: master, m and v hold that interval from index 0.
inline std::vector<AdamWRange> shard_ranges(const std::vector<AdamWRange>& all, size_t begin, size_t end) {
    std::vector<AdamWRange> r;
    for (const AdamWRange& x : all) {
        const size_t a = std::max(begin, x.offset), b = std::min(end, x.offset + x.n);
        if (a < b) r.push_back({a, b - a, x.decay, a - begin, x.rate});
    }
    return r;
}

// The ranges as the kernel reads them (adamw_launch.h's AdamWLaunchRange, uploaded once by the engine).
inline std::vector<AdamWLaunchRange> adamw_launch_ranges(const std::vector<AdamWRange>& ranges) {
    std::vector<AdamWLaunchRange> r;
    int block = 0;
    const size_t per_block = (size_t)ADAMW_BLOCK * ADAMW_PER_THREAD;
    for (const AdamWRange& x : ranges) {
        if (x.n == 0) continue;
        r.push_back({x.offset, x.n, x.state == SIZE_MAX ? x.offset : x.state, x.rate.lr, x.rate.wd, block,
                     x.decay ? 1 : 0, x.rate == TensorRate() ? 1 : 0});
        block += (int)((x.n + per_block - 1) / per_block);
    }
    r.push_back({0, 0, 0, 1, 1, block, 0, 1});  // the end: first_block of the sentinel = the launch's block count
    return r;
}
