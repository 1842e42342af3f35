// Scores: GQA reduction, pooling (hand-computed values; the avg values were also checked once
// against PyTorch's avg_pool1d / max_pool1d), KeyDiff.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "policy/scores.h"
#include "policy/select.h"
#include "util/error.h"

namespace kvec::policy {
namespace {

TEST(Pool1d, MaxKernel3And5) {
    const std::vector<float> x = {1, 3, 2, 0, 5};  // [5]
    EXPECT_EQ(pool1d(x, 3, Pooling::max), (std::vector<float>{3, 3, 3, 5, 5}));
    EXPECT_EQ(pool1d(x, 5, Pooling::max), (std::vector<float>{3, 3, 5, 5, 5}));
}

TEST(Pool1d, AvgCountsPaddingInTheDivisor) {
    const std::vector<float> x = {1, 3, 2, 0, 5};  // [5]
    // kernel 3: (0+1+3)/3, (1+3+2)/3, (3+2+0)/3, (2+0+5)/3, (0+5+0)/3
    const std::vector<float> k3 = pool1d(x, 3, Pooling::avg);
    const std::vector<double> want3 = {4.0 / 3, 2.0, 5.0 / 3, 7.0 / 3, 5.0 / 3};
    // kernel 5: (1+3+2)/5, (1+3+2+0)/5, (1+3+2+0+5)/5, (3+2+0+5)/5, (2+0+5)/5
    const std::vector<float> k5 = pool1d(x, 5, Pooling::avg);
    const std::vector<double> want5 = {1.2, 1.2, 2.2, 2.0, 1.4};
    for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_NEAR(k3[i], want3[i], 1e-6) << i;
        EXPECT_NEAR(k5[i], want5[i], 1e-6) << i;
    }
    // Kernel wider than the row: every window holds the whole row, divisor is still 7.
    const std::vector<float> k7 = pool1d(std::vector<float>{1, 2, 4}, 7, Pooling::avg);
    for (float v : k7) EXPECT_FLOAT_EQ(v, 1.0f);
}

TEST(Pool1d, KernelOneIsIdentityAndEmptyIsEmpty) {
    const std::vector<float> x = {0.5f, -1.0f, 2.0f};
    EXPECT_EQ(pool1d(x, 1, Pooling::max), x);
    EXPECT_EQ(pool1d(x, 1, Pooling::avg), x);
    EXPECT_TRUE(pool1d(std::vector<float>{}, 7, Pooling::max).empty());
}

TEST(Pool1d, MaxIgnoresPaddingForNegativeValues) {
    // Padding must not contribute a 0 to a max over negative values (max_pool1d pads with -inf).
    const std::vector<float> x = {-3, -1, -2};
    EXPECT_EQ(pool1d(x, 3, Pooling::max), (std::vector<float>{-1, -1, -1}));
    EXPECT_EQ(pool1d(std::vector<float>{-3}, 7, Pooling::max), (std::vector<float>{-3}));
}

TEST(Pool1d, FollowCarriesAScoreToThePositionsAfterIt) {
    // One attended position (index 2): kernel 3 reaches 1..3; follow 2 also reaches 4 and 5.
    const std::vector<float> x = {0, 0, 9, 0, 0, 0, 0, 1};  // [8]
    EXPECT_EQ(pool1d(x, 3, Pooling::max, 2), (std::vector<float>{0, 9, 9, 9, 9, 9, 1, 1}));
    // kernel 1 + follow: a pure forward extension, nothing before the attended position.
    EXPECT_EQ(pool1d(x, 1, Pooling::max, 3), (std::vector<float>{0, 0, 9, 9, 9, 9, 0, 1}));
    // avg: the window x[j-1-2 .. j+1] summed, divided by kernel + follow = 5 (padding counted).
    const std::vector<float> a = pool1d(x, 3, Pooling::avg, 2);
    const std::vector<double> want = {0, 9 / 5.0, 9 / 5.0, 9 / 5.0, 9 / 5.0, 9 / 5.0, 1 / 5.0, 1 / 5.0};
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(a[i], want[i], 1e-6) << i;
    // follow 0 is the symmetric pooling.
    EXPECT_EQ(pool1d(x, 5, Pooling::max, 0), pool1d(x, 5, Pooling::max));
    EXPECT_THROW(pool1d(x, 3, Pooling::max, -1), Error);
}

TEST(Pool1d, RejectsEvenOrNonPositiveKernel) {
    const std::vector<float> x = {1, 2};
    EXPECT_THROW(pool1d(x, 4, Pooling::max), Error);
    EXPECT_THROW(pool1d(x, 0, Pooling::avg), Error);
    EXPECT_THROW(pool1d(x, -3, Pooling::avg), Error);
}

TEST(GqaReduce, MeanAndMaxOverGroups) {
    // 4 query heads on 2 KV heads: q0,q1 -> kv0; q2,q3 -> kv1.
    const std::vector<std::vector<float>> rows = {{1, 2}, {3, 0}, {5, 5}, {1, 9}};  // [4][2]
    const auto spans = spans_of(rows);
    EXPECT_EQ(gqa_reduce(spans, 2, GqaReduce::mean),
              (std::vector<std::vector<float>>{{2, 1}, {3, 7}}));
    EXPECT_EQ(gqa_reduce(spans, 2, GqaReduce::max),
              (std::vector<std::vector<float>>{{3, 2}, {5, 9}}));
    // G = 1: identity.
    EXPECT_EQ(gqa_reduce(spans, 4, GqaReduce::mean), rows);
}

TEST(GqaReduce, GroupsMayDifferInLengthButNotWithinAGroup) {
    const std::vector<std::vector<float>> ok = {{1, 2, 3}, {3, 2, 1}, {4}, {6}};  // ragged
    const auto reduced = gqa_reduce(spans_of(ok), 2, GqaReduce::mean);
    EXPECT_EQ(reduced, (std::vector<std::vector<float>>{{2, 2, 2}, {5}}));
    const std::vector<std::vector<float>> bad = {{1, 2}, {3}, {4}, {6}};
    EXPECT_THROW(gqa_reduce(spans_of(bad), 2, GqaReduce::mean), Error);
    EXPECT_THROW(gqa_reduce(spans_of(ok), 3, GqaReduce::mean), Error);
    EXPECT_THROW(gqa_reduce(spans_of(ok), 0, GqaReduce::mean), Error);
}

TEST(WindowScores, ReduceThenPool) {
    // Two query heads on one KV head: mean = {0, 1, 0, 0, 3}; max-pool k3 = {1, 1, 1, 3, 3}.
    const std::vector<std::vector<float>> rows = {{0, 2, 0, 0, 2}, {0, 0, 0, 0, 4}};
    const auto s = window_scores(spans_of(rows), 1, GqaReduce::mean, 3, Pooling::max);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0], (std::vector<float>{1, 1, 1, 3, 3}));
}

