// executor.h: runs a kernel launch on the CPU with CUDA's semantics. Blocks run one after another; the threads
// of a block are fibers run round-robin, each until it exits or waits (__syncthreads, a warp collective).
// When every fiber waits, the scheduler completes what can complete: warp collectives whose lanes have all
// arrived, then the block barrier once every live thread is at it. If nothing can complete, it is a deadlock
// and the run aborts naming the kernel, the block and the waiting threads; live threads waiting at different
// __syncthreads call sites is reported as barrier divergence.
//
// Exited threads count as arrived at __syncthreads (what sm_70+ hardware does), with a warning once per
// launch because other hardware hangs. Shared memory lives in one arena, filled with 0xff bytes (NaN for float
// and bf16) at every block start so that reads of unwritten shared memory change results; under ASan the
// bytes around each shared variable are poisoned, so shared out-of-bounds accesses are caught too.
//
// Launches go through LAUNCH(grid, block, smem, stream, kernel)(args...), which checks the configuration
// the way the driver does (threads per block, dimension limits, shared memory against the opt-in limit) and
// records cudaErrorInvalidConfiguration / cudaErrorInvalidValue for cudaGetLastError without running.
#pragma once

#include <cstring>
#include <tuple>
#include <utility>

#include "cuda_cpu/runtime.h"
#include "cuda_cpu/state.h"
#include "cuda_cpu/warp.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define CUDA_CPU_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define CUDA_CPU_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define CUDA_CPU_POISON(p, n) ((void)(p), (void)(n))
#define CUDA_CPU_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace cuda_cpu {

inline constexpr size_t kRedZone = 64;  // bytes between shared variables (poisoned under ASan)
inline size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// ---- fibers ----------------------------------------------------------------------------------------------
inline void thread_main(void* p) {
    Thread* t = (Thread*)p;
    Exec& ex = exec();
    fiber_started(ex.scheduler);
    for (;;) {  // one iteration per block this thread slot takes part in
        hb_acquire(&ex.hb_block_start);
        t->bars = 0;
        t->copy_groups = 0;
        ex.invoke(ex.closure);
        if (!t->copies.empty())
            die(t, "the thread exited with %zu cp.async copies never waited for (cp_async_wait)", t->copies.size());
        hb_release(&ex.hb_block_done);
        t->state.set(kExited);
        fiber_switch(t->fiber, ex.scheduler);
    }
}

inline void ensure_pool(unsigned n) {
    Exec& ex = exec();
    if (!ex.scheduler_ready) {
        fiber_init_current(ex.scheduler);
        ex.smem = (char*)aligned_alloc(128, kSharedArenaBytes);
        ex.scheduler_ready = true;
    }
    while (ex.pool.size() < n) {
        ex.pool.emplace_back(new Thread);
        Thread* t = ex.pool.back().get();
        fiber_init(t->fiber, &thread_main, t);
    }
}

// ---- block barrier ---------------------------------------------------------------------------------------
}  // namespace cuda_cpu

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace cuda_cpu;
    Thread* t = current();
    Exec& ex = exec();
    // Two alternating happens-before objects: a thread released from barrier k acquires object k%2 even if a
    // faster thread already arrived at barrier k+1 (which releases into the other one).
    hb_release(&ex.hb_bar[t->bars & 1]);
    t->file.set(file);
    t->line.set(line);
    t->state.set(kAtBarrier);
    fiber_switch(t->fiber, ex.scheduler);
    hb_acquire(&ex.hb_bar[t->bars & 1]);
    t->bars++;
}

