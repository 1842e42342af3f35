#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "sampling/sampler.h"
#include "util/error.h"

namespace kvec {
namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
    std::vector<float> l;
    for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
    return l;
}

TEST(Sampler, GreedyIsArgmax) {
    SamplerParams p;
    p.temperature = 0.0f;
    Sampler s(p);
    const std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.9f};
    for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(l), 1);
    EXPECT_EQ(argmax(std::vector<float>{3, 3, 1}), 0);  // first on ties
}

TEST(Sampler, TopKRestrictsTheSupport) {
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 2;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    Sampler s(p);
    const auto l = logits_of({0.1, 0.4, 0.2, 0.3});
    const auto d = s.distribution(l);
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(d[0].id, 1);
    EXPECT_EQ(d[1].id, 3);
    EXPECT_NEAR(d[0].p, 0.4 / 0.7, 1e-6);
    for (int i = 0; i < 200; ++i) {
        const int32_t t = s.sample(l);
        EXPECT_TRUE(t == 1 || t == 3);
    }
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.min_p = 0.0f;
    p.top_p = 0.65f;  // 0.4 + 0.3 = 0.7 >= 0.65: ids 1 and 3
    Sampler s(p);
    const auto d = s.distribution(logits_of({0.1, 0.4, 0.2, 0.3}));
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(d[0].id, 1);
    EXPECT_EQ(d[1].id, 3);
    p.top_p = 0.75f;  // needs the 0.2 as well
    EXPECT_EQ(Sampler(p).distribution(logits_of({0.1, 0.4, 0.2, 0.3})).size(), 3u);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
    SamplerParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.5f;  // threshold 0.5 * 0.4 = 0.2: keeps 0.4, 0.3, 0.2
    const auto d = Sampler(p).distribution(logits_of({0.1, 0.4, 0.2, 0.3}));
    std::set<int32_t> ids;
    for (auto c : d) ids.insert(c.id);
    EXPECT_EQ(ids, (std::set<int32_t>{1, 2, 3}));
}

TEST(Sampler, TemperatureSharpensAndFrequenciesMatch) {
    SamplerParams p;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temperature = 0.5f;  // p_i ~ q_i^2: {0.25, 0.75} from {1/3, 2/3}... here {0.2, 0.8} -> {1/17, 16/17}
    p.seed = 3;
    Sampler s(p);
    const auto l = logits_of({0.2, 0.8});
    const auto d = s.distribution(l);
    EXPECT_NEAR(d[0].p, 16.0 / 17.0, 1e-6);
    std::map<int32_t, int> count;
    const int n = 20000;
    for (int i = 0; i < n; ++i) count[s.sample(l)]++;
    EXPECT_NEAR(count[1] / double(n), 16.0 / 17.0, 0.01);
}

TEST(Sampler, SeedIsReproducible) {
    SamplerParams p;
    p.top_k = 0;
    p.min_p = 0.0f;
    p.temperature = 1.0f;
    std::vector<float> l(100);
    for (int i = 0; i < 100; ++i) l[i] = std::sin(i * 1.7f);
    auto run = [&](uint64_t seed) {
        p.seed = seed;
        Sampler s(p);
        std::vector<int32_t> out;
        for (int i = 0; i < 50; ++i) out.push_back(s.sample(l));
        return out;
    };
    EXPECT_EQ(run(42), run(42));
    EXPECT_NE(run(42), run(43));
    // The generator's sequence is fixed by the seed on every platform.
    Rng a(7), b(7);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(a.next(), b.next());
    Rng c(0);
    double u = c.uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
}

TEST(Sampler, RepetitionPenaltyDiscouragesRecentTokens) {
    SamplerParams p;
    p.temperature = 0.0f;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    Sampler s(p);
    const std::vector<float> l = {1.0f, 1.5f, -0.5f};
    EXPECT_EQ(s.sample(l, std::vector<int32_t>{1}), 0);       // 1.5 / 2 = 0.75 < 1
    EXPECT_EQ(s.sample(l, std::vector<int32_t>{1, 0, 2}), 1);  // only the last 2 count: 0 and 2
}

TEST(Sampler, RejectsInvalidParameters) {
    SamplerParams p;
    p.top_p = 0.0f;
    EXPECT_THROW(Sampler{p}, Error);
    p = SamplerParams{};
    p.repeat_penalty = -1.0f;
    EXPECT_THROW(Sampler{p}, Error);
    p = SamplerParams{};
    p.min_p = 1.0f;
    EXPECT_THROW(Sampler{p}, Error);
}

// Values outside the documented ranges are refused, not silently used (issue 23).
TEST(Sampler, RejectsTopPAboveOneAndNegativeMinP) {
    SamplerParams p;
    p.top_p = 1.5f;
    EXPECT_THROW(Sampler{p}, Error);
    p = SamplerParams{};
    p.min_p = -1.0f;
    EXPECT_THROW(Sampler{p}, Error);
    p = SamplerParams{};
    p.top_p = NAN;
    EXPECT_THROW(Sampler{p}, Error);
    p = SamplerParams{};
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    EXPECT_NO_THROW(Sampler{p});
}

}  // namespace
}  // namespace kvec
