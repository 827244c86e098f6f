// warp.h: warp-level collectives for the executor: __syncwarp, __shfl_sync (idx/up/down/xor), __ballot_sync,
// __any_sync, __all_sync, and the tensor-core wrappers mma_m16n8k16_bf16 and ldmatrix_x{1,2,4}[_trans].
//
// A lane posts its operation (kind, mask, operands) on its Thread and yields; the scheduler completes the
// operation when every non-exited lane named in the mask waits at the same kind with the same mask (CUDA's
// rule: exited lanes in the mask are allowed, they simply do not take part), computes each lane's result and
// marks the lanes ready. Only those lanes block; the rest of the block keeps running.
//
// Shuffles follow the PTX shfl.sync definition exactly (segment mask from width, clamp for up vs the others);
// reading a lane that did not take part yields 0xffffffff bits (undefined on hardware). The tensor-core
// operations require a converged warp: all 32 lanes, full mask, the same call site. Fragment layouts are those
// of the PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" and "ldmatrix": with
// g = lane >> 2 and t = lane % 4, a register holds two bf16, the lower-indexed element in the low half.
//   A (16x16, row):  a[0] = A[g][2t..2t+1]   a[1] = A[g+8][2t..]   a[2] = A[g][2t+8..]   a[3] = A[g+8][2t+8..]
//   B (16x8, col):   b[0] = B[2t..2t+1][g]   b[1] = B[2t+8..2t+9][g]
//   C, D (16x8 f32): c[0..1] = C[g][2t..2t+1]   c[2..3] = C[g+8][2t..2t+1]
//   ldmatrix: lane 8i+r gives the address of row r of matrix i; lane l gets M_i[g][2t..2t+1] in r[i]
//   (.trans: M_i[2t][g], M_i[2t+1][g]).
// The mma accumulates in fp32 in k order, one rounding per step: hardware order and intermediate precision
// inside the tensor core are not modelled, so compare against it with a tolerance.
#pragma once

#include <cstring>
#include <type_traits>

#include "cuda_cpu/state.h"

namespace cuda_cpu {

// ---- lane side -------------------------------------------------------------------------------------------
inline void warp_wait(Thread* t, int op, unsigned mask, const char* file, int line) {
    if (!((mask >> t->lane) & 1u))
        die(t, "%s at %s:%d: mask 0x%08x does not include the calling lane %d", warp_op_name(op), file, line, mask,
            t->lane);
    t->op.set(op);
    t->mask.set(mask);
    t->file.set(file);
    t->line.set(line);
    t->state.set(kAtWarpOp);
    fiber_switch(t->fiber, exec().scheduler);
}

template <class T> uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp shuffles move values of at most 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T> T from_bits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

template <class T> T shfl(int op, unsigned mask, T var, int arg, int width, const char* file, int line) {
    Thread* t = current();
    if (width < 1 || width > 32 || (width & (width - 1)))
        die(t, "%s at %s:%d: width %d is not a power of two in [1, 32]", warp_op_name(op), file, line, width);
    t->arg[0].set(to_bits(var));
    t->iarg.set(arg);
    t->width.set(width);
    warp_wait(t, op, mask, file, line);
    return from_bits<T>(t->res[0].get());
}

inline unsigned vote(int op, unsigned mask, int pred, const char* file, int line) {
    Thread* t = current();
    t->arg[0].set(pred != 0);
    warp_wait(t, op, mask, file, line);
    return (unsigned)t->res[0].get();
}

// ---- scheduler side: complete what can complete ----------------------------------------------------------
// PTX shfl.sync: source lane j for mode op, or the lane itself when j falls outside the segment.
inline int shfl_source(int op, int lane, int b, int width) {
    int segmask = 32 - width;  // the bits of lane that select the segment
    int max_lane = (op == kShflUp) ? (lane & segmask) : ((lane & segmask) | (31 & ~segmask));
    int min_lane = lane & segmask;
    int j = lane;
    bool ok = false;
    switch (op) {
        case kShflUp:
            j = lane - b;
            ok = j >= max_lane;
            break;
        case kShflDown:
            j = lane + b;
            ok = j <= max_lane;
            break;
        case kShflXor:
            j = lane ^ b;
            ok = j <= max_lane;
            break;
        default:
            j = min_lane | (b & 31 & ~segmask);
            ok = j <= max_lane;
            break;
    }
    return ok ? j : lane;
}

inline float bits_f(uint64_t b) { return from_bits<float>(b); }
inline float bf16_lo(uint64_t r) { return float_from_bf16((uint16_t)(r & 0xffff)); }
inline float bf16_hi(uint64_t r) { return float_from_bf16((uint16_t)((r >> 16) & 0xffff)); }

inline void complete_mma(Thread** lanes) {
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        Thread* th = lanes[l];
        for (int h = 0; h < 2; h++) {
            A[g][2 * t + h] = h ? bf16_hi(th->arg[0].get()) : bf16_lo(th->arg[0].get());
            A[g + 8][2 * t + h] = h ? bf16_hi(th->arg[1].get()) : bf16_lo(th->arg[1].get());
            A[g][2 * t + 8 + h] = h ? bf16_hi(th->arg[2].get()) : bf16_lo(th->arg[2].get());
            A[g + 8][2 * t + 8 + h] = h ? bf16_hi(th->arg[3].get()) : bf16_lo(th->arg[3].get());
            B[2 * t + h][g] = h ? bf16_hi(th->arg[4].get()) : bf16_lo(th->arg[4].get());
            B[2 * t + 8 + h][g] = h ? bf16_hi(th->arg[5].get()) : bf16_lo(th->arg[5].get());
            C[g][2 * t + h] = bits_f(th->arg[6 + h].get());
            C[g + 8][2 * t + h] = bits_f(th->arg[8 + h].get());
        }
    }
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        for (int i = 0; i < 4; i++) {
            int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
            float acc = C[row][col];
            for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col];  // bf16 x bf16 is exact in fp32
            lanes[l]->res[i].set(to_bits(acc));
        }
    }
}