namespace cuda_cpu {

// ---- the scheduler ---------------------------------------------------------------------------------------
[[noreturn]] inline void report_stuck(Thread** th, unsigned n) {
    Exec& ex = exec();
    const char* file0 = nullptr;
    int line0 = 0;
    bool divergent = false;
    for (unsigned i = 0; i < n; i++)
        if (th[i]->state.get() == kAtBarrier) {
            if (!file0) {
                file0 = th[i]->file.get();
                line0 = th[i]->line.get();
            } else if (th[i]->line.get() != line0 || strcmp(th[i]->file.get(), file0)) divergent = true;
        }
    fflush(stdout);
    fprintf(stderr, "cuda_cpu: kernel %s, block (%u,%u,%u): %s; waiting threads:\n", ex.kernel, blockIdx.x, blockIdx.y,
            blockIdx.z,
            divergent ? "barrier divergence (live threads wait at different __syncthreads)"
                      : "deadlock (no thread can proceed)");
    unsigned shown = 0;
    for (unsigned i = 0; i < n && shown < 12; i++) {
        Thread* t = th[i];
        int s = t->state.get();
        if (s == kExited) continue;
        // Show the first thread of each distinct wait site, so the divergent groups are visible.
        bool first = true;
        for (unsigned j = 0; j < i && first; j++)
            first = !(th[j]->state.get() == s && th[j]->line.get() == t->line.get() && th[j]->op.get() == t->op.get());
        if (!first) continue;
        if (s == kAtBarrier)
            fprintf(stderr, "  thread (%u,%u,%u) at __syncthreads %s:%d\n", t->idx.x, t->idx.y, t->idx.z, t->file.get(),
                    t->line.get());
        else
            fprintf(stderr, "  thread (%u,%u,%u) at %s mask 0x%08x %s:%d\n", t->idx.x, t->idx.y, t->idx.z,
                    warp_op_name(t->op.get()), t->mask.get(), t->file.get(), t->line.get());
        shown++;
    }
    fflush(stderr);
    abort();
}

inline void run_block() {
    Exec& ex = exec();
    unsigned n = ex.nthreads;
    std::vector<Thread*> slots(n);
    Thread** th = slots.data();
    for (unsigned i = 0; i < n; i++) {
        th[i] = ex.pool[i].get();
        th[i]->state.set(kReady);
    }
    for (;;) {
        for (unsigned i = 0; i < n; i++) {
            if (th[i]->state.get() != kReady) continue;
            th[i]->state.set(kRunning);
            ex.cur.set(th[i]);
            fiber_switch(ex.scheduler, th[i]->fiber);
        }
        ex.cur.set(nullptr);
        unsigned live = 0, at_bar = 0;
        bool progress = false;
        for (unsigned i = 0; i < n; i++) {
            int s = th[i]->state.get();
            live += s != kExited;
            at_bar += s == kAtBarrier;
            if (s == kAtWarpOp) {
                unsigned w = i / 32, nl = n - w * 32 < 32 ? n - w * 32 : 32;
                progress |= try_complete_warp_op(th + w * 32, (int)nl, (int)w, (int)(i % 32));
            }
        }
        if (live == 0) return;
        if (progress) continue;
        if (at_bar == live) {
            const char* f = nullptr;
            int l = 0;
            for (unsigned i = 0; i < n; i++) {
                if (th[i]->state.get() != kAtBarrier) continue;
                if (!f) {
                    f = th[i]->file.get();
                    l = th[i]->line.get();
                } else if (th[i]->line.get() != l || strcmp(th[i]->file.get(), f)) report_stuck(th, n);
            }
            if (live < n && !ex.warned_exited) {
                ex.warned_exited = true;
                fprintf(stderr,
                        "cuda_cpu: warning: kernel %s, block (%u,%u,%u): __syncthreads at %s:%d after %u of %u "
                        "threads exited; they count as arrived (undefined behaviour on pre-Volta GPUs)\n",
                        ex.kernel, blockIdx.x, blockIdx.y, blockIdx.z, f, l, n - live, n);
            }
            for (unsigned i = 0; i < n; i++)
                if (th[i]->state.get() == kAtBarrier) th[i]->state.set(kReady);
            continue;
        }
        report_stuck(th, n);
    }
}

// ---- shared memory ---------------------------------------------------------------------------------------
struct SharedTag {  // one per SHARED declaration: where the variable lives in the current launch
    Rx<uint64_t> launch;
    Rx<size_t> offset;
};

inline size_t alloc_static_shared(size_t bytes, size_t align, const char* name) {
    Exec& ex = exec();
    size_t off = round_up(ex.static_top.get(), align < 16 ? 16 : align);
    size_t total = ex.static_bytes.get() + bytes;
    // CUDA's rules: static shared memory at most 48 KiB; without the opt-in attribute static + dynamic at most
    // 48 KiB, with it at most the device's opt-in limit.
    size_t limit = ex.dyn_limit > kSharedDefault ? kSharedOptin : kSharedDefault;
    if (total > kSharedDefault || ex.dyn_bytes + total > limit || off + bytes > kSharedArenaBytes)
        die(nullptr,
            "shared variable %s: %zu bytes of static plus %zu of dynamic shared memory exceed the limit "
            "(48 KiB static; static + dynamic 48 KiB, or %zu with cudaFuncAttributeMaxDynamicSharedMemorySize)",
            name, total, ex.dyn_bytes, kSharedOptin);
    ex.static_bytes.set(total);
    ex.static_top.set(off + bytes + kRedZone);
    ex.statics.push_back({off, bytes});
    CUDA_CPU_UNPOISON(ex.smem + off, bytes);  // already filled with the poison pattern at launch start
    return off;
}

template <class T> T& shared_var(SharedTag& tag, const char* name) {
    Exec& ex = exec();
    if (tag.launch.get() != ex.launch_id) {
        tag.offset.set(alloc_static_shared(sizeof(T), alignof(T), name));
        tag.launch.set(ex.launch_id);
    }
    return *reinterpret_cast<T*>(ex.smem + tag.offset.get());
}
inline void* dynamic_shared() { return exec().smem; }
template <class T> using ident_t = T;

// Fill every shared byte of the block with the poison pattern.
inline void poison_shared() {
    Exec& ex = exec();
    memset(ex.smem, 0xff, ex.dyn_bytes);
    for (auto& s : ex.statics) memset(ex.smem + s.first, 0xff, s.second);
}

// ---- launch ----------------------------------------------------------------------------------------------
inline bool check_launch(const void* kernel, dim3 g, dim3 b, size_t smem) {
    unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    if (threads == 0 || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 || g.x == 0 || g.y == 0 || g.z == 0 ||
        g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
        fail(cudaErrorInvalidConfiguration);
        return false;
    }
    auto& attrs = runtime().max_dynamic_smem;
    auto it = attrs.find(kernel);
    size_t limit = it == attrs.end() ? kSharedDefault : (size_t)it->second;
    if (limit < kSharedDefault) limit = kSharedDefault;
    if (smem > limit) {
        fail(cudaErrorInvalidValue);
        return false;
    }
    return true;
}

inline void run_grid(const char* name, const void* kernel, dim3 g, dim3 b, size_t smem, void (*invoke)(void*),
                     void* closure) {
    if (!check_launch(kernel, g, b, smem)) return;
    Exec& ex = exec();
    unsigned n = b.x * b.y * b.z;
    ensure_pool(n);
    for (unsigned i = 0; i < n; i++) {
        Thread* t = ex.pool[i].get();
        t->idx = {i % b.x, (i / b.x) % b.y, i / (b.x * b.y)};
        t->lane = (int)(i % 32);
        t->warp = (int)(i / 32);
    }
    auto& attrs = runtime().max_dynamic_smem;
    auto it = attrs.find(kernel);
    ex.kernel = name;
    ex.invoke = invoke;
    ex.closure = closure;
    ex.nthreads = n;
    ex.launch_id++;
    ex.warned_exited = false;
    ex.dyn_bytes = smem;
    ex.dyn_limit = it == attrs.end() ? kSharedDefault : (size_t)it->second;
    ex.static_top.set(round_up(smem, 16) + kRedZone);
    ex.static_bytes.set(0);
    ex.statics.clear();
    CUDA_CPU_UNPOISON(ex.smem, kSharedArenaBytes);
    // Fill the whole arena here, in the scheduler: static variables are placed lazily by the first thread that
    // declares them, and a fill there would race (for ThreadSanitizer) with the other threads' first writes.
    memset(ex.smem, 0xff, kSharedArenaBytes);
    CUDA_CPU_POISON(ex.smem + round_up(smem, 8), kSharedArenaBytes - round_up(smem, 8));
    gridDim = g;
    blockDim = b;
    for (unsigned z = 0; z < g.z; z++)
        for (unsigned y = 0; y < g.y; y++)
            for (unsigned x = 0; x < g.x; x++) {
                blockIdx = {x, y, z};
                poison_shared();
                hb_release(&ex.hb_block_start);
                run_block();
                hb_acquire(&ex.hb_block_done);
            }
    CUDA_CPU_UNPOISON(ex.smem, kSharedArenaBytes);
}

// The object LAUNCH(...) yields: calling it with the kernel's arguments runs the grid.
template <class... P> struct Launch {
    const char* name;
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    template <class... A> void operator()(A&&... a) const {
        static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
        struct Closure {
            void (*k)(P...);
            std::tuple<P...> args;  // copied once, like CUDA's parameter buffer; each thread copies its own
        } c{kernel, std::tuple<P...>(std::forward<A>(a)...)};
        auto invoke = [](void* p) {
            Closure* cl = (Closure*)p;
            std::apply(cl->k, cl->args);
        };
        run_grid(name, (const void*)kernel, grid, block, smem, invoke, &c);
    }
};
template <class... P>
Launch<P...> make_launch(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         void (*kernel)(P...)) {
    note_stream(stream);  // a launch on the legacy default stream is counted (runtime.h)
    return Launch<P...>{name, kernel, grid, block, smem};
}

}  // namespace cuda_cpu
