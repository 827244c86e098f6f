// adamw_launch.h: the table adamw.cuh's one launch reads, one entry per range of the optimizer's vectors
// (adamw_ranges.h builds it on the host from a layout; the engine uploads it once): where the range lies, its
// multipliers (unit: both 1, the step's scalars as the host rounded them), its decay and the first block of the
// launch that updates it, ADAMW_BLOCK x ADAMW_PER_THREAD elements per block. Apart from adamw_ranges.h so that the
// kernel includes only what it reads, not the model's layout.
#pragma once

#include <cstddef>

struct AdamWLaunchRange {
    size_t offset, n, state;
    double lr_mult, wd_mult;
    int first_block, decay, unit;
};
constexpr int ADAMW_BLOCK = 256, ADAMW_PER_THREAD = 4;
