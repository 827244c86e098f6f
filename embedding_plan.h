// embedding_plan.h: the embedding backward's plan of a micro-batch (embedding.cuh's kernels read it), built on the
// host: the positions sorted by token, a counting sort of O(N + V), and each token's positions cut into segments of
// at most EMB_SEGMENT. The engine builds it for every micro-batch; dev/bench_model reads a real batch's statistics
// from it for the cost model (run/cost_model.h).
// Does not: run on the device, or check token ids (the engine does).
#pragma once

#include <algorithm>
#include <vector>

#include "kernel_sizes.h"  // EMB_SEGMENT

// The backward's plan for one micro-batch (built on the host, uploaded with the tokens). Arrays of the caller,
// sized N, N + 1, N, N, N, N + 1 ints (the engine's pinned upload slot, in this order):
//   positions (N)       row indices n grouped by token (tokens increasing), increasing within each token
//   seg_start (S + 1)   segment s sums positions[seg_start[s] .. seg_start[s + 1]) (at most EMB_SEGMENT)
//   seg_row (S)         the token of segment s
//   seg_slot (S)        -1: the token's only segment, added straight into dwte; else the partial row it writes
//   fin_row (M)         the M tokens of more than one segment, increasing ...
//   fin_first (M + 1)   ... whose partial rows fin_first[m] .. fin_first[m + 1] - 1 are added, in order, into dwte
// `count` is the histogram scratch. A counting sort: positions are placed in increasing n, so each token's are
// in order, and a token's segments (and partial rows) are consecutive.
struct EmbeddingPlanSize {
    int segments = 0, multi = 0, partials = 0;  // S, M, and the partial rows used (fin_first[M])
    int distinct = 0, most = 0;                 // distinct tokens, and the positions of the most frequent one
};
inline EmbeddingPlanSize embedding_plan(const int* tokens, long N, int* positions, int* seg_start, int* seg_row,
                                        int* seg_slot, int* fin_row, int* fin_first, std::vector<int>& count) {
    int V = 0;
    for (long n = 0; n < N; n++) V = std::max(V, tokens[n] + 1);
    count.assign((size_t)V + 1, 0);
    for (long n = 0; n < N; n++) count[tokens[n] + 1]++;
    EmbeddingPlanSize z;
    fin_first[0] = 0;
    for (int v = 0; v < V; v++) {
        const int c = count[v + 1], first = count[v];  // this token's positions start at slot `first`
        if (c) {
            z.distinct++, z.most = std::max(z.most, c);
            const bool multi = c > EMB_SEGMENT;
            for (int k = 0; k < c; k += EMB_SEGMENT) {
                seg_start[z.segments] = first + k, seg_row[z.segments] = v;
                seg_slot[z.segments] = multi ? z.partials++ : -1;
                z.segments++;
            }
            if (multi) fin_row[z.multi] = v, fin_first[++z.multi] = z.partials;
        }
        count[v + 1] += first;  // count[v] = first slot of token v
    }
    seg_start[z.segments] = (int)N;
    for (long n = 0; n < N; n++) positions[count[tokens[n]]++] = (int)n;
    return z;
}
struct EmbeddingPlan {
    std::vector<int> positions, seg_start, seg_row, seg_slot, fin_row, fin_first;
    EmbeddingPlanSize size;
};
inline EmbeddingPlan embedding_plan(const int* tokens, long N) {
    EmbeddingPlan e;
    e.positions.resize(N), e.seg_start.resize(N + 1), e.seg_row.resize(N), e.seg_slot.resize(N);
    e.fin_row.resize(N), e.fin_first.resize(N + 1);
    std::vector<int> count;
    e.size = embedding_plan(tokens, N, e.positions.data(), e.seg_start.data(), e.seg_row.data(), e.seg_slot.data(),
                            e.fin_row.data(), e.fin_first.data(), count);
    const EmbeddingPlanSize& z = e.size;
    e.seg_start.resize(z.segments + 1), e.seg_row.resize(z.segments), e.seg_slot.resize(z.segments);
    e.fin_row.resize(z.multi), e.fin_first.resize(z.multi + 1);
    return e;
}