TEST(KeyDiff, NegativeCosineToTheMeanKey) {
    // keys (1,0), (0,1), (1,1): mean (2/3, 2/3); cos = 1/sqrt2, 1/sqrt2, 1.
    const std::vector<float> keys = {1, 0, 0, 1, 1, 1};  // [3, 2]
    const std::vector<float> s = keydiff_scores(keys, 2);
    ASSERT_EQ(s.size(), 3u);
    EXPECT_NEAR(s[0], -1.0 / std::sqrt(2.0), 1e-6);
    EXPECT_NEAR(s[1], -1.0 / std::sqrt(2.0), 1e-6);
    EXPECT_NEAR(s[2], -1.0, 1e-6);
    // The key least like the others ranks first.
    const std::vector<float> keys2 = {1, 0, 1, 0.1f, -1, 0};  // [3, 2]; mean (1/3, 1/30)
    const std::vector<float> s2 = keydiff_scores(keys2, 2);
    EXPECT_EQ(top_k(s2, 1), (std::vector<int32_t>{2}));
    // A unit anchor weighs every key's direction alike: keys (4,0), (0,1), (0,1) have the mean
    // (4/3, 2/3), nearest to (4,0) (cos 0.894 against 0.447), but the unit mean (1/3, 2/3),
    // nearest to (0,1) (0.894 against 0.447).
    const std::vector<float> keys3 = {4, 0, 0, 1, 0, 1};  // [3, 2]
    const std::vector<float> raw = keydiff_scores(keys3, 2);
    const std::vector<float> unit = keydiff_scores(keys3, 2, true);
    EXPECT_NEAR(raw[0], -2.0 / std::sqrt(5.0), 1e-6);
    EXPECT_NEAR(raw[1], -1.0 / std::sqrt(5.0), 1e-6);
    EXPECT_NEAR(unit[0], -1.0 / std::sqrt(5.0), 1e-6);
    EXPECT_NEAR(unit[1], -2.0 / std::sqrt(5.0), 1e-6);
}

TEST(KeyDiff, ZeroKeyAndBadShape) {
    const std::vector<float> keys = {0, 0, 1, 0};  // [2, 2]
    const std::vector<float> s = keydiff_scores(keys, 2);
    EXPECT_EQ(s[0], 0.0f);
    EXPECT_NEAR(s[1], -1.0, 1e-6);
    EXPECT_THROW(keydiff_scores(std::vector<float>{1, 2, 3}, 2), Error);
    EXPECT_THROW(keydiff_scores(keys, 0), Error);
    EXPECT_TRUE(keydiff_scores(std::vector<float>{}, 4).empty());
}

TEST(Parse, NamesAndErrors) {
    EXPECT_EQ(parse_pooling("avg"), Pooling::avg);
    EXPECT_EQ(parse_gqa_reduce("max"), GqaReduce::max);
    EXPECT_THROW(parse_pooling("mean"), Error);
    EXPECT_THROW(parse_gqa_reduce("sum"), Error);
}

}  // namespace
}  // namespace kvec::policy
