#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "model/model.h"
#include "model/session.h"
#include "test_helpers.h"
#include "util/error.h"

namespace kvec {
namespace {

using namespace testing_helpers;

const Model& tiny_model() {
    static const auto m = Model::load(write_model(tiny_spec(), "session-tiny.gguf"));
    return *m;
}

std::vector<int32_t> some_tokens(int n, int seed = 1) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 37 + seed * 11 + 5) % 512;
    return t;
}


TEST(Session, LogitsAreFiniteAndNonDegenerate) {
    Session s(tiny_model(), f32_options());
    const auto logits = s.prefill(some_tokens(12));
    ASSERT_EQ(logits.size(), 512u);
    double mean = 0, var = 0;
    for (float x : logits) {
        ASSERT_TRUE(std::isfinite(x));
        mean += x;
    }
    mean /= 512;
    for (float x : logits) var += (x - mean) * (x - mean);
    const double sd = std::sqrt(var / 512);
    EXPECT_GT(sd, 0.5);  // the generator aims at about 3
    EXPECT_LT(sd, 30.0);
}

TEST(Session, ChunkedPrefillMatchesOneChunk) {
    const auto tokens = some_tokens(20);
    Session one(tiny_model(), f32_options());
    const auto a = one.prefill(tokens, true);
    std::vector<float> all(a.begin(), a.end());
    Session chunked(tiny_model(), f32_options(7));
    const auto b = chunked.prefill(tokens, true);
    EXPECT_LT(max_abs_diff(all, b), 1e-4f);
    EXPECT_EQ(chunked.n_past(), 20);
    EXPECT_EQ(chunked.kv_cache().size(1, 1), 20);
}

TEST(Session, DecodeMatchesPrefillOfTheWholeSequence) {
    const auto tokens = some_tokens(15);
    Session full(tiny_model(), f32_options());
    const auto all = full.prefill(tokens, true);
    std::vector<float> ref(all.begin(), all.end());  // [15, 512]

    Session s(tiny_model(), f32_options());
    s.prefill(std::span<const int32_t>(tokens).first(10));
    for (int i = 10; i < 15; ++i) {
        const auto l = s.decode(tokens[static_cast<size_t>(i)]);
        EXPECT_LT(max_abs_diff(l, std::span<const float>(ref).subspan(static_cast<size_t>(i) * 512, 512)), 1e-4f)
            << "token " << i;
    }
    EXPECT_EQ(s.n_past(), 15);
    EXPECT_EQ(s.n_decoded(), 5);
    EXPECT_EQ(s.tokens(), tokens);
}

// A decode step's attention split over the entries: enough slices per KV head for the same item
// count on every thread, at most one per 128 entries.
TEST(Session, DecodeSplitPartsSpreadTheHeadsEvenly) {
    EXPECT_EQ(decode_split_parts(2, 3, 600), 2);    // SmolLM2's 3 KV heads on 2 threads: 6 items
    EXPECT_EQ(decode_split_parts(2, 1, 600), 2);    // Gemma 3's one KV head
    EXPECT_EQ(decode_split_parts(2, 2, 600), 1);    // 2 heads on 2 threads: the query-head split
    EXPECT_EQ(decode_split_parts(16, 3, 4096), 16);
    EXPECT_EQ(decode_split_parts(16, 3, 1000), 7);  // 7 slices of 128+ entries
    EXPECT_EQ(decode_split_parts(2, 3, 200), 1);    // too few entries to cut
    EXPECT_EQ(decode_split_parts(1, 3, 600), 1);
}

