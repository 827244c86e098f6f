// state.h: the executor's bookkeeping. One Thread per CUDA thread of the running block (a fiber plus what it
// is waiting for), one Exec for the whole process (the scheduler fiber, the thread pool, the running launch,
// the shared-memory arena). Kernels run on one OS thread, one block at a time; blocks of a grid run in order.
//
// Why the Rx<T> fields: fibers and the scheduler hand each other state without a happens-before edge (that
// is the point of the race build), so every field one fiber writes and another reads is a relaxed atomic,
// invisible to ThreadSanitizer as a race and a plain load or store in ordinary builds.
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "cuda_cpu/fiber.h"
#include "cuda_cpu/types.h"

namespace cuda_cpu {

template <class T> struct Rx {
    std::atomic<T> v{};
    T get() const { return v.load(std::memory_order_relaxed); }
    void set(T x) { v.store(x, std::memory_order_relaxed); }
};

enum State : int { kReady, kRunning, kAtBarrier, kAtWarpOp, kExited };
enum WarpOpKind : int { kSyncwarp, kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kMma, kLdmatrix };
inline const char* warp_op_name(int op) {
    static const char* names[] = {"__syncwarp",        "__shfl_sync",   "__shfl_up_sync", "__shfl_down_sync",
                                  "__shfl_xor_sync",   "__ballot_sync", "__any_sync",     "__all_sync",
                                  "mma_m16n8k16_bf16", "ldmatrix"};
    return names[op];
}

// A cp.async copy issued but not yet landed (see async_copy.h): it lands when a wait retires its group.
struct AsyncCopy {
    char* dst;
    const char* src;  // nullptr: zero-fill
    int bytes;
    int group;  // the number of groups committed before it was issued
};

struct Thread {
    Fiber fiber;
    uint3 idx{};             // threadIdx
    int lane = 0, warp = 0;  // lane within the warp, warp within the block
    int bars = 0;            // __syncthreads passed in this block (own fiber only)
    Rx<int> state;
    Rx<const char*> file;  // where it waits (__syncthreads or a warp op)
    Rx<int> line;
    // A pending warp operation: kind, mask, operands in; results out (written by the scheduler).
    Rx<int> op, iarg, width;
    Rx<unsigned> mask, group;  // group: the lanes that took part, set when the operation completes
    Rx<uint64_t> arg[10];
    Rx<uint64_t> res[8];
    Rx<int> syncwarp_n;             // __syncwarp calls so far; selects the happens-before slot below
    char hb_slot[2] = {0, 0};       // addresses __syncwarp releases to (race build only)
    std::vector<AsyncCopy> copies;  // cp.async copies in flight (own fiber only)
    int copy_groups = 0;            // cp.async groups committed in this block (own fiber only)
};

struct Warp {
    Rx<int> last_syncwarp_n[32];  // each lane's syncwarp_n at the last completed __syncwarp
};

struct Exec {
    Fiber scheduler;
    bool scheduler_ready = false;
    std::vector<std::unique_ptr<Thread>> pool;
    Warp warps[32];
    Rx<Thread*> cur;
    // the running launch
    const char* kernel = "";
    void (*invoke)(void*) = nullptr;
    void* closure = nullptr;
    unsigned nthreads = 0;
    uint64_t launch_id = 0;
    bool warned_exited = false;
    // shared memory: [0, dyn) dynamic, then the static SHARED variables, each followed by a red zone
    char* smem = nullptr;
    size_t dyn_bytes = 0, dyn_limit = 0;
    Rx<size_t> static_top, static_bytes;
    std::vector<std::pair<size_t, size_t>> statics;  // (offset, bytes) of this launch's static variables
    // happens-before objects of the race build
    char hb_block_start = 0, hb_block_done = 0, hb_bar[2] = {0, 0};
    Rx<uint64_t> warp_ops[kLdmatrix + 1];  // completed warp operations by kind, one per warp (warp_op_count)
};
// Never destroyed: the fibers stay parked inside their stacks until the process ends.
inline Exec& exec() {
    static Exec* e = new Exec;
    return *e;
}

inline constexpr size_t kSharedArenaBytes = (227 << 10) + (64 << 10);  // the opt-in limit plus red zones

// Print a one-line diagnosis naming the kernel, the block and (if any) the thread, then abort.
[[noreturn]] inline void die(const Thread* t, const char* fmt, ...);

inline Thread* current() {
    Thread* t = exec().cur.get();
    if (!t) {
        fprintf(stderr, "cuda_cpu: a device function ran outside a kernel launch\n");
        abort();
    }
    return t;
}

}  // namespace cuda_cpu

// The built-in variables. blockIdx / blockDim / gridDim change only between blocks, while no fiber runs, so
// they are plain globals; threadIdx differs per fiber and is read through the running Thread.
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;
constexpr int warpSize = 32;
#define threadIdx (::cuda_cpu::current()->idx)

namespace cuda_cpu {
[[noreturn]] inline void die(const Thread* t, const char* fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "cuda_cpu: kernel %s, block (%u,%u,%u)", exec().kernel, blockIdx.x, blockIdx.y, blockIdx.z);
    if (t) fprintf(stderr, ", thread (%u,%u,%u)", t->idx.x, t->idx.y, t->idx.z);
    fprintf(stderr, ": ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    abort();
}
}  // namespace cuda_cpu
