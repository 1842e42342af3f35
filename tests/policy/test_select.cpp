// Selection primitives: ranking/top-k, StreamingLLM, Random, PyramidKV and Ada-KV budgets,
// Ada-SnapKV selection. Expected values are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "policy/select.h"
#include "util/error.h"

namespace kvec::policy {
namespace {

using Idx = std::vector<int32_t>;

TEST(TopK, HigherScoreThenLowerIndex) {
    const std::vector<float> s = {0.5f, 0.9f, 0.5f, 0.1f, 0.9f};  // [5]
    // Order: 1 (0.9), 4 (0.9), 0 (0.5), 2 (0.5), 3 (0.1).
    EXPECT_EQ(top_k(s, 1), (Idx{1}));
    EXPECT_EQ(top_k(s, 2), (Idx{1, 4}));
    EXPECT_EQ(top_k(s, 3), (Idx{0, 1, 4}));
    EXPECT_EQ(top_k(s, 4), (Idx{0, 1, 2, 4}));
    EXPECT_EQ(top_k(s, 9), (Idx{0, 1, 2, 3, 4}));
    EXPECT_EQ(top_k(s, 0), (Idx{}));
    EXPECT_THROW(top_k(s, -1), Error);
}

TEST(TopK, NanRanksLastAndSignedZerosTie) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> s = {nan, 0.1f, -inf, nan};
    EXPECT_EQ(top_k(s, 2), (Idx{1, 2}));
    EXPECT_EQ(top_k(s, 3), (Idx{0, 1, 2}));
    const std::vector<float> z = {0.0f, -0.0f, 0.0f};
    EXPECT_EQ(top_k(z, 1), (Idx{0}));
    const std::vector<float> z2 = {-0.0f, 0.0f};
    EXPECT_EQ(top_k(z2, 1), (Idx{0}));
}

TEST(TopK, AllTiesKeepTheEarliest) {
    const std::vector<double> s(10, 0.25);
    EXPECT_EQ(top_k(std::span<const double>(s), 3), (Idx{0, 1, 2}));
    EXPECT_EQ(rank_order(s), iota_indices(10));
}

TEST(Window, AppendsTheLastEntries) {
    EXPECT_EQ(with_window({0, 3}, 8, 5), (Idx{0, 3, 5, 6, 7}));
    EXPECT_EQ(with_window({}, 3, 0), (Idx{0, 1, 2}));
    EXPECT_EQ(prefix_count(10, 4), 6);
    EXPECT_EQ(prefix_count(3, 4), 0);
}

TEST(Streaming, SinksPlusRecent) {
    EXPECT_EQ(streaming_select(10, 6, 4), (Idx{0, 1, 2, 3, 8, 9}));
    EXPECT_EQ(streaming_select(10, 4, 4), (Idx{0, 1, 2, 3}));
    EXPECT_EQ(streaming_select(10, 5, 0), (Idx{5, 6, 7, 8, 9}));
    EXPECT_EQ(streaming_select(6, 6, 4), iota_indices(6));  // N <= B: nothing evicted
    EXPECT_EQ(streaming_select(2, 6, 4), iota_indices(2));
    EXPECT_THROW(streaming_select(10, 3, 4), Error);
    EXPECT_THROW(streaming_select(10, 6, -1), Error);
}

TEST(Random, SubsetIsSortedDistinctDeterministic) {
    for (uint64_t seed = 0; seed < 50; ++seed) {
        const Idx a = random_subset(40, 12, seed);
        ASSERT_EQ(a.size(), 12u);
        EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
        EXPECT_EQ(std::adjacent_find(a.begin(), a.end()), a.end());
        for (int32_t i : a) EXPECT_TRUE(i >= 0 && i < 40);
        EXPECT_EQ(a, random_subset(40, 12, seed));
    }
    EXPECT_NE(random_subset(1000, 10, 1), random_subset(1000, 10, 2));
    EXPECT_EQ(random_subset(5, 9, 3), iota_indices(5));
    EXPECT_EQ(random_subset(5, 0, 3), Idx{});
    EXPECT_NE(mix_seed(7, 0, 1), mix_seed(7, 1, 0));
}

TEST(Random, RoughlyUniform) {
    // 20000 draws of 3 out of 10: each index expected 6000 times (sd ~ 65).
    std::vector<int> count(10, 0);
    for (uint64_t t = 0; t < 20000; ++t) {
        for (int32_t i : random_subset(10, 3, mix_seed(99, t))) ++count[static_cast<size_t>(i)];
    }
    for (int c : count) EXPECT_NEAR(c, 6000, 400);
}

TEST(Pyramid, HandWorkedSchedule) {
    // L = 4, b = 10, beta = 20: min 0.5, max 19.5, step 19/3.
    // x = 19.5, 13.1667, 6.8333, 0.5 -> round 20, 13, 7, 1 = 41 > 40.
    // Excess r - x: 0.5, -0.17, 0.17, 0.5; tie between layers 0 and 3 -> deepest loses one.
    EXPECT_EQ(pyramid_budgets(4, 10, 1000, 20.0), (std::vector<int64_t>{20, 13, 7, 0}));
    // Clamp: max 19.5 >= n_prefix 15 -> max 15, min 5, step 5.
    EXPECT_EQ(pyramid_budgets(3, 10, 15, 20.0), (std::vector<int64_t>{15, 10, 5}));
    // b = 128, L = 32: x_0 = 249.6 -> 250, x_31 = 6.4 -> 6.
    const auto llama = pyramid_budgets(32, 128, 10000, 20.0);
    EXPECT_EQ(llama.front(), 250);
    EXPECT_EQ(llama.back(), 6);
    EXPECT_EQ(std::accumulate(llama.begin(), llama.end(), int64_t{0}), 32 * 128);
}

TEST(Pyramid, EdgeCases) {
    EXPECT_EQ(pyramid_budgets(1, 64, 500), (std::vector<int64_t>{64}));
    EXPECT_EQ(pyramid_budgets(3, 64, 50), (std::vector<int64_t>{50, 50, 50}));  // no eviction
    EXPECT_EQ(pyramid_budgets(3, 0, 50), (std::vector<int64_t>{0, 0, 0}));
    EXPECT_EQ(pyramid_budgets(3, 10, 100, 1.0), (std::vector<int64_t>{10, 10, 10}));
    EXPECT_THROW(pyramid_budgets(0, 10, 100), Error);
    EXPECT_THROW(pyramid_budgets(4, -1, 100), Error);
    EXPECT_THROW(pyramid_budgets(4, 10, 100, 0.5), Error);
}

TEST(Pyramid, ScheduleProperties) {
    std::mt19937 rng(1234);
    for (int t = 0; t < 3000; ++t) {
        const int64_t L = 1 + static_cast<int64_t>(rng() % 80);
        const int64_t b = static_cast<int64_t>(rng() % 3000);
        const int64_t n = b + 1 + static_cast<int64_t>(rng() % 6000);
        const double beta = 1.0 + static_cast<double>(rng() % 40);
        const auto r = pyramid_budgets(L, b, n, beta);
        ASSERT_EQ(static_cast<int64_t>(r.size()), L);
        EXPECT_EQ(std::accumulate(r.begin(), r.end(), int64_t{0}), L * b);
        // Independent recomputation of the spec's real-valued schedule: each layer within 1.
        double lo = static_cast<double>(b) / beta, hi = 2.0 * static_cast<double>(b) - lo;
        if (hi >= static_cast<double>(n)) {
            hi = static_cast<double>(n);
            lo = 2.0 * static_cast<double>(b) - hi;
        }
        for (int64_t l = 0; l < L; ++l) {
            const double x = L == 1 ? static_cast<double>(b)
                                    : hi - static_cast<double>(l) * (hi - lo) / (L - 1.0);
            EXPECT_LE(std::abs(static_cast<double>(r[static_cast<size_t>(l)]) - x), 1.0);
            EXPECT_LE(r[static_cast<size_t>(l)], n);
            EXPECT_GE(r[static_cast<size_t>(l)], 0);
            if (l > 0) {
                EXPECT_LE(r[static_cast<size_t>(l)], r[static_cast<size_t>(l - 1)] + 1);
            }
        }
    }
}

TEST(AdaBudgets, HandWorked) {
    // b = 10, alpha = 0.2 -> floor 2. q = 16*0.8+2 = 14.8, 4*0.8+2 = 5.2 -> 14 + 5 = 19;
    // one unit left -> largest remainder (head 0, 0.8) -> {15, 5}.
    EXPECT_EQ(
        ada_head_budgets(std::vector<int64_t>{16, 4}, std::vector<int64_t>{100, 100}, 10, 0.2),
        (std::vector<int64_t>{15, 5}));
    // Capacity: q = 6 (cap 5), 10, 14 -> 29; remainders all 0 -> head 0 full -> head 1.
    EXPECT_EQ(ada_head_budgets(std::vector<int64_t>{5, 10, 15}, std::vector<int64_t>{5, 100, 100},
                               10, 0.2),
              (std::vector<int64_t>{5, 11, 14}));
    // Several rounds: alpha 0.5 -> floor 5; q = 6.5 (cap 3), 13.5 -> 16; four units left, head 0
    // is full, so head 1 takes all four.
    EXPECT_EQ(ada_head_budgets(std::vector<int64_t>{3, 17}, std::vector<int64_t>{3, 100}, 10, 0.5),
              (std::vector<int64_t>{3, 17}));
    // Nothing to evict: sum cap <= H*b keeps everything.
    EXPECT_EQ(ada_head_budgets(std::vector<int64_t>{4, 7}, std::vector<int64_t>{4, 7}, 10, 0.2),
              (std::vector<int64_t>{4, 7}));
    // alpha = 0: budgets are the picks; alpha = 1: uniform b.
    EXPECT_EQ(ada_head_budgets(std::vector<int64_t>{13, 7}, std::vector<int64_t>{50, 50}, 10, 0),
              (std::vector<int64_t>{13, 7}));
    EXPECT_EQ(ada_head_budgets(std::vector<int64_t>{13, 7}, std::vector<int64_t>{50, 50}, 10, 1),
              (std::vector<int64_t>{10, 10}));
    EXPECT_EQ(safeguard_count(100, 0.29), 29);
    EXPECT_EQ(safeguard_count(10, 0.25), 2);
}

TEST(AdaBudgets, Errors) {
    const std::vector<int64_t> p = {1, 2}, c = {5, 5};
    EXPECT_THROW(ada_head_budgets(p, std::vector<int64_t>{5}, 2, 0.2), Error);
    EXPECT_THROW(ada_head_budgets(p, c, 2, 1.5), Error);
    EXPECT_THROW(ada_head_budgets(p, c, -2, 0.2), Error);
    EXPECT_THROW(ada_head_budgets(std::vector<int64_t>{6, 0}, c, 3, 0.2), Error);
}

TEST(AdaBudgets, ExactTotalAndFloorOnRandomInputs) {
    std::mt19937 rng(77);
    for (int t = 0; t < 5000; ++t) {
        const size_t H = 1 + rng() % 12;
        const int64_t b = static_cast<int64_t>(rng() % 200);
        const double alpha = (rng() % 4 == 0) ? 0.2 : static_cast<double>(rng() % 1001) / 1000.0;
        std::vector<int64_t> cap(H), picks(H, 0);
        int64_t cap_total = 0;
        for (auto& c : cap) {
            c = static_cast<int64_t>(rng() % 400);
            cap_total += c;
        }
        const int64_t pool = std::min<int64_t>(static_cast<int64_t>(H) * b, cap_total);
        // Distribute `pool` picks at random within the capacities.
        for (int64_t p = 0; p < pool;) {
            const size_t h = rng() % H;
            if (picks[h] < cap[h]) {
                ++picks[h];
                ++p;
            }
        }
        const auto budget = ada_head_budgets(picks, cap, b, alpha);
        const int64_t floor_units = static_cast<int64_t>(std::floor(b * alpha + 1e-9));
        EXPECT_EQ(std::accumulate(budget.begin(), budget.end(), int64_t{0}), pool);
        for (size_t h = 0; h < H; ++h) {
            EXPECT_LE(budget[h], cap[h]);
            EXPECT_GE(budget[h], std::min(floor_units, cap[h]));
            if (cap_total > static_cast<int64_t>(H) * b) {
                // Never below the rounded-down formula value (capped).
                const double q = picks[h] * (1.0 - alpha) + static_cast<double>(floor_units);
                EXPECT_GE(budget[h], std::min<int64_t>(static_cast<int64_t>(q + 1e-9) - 1, cap[h]));
            }
        }
    }
}

TEST(AdaSelect, HandWorked) {
    // Raw scores. Pool of 4: 0.9, 0.8, 0.7 (head 0) and 0.5 (head 1) -> picks {3, 1}.
    const std::vector<std::vector<float>> s = {{0.9f, 0.8f, 0.7f, 0.1f},
                                               {0.5f, 0.3f, 0.05f, 0.05f}};
    AdaSelection a = ada_select(s, 2, 0.0, false);
    EXPECT_EQ(a.picks, (std::vector<int64_t>{3, 1}));
    EXPECT_EQ(a.budgets, (std::vector<int64_t>{3, 1}));
    EXPECT_EQ(a.keep, (HeadSelection{{0, 1, 2}, {0}}));
    // alpha 0.5: floor 1; q = 2.5, 1.5 -> 2 + 1, one unit to head 0 (equal remainders).
    a = ada_select(s, 2, 0.5, false);
    EXPECT_EQ(a.budgets, (std::vector<int64_t>{3, 1}));
    // Normalised: head 0 / 2.5 = .36 .32 .28 .04; head 1 / 0.9 = .556 .333 .056 .056
    // pool: .556 (h1), .36 (h0), .333 (h1), .32 (h0) -> picks {2, 2}.
    a = ada_select(s, 2, 0.0, true);
    EXPECT_EQ(a.picks, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(a.keep, (HeadSelection{{0, 1}, {0, 1}}));
}

TEST(AdaSelect, TiesGoToLowerHeadThenLowerIndex) {
    const std::vector<std::vector<float>> s = {{1, 1, 1}, {1, 1, 1}};
    const AdaSelection a = ada_select(s, 2, 0.0, false);
    EXPECT_EQ(a.picks, (std::vector<int64_t>{3, 1}));
    EXPECT_EQ(a.keep, (HeadSelection{{0, 1, 2}, {0}}));
}

TEST(AdaSelect, UnevenAndEmptyHeads) {
    // Chunked mode: head 1 has no candidates, head 2 only one. b = 2, pool = min(6, 5) = 5...
    const std::vector<std::vector<float>> s = {{0.1f, 0.4f, 0.3f, 0.2f}, {}, {0.9f}};
    AdaSelection a = ada_select(s, 2, 0.2, false);
    // sum cap = 5 <= 6: everything is kept.
    EXPECT_EQ(a.keep, (HeadSelection{{0, 1, 2, 3}, {}, {0}}));
    // b = 1: pool 3 = .9 (h2), .4, .3 (h0) -> picks {2, 0, 1}; alpha 0 -> same budgets.
    a = ada_select(s, 1, 0.0, false);
    EXPECT_EQ(a.budgets, (std::vector<int64_t>{2, 0, 1}));
    EXPECT_EQ(a.keep, (HeadSelection{{1, 2}, {}, {0}}));
    EXPECT_TRUE(ada_select({}, 3, 0.2, false).keep.empty());
}

}  // namespace
}  // namespace kvec::policy