// With 3 KV heads on 2 threads and 300+ entries, decode takes the split over entries
// (decode_split_parts above): the logits of one prefill of the whole sequence, as the unsplit
// decode gives them, with 1 thread and 2.
TEST(Session, DecodeSplitOverEntriesMatchesPrefill) {
    RandomModelSpec spec = tiny_spec();
    spec.n_embd = 192;
    spec.n_head = 6;  // heads of 32
    spec.n_head_kv = 3;
    spec.n_ctx = 512;
    const auto m = Model::load(write_model(spec, "session-three-kv-heads.gguf"));
    const auto tokens = some_tokens(304);
    Session full(*m, f32_options());
    const auto all = full.prefill(tokens, true);
    const std::vector<float> ref(all.begin(), all.end());  // [304, 512]
    const int saved = omp_get_max_threads();
    for (const int threads : {1, 2}) {
        omp_set_num_threads(threads);
        Session s(*m, f32_options());
        s.prefill(std::span<const int32_t>(tokens).first(300));
        for (int i = 300; i < 304; ++i) {
            const auto l = s.decode(tokens[static_cast<size_t>(i)]);
            EXPECT_LT(max_abs_diff(l, std::span<const float>(ref).subspan(static_cast<size_t>(i) * 512, 512)), 1e-4f)
                << threads << " threads, token " << i;
        }
    }
    omp_set_num_threads(saved);
}

// The weights copied into huge pages are the mapped file's bytes: the same logits, bit for bit.
TEST(Session, CopiedAndMappedWeightsGiveTheSameLogits) {
    const std::string path = write_model(tiny_spec(), "session-load-modes.gguf");
    const auto mapped = Model::load(path, LoadMode::Map);
    const auto copied = Model::load(path, LoadMode::Copy);
    EXPECT_TRUE(copied->file().bytes().copied());
    EXPECT_FALSE(mapped->file().bytes().copied());
    const auto tokens = some_tokens(9);
    Session a(*mapped, f32_options()), b(*copied, f32_options());
    const auto la = a.prefill(tokens);
    const std::vector<float> first(la.begin(), la.end());
    const auto lb = b.prefill(tokens);
    ASSERT_EQ(first.size(), lb.size());
    EXPECT_EQ(std::memcmp(first.data(), lb.data(), first.size() * sizeof(float)), 0);
}

TEST(Session, F16CacheIsCloseToF32) {
    const auto tokens = some_tokens(16);
    Session a(tiny_model(), f32_options());
    const auto la = a.prefill(tokens);
    std::vector<float> ref(la.begin(), la.end());
    SessionOptions o;
    o.kv_type_k = o.kv_type_v = KvType::F16;
    Session b(tiny_model(), o);
    const auto lb = b.prefill(tokens);
    const float d = max_abs_diff(ref, lb);
    EXPECT_LT(d, 0.05f);
    EXPECT_GT(b.kv_cache().entry_bytes() * 2, a.kv_cache().entry_bytes());  // roughly half
    EXPECT_LT(b.kv_cache().bytes(), a.kv_cache().bytes());
}

TEST(Session, ErrorsOnContextOverflowAndBadTokens) {
    SessionOptions o = f32_options();
    o.n_ctx = 8;
    Session s(tiny_model(), o);
    try {
        s.prefill(some_tokens(9));
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("context holds 8"), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.n_past(), 0);  // nothing happened
    s.prefill(some_tokens(8));
    EXPECT_THROW(s.decode(1), Error);
    s.reset();
    const std::vector<int32_t> bad = {1, 512};
    EXPECT_THROW(s.prefill(bad), Error);
    EXPECT_THROW(s.decode(-1), Error);
    EXPECT_THROW(s.prefill({}), Error);
    const std::vector<int32_t> tok = {1, 2}, pos = {3, 3};
    EXPECT_THROW(s.prefill_at(tok, pos), Error);
}

