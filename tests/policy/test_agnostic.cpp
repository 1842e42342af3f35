// The query-agnostic baselines on hand-built inputs: Knorm, LagKV and Expected Attention scores
// worked out by hand or checked against an independent computation (Monte Carlo for the Gaussian
// closed form, explicit rotations for the averaged RoPE), and the policies Knorm, LagKV, Expected
// Attention and KVzip on fake layer views (sinks, window, Ada allocation, options and errors).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "fake_layer.h"
#include "policy/agnostic_scores.h"
#include "policy/policy.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {
namespace {

using testing::FakeLayer;
using Keep = KeepLists;
constexpr float kInf = std::numeric_limits<float>::infinity();

Keep prefill(Evictor& e, FakeLayer& f) {
    Keep keep(f.heads.size());
    const LayerView v = f.view();
    if (e.request().all_layers) e.observe(v);  // a one-layer model: the engine's order
    if (!e.on_prefill(v, keep)) return {};
    check_keep_lists(v, keep);
    return keep;
}

template <typename F>
void expect_error(F&& f, const std::string& fragment) {
    try {
        f();
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

TEST(AgnosticScores, KnormIsMinusTheKeyNorm) {
    const std::vector<float> keys = {3, 4, 1, 0, 0, 0, 6, 8};  // [4, 2]
    EXPECT_EQ(knorm_scores(keys, 2), (std::vector<float>{-5, -1, 0, -10}));
    EXPECT_THROW(knorm_scores(keys, 3), Error);
}

// sinks 1, lag 2, d 2, 7 entries: partitions {1, 2} (reference {3, 4}), {3, 4} (reference {5, 6});
// {5, 6} has no successor and is the tail.
TEST(AgnosticScores, LagKvHandWorked) {
    // keys: e1 (2, 0) and e2 (1, 2) against e3 (0, 0), e4 (2, 4): ranges (2, 4), normalised
    // (1, 0) and (0.5, 0.5): standard deviations 1/sqrt(2) and 0. e3, e4 against e5 = e6: zero
    // ranges, all 0. Values all equal: every range 0, every deviation 0.
    const std::vector<float> keys = {9, 9, 2, 0, 1, 2, 0, 0, 2, 4, 5, 5, 5, 5};  // [7, 2]
    const std::vector<float> values(14, 1.0f);
    LagKvOptions o;
    o.sinks = 1;
    o.lag = 2;
    o.cross = true;
    const std::vector<float> s = lagkv_scores(keys, values, 2, o);
    ASSERT_EQ(s.size(), 7u);
    const double a = std::exp(1.0 / std::sqrt(2.0));
    EXPECT_EQ(s[0], kInf);
    EXPECT_NEAR(s[1], (a / (a + 1) + 0.5) / 2, 1e-6);
    EXPECT_NEAR(s[2], (1 / (a + 1) + 0.5) / 2, 1e-6);
    EXPECT_NEAR(s[3], 0.5, 1e-7);
    EXPECT_NEAR(s[4], 0.5, 1e-7);
    EXPECT_FLOAT_EQ(s[5], 2.0f + 6.0f / 7.0f);  // tail: most recent first
    EXPECT_FLOAT_EQ(s[6], 3.0f);
    // Ranks within each partition: the better of two gets (2 - 1 - 0) / 2, the other 0; the tie
    // {3, 4} goes to the lower index.
    o.cross = false;
    EXPECT_EQ(lagkv_scores(keys, values, 2, o), (std::vector<float>{kInf, 0.5f, 0.0f, 0.5f, 0.0f, s[5], s[6]}));
    // Shorter than sinks + 2 lag: nothing is scored, all recent first.
    o.lag = 4;
    const std::vector<float> t = lagkv_scores(keys, values, 2, o);
    for (int i = 1; i < 7; ++i) EXPECT_FLOAT_EQ(t[static_cast<size_t>(i)], 2.0f + static_cast<float>(i + 1) / 7.0f);
    o.lag = 0;
    EXPECT_THROW(lagkv_scores(keys, values, 2, o), Error);
}

TEST(AgnosticScores, QueryStatsSkipEarlyPositions) {
    // Two query heads of d = 2; head 1's rows: (1, 0) at position 5, (3, 2) at position 6.
    const std::vector<float> q = {7, 7, 1, 0, 7, 7, 3, 2};
    const std::vector<int32_t> pos = {5, 6};
    QueryStats s = query_stats(q, pos, 2, 2, 1, 0, true);
    EXPECT_EQ(s.mean, (std::vector<double>{2, 1}));
    EXPECT_EQ(s.cov, (std::vector<double>{1, 1, 1, 1}));
    s = query_stats(q, pos, 2, 2, 1, 6, true);
    EXPECT_EQ(s.mean, (std::vector<double>{3, 2}));
    EXPECT_EQ(s.cov, (std::vector<double>{0, 0, 0, 0}));
    s = query_stats(q, pos, 2, 2, 1, 7, false);
    EXPECT_EQ(s.mean, (std::vector<double>{0, 0}));
    EXPECT_TRUE(s.cov.empty());
}

// The averaged rotation against rotations written out: one position is RoPE itself; several
// positions average the rotated vectors (the map is linear), for both pair layouts and partial RoPE.
TEST(AgnosticScores, AveragedRotation) {
    for (bool neox : {false, true}) {
        SCOPED_TRACE(neox ? "neox" : "norm");
        RopeInfo rope;
        rope.neox = neox;
        rope.n_rot = 4;  // of head_dim 6: dimensions 4 and 5 do not rotate
        rope.freq_base = 100.0f;
        rope.freq_scale = 0.5f;
        const std::vector<double> x = {1, -2, 0.5, 3, 7, -1};
        auto rope_at = [&](int64_t p) {  // RoPE at position p, written out
            std::vector<double> y = x;
            for (int i = 0; i < 2; ++i) {
                const double angle = static_cast<double>(p) * 0.5 * std::pow(100.0, -2.0 * i / 4);
                const int a = neox ? i : 2 * i, b = neox ? i + 2 : 2 * i + 1;
                y[a] = x[a] * std::cos(angle) - x[b] * std::sin(angle);
                y[b] = x[a] * std::sin(angle) + x[b] * std::cos(angle);
            }
            return y;
        };
        QueryStats s{x, std::vector<double>(36, 0.0)};
        for (int a = 0; a < 6; ++a) s.cov[a * 6 + a] = 1.0;  // identity: Rbar Rbar^T
        rotate(s, averaged_rope(rope, 10, 5), 6);
        std::vector<double> want(6, 0.0);
        for (int64_t p = 10; p < 15; ++p) {
            const auto y = rope_at(p);
            for (int a = 0; a < 6; ++a) want[a] += y[a] / 5;
        }
        for (int a = 0; a < 6; ++a) EXPECT_NEAR(s.mean[a], want[a], 1e-12) << a;
        EXPECT_NEAR(s.cov[4 * 6 + 4], 1.0, 1e-12);  // unrotated dimension
        EXPECT_LT(s.cov[0], 1.0);                  // an average of rotations shrinks
        // Rbar Rbar^T: per pair (c^2 + s^2) on the diagonal, 0 elsewhere.
        const AveragedRope r = averaged_rope(rope, 10, 5);
        const int a0 = neox ? 1 : 2;  // the first dimension of pair 1
        EXPECT_NEAR(s.cov[a0 * 6 + a0], r.cos[1] * r.cos[1] + r.sin[1] * r.sin[1], 1e-12);
        EXPECT_NEAR(s.cov[0 * 6 + 1], 0.0, 1e-12);
        // One position: exactly RoPE, and the covariance stays the identity.
        QueryStats one{x, std::vector<double>(36, 0.0)};
        for (int a = 0; a < 6; ++a) one.cov[a * 6 + a] = 1.0;
        rotate(one, averaged_rope(rope, 12, 1), 6);
        const auto y = rope_at(12);
        for (int a = 0; a < 6; ++a) EXPECT_NEAR(one.mean[a], y[a], 1e-12);
        for (int a = 0; a < 6; ++a)
            for (int b = 0; b < 6; ++b) EXPECT_NEAR(one.cov[a * 6 + b], a == b ? 1.0 : 0.0, 1e-12);
    }
}

// z = mean . k / sqrt(d) + k^T cov k / (2d) is log E[exp(q . k / sqrt(d))] for q ~ N(mean, cov).
TEST(AgnosticScores, ExpectedLogitsAreTheGaussianMomentGenerator) {
    const int d = 4;
    std::mt19937 rng(5);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> A(d * d);  // cov = A A^T / 4
    for (double& a : A) a = normal(rng) / 2;
    QueryStats s;
    s.mean = {0.3, -0.2, 0.1, 0.5};
    s.cov.assign(d * d, 0.0);
    for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j)
            for (int k = 0; k < d; ++k) s.cov[i * d + j] += A[i * d + k] * A[j * d + k];
    const std::vector<float> keys = {1, 0, -1, 0.5f, 0.2f, 0.4f, 0.1f, -0.3f};  // [2, d]
    const std::vector<double> z = expected_logits(keys, d, s);
    ASSERT_EQ(z.size(), 2u);
    for (int i = 0; i < 2; ++i) {
        double acc = 0.0;
        const int n = 400000;
        for (int t = 0; t < n; ++t) {
            double e[d], dot = 0.0;
            for (double& v : e) v = normal(rng);
            for (int a = 0; a < d; ++a) {
                double q = s.mean[a];
                for (int k = 0; k < d; ++k) q += A[a * d + k] * e[k];
                dot += q * keys[i * d + a];
            }
            acc += std::exp(dot / 2.0);  // sqrt(d) = 2
        }
        EXPECT_NEAR(z[i], std::log(acc / n), 5e-3) << "key " << i;
    }
    s.cov.clear();  // mean only
    const std::vector<double> lin = expected_logits(keys, d, s);
    EXPECT_NEAR(lin[0], (0.3 + -0.1 + 0.25) / 2, 1e-7);
}

TEST(AgnosticPolicies, KnormKeepsSmallKeysAndTheWindow) {
    FakeLayer f = FakeLayer::uniform(1, 6);
    f.heads[0].keys = {5, 0, 1, 1, 0, 3, 0.5f, 0, 9, 9, 4, 4};  // norms 5, 1.41, 3, 0.5 | window 12.7, 5.7
    auto p = make_policy("knorm:budget=4,window=2");
    EXPECT_EQ(prefill(*p, f), (Keep{{1, 3, 4, 5}}));
}

TEST(AgnosticPolicies, AdaOptionMovesBudgetBetweenHeads) {
    FakeLayer f = FakeLayer::uniform(2, 10);
    for (int i = 0; i < 10; ++i) {  // head 0: norms 1..10; head 1: norms 100..109
        f.heads[0].keys.insert(f.heads[0].keys.end(), {static_cast<float>(i + 1), 0});
        f.heads[1].keys.insert(f.heads[1].keys.end(), {static_cast<float>(100 + i), 0});
    }
    auto uniform = make_policy("knorm:budget=4,window=0");
    EXPECT_EQ(prefill(*uniform, f), (Keep{{0, 1, 2, 3}, {0, 1, 2, 3}}));
    // The layer's top 8 are all in head 0: q_0 = 8 * 0.75 + 1, q_1 = 1 -> 7 and 1.
    auto ada = make_policy("knorm:budget=4,window=0,ada=true,alpha=0.25");
    EXPECT_EQ(prefill(*ada, f), (Keep{{0, 1, 2, 3, 4, 5, 6}, {0}}));
}

TEST(AgnosticPolicies, LagKvKeepsSinksTailAndTheBestOfEachPartition) {
    // One head, d = 2, sinks 1, lag 2, 9 entries: partitions {1,2} {3,4} {5,6} scored (ranks .5
    // for 1, 3 and 5, 0 for the others, as in LagKvHandWorked; {5,6} against {7,8}: equal keys),
    // {7,8} is the tail. Budget 5 = the sink, the tail, and the best of the two earliest partitions.
    FakeLayer f = FakeLayer::uniform(1, 9);
    f.heads[0].keys = {9, 9, 2, 0, 1, 2, 0, 0, 2, 4, 5, 5, 5, 5, 1, 1, 2, 2};
    f.heads[0].values.assign(18, 1.0f);
    auto p = make_policy("lagkv:budget=5,sinks=1,lag=2");
    EXPECT_EQ(prefill(*p, f), (Keep{{0, 1, 3, 7, 8}}));
    auto missing = make_policy("lagkv:budget=6,sinks=1,lag=2");
    f.heads[0].values.clear();
    expect_error([&] { prefill(*missing, f); }, "values");
}

TEST(AgnosticPolicies, ExpectedAttentionWithoutRotation) {
    // One head, group 1, d = 2, no RoPE; every recent query (1, 0): z_i = k_i[0] / sqrt(2).
    FakeLayer f = FakeLayer::uniform(1, 6);
    f.heads[0].keys = {0, 0, 3, 0, 1, 0, 2, 0, -1, 0, 0, 0};
    f.heads[0].values = {1, 0, 1, 0, 1, 0, 0.1f, 0, 1, 0, 1, 0};  // entry 3's value is small
    f.queries = {1, 0, 1, 0, 1, 0};
    f.query_positions = {3, 4, 5};
    // sinks 1: entry 0 kept; scores softmax(k / sqrt 2) x ||v||: entry 1 (3), 2 (1), 3 (2 x 0.1).
    auto p = make_policy("expected-attention:budget=3,sinks=1");
    EXPECT_EQ(prefill(*p, f), (Keep{{0, 1, 2}}));
    auto plain = make_policy("expected-attention:budget=3,sinks=1,vnorm=false");
    EXPECT_EQ(prefill(*plain, f), (Keep{{0, 1, 3}}));
    auto* scored = dynamic_cast<ScoredPolicy*>(plain.get());
    ASSERT_NE(scored, nullptr);
    const auto s = scored->scores(f.view())[0];
    double sum = 0;
    for (float k : {3.0f, 1.0f, 2.0f, -1.0f, 0.0f}) sum += std::exp(k / std::sqrt(2.0));
    EXPECT_EQ(s[0], kInf);
    EXPECT_NEAR(s[1], std::exp(3 / std::sqrt(2.0)) / sum, 1e-6);
    EXPECT_NEAR(s[4], std::exp(-1 / std::sqrt(2.0)) / sum, 1e-6);
    FakeLayer g = f;
    g.queries.clear();
    g.query_positions.clear();
    expect_error([&] { prefill(*p, g); }, "recent queries");
}

TEST(AgnosticPolicies, KvzipMaxOverGroupAndLayerPool) {
    // Two heads, group 2, 6 entries, sinks 1. Reconstruction rows per query head.
    FakeLayer f = FakeLayer::uniform(2, 6, 2);
    f.heads[0].reconstruction = {0, 0.1f, 0.9f, 0.2f, 0.3f, 0.4f,   // query head 0
                                 0, 0.5f, 0.1f, 0.2f, 0.3f, 0.1f};  // query head 1
    f.heads[1].reconstruction = {0, 0.05f, 0.06f, 0.07f, 0.8f, 0.01f,
                                 0, 0.04f, 0.03f, 0.02f, 0.01f, 0.7f};
    // Max over the group, after the sink: head 0 .5 .9 .2 .3 .4, head 1 .05 .06 .07 .8 .7. The
    // layer's pool (alpha 0) of 2 x 3 places: both sinks, .9, .8, .7, .5 -> head 0 {0, 1, 2},
    // head 1 {0, 4, 5}.
    auto p = make_policy("kvzip:budget=3,sinks=1");
    EXPECT_EQ(prefill(*p, f), (Keep{{0, 1, 2}, {0, 4, 5}}));
    auto local = make_policy("kvzip:budget=3,sinks=1,layers=local");
    EXPECT_EQ(prefill(*local, f), (Keep{{0, 1, 2}, {0, 4, 5}}));  // one layer: the same pool
    auto uniform = make_policy("kvzip:budget=3,sinks=1,ada=false,layers=local");
    EXPECT_EQ(prefill(*uniform, f), (Keep{{0, 1, 2}, {0, 4, 5}}));
    auto four = make_policy("kvzip:budget=4,sinks=1,ada=false,layers=local");
    EXPECT_EQ(prefill(*four, f), (Keep{{0, 1, 2, 5}, {0, 3, 4, 5}}));
    // Without reconstruction scores (a prefill appended to a compressed context) nothing happens.
    f.heads[0].reconstruction.clear();
    f.heads[1].reconstruction.clear();
    EXPECT_TRUE(prefill(*p, f).empty());
    EXPECT_EQ(p->request().reconstruct_chunk, 2048);
    EXPECT_EQ(p->request().reconstruct_sinks, 1);
}

TEST(AgnosticPolicies, OptionsAndErrors) {
    EXPECT_EQ(make_policy("knorm")->request().window, 0);
    EXPECT_FALSE(make_policy("knorm")->request().values);
    EXPECT_TRUE(make_policy("lagkv")->request().values);
    EXPECT_EQ(make_policy("expected-attention")->request().queries, 128);
    EXPECT_TRUE(make_policy("expected-attention")->request().values);
    EXPECT_FALSE(make_policy("expected-attention:vnorm=false")->request().values);
    EXPECT_EQ(make_policy("kvzip:chunk=512,sinks=2")->request().reconstruct_chunk, 512);
    EXPECT_EQ(policy_options("kvzip").canonical(),
              "kvzip:budget=128,window=0,ratio=0,chunked=false,decode=0,sinks=4,chunk=2048,ada=true,alpha=0,"
              "layers=global");
    expect_error([] { make_policy("kvzip:chunked=true"); }, "chunked=true is not supported");
    expect_error([] { make_policy("kvzip:decode=2"); }, "decode-time eviction");
    expect_error([] { make_policy("lagkv:lag=0"); }, "lag");
    expect_error([] { make_policy("expected-attention:queries=0"); }, "queries");
    expect_error([] { make_policy("expected-attention:budget=8,window=8"); }, "the 4 sinks and the window 8");
    expect_error([] { make_policy("knorm:ada=maybe"); }, "true or false");
    expect_error([] { make_policy("lagkv:alpha=1.5"); }, "alpha");
    expect_error([] { make_policy("knorm:sinks=2"); }, "no option 'sinks'");
    EXPECT_NE(make_policy("expected-attention:budget=4,window=0"), nullptr);
}

}  // namespace
}  // namespace kvec::policy