// ldmatrix: hand each lane the addresses of the elements it loads; the lane reads them itself (so the race
// detector sees the shared-memory reads in the right fiber).
inline void complete_ldmatrix(Thread** lanes) {
    int num = lanes[0]->iarg.get() & 7, trans = lanes[0]->iarg.get() >> 4;
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, t = l & 3;
        for (int i = 0; i < num; i++) {
            if (!trans) {
                lanes[l]->res[i].set(lanes[8 * i + g]->arg[0].get() + 4 * t);
            } else {
                lanes[l]->res[2 * i].set(lanes[8 * i + 2 * t]->arg[0].get() + 2 * g);
                lanes[l]->res[2 * i + 1].set(lanes[8 * i + 2 * t + 1]->arg[0].get() + 2 * g);
            }
        }
    }
}

// Warp operations of one kind completed since the process started, each counted once per warp (an mma_m16n8k16_bf16
// is one tensor-core instruction): tests count what a kernel computes, e.g. the key tiles a window skips.
inline uint64_t warp_op_count(WarpOpKind op) { return exec().warp_ops[op].get(); }

// Try to complete the operation lane `l` of warp `w` waits at. Returns true if it completed.
inline bool try_complete_warp_op(Thread** lanes, int nlanes, int w, int l) {
    Thread* me = lanes[l];
    int op = me->op.get();
    unsigned mask = me->mask.get(), group = 0;
    for (int m = 0; m < 32; m++) {
        if (!((mask >> m) & 1u) || m >= nlanes || lanes[m]->state.get() == kExited) continue;
        Thread* o = lanes[m];
        if (o->state.get() != kAtWarpOp || o->op.get() != op || o->mask.get() != mask) return false;
        group |= 1u << m;
    }
    if (op == kMma || op == kLdmatrix) {
        bool converged = group == 0xffffffffu;
        for (int m = 0; converged && m < 32; m++)
            converged = lanes[m]->line.get() == me->line.get() && lanes[m]->file.get() == me->file.get();
        if (!converged)
            die(me, "%s at %s:%d needs a converged warp: all 32 lanes at the same call", warp_op_name(op),
                me->file.get(), me->line.get());
    }
    exec().warp_ops[op].set(exec().warp_ops[op].get() + 1);
    switch (op) {
        case kMma:
            complete_mma(lanes);
            break;
        case kLdmatrix:
            complete_ldmatrix(lanes);
            break;
        case kBallot:
        case kAny:
        case kAll: {
            unsigned ballot = 0;
            for (int m = 0; m < 32; m++)
                if (((group >> m) & 1u) && lanes[m]->arg[0].get()) ballot |= 1u << m;
            uint64_t r = op == kBallot ? ballot : op == kAny ? (ballot != 0) : (ballot == group);
            for (int m = 0; m < 32; m++)
                if ((group >> m) & 1u) lanes[m]->res[0].set(r);
            break;
        }
        case kSyncwarp:
            for (int m = 0; m < 32; m++)
                if ((group >> m) & 1u) exec().warps[w].last_syncwarp_n[m].set(lanes[m]->syncwarp_n.get());
            break;
        default:  // shuffles
            for (int m = 0; m < 32; m++) {
                if (!((group >> m) & 1u)) continue;
                int j = shfl_source(op, m, lanes[m]->iarg.get(), lanes[m]->width.get());
                lanes[m]->res[0].set(((group >> j) & 1u) ? lanes[j]->arg[0].get() : ~0ull);
            }
    }
    for (int m = 0; m < 32; m++)
        if ((group >> m) & 1u) {
            lanes[m]->group.set(group);
            lanes[m]->state.set(kReady);
        }
    return true;
}

}  // namespace cuda_cpu

