// staging.cuh: pinned host memory for the engine's uploads (tokens, targets, embedding buckets) and small read-
// backs, so that cudaMemcpyAsync really is asynchronous: from pageable memory the driver stages the copy itself
// and may wait for the stream, which would put a host stall into every micro-step.
//   StagingRing  slots of pinned ints; acquire(n) hands out a slot no queued copy still reads, without waiting
// A slot is written by the host, copied by cudaMemcpyAsync, and free again once the host has waited for the
// compute stream past that copy (the engine does once per step, in read_stats, and in every read-back): the
// engine tells the ring with `synced(mark)`, mark being the ring's clock when the waited-for work was queued.
// A step of n micro-batches uses n slots; the ring grows to that on the first step and then reuses them, so a
// steady-state step allocates nothing. Only a caller that queues more than kMaxSlots uploads without ever
// reading anything back makes acquire wait (cudaStreamSynchronize), which the sync-count test would show.
// Does not: allocate device memory (the engine's activation block holds the device side of every upload).
#pragma once

#include <cstring>
#include <vector>

#include "cuda_common.cuh"

class StagingRing {
  public:
    static constexpr size_t kMaxSlots = 64;

    StagingRing() = default;
    StagingRing(const StagingRing&) = delete;
    StagingRing& operator=(const StagingRing&) = delete;
    ~StagingRing() {
        for (Slot& s : slots_) cudaFreeHost(s.host);
    }

    // A pinned slot of at least n ints that no queued copy reads. `stream`: waited for only when kMaxSlots
    // slots are all in flight.
    int* acquire(size_t n, cudaStream_t stream) {
        for (size_t tries = 0; tries < slots_.size(); tries++) {
            Slot& s = slots_[next_];
            next_ = (next_ + 1) % slots_.size();
            if (s.used_at < done_ && s.capacity >= n) return use(s);
        }
        for (Slot& s : slots_)  // a free slot too small for n: replace it
            if (s.used_at < done_) {
                cudaCheck(cudaFreeHost(s.host));
                s = allocate(n);
                return use(s);
            }
        if (slots_.size() < kMaxSlots) {
            slots_.push_back(allocate(n));
            return use(slots_.back());
        }
        cudaCheck(cudaStreamSynchronize(stream));  // every slot in flight: wait (never in a training step)
        synced(clock_);
        return acquire(n, stream);
    }
    // The clock now: pass it to synced() once the host has waited for work queued after this call.
    uint64_t mark() const { return clock_; }
    // Every slot acquired before `m` (a mark()) is free.
    void synced(uint64_t m) {
        if (m > done_) done_ = m;
    }

  private:
    struct Slot {
        int* host = nullptr;
        size_t capacity = 0;
        uint64_t used_at = 0;  // clock at the last acquire
    };
    std::vector<Slot> slots_;
    size_t next_ = 0;
    uint64_t clock_ = 1, done_ = 1;  // used_at < done_: free (a new slot has used_at 0)

    static Slot allocate(size_t n) {
        Slot s;
        s.capacity = n < 1024 ? 1024 : n;
        cudaCheck(cudaMallocHost(&s.host, s.capacity * sizeof(int)));
        memset(s.host, 0, s.capacity * sizeof(int));  // copied whole even where a micro-batch leaves it unused
        return s;
    }
    int* use(Slot& s) {
        s.used_at = clock_++;
        return s.host;
    }
};
