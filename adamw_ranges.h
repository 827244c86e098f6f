// adamw_ranges.h: the ranges adamw.cuh's one launch updates, built on the host. A layout's (adamw_ranges:
// consecutive tensors of one kind, decayed matrices or undecayed norm weights and biases, merged into one range,
// about 4 per layer), a ZeRO-1 shard's part of them (shard_ranges), and the table the kernel reads
// (adamw_launch_ranges: each range's first block of the launch). The engine builds them once, at construction.
// Does not: touch the device (the engine uploads the table).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model_config.h"  // ParamLayout

struct AdamWRange {
    size_t offset, n;         // elements of the flat parameter block (params, grads)
    bool decay;               // matrices (and embeddings) decay, norms do not
    size_t state = SIZE_MAX;  // index of element `offset` in master, m, v (SIZE_MAX: offset, the unsharded case)
};
// A layout's ranges: consecutive tensors of the same kind (decayed matrices, or undecayed norm weights and biases)
// merged into one range (about 4 per layer, one launch for all).
// Gaps between tensors (the 128-element alignment of device_layout) are left out: they stay zero.
inline std::vector<AdamWRange> adamw_ranges(const ParamLayout& layout) {
    std::vector<AdamWRange> r;
    for (const ParamTensor& t : layout.tensors) {
        if (!r.empty() && r.back().decay == t.is_matrix && r.back().offset + r.back().n == t.offset)
            r.back().n += t.numel();
        else r.push_back({t.offset, t.numel(), t.is_matrix});
    }
    return r;
}

// The ranges' parts inside [begin, end), for a ZeRO-1 shard: master, m and v hold that interval from index 0.
inline std::vector<AdamWRange> shard_ranges(const std::vector<AdamWRange>& all, size_t begin, size_t end) {
    std::vector<AdamWRange> r;
    for (const AdamWRange& x : all) {
        const size_t a = std::max(begin, x.offset), b = std::min(end, x.offset + x.n);
        if (a < b) r.push_back({a, b - a, x.decay, a - begin});
    }
    return r;
}

// The ranges as the kernel reads them (uploaded once by the engine): each with the first block of the one launch
// that updates every range, ADAMW_BLOCK x ADAMW_PER_THREAD elements per block.
struct AdamWLaunchRange {
    size_t offset, n, state;
    int first_block, decay;
};
constexpr int ADAMW_BLOCK = 256, ADAMW_PER_THREAD = 4;
inline std::vector<AdamWLaunchRange> adamw_launch_ranges(const std::vector<AdamWRange>& ranges) {
    std::vector<AdamWLaunchRange> r;
    int block = 0;
    const size_t per_block = (size_t)ADAMW_BLOCK * ADAMW_PER_THREAD;
    for (const AdamWRange& x : ranges) {
        if (x.n == 0) continue;
        r.push_back({x.offset, x.n, x.state == SIZE_MAX ? x.offset : x.state, block, x.decay ? 1 : 0});
        block += (int)((x.n + per_block - 1) / per_block);
    }
    r.push_back({0, 0, 0, block, 0});  // the end: first_block of the sentinel = the launch's block count
    return r;
}
