// async_copy.h: cp.async for the executor: cp_async<BYTES>(smem, gmem, valid), cp_async_commit(),
// cp_async_wait<N>() (PTX cp.async.{ca,cg}.shared.global, cp.async.commit_group, cp.async.wait_group).
//
// A copy is checked when it is issued (destination inside shared memory, source inside one cudaMalloc
// allocation unless it zero-fills, both aligned to the copy size: the hardware faults otherwise) and queued on
// the issuing thread. It lands, in that thread's fiber, only when a cp_async_wait<N> retires its group: until
// then the destination keeps whatever it held (the NaN poison at block start), so a read before the wait shows
// up as a wrong result, and a read by another thread without a __syncthreads after the wait shows up as a data
// race in the race build. Copies not yet committed are not waited for (PTX: wait_group covers committed groups),
// and a thread that exits with copies in flight aborts the run: the data would never be read on hardware
// either, so it is a bug in the kernel's pipeline.
#pragma once

#include <cstring>

#include "cuda_cpu/runtime.h"
#include "cuda_cpu/state.h"

namespace cuda_cpu {
inline void async_copy_issue(void* smem, const void* gmem, int bytes, bool valid, const char* file, int line) {
    Thread* t = current();
    Exec& ex = exec();
    char* d = (char*)smem;
    if (((uintptr_t)d % bytes) || d < ex.smem || d + bytes > ex.smem + kSharedArenaBytes)
        die(t, "cp_async at %s:%d: destination %p is not a %d-byte aligned shared-memory address", file, line, smem,
            bytes);
    if ((uintptr_t)gmem % bytes) die(t, "cp_async at %s:%d: source %p is not %d-byte aligned", file, line, gmem, bytes);
    if (valid && !is_device_range(gmem, bytes))
        die(t, "cp_async at %s:%d: source %p..+%d is outside every device allocation", file, line, gmem, bytes);
    t->copies.push_back({d, valid ? (const char*)gmem : nullptr, bytes, t->copy_groups});
}
// Land every copy of the groups older than the n most recently committed ones, in issue order.
inline void async_copy_wait(int n) {
    Thread* t = current();
    const int limit = t->copy_groups - n;  // groups [0, limit) must have landed
    size_t kept = 0;
    for (size_t i = 0; i < t->copies.size(); i++) {
        const AsyncCopy c = t->copies[i];
        if (c.group < limit) {
            if (c.src) memcpy(c.dst, c.src, c.bytes);
            else memset(c.dst, 0, c.bytes);
        } else {
            t->copies[kept++] = c;
        }
    }
    t->copies.resize(kept);
}
}  // namespace cuda_cpu

template <int BYTES>
inline void cp_async(void* smem, const void* gmem, bool valid, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
    cuda_cpu::async_copy_issue(smem, gmem, BYTES, valid, file, line);
}
inline void cp_async_commit() { cuda_cpu::current()->copy_groups++; }
template <int N> inline void cp_async_wait() {
    static_assert(N >= 0, "cp.async.wait_group takes a count >= 0");
    cuda_cpu::async_copy_wait(N);
}
