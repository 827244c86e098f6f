// test_attention_span.cpp: attention_span.h's visibility rule is the one the CPU reference, the decoders, analyze
// and the kernels use: every other form of it (the range att_first_key, the kernels' one-compare
// att_visible_unsigned with ATT_NO_WINDOW for a global layer, the tile tests att_sees and att_sees_all, and the
// tile ranges att_key_tiles / att_query_tiles) equals what enumerating att_visible over every (query, key) gives,
// for every small query, key, window and tile placement.
#include <catch2/catch.hpp>

#include <string>

#include "attention_span.h"
#include "ref/ops.h"

namespace {

constexpr int N = 40;  // positions 0 .. N - 1; windows 0 (global) .. N + 1

}  // namespace

TEST_CASE("the visibility rule: key j visible to query i iff i - W < j <= i, W = 0 global", "[attention_span]") {
    CHECK(att_visible(5, 5, 0));
    CHECK(att_visible(5, 0, 0));
    CHECK_FALSE(att_visible(5, 6, 0));
    CHECK(att_visible(5, 3, 3));
    CHECK_FALSE(att_visible(5, 2, 3));  // i - W = 2: not after it
    CHECK(att_visible(5, 5, 1));        // a window of 1: the query's own key only
    CHECK_FALSE(att_visible(5, 4, 1));
}

TEST_CASE("every form of the visibility rule equals att_visible over all small (query, key, window)",
          "[attention_span]") {
    long mismatches = 0;
    for (int W = 0; W <= N + 1; W++)
        for (int i = 0; i < N; i++) {
            int first = -1, count = 0;
            for (int j = 0; j < N; j++) {
                const bool v = att_visible(i, j, W);
                // The kernels' form: a global layer passes ATT_NO_WINDOW.
                mismatches += att_visible_unsigned(i, j, W ? W : ATT_NO_WINDOW) != v;
                if (v && first < 0) first = j;
                count += v;
            }
            // The range form: [att_first_key, i], contiguous; and the reference's AttnShape reads it.
            mismatches += first != att_first_key(i, W) || count != i - first + 1;
            mismatches += ref::AttnShape{1, 1, 2, W}.first_key(i) != first;
        }
    CHECK(mismatches == 0);
}

TEST_CASE("the tile tests and tile ranges equal the rule enumerated over every pair of their tiles",
          "[attention_span]") {
    long mismatches = 0;
    for (int W = 0; W <= N + 1; W++)
        for (int q0 = 0; q0 < N; q0++)
            for (int nq = 1; q0 + nq <= N; nq += 3)
                for (int k0 = 0; k0 < N; k0++)
                    for (int nk = 1; k0 + nk <= N; nk += 3) {
                        bool any = false, all = true;
                        for (int i = q0; i < q0 + nq; i++)
                            for (int j = k0; j < k0 + nk; j++) any |= att_visible(i, j, W), all &= att_visible(i, j, W);
                        // The kernels call both with W or ATT_NO_WINDOW; the cost model with W (0: global).
                        for (int kw : {W, W ? W : ATT_NO_WINDOW}) {
                            mismatches += att_sees(q0, nq, k0, nk, kw) != any;
                            mismatches += att_sees_all(q0, nq, k0, nk, kw) != all;
                        }
                    }
    CHECK(mismatches == 0);
}

TEST_CASE("att_key_tiles and att_query_tiles hold exactly the tiles with a visible pair", "[attention_span]") {
    long mismatches = 0;
    for (int W = 0; W <= N + 1; W++)
        for (int B = 1; B <= 9; B += 4)  // tile sizes
            for (int t0 = 0; t0 < N; t0 += B) {
                const int nt = t0 + B <= N ? B : N - t0, tiles = (N + B - 1) / B;
                const AttSpan ks = att_key_tiles(t0, nt, N, W, B), qs = att_query_tiles(t0, nt, N, W, B);
                for (int tile = 0; tile < tiles; tile++) {
                    const int lo = tile * B, n = lo + B <= N ? B : N - lo;
                    const bool k_in = tile >= ks.lo && tile < ks.hi, q_in = tile >= qs.lo && tile < qs.hi;
                    // key tiles of query rows [t0, t0 + nt); query tiles of keys [t0, t0 + nt)
                    mismatches += k_in != att_sees(t0, nt, lo, n, W);
                    mismatches += q_in != att_sees(lo, n, t0, nt, W);
                }
            }
    CHECK(mismatches == 0);
}
