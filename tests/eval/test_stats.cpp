// Bootstrap intervals and paired comparisons (eval/stats.h): exact cases small enough to
// enumerate, determinism, and the coverage of the interval on simulated data.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/stats.h"
#include "util/error.h"
#include "util/rng.h"

namespace kvec::eval {
namespace {

TEST(Bootstrap, ConstantValuesGiveAPointInterval) {
    const Estimate e = bootstrap_mean({{3, 3, 3}, {5}});
    EXPECT_DOUBLE_EQ(e.mean, 4.0);  // mean over strata of the stratum means
    EXPECT_DOUBLE_EQ(e.lo, 4.0);
    EXPECT_DOUBLE_EQ(e.hi, 4.0);
    EXPECT_DOUBLE_EQ(e.p_above, 1.0);
    EXPECT_EQ(e.n, 4);
    EXPECT_TRUE(e.significant());
}

TEST(Bootstrap, StrataAreResampledSeparately) {
    // Stratum 0 {0, 10} resamples to means 0, 5, 10 (1/4, 1/2, 1/4); stratum 1 {20} stays 20.
    // The statistic is their mean: 10, 12.5 or 15.
    const Estimate e = bootstrap_mean({{0, 10}, {20}, {}});
    EXPECT_DOUBLE_EQ(e.mean, 12.5);
    EXPECT_DOUBLE_EQ(e.lo, 10.0);
    EXPECT_DOUBLE_EQ(e.hi, 15.0);
    EXPECT_EQ(e.n, 3);
}

TEST(Bootstrap, TiesAreZeroNotATinyEffect) {
    // Differences of equal scores summed in different orders: exactly 0 after snapping.
    const double third = 100.0 / 3.0;
    const Estimate e = bootstrap_mean({{third - third, 0.0, (1.0 / 3.0) * 100.0 - third}});
    EXPECT_EQ(e.mean, 0.0);
    EXPECT_EQ(e.p_above, 0.0);
    EXPECT_FALSE(e.significant());
}

TEST(Bootstrap, SameSeedSameIntervalOtherSeedOther) {
    std::vector<std::vector<double>> v(3);
    Rng rng(7);
    for (auto& s : v) {
        for (int i = 0; i < 40; ++i) s.push_back(rng.uniform() * 100.0);
    }
    const Estimate a = bootstrap_mean(v), b = bootstrap_mean(v);
    EXPECT_EQ(a.lo, b.lo);
    EXPECT_EQ(a.hi, b.hi);
    BootstrapOptions other;
    other.seed = 99;
    const Estimate c = bootstrap_mean(v, other);
    EXPECT_NE(a.lo, c.lo);
    EXPECT_DOUBLE_EQ(a.mean, c.mean);
}

TEST(Bootstrap, NinetyFivePercentIntervalsCoverTheTrueMean) {
    // 200 simulated experiments of 50 items with true mean 0.3 (Bernoulli): the percentile
    // interval should contain 0.3 in about 95 % of them (binomial sd ~1.5 %: allow 88-99 %).
    Rng rng(2026);
    int covered = 0;
    BootstrapOptions o;
    o.resamples = 500;
    for (int e = 0; e < 200; ++e) {
        std::vector<double> s;
        for (int i = 0; i < 50; ++i) s.push_back(rng.uniform() < 0.3 ? 1.0 : 0.0);
        o.seed = static_cast<uint64_t>(e);
        const Estimate est = bootstrap_mean({s}, o);
        if (est.lo <= 0.3 && 0.3 <= est.hi) ++covered;
    }
    EXPECT_GE(covered, 176);
    EXPECT_LE(covered, 198);
}

TEST(Bootstrap, PairedDifferencesDetectAShift) {
    // B is A plus 2 on every item, with noise far larger than 2 across items: paired, the
    // difference is exactly -2 on every item and significant.
    Rng rng(3);
    std::vector<double> diff;
    for (int i = 0; i < 30; ++i) {
        const double a = rng.uniform() * 100.0;
        diff.push_back(a - (a + 2.0));
    }
    const Estimate e = bootstrap_mean({diff});
    EXPECT_NEAR(e.mean, -2.0, 1e-9);
    EXPECT_TRUE(e.significant());
    EXPECT_LT(e.hi, 0.0);
    EXPECT_EQ(e.p_above, 0.0);
}

TEST(Bootstrap, NegatedSwapsTheIntervalAndTheSharesAndATieStaysZero) {
    Rng rng(5);
    std::vector<double> diff;
    for (int i = 0; i < 40; ++i) diff.push_back(rng.uniform() * 4.0 - 1.0);  // mean about +1
    const Estimate e = bootstrap_mean({diff});
    const Estimate n = negated(e);
    EXPECT_DOUBLE_EQ(n.mean, -e.mean);
    EXPECT_DOUBLE_EQ(n.lo, -e.hi);
    EXPECT_DOUBLE_EQ(n.hi, -e.lo);
    EXPECT_DOUBLE_EQ(n.p_above, e.p_below);
    EXPECT_DOUBLE_EQ(n.p_below, e.p_above);
    EXPECT_EQ(n.n, e.n);
    EXPECT_GT(e.p_above + e.p_below, 0.99);

    const Estimate tie = negated(bootstrap_mean({{0.0, 0.0, 0.0}, {0.0, 0.0}}));  // equal scores
    EXPECT_EQ(tie.p_above, 0.0);
    EXPECT_EQ(tie.p_below, 0.0);
    EXPECT_EQ(format_estimate(tie, 2, true), "+0.00 [+0.00, +0.00]");
}

TEST(Bootstrap, RejectsEmptyInputAndBadOptions) {
    EXPECT_THROW(bootstrap_mean({}), Error);
    EXPECT_THROW(bootstrap_mean({{}, {}}), Error);
    BootstrapOptions o;
    o.resamples = 0;
    EXPECT_THROW(bootstrap_mean({{1.0}}, o), Error);
    o.resamples = 10;
    o.level = 1.0;
    EXPECT_THROW(bootstrap_mean({{1.0}}, o), Error);
}

TEST(Bootstrap, FormatsSignedAndUnsigned) {
    const Estimate e{1.5, -0.25, 3.0, 0.9, 10};
    EXPECT_EQ(format_estimate(e, 2, true), "+1.50 [-0.25, +3.00]");
    EXPECT_EQ(format_estimate(e, 1, false), "1.5 [-0.2, 3.0]");
}

}  // namespace
}  // namespace kvec::eval
