// K-VEC's focus design (focus.h): head focus statistics, the low-focus rankings and their
// controls, the focus stage on the scores, the cross-layer priority, hand-worked.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "fake_layer.h"
#include "policy/focus.h"
#include "util/error.h"

namespace kvec::policy {
namespace {

TEST(Focus, StatisticsOfUniformPeakedAndHandWorkedRows) {
    const HeadFocus uniform = head_focus(std::vector<float>{2, 2, 2, 2});
    EXPECT_DOUBLE_EQ(uniform.cv, 0.0);
    EXPECT_NEAR(uniform.entropy, 1.0, 1e-12);
    const HeadFocus peaked = head_focus(std::vector<float>{0, 0, 5, 0});
    EXPECT_NEAR(peaked.cv, std::sqrt(3.0), 1e-12);
    EXPECT_NEAR(peaked.entropy, 0.0, 1e-12);
    // p = (0.5, 0.25, 0.25): deviations (1/6, -1/12, -1/12), variance 1/72, cv = 3 sqrt(1/72).
    const HeadFocus mixed = head_focus(std::vector<float>{2, 1, 1});
    EXPECT_NEAR(mixed.cv, 3.0 * std::sqrt(1.0 / 72.0), 1e-12);
    EXPECT_NEAR(mixed.entropy, (0.5 * std::log(2.0) + 0.5 * std::log(4.0)) / std::log(3.0), 1e-12);
    // Scale-free: the same distribution at another scale has the same focus.
    EXPECT_NEAR(head_focus(std::vector<float>{0.02f, 0.01f, 0.01f}).cv, mixed.cv, 1e-6);
    // Nothing to focus on: one entry, all zero, a NaN.
    for (const std::vector<float>& row : {std::vector<float>{3}, std::vector<float>{0, 0}, std::vector<float>{NAN, 1}}) {
        EXPECT_EQ(head_focus(row).cv, 0.0);
        EXPECT_EQ(head_focus(row).entropy, 1.0);
    }
}

TEST(Focus, RankingsPickTheirShare) {
    // cv ascending: head 2, 0, 3, 1; entropy descending: 1, 3, 0, 2 (independent of cv on purpose).
    const std::vector<HeadFocus> heads = {{1.0, 0.5}, {4.0, 0.9}, {0.5, 0.1}, {2.0, 0.7}};
    using Flags = std::vector<char>;
    EXPECT_EQ(low_focus_heads(heads, 0.5, FocusRank::low_std, 0), (Flags{1, 0, 1, 0}));
    EXPECT_EQ(low_focus_heads(heads, 0.5, FocusRank::high_std, 0), (Flags{0, 1, 0, 1}));
    EXPECT_EQ(low_focus_heads(heads, 0.5, FocusRank::entropy, 0), (Flags{0, 1, 0, 1}));
    EXPECT_EQ(low_focus_heads(heads, 0.25, FocusRank::low_std, 0), (Flags{0, 0, 1, 0}));
    EXPECT_EQ(low_focus_heads(heads, 0.0, FocusRank::low_std, 0), (Flags{0, 0, 0, 0}));
    EXPECT_EQ(low_focus_heads(heads, 1.0, FocusRank::high_std, 0), (Flags{1, 1, 1, 1}));
    // Random: the share, the same subset for the same seed, and not always the same subset.
    std::vector<HeadFocus> many(40);
    bool differs = false;
    const Flags first = low_focus_heads(many, 0.25, FocusRank::random, 1);
    EXPECT_EQ(std::count(first.begin(), first.end(), 1), 10);
    EXPECT_EQ(low_focus_heads(many, 0.25, FocusRank::random, 1), first);
    for (uint64_t seed = 2; seed < 6; ++seed) differs = differs || low_focus_heads(many, 0.25, FocusRank::random, seed) != first;
    EXPECT_TRUE(differs);
    EXPECT_THROW(low_focus_heads(heads, 1.5, FocusRank::low_std, 0), Error);
    EXPECT_EQ(parse_focus_rank("entropy"), FocusRank::entropy);
    EXPECT_STREQ(to_string(parse_focus_rank("high-std")), "high-std");
    EXPECT_THROW(parse_focus_rank("low_std"), Error);
}

// The O' rows on a head whose entries have gaps (an earlier compression) and queries that see
// different numbers of them, against softmax(scale q.k) over each query's visible entries, by hand
// (no rotation: frequency scale 0, every angle 0).
TEST(Focus, QueryWindowRowsOverACompressedHead) {
    testing::FakeLayer f;
    f.group = 2;
    f.head_dim = 4;
    f.heads.resize(2);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    for (auto& head : f.heads) {
        head.positions = {0, 1, 2, 5, 6, 9};
        for (int i = 0; i < 6 * 4; ++i) head.keys.push_back(normal(rng));
    }
    f.query_positions = {3, 4, 5, 6, 8, 9};  // see 3, 3, 4, 5, 5, 6 entries
    for (int i = 0; i < 6 * 4 * 4; ++i) f.queries.push_back(normal(rng));  // [6, 4 heads x 4]
    f.rope.n_rot = 4;
    f.rope.freq_scale = 0.0f;
    LayerView view = f.view();
    view.attn_scale = 0.5f;
    for (size_t h = 0; h < 2; ++h) {
        for (int64_t n_queries : {6, 4, 1}) {
            const std::vector<float> rows = query_window_rows(view, h, n_queries);  // [2, 6]
            ASSERT_EQ(rows.size(), 12u);
            std::vector<double> want(12, 0.0);
            for (size_t t = 6 - static_cast<size_t>(n_queries); t < 6; ++t) {
                const int32_t pos = f.query_positions[t];
                int vis = 0;
                while (vis < 6 && f.heads[h].positions[static_cast<size_t>(vis)] <= pos) ++vis;
                for (int g = 0; g < 2; ++g) {
                    const float* q = f.queries.data() + t * 16 + (h * 2 + static_cast<size_t>(g)) * 4;
                    std::vector<double> z(static_cast<size_t>(vis));
                    double top = -1e300, sum = 0;
                    for (int j = 0; j < vis; ++j) {
                        double d = 0;
                        for (int c = 0; c < 4; ++c) d += double{q[c]} * f.heads[h].keys[static_cast<size_t>(j * 4 + c)];
                        z[static_cast<size_t>(j)] = 0.5 * d;
                        top = std::max(top, z[static_cast<size_t>(j)]);
                    }
                    for (double& x : z) sum += (x = std::exp(x - top));
                    for (int j = 0; j < vis; ++j) want[static_cast<size_t>(g * 6 + j)] += z[static_cast<size_t>(j)] / sum / n_queries;
                }
            }
            for (size_t i = 0; i < 12; ++i) EXPECT_NEAR(rows[i], want[i], 1e-5) << h << " " << n_queries << " " << i;
        }
    }
}

KvecLayer layer_of(std::vector<std::vector<float>> scores) {
    KvecLayer l;
    for (const auto& s : scores) {
        std::vector<int32_t> u;
        for (size_t i = 0; i < s.size(); ++i) u.push_back(static_cast<int32_t>(i));
        l.units.push_back(u);
    }
    l.scores = std::move(scores);
    return l;
}

TEST(Focus, StageReweightsAndWidensOnlyLowFocusHeads) {
    std::vector<KvecLayer> layers = {layer_of({{1, 2, 3}, {5, 5, 5}}), layer_of({{9, 0, 0}, {1, 1, 2}})};
    std::vector<std::vector<FocusHeadInput>> in(2, std::vector<FocusHeadInput>(2));
    in[0][0].focus = {0.8, 0.8};
    in[0][1].focus = {0.0, 1.0};  // the most diffuse
    in[1][0].focus = {1.4, 0.0};
    in[1][1].focus = {0.5, 0.9};
    in[1][1].wide = {4, 4, 4};
    FocusOptions o;
    o.share = 0.5;
    o.gamma = 1.0;
    const auto flags = apply_focus(layers, in, o);
    EXPECT_EQ(flags, (std::vector<std::vector<char>>{{0, 1}, {0, 1}}));
    EXPECT_EQ(layers[0].scores[0], (std::vector<float>{1, 2, 3}));
    EXPECT_EQ(layers[0].scores[1], (std::vector<float>{10, 10, 10}));  // own scores x 2
    EXPECT_EQ(layers[1].scores[0], (std::vector<float>{9, 0, 0}));
    EXPECT_EQ(layers[1].scores[1], (std::vector<float>{8, 8, 8}));  // the wide window's x 2
    // gamma = 0 and no wide window: the scores stay as they are, bit for bit.
    std::vector<KvecLayer> same = {layer_of({{1, 2, 3}, {5, 5, 5}})};
    std::vector<std::vector<FocusHeadInput>> in0(1, std::vector<FocusHeadInput>(2));
    o.gamma = 0.0;
    o.share = 1.0;
    apply_focus(same, in0, o);
    EXPECT_EQ(same[0].scores, (std::vector<std::vector<float>>{{1, 2, 3}, {5, 5, 5}}));
    in0[0][1].wide = {1, 2};
    EXPECT_THROW(apply_focus(same, in0, o), Error);  // wide scores of the wrong length
}

TEST(Focus, CrossLayerPriorityFavoursUnitsOtherLayersDrop) {
    // Three layers, one head of four candidates each, b = 2. Layer 0 and 1 keep {0, 1}, layer 2
    // keeps {0, 2}. ref = mean of the rank-2 scores = (3 + 3 + 3) / 3 = 3; nu = 1.
    std::vector<KvecLayer> layers = {layer_of({{4, 3, 2, 1}}), layer_of({{4, 3, 2, 1}}), layer_of({{4, 2, 3, 1}})};
    std::vector<KvecSelection> first(3);
    first[0].keep = {{0, 1}};
    first[1].keep = {{0, 1}};
    first[2].keep = {{0, 2}};
    add_cross_layer_priority(layers, first, 2, 1.0);
    // Layer 0: unit 0 kept by 2 others (bonus 0), unit 1 by 1 (1.5), units 2 and 3 by 1 and 0.
    EXPECT_EQ(layers[0].scores[0], (std::vector<float>{4 + 0.0f, 3 + 1.5f, 2 + 1.5f, 1 + 3.0f}));
    // Layer 2: unit 1 is kept by both others (bonus 0), unit 2 by none (3).
    EXPECT_EQ(layers[2].scores[0], (std::vector<float>{4 + 0.0f, 2 + 0.0f, 3 + 3.0f, 1 + 3.0f}));
    // nu = 0 or one layer: unchanged.
    std::vector<KvecLayer> one = {layer_of({{4, 3}})};
    add_cross_layer_priority(one, {KvecSelection{}}, 1, 1.0);
    EXPECT_EQ(one[0].scores[0], (std::vector<float>{4, 3}));
}

}  // namespace
}  // namespace kvec::policy