// ---- the intrinsics kernels call ---------------------------------------------------------------------------
// The trailing file/line parameters are filled in at the call site by the compiler; kernels never pass them.
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace cuda_cpu;
    Thread* t = current();
    int n = t->syncwarp_n.get();
    hb_release(&t->hb_slot[n & 1]);
    warp_wait(t, kSyncwarp, mask, file, line);
    t->syncwarp_n.set(n + 1);
    // Acquire what every other lane of the group released on arrival at this same __syncwarp.
    Exec& ex = exec();
    unsigned group = t->group.get();
    int base = t->warp * 32;
    for (int m = 0; m < 32; m++)
        if (((group >> m) & 1u) && m != t->lane) {
            int mn = ex.warps[t->warp].last_syncwarp_n[m].get();
            hb_acquire(&ex.pool[base + m]->hb_slot[mn & 1]);
        }
}
template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32, const char* file = __builtin_FILE(),
              int line = __builtin_LINE()) {
    return cuda_cpu::shfl(cuda_cpu::kShflIdx, mask, var, src_lane, width, file, line);
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
    return cuda_cpu::shfl(cuda_cpu::kShflUp, mask, var, (int)delta, width, file, line);
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                   int line = __builtin_LINE()) {
    return cuda_cpu::shfl(cuda_cpu::kShflDown, mask, var, (int)delta, width, file, line);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
    return cuda_cpu::shfl(cuda_cpu::kShflXor, mask, var, lane_mask, width, file, line);
}
inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    return cuda_cpu::vote(cuda_cpu::kBallot, mask, pred, file, line);
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return (int)cuda_cpu::vote(cuda_cpu::kAny, mask, pred, file, line);
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return (int)cuda_cpu::vote(cuda_cpu::kAll, mask, pred, file, line);
}

// ---- tensor cores ----------------------------------------------------------------------------------------
// d = a * b + c for one 16x8x16 tile per warp (layouts in the header comment).
inline void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b, const float* c,
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace cuda_cpu;
    Thread* t = current();
    for (int i = 0; i < 4; i++) t->arg[i].set(a[i]);
    for (int i = 0; i < 2; i++) t->arg[4 + i].set(b[i]);
    for (int i = 0; i < 4; i++) t->arg[6 + i].set(to_bits(c[i]));
    warp_wait(t, kMma, 0xffffffffu, file, line);
    for (int i = 0; i < 4; i++) d[i] = bits_f(t->res[i].get());
}

namespace cuda_cpu {
inline void ldmatrix(uint32_t* r, const void* row, int num, bool trans, const char* file, int line) {
    Thread* t = current();
    Exec& ex = exec();
    const char* p = (const char*)row;
    bool used = t->lane < 8 * num;  // the other lanes' addresses are ignored, as on hardware
    if (used && (((uintptr_t)p & 15) || p < ex.smem || p + 16 > ex.smem + kSharedArenaBytes))
        die(t, "ldmatrix at %s:%d: row address %p is not a 16-byte aligned shared-memory address", file, line, row);
    t->arg[0].set((uint64_t)(uintptr_t)p);
    t->iarg.set(num | (trans ? 16 : 0));
    warp_wait(t, kLdmatrix, 0xffffffffu, file, line);
    for (int i = 0; i < num; i++) {
        if (!trans) {
            uint32_t v;
            memcpy(&v, (const void*)(uintptr_t)t->res[i].get(), 4);
            r[i] = v;
        } else {
            uint16_t lo, hi;
            memcpy(&lo, (const void*)(uintptr_t)t->res[2 * i].get(), 2);
            memcpy(&hi, (const void*)(uintptr_t)t->res[2 * i + 1].get(), 2);
            r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
}
}  // namespace cuda_cpu

#define CUDA_CPU_LDMATRIX(NAME, NUM, TRANS)                                                                            \
    inline void NAME(uint32_t* r, const void* smem_row, const char* file = __builtin_FILE(),                           \
                     int line = __builtin_LINE()) {                                                                    \
        cuda_cpu::ldmatrix(r, smem_row, NUM, TRANS, file, line);                                                       \
    }
CUDA_CPU_LDMATRIX(ldmatrix_x1, 1, false)
CUDA_CPU_LDMATRIX(ldmatrix_x2, 2, false)
CUDA_CPU_LDMATRIX(ldmatrix_x4, 4, false)
CUDA_CPU_LDMATRIX(ldmatrix_x1_trans, 1, true)
CUDA_CPU_LDMATRIX(ldmatrix_x2_trans, 2, true)
CUDA_CPU_LDMATRIX(ldmatrix_x4_trans, 4, true)
#undef CUDA_CPU_LDMATRIX
