// Re-positioning of kept entries (StreamingLLM's re-rotation), the prompt-wide observation window
// (WindowScope::Prompt) and the session's eviction statistics:
//   - rerotate_keys(RoPE(k, old), old -> new) == RoPE(k, new) for every RoPE variant;
//   - in a real forward pass, layer-0 keys (which depend on the token only) re-rotated to new
//     positions equal the keys a fresh session computes for that token at that position;
//   - positions, token ids and n_past follow the re-positioning, also across prefill chunks;
//   - a policy that re-positions only some layers is an error;
//   - WindowScope::Prompt gives the same window scores whatever the chunking;
//   - EvictionStats counts calls, compressions and evicted entries.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/model.h"
#include "model/session.h"
#include "tensor/ops.h"
#include "test_helpers.h"
#include "util/error.h"

namespace kvec {
namespace {

using namespace testing_helpers;

std::vector<int32_t> some_tokens(int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 53 + 17) % 512;
    return t;
}


TEST(Rerotate, EqualsRopeAtTheNewPosition) {
    const int D = 16, n = 12;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const std::vector<float> factors = {1.0f, 1.5f, 2.0f, 4.0f, 8.0f, 8.0f, 1.0f, 3.0f};  // [n_rot / 2]
    int cases = 0;
    for (ops::RopeMode mode : {ops::RopeMode::Norm, ops::RopeMode::Neox}) {
        for (int n_rot : {D, D / 2}) {
            for (float scale : {1.0f, 0.25f}) {
                for (bool with_factors : {false, true}) {
                    if (with_factors && n_rot != D) continue;
                    ops::RopeParams rope;
                    rope.mode = mode;
                    rope.n_rot = n_rot;
                    rope.freq_base = 10000.0f;
                    rope.freq_scale = scale;
                    rope.freq_factors = with_factors ? factors.data() : nullptr;
                    std::vector<float> raw(static_cast<size_t>(n) * D);  // [n, D] un-rotated keys
                    for (auto& x : raw) x = normal(rng);
                    // Old positions spread up to ~5000; new ones contiguous with two runs of equal
                    // shifts and one unchanged entry (position 0 -> 0).
                    const std::vector<int32_t> from = {0, 1, 2, 3, 40, 41, 42, 900, 2500, 2501, 4000, 5003};
                    const std::vector<int32_t> to = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
                    std::vector<float> moved = raw;  // RoPE at `from`, then re-rotated
                    ops::rope(moved.data(), n, 1, D, from.data(), rope);
                    const std::vector<float> at_old = moved;
                    rerotate_keys(moved.data(), n, D, from.data(), to.data(), rope);
                    std::vector<float> direct = raw;  // RoPE at `to`
                    ops::rope(direct.data(), n, 1, D, to.data(), rope);
                    for (int i = 0; i < n; ++i) {
                        for (int j = 0; j < D; ++j) {
                            const size_t k = static_cast<size_t>(i) * D + j;
                            ASSERT_NEAR(moved[k], direct[k], 2e-5f)
                                << "mode " << static_cast<int>(mode) << " n_rot " << n_rot << " scale " << scale
                                << " factors " << with_factors << " entry " << i << " dim " << j;
                            if (j >= n_rot) {
                                EXPECT_EQ(moved[k], raw[k]);  // not rotated at all
                            }
                        }
                    }
                    for (int i = 0; i < 4; ++i) {  // zero shift: bit for bit untouched
                        for (int j = 0; j < D; ++j) {
                            const size_t k = static_cast<size_t>(i) * D + j;
                            EXPECT_EQ(moved[k], at_old[k]);
                        }
                    }
                    // Moving back restores the keys at their old positions.
                    rerotate_keys(moved.data(), n, D, to.data(), from.data(), rope);
                    for (size_t k = 0; k < moved.size(); ++k) ASSERT_NEAR(moved[k], at_old[k], 4e-5f);
                    ++cases;
                }
            }
        }
    }
    EXPECT_EQ(cases, 12);
}

// Keeps sinks + recent (all heads alike) and moves what it keeps to positions 0 .. k-1.
class RerotatingEvictor : public Evictor {
public:
    RerotatingEvictor(int n_sink, int n_recent, int decode_interval = 0)
        : inner_(n_sink, n_recent, 0, ObservationRequest{0, false, false, decode_interval}) {}
    ObservationRequest request() const override { return inner_.request(); }
    bool on_prefill(const LayerView& v, KeepLists& keep) override { return inner_.on_prefill(v, keep); }
    bool on_decode(const LayerView& v, KeepLists& keep) override { return inner_.on_decode(v, keep); }
    bool reposition(const LayerView& v, const KeepLists& keep, Repositioning& out) override {
        if (only_layer >= 0 && v.layer != only_layer) return false;
        out.positions.assign(keep.size(), {});
        for (size_t h = 0; h < keep.size(); ++h) {
            for (size_t i = 0; i < keep[h].size(); ++i) out.positions[h].push_back(static_cast<int32_t>(i) + offset);
        }
        out.next_position = static_cast<int32_t>(keep[0].size()) + offset + (v.layer == 1 ? next_skew : 0);
        return true;
    }
    int only_layer = -1;  // >= 0: re-position that layer only (an error)
    int next_skew = 0;    // != 0: layer 1 names another next position (an error)
    int offset = 0;

private:
    SinkRecentEvictor inner_;
};

// The layer-0 key of `token` at `position` from a fresh session: [n_head_kv][head_dim].
std::vector<std::vector<float>> layer0_key(const Model& m, int32_t token, int32_t position) {
    Session s(m, f32_options());
    const std::vector<int32_t> t = {token}, p = {position};
    s.prefill_at(t, p);
    std::vector<std::vector<float>> out;
    for (int h = 0; h < m.config().n_head_kv; ++h) {
        out.emplace_back(static_cast<size_t>(m.config().head_dim));
        s.kv_cache().read_keys(0, h, 0, 1, out.back().data());
    }
    return out;
}

TEST(Reposition, KeysEqualAFreshComputationAtTheNewPosition) {
    std::vector<RandomModelSpec> specs = {tiny_spec("llama"), tiny_spec("qwen2")};  // NORM, NEOX + biases
    specs.push_back(tiny_spec("llama"));
    specs.back().rope_scaling = "llama3";  // frequency factors
    specs.back().rope_factor = 8.0f;
    specs.back().rope_base = 500000.0f;
    specs.push_back(tiny_spec("llama"));
    specs.back().rope_scaling = "linear";
    specs.back().rope_factor = 4.0f;
    int i = 0;
    for (const RandomModelSpec& spec : specs) {
        SCOPED_TRACE(spec.arch + " " + spec.rope_scaling);
        const auto m = Model::load(write_model(spec, "reposition-" + std::to_string(i++) + ".gguf"));
        const auto tokens = some_tokens(40);
        RerotatingEvictor ev(4, 8);
        Session s(*m, f32_options());
        s.set_evictor(&ev);
        s.prefill(tokens);
        EXPECT_EQ(s.n_past(), 12);
        EXPECT_EQ(s.eviction_stats().repositioned, 1);
        ASSERT_EQ(s.tokens().size(), 12u);
        for (int32_t p = 0; p < 12; ++p) {
            const int32_t old = p < 4 ? p : 40 - 8 + (p - 4);
            EXPECT_EQ(s.tokens()[static_cast<size_t>(p)], tokens[static_cast<size_t>(old)]) << p;
            for (int l = 0; l < 2; ++l)
                for (int h = 0; h < 2; ++h) ASSERT_EQ(s.kv_cache().positions(l, h)[p], p);
            if (p < 4) continue;  // sinks did not move
            const auto fresh = layer0_key(*m, tokens[static_cast<size_t>(old)], p);
            for (int h = 0; h < 2; ++h) {
                std::vector<float> k(static_cast<size_t>(m->config().head_dim));
                s.kv_cache().read_keys(0, h, p, p + 1, k.data());
                for (size_t j = 0; j < k.size(); ++j) ASSERT_NEAR(k[j], fresh[static_cast<size_t>(h)][j], 2e-5f) << "entry " << p;
            }
        }
        // Decoding continues right after the kept entries.
        s.decode(7);
        EXPECT_EQ(s.n_past(), 13);
        EXPECT_EQ(s.kv_cache().positions(1, 1)[12], 12);
    }
}

TEST(Reposition, ChunkedPrefillShiftsLaterChunks) {
    const auto m = Model::load(write_model(tiny_spec(), "reposition-chunked.gguf"));
    const auto tokens = some_tokens(48);
    RerotatingEvictor ev(2, 6);  // 8 kept after every chunk of 16
    Session s(*m, f32_options(16));
    s.set_evictor(&ev);
    s.prefill(tokens);
    // Chunk 1 -> 8 entries at 0..7; chunk 2 appended at 8..23 -> 8; chunk 3 at 8..23 -> 8.
    EXPECT_EQ(s.n_past(), 8);
    EXPECT_EQ(s.eviction_stats().repositioned, 3);
    EXPECT_EQ(s.n_prompt(), 48);
    for (int32_t p = 0; p < 8; ++p) EXPECT_EQ(s.kv_cache().positions(1, 0)[p], p);
    const std::vector<int32_t> want = {tokens[0], tokens[1], tokens[42], tokens[43], tokens[44],
                                       tokens[45], tokens[46], tokens[47]};
    EXPECT_EQ(s.tokens(), want);
    s.decode(3);
    EXPECT_EQ(s.kv_cache().positions(0, 1)[8], 8);
}

TEST(Reposition, DecodeTimeRerotationKeepsPositionsBounded) {
    const auto m = Model::load(write_model(tiny_spec(), "reposition-decode.gguf"));
    RerotatingEvictor ev(2, 6, /*decode_interval=*/1);
    SessionOptions o = f32_options();
    o.n_ctx = 24;  // far fewer positions than the tokens processed
    Session s(*m, o);
    s.set_evictor(&ev);
    s.prefill(some_tokens(20));
    for (int i = 0; i < 40; ++i) {
        s.decode(i % 500);
        EXPECT_EQ(s.n_past(), 8);
        EXPECT_EQ(s.kv_cache().size(1, 1), 8);
    }
}

TEST(Reposition, AllLayersOrNone) {
    const auto m = Model::load(write_model(tiny_spec(), "reposition-errors.gguf"));
    {
        RerotatingEvictor ev(2, 6);
        ev.only_layer = 1;
        Session s(*m, f32_options());
        s.set_evictor(&ev);
        EXPECT_THROW(s.prefill(some_tokens(20)), Error);
    }
    {
        RerotatingEvictor ev(2, 6);
        ev.only_layer = 0;
        Session s(*m, f32_options());
        s.set_evictor(&ev);
        EXPECT_THROW(s.prefill(some_tokens(20)), Error);
    }
    {
        RerotatingEvictor ev(2, 6);
        ev.next_skew = 1;
        Session s(*m, f32_options());
        s.set_evictor(&ev);
        EXPECT_THROW(s.prefill(some_tokens(20)), Error);
    }
    {
        RerotatingEvictor ev(2, 6);
        ev.offset = 30;  // positions are checked: 30 .. 37 is fine, no overlap
        Session s(*m, f32_options());
        s.set_evictor(&ev);
        s.prefill(some_tokens(20));
        EXPECT_EQ(s.n_past(), 38);
        EXPECT_EQ(s.tokens()[0], -1);
    }
}

// Records the window scores of the final prefill call of each layer.
class WindowRecorder : public Evictor {
public:
    explicit WindowRecorder(WindowScope scope) {
        request_.window = 8;
        request_.window_scope = scope;
    }
    ObservationRequest request() const override { return request_; }
    bool on_prefill(const LayerView& v, KeepLists&) override {
        ++calls;
        if (!v.final_chunk) {
            if (v.heads[0].window_scores != nullptr) ++early_windows;
            return false;
        }
        n_window.push_back(v.n_window);
        std::vector<float> w;
        for (int h = 0; h < v.n_head_kv; ++h) {
            const KvHeadView& hv = v.heads[static_cast<size_t>(h)];
            if (hv.window_scores == nullptr) return false;
            w.insert(w.end(), hv.window_scores, hv.window_scores + int64_t{v.group} * hv.n_entries);
        }
        windows.push_back(w);
        return false;
    }
    ObservationRequest request_;
    int calls = 0, early_windows = 0;
    std::vector<int32_t> n_window;
    std::vector<std::vector<float>> windows;  // [layer][n_head_kv * group * n]
};

TEST(WindowScope, PromptWindowDoesNotDependOnTheChunking) {
    const auto m = Model::load(write_model(tiny_spec(), "window-scope.gguf"));
    const auto tokens = some_tokens(36);
    WindowRecorder whole(WindowScope::Prompt);
    Session a(*m, f32_options());
    a.set_evictor(&whole);
    a.prefill(tokens);
    ASSERT_EQ(whole.windows.size(), 2u);
    EXPECT_EQ(whole.n_window, (std::vector<int32_t>{8, 8}));
    for (int32_t chunk : {16, 5, 1}) {  // final chunks of 4, 1 and 1 queries
        SCOPED_TRACE(chunk);
        WindowRecorder split(WindowScope::Prompt);
        Session b(*m, f32_options(chunk));
        b.set_evictor(&split);
        b.prefill(tokens);
        EXPECT_EQ(split.early_windows, 0);  // nothing computed before the final chunk
        ASSERT_EQ(split.windows.size(), 2u);
        EXPECT_EQ(split.n_window, (std::vector<int32_t>{8, 8}));
        for (size_t l = 0; l < 2; ++l) {
            ASSERT_EQ(split.windows[l].size(), whole.windows[l].size());
            for (size_t i = 0; i < split.windows[l].size(); ++i)
                ASSERT_NEAR(split.windows[l][i], whole.windows[l][i], 2e-6f) << "layer " << l << " i " << i;
        }
    }
    // Chunk scope: the final chunk's own queries only (4 of them here), so the rows differ.
    WindowRecorder own(WindowScope::Chunk);
    Session c(*m, f32_options(16));
    c.set_evictor(&own);
    c.prefill(tokens);
    EXPECT_EQ(own.n_window, (std::vector<int32_t>{4, 4}));
    EXPECT_EQ(own.early_windows, 4);  // chunks 1 and 2, both layers
}

TEST(EvictionStats, CountsCallsCompressionsAndEvictedEntries) {
    const auto m = Model::load(write_model(tiny_spec(), "eviction-stats.gguf"));
    SinkRecentEvictor ev(4, 8, /*head_skew=*/2, ObservationRequest{0, false, false, 2});
    Session s(*m, f32_options(10));
    s.set_evictor(&ev);
    s.prefill(some_tokens(30));  // 3 chunks x 2 layers
    const EvictionStats& st = s.eviction_stats();
    EXPECT_EQ(st.calls, 6);
    EXPECT_EQ(st.compressions, 6);
    // Heads keep 12 and 14 entries. Chunk 1: 10 entries, nothing dropped; chunk 2: 20 -> 12 / 14;
    // chunk 3: 22 / 24 -> 12 / 14. Per layer (8 + 6) + (10 + 10) = 34.
    EXPECT_EQ(st.evicted, 2 * 34);
    EXPECT_EQ(st.evicted, 2 * 2 * 30 - s.kv_cache().total_entries());
    EXPECT_GE(st.policy_seconds, 0.0);
    EXPECT_GE(st.compact_seconds, 0.0);
    EXPECT_EQ(st.repositioned, 0);
    s.decode(1);  // step 1: no call
    s.decode(2);  // step 2: a call per layer; 14 / 16 entries -> 12 / 14
    EXPECT_EQ(st.calls, 8);
    EXPECT_EQ(st.evicted, 2 * 34 + 2 * 4);
    s.reset();
    EXPECT_EQ(s.eviction_stats().calls, 0);
    EXPECT_EQ(s.eviction_stats().evicted, 0);
}

}  // namespace
}  // namespace kvec
