// fiber.h: the user-level threads the CUDA-on-CPU executor runs each CUDA thread on. A Fiber is a stack and a
// saved stack pointer; fiber_switch() saves the callee-saved registers of System V x86-64 on the current stack,
// swaps stack pointers and pops the other fiber's registers. No syscall (unlike glibc swapcontext), so a block
// of 1024 threads hitting a __syncthreads costs ~1024 switches of a few nanoseconds each.
//
// Sanitiser hooks: under AddressSanitizer every switch is announced with __sanitizer_start/finish_switch_fiber
// (so ASan knows which stack is live); under ThreadSanitizer each fiber is a TSan fiber and switches are made
// with __tsan_switch_to_fiber_no_sync, so a switch is NOT a happens-before edge: only the executor's explicit
// release/acquire on barrier objects orders memory, as on the GPU.
//
// Does not: save the x87/SSE control words (kernels do not change rounding modes), support non-x86-64 hosts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define CUDA_CPU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define CUDA_CPU_TSAN 1
#endif
#if !defined(__x86_64__)
#error "the CUDA-on-CPU executor's fiber switch is written for x86-64 (System V ABI)"
#endif

extern "C" void cuda_cpu_fiber_switch(void** save_sp, void* next_sp);
extern "C" void cuda_cpu_fiber_trampoline();

// Save rbp, rbx, r12-r15 on the current stack, store rsp to *save_sp (rdi), load next_sp (rsi), pop, return.
// A weak symbol so that every translation unit including this header may define it.
asm(R"(
    .text
    .weak cuda_cpu_fiber_switch
    .type cuda_cpu_fiber_switch, @function
cuda_cpu_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuda_cpu_fiber_switch, .-cuda_cpu_fiber_switch

    .weak cuda_cpu_fiber_trampoline
    .type cuda_cpu_fiber_trampoline, @function
cuda_cpu_fiber_trampoline:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size cuda_cpu_fiber_trampoline, .-cuda_cpu_fiber_trampoline
)");

namespace cuda_cpu {

struct Fiber {
    void* sp = nullptr;     // saved stack pointer while not running
    char* stack = nullptr;  // lowest address of the usable stack (a guard page lies below it)
    size_t stack_size = 0;
    void* tsan_fiber = nullptr;  // TSan's handle, or the thread's own one for the scheduler fiber
    void* asan_fake_stack = nullptr;
};

#if defined(CUDA_CPU_ASAN) || defined(CUDA_CPU_TSAN)
inline constexpr size_t kFiberStackBytes = 1 << 20;  // sanitisers put large frames on the stack
#else
inline constexpr size_t kFiberStackBytes = 256 << 10;
#endif

// A fresh fiber that will call entry(arg) on its first switch-in; entry must never return.
inline void fiber_init(Fiber& f, void (*entry)(void*), void* arg) {
    const size_t page = 4096;
    char* mem = (char*)mmap(nullptr, kFiberStackBytes + page, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) {
        fprintf(stderr, "cuda_cpu: cannot map a fiber stack\n");
        abort();
    }
    mprotect(mem, page, PROT_NONE);  // a stack overflow faults instead of corrupting a neighbour
    f.stack = mem + page;
    f.stack_size = kFiberStackBytes;
    // Initial frame popped by cuda_cpu_fiber_switch: r15 r14 r13 r12 rbx rbp, then the return address. The top
    // is 16-byte aligned so the trampoline's call leaves the ABI-required alignment at entry().
    uintptr_t top = ((uintptr_t)(f.stack + f.stack_size)) & ~(uintptr_t)15;
    void** sp = (void**)top - 7;
    sp[0] = nullptr;       // r15
    sp[1] = nullptr;       // r14
    sp[2] = (void*)entry;  // r13: called by the trampoline
    sp[3] = arg;           // r12: first argument
    sp[4] = nullptr;       // rbx
    sp[5] = nullptr;       // rbp
    sp[6] = (void*)&cuda_cpu_fiber_trampoline;
    f.sp = sp;
#ifdef CUDA_CPU_TSAN
    f.tsan_fiber = __tsan_create_fiber(0);
#endif
}

// The scheduler's own fiber: the OS thread's stack, described lazily by ASan on the first switch back.
inline void fiber_init_current(Fiber& f) {
#ifdef CUDA_CPU_TSAN
    f.tsan_fiber = __tsan_get_current_fiber();
#endif
    (void)f;
}

// Switch from `from` (the running fiber) to `to`. Returns when someone switches back to `from`.
inline void fiber_switch(Fiber& from, Fiber& to) {
#ifdef CUDA_CPU_ASAN
    __sanitizer_start_switch_fiber(&from.asan_fake_stack, to.stack, to.stack_size);
#endif
#ifdef CUDA_CPU_TSAN
    __tsan_switch_to_fiber(to.tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
    cuda_cpu_fiber_switch(&from.sp, to.sp);
#ifdef CUDA_CPU_ASAN
    const void* bottom = nullptr;
    size_t size = 0;
    __sanitizer_finish_switch_fiber(from.asan_fake_stack, &bottom, &size);
#endif
}

// First thing a new fiber must do (ASan needs to learn the stack it came from).
inline void fiber_started(Fiber& from_scheduler) {
#ifdef CUDA_CPU_ASAN
    const void* bottom = nullptr;
    size_t size = 0;
    __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
    from_scheduler.stack = (char*)bottom;
    from_scheduler.stack_size = size;
#endif
    (void)from_scheduler;
}

// Happens-before edges for the race detector; no-ops in ordinary builds.
inline void hb_release(void* addr) {
#ifdef CUDA_CPU_TSAN
    __tsan_release(addr);
#endif
    (void)addr;
}
inline void hb_acquire(void* addr) {
#ifdef CUDA_CPU_TSAN
    __tsan_acquire(addr);
#endif
    (void)addr;
}

}  // namespace cuda_cpu
