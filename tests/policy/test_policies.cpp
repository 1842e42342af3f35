// Policies on hand-built layer views (no model): the selections worked out by hand in the
// comments, the common frame (one-shot / chunked / decode, N <= B, ratio), memory totals, and
// K-VEC(gamma = mu = 0) == Ada-SnapKV through the registry. Score values are dyadic fractions so
// that float means are exact.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "fake_layer.h"
#include "policy/coverage_probe.h"
#include "policy/registry.h"
#include "policy/select.h"
#include "util/error.h"

namespace kvec::policy {
namespace {

using testing::FakeLayer;
using Keep = KeepLists;

// Runs the prefill hook; returns the keep lists (empty when the policy left the layer alone).
Keep prefill(Evictor& e, FakeLayer& f) {
    Keep keep(f.heads.size());
    const LayerView v = f.view();
    if (!e.on_prefill(v, keep)) return {};
    check_keep_lists(v, keep);
    return keep;
}

int64_t total(const Keep& keep) {
    int64_t n = 0;
    for (const auto& k : keep) n += static_cast<int64_t>(k.size());
    return n;
}

// One KV head of 10 entries with two query heads (group 2), for the SnapKV tests.
FakeLayer snap_layer() {
    FakeLayer f = FakeLayer::uniform(1, 10, 2);
    // Rows over all 10 entries; the last two are the window (w = 2).
    const std::vector<float> g0 = {0.125f, 0, 0.375f, 0, 0.25f, 0, 0, 0.125f, 0.25f, 0.25f};
    const std::vector<float> g1 = {0.125f, 0.25f, 0.125f, 0, 0.25f, 0, 0.0625f, 0.125f, 0, 0};
    f.heads[0].window = g0;
    f.heads[0].window.insert(f.heads[0].window.end(), g1.begin(), g1.end());
    return f;
}

TEST(Policies, FullNeverEvicts) {
    auto p = make_policy("full");
    FakeLayer f = FakeLayer::uniform(2, 1000);
    EXPECT_TRUE(prefill(*p, f).empty());
}

TEST(Policies, SnapKvHandWorked) {
    FakeLayer f = snap_layer();
    // mean over the group of the prefix (8 entries): .125 .125 .25 0 .25 0 .03125 .125
    // top 3 (B - w): 2, 4 (0.25), then 0 (0.125, lowest index among 0, 1, 7); + window 8, 9.
    auto p = make_policy("snapkv:budget=5,window=2,kernel=1");
    EXPECT_EQ(prefill(*p, f), (Keep{{0, 2, 4, 8, 9}}));
    // max over the group: .125 .25 .375 0 .25 0 .0625 .125 -> 2, then 1 and 4 (0.25).
    p = make_policy("snapkv:budget=5,window=2,kernel=1,gqa=max");
    EXPECT_EQ(prefill(*p, f), (Keep{{1, 2, 4, 8, 9}}));
    // max-pool k3 of the mean: .125 .25 .25 .25 .25 .25 .125 .125 -> 1, 2, 3.
    p = make_policy("snapkv:budget=5,window=2,kernel=3");
    EXPECT_EQ(prefill(*p, f), (Keep{{1, 2, 3, 8, 9}}));
    // avg-pool k3 (padding counted): j0 (.25)/3, j1 .5/3, j2 .375/3, j3 .5/3, j4 .25/3,
    // j5 .28125/3, j6 .15625/3, j7 .15625/3 -> 1, 3, then 2.
    p = make_policy("snapkv:budget=5,window=2,kernel=3,pooling=avg");
    EXPECT_EQ(prefill(*p, f), (Keep{{1, 2, 3, 8, 9}}));
}

TEST(Policies, OneShotChunkedAndNothingToEvict) {
    FakeLayer f = snap_layer();
    f.final_chunk = false;
    auto one_shot = make_policy("snapkv:budget=5,window=2,kernel=1");
    EXPECT_TRUE(prefill(*one_shot, f).empty());  // waits for the end of the prompt
    auto chunked = make_policy("snapkv:budget=5,window=2,kernel=1,chunked=true");
    EXPECT_EQ(prefill(*chunked, f), (Keep{{0, 2, 4, 8, 9}}));
    f.final_chunk = true;
    auto big = make_policy("snapkv:budget=10,window=2");
    EXPECT_TRUE(prefill(*big, f).empty());  // N <= B
    // Decode-time eviction only when asked for.
    Keep keep(1);
    const LayerView v = f.view();
    EXPECT_FALSE(one_shot->on_decode(v, keep));
    auto decoding = make_policy("snapkv:budget=5,window=2,kernel=1,decode=1");
    EXPECT_TRUE(decoding->on_decode(v, keep));
    EXPECT_EQ(keep, (Keep{{0, 2, 4, 8, 9}}));
}

TEST(Policies, RatioBudget) {
    FakeLayer f = FakeLayer::uniform(2, 20);
    auto p = make_policy("streaming:ratio=0.5,sinks=2");  // B = floor(0.5 * 20) = 10
    const Keep keep = prefill(*p, f);
    ASSERT_EQ(keep.size(), 2u);
    EXPECT_EQ(keep[0], (std::vector<int32_t>{0, 1, 12, 13, 14, 15, 16, 17, 18, 19}));
    // A ratio below the window keeps the window.
    FakeLayer g = FakeLayer::uniform(1, 20);
    auto r = make_policy("random:ratio=0.05,window=4");
    EXPECT_EQ(prefill(*r, g), (Keep{{16, 17, 18, 19}}));
}

TEST(Policies, MissingObservationIsAClearError) {
    FakeLayer f = FakeLayer::uniform(1, 10);
    auto p = make_policy("snapkv:budget=5,window=2");
    try {
        prefill(*p, f);
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("window scores"), std::string::npos) << e.what();
    }
    auto h = make_policy("h2o:budget=5,window=2");
    EXPECT_THROW(prefill(*h, f), Error);
}

TEST(Policies, StreamingIsSinksPlusRecentEverywhere) {
    auto p = make_policy("streaming:budget=6");
    for (int layer = 0; layer < 3; ++layer) {
        FakeLayer f = FakeLayer::uniform(2, 12);
        f.layer = layer;
        f.n_layer = 3;
        EXPECT_EQ(prefill(*p, f), (Keep{{0, 1, 2, 3, 10, 11}, {0, 1, 2, 3, 10, 11}}));
    }
}

TEST(Policies, H2oTovaKeyDiffHandWorked) {
    // H2O: column sums 5 1 3 2 | 9 9 (window 2), B = 4 -> prefix top 2: 0, 2.
    FakeLayer f = FakeLayer::uniform(1, 6);
    f.heads[0].column_sums = {5, 1, 3, 2, 9, 9};
    EXPECT_EQ(prefill(*make_policy("h2o:budget=4,window=2"), f), (Keep{{0, 2, 4, 5}}));
    // TOVA: last row .125 .5 .0625 .25 | .0625 (window 1), B = 3 -> 1, 3 + newest.
    FakeLayer t = FakeLayer::uniform(1, 5);
    t.heads[0].last_row = {0.125f, 0.5f, 0.0625f, 0.25f, 0.0625f};
    EXPECT_EQ(prefill(*make_policy("tova:budget=3"), t), (Keep{{1, 3, 4}}));
    // Group of 2, mean: rows (.5 0 0 0 | 1) and (0 0 .5 .25 | 1) -> .25 0 .25 .125 -> 0, 2.
    FakeLayer t2 = FakeLayer::uniform(1, 5, 2);
    t2.heads[0].last_row = {0.5f, 0, 0, 0, 1, 0, 0, 0.5f, 0.25f, 1};
    EXPECT_EQ(prefill(*make_policy("tova:budget=3"), t2), (Keep{{0, 2, 4}}));
    // scope=layer (the default: the paper's and kvpress's TOVA): two KV heads, last rows
    // (.5 0 .25 0 | 1) and (0 .125 0 .5 | 1); each head alone (scope=head) keeps 0, 2 and 1, 3;
    // averaged over the layer .25 .0625 .125 .25 -> 0 and 3 in both heads.
    FakeLayer t3 = FakeLayer::uniform(2, 5);
    t3.heads[0].last_row = {0.5f, 0, 0.25f, 0, 1};
    t3.heads[1].last_row = {0, 0.125f, 0, 0.5f, 1};
    EXPECT_EQ(prefill(*make_policy("tova:budget=3,scope=head"), t3), (Keep{{0, 2, 4}, {1, 3, 4}}));
    EXPECT_EQ(prefill(*make_policy("tova:budget=3"), t3), (Keep{{0, 3, 4}, {0, 3, 4}}));
    EXPECT_EQ(prefill(*make_policy("tova:budget=3,scope=layer"), t3), (Keep{{0, 3, 4}, {0, 3, 4}}));
    // KeyDiff: keys (1,0) (1,0) (1,0) (-1,0) | (0,1); mean (.4, .2); scores -cos:
    // -.894 -.894 -.894 +.894 | (window). B = 3, w = 1 -> 3, then 0 (tie, lowest index).
    FakeLayer k = FakeLayer::uniform(1, 5);
    k.heads[0].keys = {1, 0, 1, 0, 1, 0, -1, 0, 0, 1};
    EXPECT_EQ(prefill(*make_policy("keydiff:budget=3,window=1"), k), (Keep{{0, 3, 4}}));
}

TEST(Policies, RandomIsSeededAndSized) {
    FakeLayer f = FakeLayer::uniform(3, 100);
    const Keep a = prefill(*make_policy("random:budget=20,window=5,seed=1"), f);
    const Keep b = prefill(*make_policy("random:budget=20,window=5,seed=1"), f);
    const Keep c = prefill(*make_policy("random:budget=20,window=5,seed=2"), f);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    EXPECT_NE(a[0], a[1]);  // heads draw independently
    for (const auto& head : a) {
        ASSERT_EQ(head.size(), 20u);
        EXPECT_EQ(std::vector<int32_t>(head.end() - 5, head.end()),
                  (std::vector<int32_t>{95, 96, 97, 98, 99}));
    }
}

// Random window rows for a uniform layer: [group, n] per head.
void fill_window(FakeLayer& f, std::mt19937& rng, bool ties) {
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    for (auto& h : f.heads) {
        const size_t n = h.positions.size();
        h.window.resize(static_cast<size_t>(f.group) * n);
        for (float& v : h.window) v = ties ? static_cast<float>(rng() % 4) * 0.125f : uni(rng);
    }
}

TEST(Policies, PyramidBudgetsPerLayerAndTotalMemory) {
    // B = 12, w = 2 -> b = 10; 4 layers of 1000 entries: 20, 13, 7, 0 (+ w) per head.
    std::mt19937 rng(5);
    auto p = make_policy("pyramidkv:budget=12,window=2");
    const std::vector<size_t> want = {22, 15, 9, 2};
    int64_t sum = 0;
    for (int layer = 0; layer < 4; ++layer) {
        FakeLayer f = FakeLayer::uniform(2, 1000);
        f.layer = layer;
        f.n_layer = 4;
        fill_window(f, rng, false);
        const Keep keep = prefill(*p, f);
        ASSERT_EQ(keep.size(), 2u);
        EXPECT_EQ(keep[0].size(), want[static_cast<size_t>(layer)]);
        EXPECT_EQ(keep[1].size(), want[static_cast<size_t>(layer)]);
        sum += total(keep);
    }
    EXPECT_EQ(sum, 4 * 2 * 12);  // L x H x B, as SnapKV
}

TEST(Policies, PyramidChunkedRoundsUseOneScheduleForAllLayers) {
    // Chunked prefill: each layer holds its previous budget (22, 15, 9, 2) plus a chunk of 8, so
    // the layers see 30, 23, 17 and 10 entries; the schedule must still be the one of the
    // sequence so far (n_past = 1000), or the deep layers keep more and the total exceeds L x H x B.
    std::mt19937 rng(9);
    auto p = make_policy("pyramidkv:budget=12,window=2,chunked=true");
    const std::vector<int32_t> held = {30, 23, 17, 10};
    const std::vector<size_t> want = {22, 15, 9, 2};
    int64_t sum = 0;
    for (int layer = 0; layer < 4; ++layer) {
        FakeLayer f = FakeLayer::uniform(2, held[static_cast<size_t>(layer)]);
        f.layer = layer;
        f.n_layer = 4;
        f.n_past = 1000;
        f.n_prompt = 2000;
        f.final_chunk = false;
        fill_window(f, rng, false);
        const Keep keep = prefill(*p, f);
        ASSERT_EQ(keep.size(), 2u) << layer;
        EXPECT_EQ(keep[0].size(), want[static_cast<size_t>(layer)]) << layer;
        sum += total(keep);
    }
    EXPECT_EQ(sum, 4 * 2 * 12);
}

TEST(Policies, AdaAndKvecMeetTheLayerBudgetExactly) {
    std::mt19937 rng(11);
    for (int t = 0; t < 20; ++t) {
        FakeLayer f = FakeLayer::uniform(4, 300, 2);
        fill_window(f, rng, t % 2 == 0);
        for (const char* spec : {"ada-snapkv:budget=40,window=8", "kvec:budget=40,window=8,layers=local,gamma=1",
                                 "kvec:budget=40,window=8,layers=local,unit=token,gamma=3,mu=0.5"}) {
            const Keep keep = prefill(*make_policy(spec), f);
            EXPECT_EQ(total(keep), 4 * 40) << spec;
            for (const auto& head : keep) {
                EXPECT_GE(head.size(), 8u + 6u) << spec;  // window + floor(0.2 * 32)
                EXPECT_EQ(head.back(), 299);
            }
        }
    }
}

TEST(Policies, KvecWithZeroCoefficientsIsAdaSnapKv) {
    std::mt19937 rng(3);
    for (int t = 0; t < 60; ++t) {
        const bool normalize = t % 2 == 0;
        const std::string common = "budget=24,window=4,kernel=" + std::to_string(1 + 2 * (t % 4)) +
                                   (t % 3 == 0 ? ",gqa=max" : "") +
                                   (t % 5 == 0 ? ",pooling=avg" : "") +
                                   ",normalize=" + (normalize ? "true" : "false");
        auto ada = make_policy("ada-snapkv:" + common);
        auto kv = make_policy("kvec:layers=local,gamma=0,mu=0," + common);
        for (int layer = 0; layer < 3; ++layer) {
            FakeLayer f = FakeLayer::uniform(1 + static_cast<int>(rng() % 4), 80, 2);
            f.layer = layer;
            f.n_layer = 3;
            fill_window(f, rng, t % 2 == 1);
            EXPECT_EQ(prefill(*kv, f), prefill(*ada, f)) << common << " layer " << layer;
        }
    }
}

TEST(Policies, KvecCoversMoreThanAdaOnSharedFavourites) {
    // Two heads that favour the same positions: Ada-SnapKV keeps the same prefix entries in both,
    // K-VEC spreads them. Head 0 prefers 0..9, head 1 too but less sharply.
    FakeLayer f = FakeLayer::uniform(2, 40);
    for (size_t h = 0; h < 2; ++h) {
        f.heads[h].window.assign(40, 0.0f);
        for (size_t i = 0; i < 36; ++i) {
            const float base = i < 10 ? 0.05f : 0.01f;
            f.heads[h].window[i] = base - (h == 1 ? 0.0005f * static_cast<float>(i % 10) : 0.0f);
        }
    }
    const Keep ada = prefill(*make_policy("ada-snapkv:budget=14,window=4,kernel=1,alpha=1"), f);
    const Keep kv = prefill(*make_policy("kvec:budget=14,window=4,kernel=1,alpha=0,layers=local,gamma=1,mu=1,normalize=true"), f);
    auto prefix_union = [](const Keep& keep) {
        std::vector<int32_t> all;
        for (const auto& head : keep) {
            for (int32_t i : head) {
                if (i < 36) all.push_back(i);
            }
        }
        std::sort(all.begin(), all.end());
        return std::unique(all.begin(), all.end()) - all.begin();
    };
    EXPECT_EQ(prefix_union(ada), 10);
    EXPECT_GT(prefix_union(kv), 10);
    EXPECT_EQ(total(kv), total(ada));
}

TEST(Policies, KvecCrossLayerMemoryResetsPerRound) {
    // Same layer twice as layer 0 of two rounds must give the same answer (U starts empty).
    std::mt19937 rng(8);
    FakeLayer f = FakeLayer::uniform(2, 60, 1);
    fill_window(f, rng, false);
    auto p = make_policy("kvec:budget=12,window=2,mu=4,gamma=2,layers=local");
    const Keep first = prefill(*p, f);
    FakeLayer g = f;
    g.layer = 1;
    g.n_layer = 2;
    f.n_layer = 2;
    prefill(*p, g);
    EXPECT_EQ(prefill(*p, f), first);
}

TEST(Policies, UnevenHeadsChunkedMode) {
    // Heads with different entry counts (after an earlier Ada compression) and an empty head.
    FakeLayer f = FakeLayer::uniform(3, 30);
    f.heads[1].positions.resize(12);
    f.heads[2].positions.clear();
    std::mt19937 rng(2);
    fill_window(f, rng, false);
    f.heads[1].window.resize(12);
    for (const char* spec :
         {"snapkv:budget=10,window=2,chunked=true", "ada-snapkv:budget=10,window=2,chunked=true",
          "kvec:budget=10,window=2,chunked=true,layers=local", "pyramidkv:budget=10,window=2,chunked=true",
          "streaming:budget=10,chunked=true", "random:budget=10,window=2,chunked=true"}) {
        f.final_chunk = false;
        const Keep keep = prefill(*make_policy(spec), f);
        ASSERT_EQ(keep.size(), 3u) << spec;
        EXPECT_TRUE(keep[2].empty()) << spec;
        EXPECT_LE(total(keep), 3 * 10) << spec;
        EXPECT_EQ(keep[0].back(), 29) << spec;
        EXPECT_EQ(keep[1].back(), 11) << spec;
    }
}

TEST(CoverageProbe, MeasuresWhatThePolicyKeeps) {
    // Streaming B = 6, sinks 4 on 10 tokens: both heads keep 0 1 2 3 8 9. Probe window 2: the
    // prefix is positions 0..7, of which 0..3 are kept: C_head = 4/8, R = 8/4.
    // Tokens 5 5 6 7 8 9 5 6 | 1 2: prefix ids {5,6,7,8,9}; kept ids {5,6,7} -> 3/5, R = 6/3.
    auto inner = make_policy("streaming:budget=6");
    CoverageProbe probe(*inner, 2);
    FakeLayer f = FakeLayer::uniform(2, 10);
    f.tokens = {5, 5, 6, 7, 8, 9, 5, 6, 1, 2};
    EXPECT_EQ(prefill(probe, f), (Keep{{0, 1, 2, 3, 8, 9}, {0, 1, 2, 3, 8, 9}}));
    const CoverageReport& r = probe.report();
    ASSERT_EQ(r.positions.size(), 1u);
    EXPECT_EQ(r.universe_positions, 8);
    EXPECT_EQ(r.universe_tokens, 5);
    EXPECT_DOUBLE_EQ(r.positions[0].c_head, 0.5);
    EXPECT_DOUBLE_EQ(r.positions[0].redundancy, 2.0);
    EXPECT_DOUBLE_EQ(r.tokens[0].c_head, 0.6);
    EXPECT_DOUBLE_EQ(r.tokens[0].redundancy, 2.0);
    EXPECT_DOUBLE_EQ(r.c_layer_positions, 0.5);
    // Kept prefix positions 0..3 of 8, twice: tenths p * 10 / 8 = 0, 1, 2, 3.
    EXPECT_EQ(r.kept_tenths, (std::vector<int64_t>{2, 2, 2, 2, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(r.kept_tenth_shares(), (std::vector<double>{0.25, 0.25, 0.25, 0.25, 0, 0, 0, 0, 0, 0}));
    // A second layer that the policy leaves alone (Full) counts as keeping everything.
    auto full = make_policy("full");
    CoverageProbe probe_full(*full, 2);
    EXPECT_TRUE(prefill(probe_full, f).empty());
    EXPECT_DOUBLE_EQ(probe_full.report().positions[0].c_head, 1.0);
    EXPECT_DOUBLE_EQ(probe_full.report().tokens[0].c_head, 1.0);
    EXPECT_DOUBLE_EQ(probe_full.report().mean_redundancy(false), 2.0);
}

}  // namespace
}  // namespace kvec::policy