// A NaN in the output matrix's row 7 (matrices are not scanned at load time) makes logit 7 NaN:
// prefill, decode and a batched decode step each refuse it, naming the position.
TEST(Session, NonFiniteLogitsAreRefused) {
    const std::string good = write_model(tiny_spec(), "finite-logits-good.gguf");
    auto f = gguf::File::open(good);
    gguf::Writer w;
    for (const auto& [k, v] : f->metadata()) w.set(k, v);
    bool poisoned = false;
    for (const auto& t : f->tensors()) {
        std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
        if (t.name == "output.weight") {
            ASSERT_EQ(t.type, GgmlType::F32);
            const float nan = NAN;
            std::memcpy(bytes.data() + 7 * t.ne[0] * sizeof(float), &nan, sizeof(float));
            poisoned = true;
        }
        w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), bytes.data(),
                     bytes.size());
    }
    ASSERT_TRUE(poisoned);
    w.write(temp_path("finite-logits-nan.gguf"));
    const auto m = Model::load(temp_path("finite-logits-nan.gguf"));
    auto error_of = [](auto&& run) {
        try {
            run();
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    Session a(*m, f32_options()), b(*m, f32_options());
    EXPECT_NE(error_of([&] { a.prefill(some_tokens(5)); }).find("non-finite logit (nan) at position 4"),
              std::string::npos);
    EXPECT_NE(error_of([&] { a.decode(3); }).find("non-finite logit (nan) at position 5"), std::string::npos);
    EXPECT_NE(error_of([&] { b.prefill(some_tokens(2)); }).find("at position 1"), std::string::npos);
    Session* both[] = {&a, &b};
    const int32_t tokens[] = {1, 2};
    EXPECT_NE(error_of([&] { Session::decode_batch(both, tokens); }).find("non-finite logit (nan) at position 6"),
              std::string::npos);
}

TEST(Session, ExplicitPositionsLeaveGaps) {
    Session s(tiny_model(), f32_options());
    const std::vector<int32_t> tok = {5, 6, 7}, pos = {0, 4, 9};
    s.prefill_at(tok, pos);
    EXPECT_EQ(s.n_past(), 10);
    EXPECT_EQ(s.tokens()[4], 6);
    EXPECT_EQ(s.tokens()[5], -1);
    EXPECT_EQ(s.kv_cache().positions(0, 0)[2], 9);
    s.decode(8);
    EXPECT_EQ(s.kv_cache().positions(1, 1)[3], 10);
}

TEST(Session, EvictionCompactsEveryLayerAfterItsAttention) {
    const auto tokens = some_tokens(40);
    Session full(tiny_model(), f32_options());
    full.prefill(tokens);
    const size_t full_bytes = full.kv_cache().bytes();

    SinkRecentEvictor ev(4, 8, /*head_skew=*/3);
    Session s(tiny_model(), f32_options());
    s.set_evictor(&ev);
    s.prefill(tokens);
    ASSERT_EQ(ev.sequences, std::vector<int32_t>{40});
    ASSERT_EQ(ev.calls.size(), 2u);  // one call per layer, single chunk
    for (int l = 0; l < 2; ++l) {
        EXPECT_EQ(ev.calls[static_cast<size_t>(l)].layer, l);
        EXPECT_EQ(ev.calls[static_cast<size_t>(l)].phase, EvictionPhase::Prefill);
        EXPECT_TRUE(ev.calls[static_cast<size_t>(l)].final_chunk);
        EXPECT_EQ(ev.calls[static_cast<size_t>(l)].n_prompt, 40);
        EXPECT_EQ(ev.calls[static_cast<size_t>(l)].group, 2);
        for (int h = 0; h < 2; ++h) {
            const int32_t recent = 8 + 3 * h;
            ASSERT_EQ(s.kv_cache().size(l, h), 4 + recent);
            EXPECT_EQ(s.kv_cache().capacity(l, h), 4 + recent);  // memory really released
            const int32_t* pos = s.kv_cache().positions(l, h);
            for (int i = 0; i < 4; ++i) EXPECT_EQ(pos[i], i);
            for (int i = 0; i < recent; ++i) EXPECT_EQ(pos[4 + i], 40 - recent + i);
        }
    }
    const size_t expected = static_cast<size_t>(2 * (12 + 15)) * s.kv_cache().entry_bytes();
    EXPECT_EQ(s.kv_cache().bytes(), expected);
    EXPECT_LT(s.kv_cache().bytes(), full_bytes / 2);
    // Layer 0 is compressed before layer 1 appends, so the peak is layer 1 full (2 heads x 40
    // entries, allocated exactly for the chunk) plus layer 0 compressed (27 entries): never the
    // whole prompt everywhere.
    EXPECT_EQ(s.kv_cache().peak_bytes(), static_cast<size_t>(2 * 40 + 27) * s.kv_cache().entry_bytes());

    // Decoding continues at the original position.
    s.decode(3);
    EXPECT_EQ(s.kv_cache().positions(0, 0)[12], 40);
    EXPECT_EQ(s.n_past(), 41);
}

TEST(Session, KeepAllEvictorChangesNothing) {
    const auto tokens = some_tokens(20);
    Session plain(tiny_model(), f32_options());
    std::vector<float> ref(plain.prefill(tokens).begin(), plain.prefill(std::vector<int32_t>{9}).end());
    SinkRecentEvictor keep_all(1000, 0);
    Session s(tiny_model(), f32_options());
    s.set_evictor(&keep_all);
    s.prefill(tokens);
    const auto l = s.decode(9);
    plain.reset();
    plain.prefill(tokens);
    const auto r = plain.decode(9);
    EXPECT_EQ(max_abs_diff(l, r), 0.0f);
}

TEST(Session, ObservationsAreProbabilityStatistics) {
    const auto tokens = some_tokens(30);
    ObservationRequest req;
    req.window = 8;
    req.column_sums = true;
    req.last_row = true;
    SinkRecentEvictor ev(2, 10, 0, req);
    int checked = 0;
    ev.inspect = [&](const LayerView& v) {
        EXPECT_EQ(v.n_window, 8);
        EXPECT_EQ(v.tokens.size(), 30u);
        EXPECT_EQ(v.tokens[3], tokens[3]);
        for (int h = 0; h < v.n_head_kv; ++h) {
            const KvHeadView& hv = v.heads[static_cast<size_t>(h)];
            ASSERT_EQ(hv.n_entries, 30);
            ASSERT_NE(hv.window_scores, nullptr);
            ASSERT_NE(hv.column_sums, nullptr);
            ASSERT_NE(hv.last_row, nullptr);
            for (int g = 0; g < v.group; ++g) {
                const float* w = hv.window_scores + g * 30;
                const float* c = hv.column_sums + g * 30;
                const float* r = hv.last_row + g * 30;
                const double sw = std::accumulate(w, w + 30, 0.0), sc = std::accumulate(c, c + 30, 0.0),
                             sr = std::accumulate(r, r + 30, 0.0);
                EXPECT_NEAR(sw, 1.0, 1e-5);   // mean of 8 probability rows
                EXPECT_NEAR(sc, 30.0, 1e-4);  // 30 queries, each row sums to 1
                EXPECT_NEAR(sr, 1.0, 1e-5);
                // Causality: only the last window query sees the last key; the first token is
                // seen by all 30 queries.
                EXPECT_NEAR(w[29], r[29] / 8.0f, 1e-6);
                EXPECT_GT(c[0], c[29]);
                EXPECT_NEAR(c[29], r[29], 1e-6);
            }
        }
        ++checked;
    };
    Session s(tiny_model(), f32_options());
    s.set_evictor(&ev);
    s.prefill(tokens);
    EXPECT_EQ(checked, 2);
    // Column sums live in the cache and moved with the compaction; decoding keeps accumulating.
    const float before = s.kv_cache().aux(0, 0, 0)[0];
    s.decode(1);
    EXPECT_GT(s.kv_cache().aux(0, 0, 0)[0], before);
    EXPECT_EQ(s.kv_cache().aux(0, 0, 0)[12], 0.0f + s.kv_cache().aux(0, 0, 0)[12]);
}

TEST(Session, ChunkedPrefillEvictsAfterEveryChunkAndBoundsPeak) {
    const auto tokens = some_tokens(64);
    ObservationRequest req;
    req.window = 4;
    SinkRecentEvictor ev(4, 12, 0, req);
    Session s(tiny_model(), f32_options(16));
    s.set_evictor(&ev);
    s.prefill(tokens);
    ASSERT_EQ(ev.calls.size(), 8u);  // 4 chunks x 2 layers
    EXPECT_FALSE(ev.calls[0].final_chunk);
    EXPECT_TRUE(ev.calls[7].final_chunk);
    EXPECT_EQ(ev.calls[2].chunk_begin, 16);
    EXPECT_EQ(ev.calls[2].chunk_end, 32);
    EXPECT_EQ(ev.calls[2].n_prompt, 64);
    EXPECT_EQ(s.kv_cache().size(1, 1), 16);
    // Peak: budget 16 + chunk 16 entries per head at most; in fact only the layer being processed
    // holds the chunk: 2 layers x 2 heads x 16 + 2 heads x 16 = 96 entries.
    EXPECT_LE(s.kv_cache().peak_bytes(), static_cast<size_t>(2 * 2 * (16 + 16)) * s.kv_cache().entry_bytes());
    EXPECT_EQ(s.kv_cache().peak_bytes(), static_cast<size_t>(96) * s.kv_cache().entry_bytes());
}

TEST(Session, DecodeTimeEvictionEveryKSteps) {
    const auto tokens = some_tokens(20);
    ObservationRequest req;
    req.window = 4;
    req.decode_interval = 3;
    SinkRecentEvictor ev(2, 6, 0, req);
    int decode_calls = 0;
    ev.inspect = [&](const LayerView& v) {
        if (v.phase != EvictionPhase::Decode) return;
        ++decode_calls;
        EXPECT_EQ(v.decode_step % 3, 0);
        EXPECT_EQ(v.n_window, 4);
        for (int h = 0; h < v.n_head_kv; ++h) {
            const KvHeadView& hv = v.heads[static_cast<size_t>(h)];
            ASSERT_NE(hv.window_scores, nullptr);
            for (int g = 0; g < v.group; ++g) {
                double sum = 0;
                for (int32_t i = 0; i < hv.n_entries; ++i) sum += hv.window_scores[g * hv.n_entries + i];
                EXPECT_NEAR(sum, 1.0, 1e-5);
            }
        }
    };
    Session s(tiny_model(), f32_options());
    s.set_evictor(&ev);
    s.prefill(tokens);
    for (int i = 0; i < 7; ++i) s.decode(i + 1);
    EXPECT_EQ(decode_calls, 2 * 2);  // steps 3 and 6, two layers each
    EXPECT_EQ(s.kv_cache().size(0, 0), 8 + 1);  // compressed to 8 at step 6, then step 7 appended
    EXPECT_EQ(s.kv_cache().positions(0, 0)[8], 26);
}

// An all-layer policy: every layer of a step is observed (with its window scores) before the
// hook of any layer runs, the hooks come in layer order without window scores, and the cache
// ends as a per-layer policy making the same decisions leaves it.
class AllLayersEvictor : public SinkRecentEvictor {
public:
    AllLayersEvictor(ObservationRequest r) : SinkRecentEvictor(2, 6, 1, r) {}
    void observe(const LayerView& view) override {
        events.push_back("o" + std::to_string(view.layer));
        observed_window.push_back(view.heads[0].window_scores != nullptr);
    }
    std::vector<std::string> events;
    std::vector<bool> observed_window;
};

TEST(Session, AllLayerPoliciesSeeEveryLayerBeforeAnyCompression) {
    const auto tokens = some_tokens(40);
    ObservationRequest req;
    req.window = 4;
    req.window_scope = WindowScope::Prompt;
    req.all_layers = true;
    AllLayersEvictor ev(req);
    ev.inspect = [&](const LayerView& v) {
        ev.events.push_back("h" + std::to_string(v.layer));
        EXPECT_EQ(v.heads[0].window_scores, nullptr);
        EXPECT_EQ(v.heads[0].n_entries, 40);  // no layer is compacted before every hook ran
    };
    SessionOptions o = f32_options();
    o.n_batch = 64;
    Session s(tiny_model(), o);
    s.set_evictor(&ev);
    const float a = s.prefill(tokens)[3];
    const int L = tiny_model().config().n_layer;
    std::vector<std::string> want;
    for (int l = 0; l < L; ++l) want.push_back("o" + std::to_string(l));
    for (int l = 0; l < L; ++l) want.push_back("h" + std::to_string(l));
    EXPECT_EQ(ev.events, want);
    for (bool w : ev.observed_window) EXPECT_TRUE(w);
    // The same decisions, layer by layer.
    req.all_layers = false;
    SinkRecentEvictor per_layer(2, 6, 1, req);
    Session t(tiny_model(), o);
    t.set_evictor(&per_layer);
    EXPECT_EQ(t.prefill(tokens)[3], a);
    for (int l = 0; l < L; ++l) {
        for (int h = 0; h < tiny_model().config().n_head_kv; ++h) {
            ASSERT_EQ(s.kv_cache().size(l, h), t.kv_cache().size(l, h));
            EXPECT_TRUE(std::equal(s.kv_cache().positions(l, h), s.kv_cache().positions(l, h) + s.kv_cache().size(l, h),
                                   t.kv_cache().positions(l, h)));
        }
    }
    EXPECT_EQ(s.decode(9)[5], t.decode(9)[5]);
    // With context reconstruction: every layer is observed after the reconstruction pass (its
    // scores in the view), then every hook runs.
    ObservationRequest both;
    both.reconstruct_chunk = 16;
    both.all_layers = true;
    AllLayersEvictor recon(both);
    bool scored = true;
    recon.inspect = [&](const LayerView& v) {
        recon.events.push_back("h" + std::to_string(v.layer));
        scored = scored && v.heads[0].reconstruction != nullptr;
    };
    Session u(tiny_model(), o);
    u.set_evictor(&recon);
    u.prefill(tokens);
    EXPECT_EQ(recon.events, want);
    EXPECT_TRUE(scored);
}

class BadEvictor : public Evictor {
public:
    ObservationRequest request() const override { return {}; }
    bool on_prefill(const LayerView&, KeepLists& keep) override {
        keep[0] = {3, 1};
        return true;
    }
};

TEST(Session, RejectsBadKeepListsAndLateAttachment) {
    BadEvictor bad;
    Session s(tiny_model(), f32_options());
    s.set_evictor(&bad);
    EXPECT_THROW(s.prefill(some_tokens(8)), Error);
    Session t(tiny_model(), f32_options());
    t.prefill(some_tokens(4));
    EXPECT_THROW(t.set_evictor(&bad), Error);
}

// Context reconstruction (KVzip's engine mechanism): the hook waits for the reconstruction pass,
// is called once per layer with scores of every prompt entry, and afterwards the session is
// exactly where the prompt left it (logits, position, the entries the policy kept).
TEST(Session, ContextReconstructionDefersTheHook) {
    const auto tokens = some_tokens(40);
    ObservationRequest req;
    req.reconstruct_chunk = 16;  // chunks [0, 16), [16, 32), [32, 40)
    req.reconstruct_sinks = 2;
    req.values = true;
    SinkRecentEvictor ev(2, 10, 0, req);
    int scored_calls = 0, plain_calls = 0;
    ev.inspect = [&](const LayerView& v) {
        if (v.heads[0].reconstruction == nullptr) {
            ++plain_calls;
            return;
        }
        ++scored_calls;
        EXPECT_TRUE(v.final_chunk);
        EXPECT_EQ(v.n_past, 40);
        EXPECT_EQ(v.chunk_end, 40);
        for (int h = 0; h < v.n_head_kv; ++h) {
            const KvHeadView& hv = v.heads[static_cast<size_t>(h)];
            ASSERT_EQ(hv.n_entries, 40);  // the reconstruction's entries are gone
            EXPECT_EQ(hv.positions[39], 39);
            ASSERT_NE(hv.reconstruction, nullptr);
            ASSERT_NE(hv.values, nullptr);
            for (int g = 0; g < v.group; ++g) {
                for (int32_t j = 0; j < 40; ++j) {
                    const float r = hv.reconstruction[g * 40 + j];
                    EXPECT_GT(r, 0.0f) << j;  // every entry is seen by its chunk's queries
                    EXPECT_LE(r, 1.0f + 1e-6f) << j;
                }
            }
        }
    };
    Session s(tiny_model(), f32_options(16));
    s.set_evictor(&ev);
    std::vector<float> first;
    {
        const auto l = s.prefill(tokens);
        first.assign(l.begin(), l.end());
    }
    EXPECT_EQ(scored_calls, 2);  // once per layer, after the pass, and not at the prompt's chunks
    EXPECT_EQ(plain_calls, 0);
    EXPECT_GT(s.eviction_stats().reconstruct_seconds, 0.0);
    EXPECT_EQ(s.n_past(), 40);
    EXPECT_EQ(s.kv_cache().size(1, 1), 12);
    const RepeatPrompts rp = repeat_prompts(tiny_model().file());
    EXPECT_FALSE(rp.first.empty());
    const size_t longest = std::max(rp.first.size(), rp.later.size() + rp.overlap) + rp.suffix.size() + 16;
    EXPECT_LE(s.kv_cache().peak_bytes(), (40 + longest) * 2 * 2 * s.kv_cache().entry_bytes());
    // The same as without a reconstruction: the prompt's logits (no evictor, same chunks), and
    // decoding from the same entries (the evictor once after a one-chunk prompt).
    Session none(tiny_model(), f32_options(16));
    EXPECT_EQ(max_abs_diff(first, none.prefill(tokens)), 0.0f);
    SinkRecentEvictor plain_ev(2, 10);
    Session plain(tiny_model(), f32_options(64));
    plain.set_evictor(&plain_ev);
    plain.prefill(tokens);
    std::vector<float> d1;
    {
        const auto l = s.decode(7);
        d1.assign(l.begin(), l.end());
    }
    EXPECT_LT(max_abs_diff(d1, plain.decode(7)), 1e-4f);
    // Text appended by a later prefill is not reconstructed: the hook runs at its chunks as usual.
    s.prefill(some_tokens(5, 2));
    EXPECT_EQ(scored_calls, 2);
    EXPECT_EQ(plain_calls, 2);
}

TEST(Session, ReconstructionRejectsWindowAndDecodeRequests) {
    ObservationRequest req;
    req.reconstruct_chunk = 16;
    req.window = 4;
    SinkRecentEvictor a(2, 10, 0, req);
    Session s(tiny_model(), f32_options());
    EXPECT_THROW(s.set_evictor(&a), Error);
    req.window = 0;
    req.decode_interval = 1;
    SinkRecentEvictor b(2, 10, 0, req);
    EXPECT_THROW(s.set_evictor(&b), Error);
}

// The recent queries before RoPE: the last m of the prompt, oldest first, and independent of the
// positions (layer 0's queries only depend on the tokens; after RoPE they would not be).
TEST(Session, RecentQueriesAreTakenBeforeRope) {
    const auto tokens = some_tokens(20);
    ObservationRequest req;
    req.queries = 6;
    std::vector<std::vector<float>> seen;
    std::vector<std::vector<int32_t>> seen_pos;
    SinkRecentEvictor ev(1000, 0, 0, req);
    ev.inspect = [&](const LayerView& v) {
        if (v.layer != 0 || !v.final_chunk) return;
        seen.emplace_back(v.queries.begin(), v.queries.end());
        seen_pos.emplace_back(v.query_positions.begin(), v.query_positions.end());
    };
    for (int32_t shift : {0, 100}) {
        Session s(tiny_model(), f32_options(8));
        s.set_evictor(&ev);
        std::vector<int32_t> pos(20);
        std::iota(pos.begin(), pos.end(), shift);
        s.prefill_at(tokens, pos);
    }
    ASSERT_EQ(seen.size(), 2u);
    const ModelConfig& c = tiny_model().config();
    EXPECT_EQ(seen[0].size(), static_cast<size_t>(6 * c.q_dim()));
    EXPECT_EQ(seen_pos[0], (std::vector<int32_t>{14, 15, 16, 17, 18, 19}));
    EXPECT_EQ(seen_pos[1], (std::vector<int32_t>{114, 115, 116, 117, 118, 119}));
    EXPECT_EQ(seen[0], seen[1]);
}

}  // namespace
}  // namespace kvec
