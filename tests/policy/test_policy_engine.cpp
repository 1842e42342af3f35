// Every policy inside the real forward pass (a tiny random model): the cache ends at exactly the
// budget (L x H_kv x B entries), decode-time eviction holds it there, chunked prefill lowers the
// peak, K-VEC(gamma = mu = 0) keeps the same entries as Ada-SnapKV, and K-VEC's coverage is never
// below Ada-SnapKV's on the same model and prompt.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "model/model.h"
#include "model/random_model.h"
#include "model/session.h"
#include "policy/coverage_probe.h"
#include "policy/focus.h"
#include "policy/head_importance.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {
namespace {

constexpr int kLayers = 3;
constexpr int kHeadsKv = 2;
constexpr int32_t kPrompt = 200;

const Model& tiny_model() {
    static std::unique_ptr<Model> model = [] {
        RandomModelSpec spec;
        spec.n_layer = kLayers;
        spec.n_embd = 64;
        spec.n_head = 4;
        spec.n_head_kv = kHeadsKv;
        spec.n_ff = 128;
        spec.n_vocab = 300;
        spec.n_ctx = 1024;
        spec.vocab_from = "none";
        spec.seed = 3;
        const auto path = std::filesystem::path(::testing::TempDir()) /
                          ("kvec-policy-" + std::to_string(::getpid()) + ".gguf");
        write_random_model(spec, path.string());
        auto m = Model::load(path.string());
        std::filesystem::remove(path);
        return m;
    }();
    return *model;
}

std::vector<int32_t> prompt_tokens() {
    std::mt19937 rng(17);
    std::vector<int32_t> t(kPrompt);                         // [N]
    for (auto& x : t) x = static_cast<int32_t>(rng() % 40);  // few ids: many repeated tokens
    return t;
}

SessionOptions session_options() {
    SessionOptions o;
    o.n_ctx = 512;
    o.n_batch = 64;  // the prompt runs as 5 chunks
    o.kv_type_k = o.kv_type_v = KvType::F32;
    return o;
}

// Positions kept per (layer, head) after a prefill with `spec`.
// A head importance file for the tiny model (headkv's scores=FILE): uneven scores.
const std::string& importance_file() {
    static const std::string path = [] {
        HeadImportance h;
        h.model = "tiny";
        h.scores = {{0.1, 0.5}, {0.9, 0.0}, {0.3, 0.2}};  // [kLayers][kHeadsKv]
        const auto p = (std::filesystem::path(::testing::TempDir()) /
                        ("kvec-importance-" + std::to_string(::getpid()) + ".json")).string();
        write_head_importance(h, p);
        return p;
    }();
    return path;
}

// The spec of a registered policy with `options`, plus what it cannot run without (headkv's scores).
std::string spec_of(const std::string& name, const std::string& options) {
    const std::string extra = name == "headkv" ? "scores=" + importance_file() : "";
    if (options.empty() && extra.empty()) return name;
    return name + ":" + options + (options.empty() || extra.empty() ? "" : ",") + extra;
}

std::vector<std::vector<int32_t>> kept_positions(Session& s) {
    std::vector<std::vector<int32_t>> out;
    for (int l = 0; l < kLayers; ++l) {
        for (int h = 0; h < kHeadsKv; ++h) {
            const int32_t* p = s.kv_cache().positions(l, h);
            out.emplace_back(p, p + s.kv_cache().size(l, h));
        }
    }
    return out;
}

TEST(PolicyEngine, EveryPolicyMeetsTheBudgetExactly) {
    const auto prompt = prompt_tokens();
    for (const PolicyEntry& entry : policies()) {
        const bool full = entry.name == "full";
        const std::string spec = full ? "full"
                                 : entry.name == "streaming" || entry.name == "tova"
                                     ? spec_of(entry.name, "budget=48")
                                     : spec_of(entry.name, "budget=48,window=8");
        auto policy = make_policy(spec);
        Session s(tiny_model(), session_options());
        s.set_evictor(policy.get());
        s.prefill(prompt);
        const int64_t want = int64_t{kLayers} * kHeadsKv * (full ? kPrompt : 48);
        EXPECT_EQ(s.kv_cache().total_entries(), want) << spec;
        for (int i = 0; i < 3; ++i) s.decode(5);  // no decode-time eviction by default
        EXPECT_EQ(s.kv_cache().total_entries(), want + 3 * kLayers * kHeadsKv) << spec;
    }
}

// K-VEC with one pool for every layer: layers keep different counts, the total is exactly
// L x H x B; chunked and decode-time modes hold it too.
TEST(PolicyEngine, KvecGlobalPoolMeetsTheTotalBudget) {
    const auto prompt = prompt_tokens();
    for (const char* spec : {"kvec:budget=48,window=8,layers=global", "kvec:budget=48,window=8,layers=global,gamma=0",
                             "kvec:budget=48,window=8,layers=global,unit=token,weight=idf"}) {
        auto policy = make_policy(spec);
        Session s(tiny_model(), session_options());
        s.set_evictor(policy.get());
        s.prefill(prompt);
        EXPECT_EQ(s.kv_cache().total_entries(), int64_t{kLayers} * kHeadsKv * 48) << spec;
    }
    auto chunked = make_policy("kvec:budget=48,window=8,layers=global,chunked=true,decode=2");
    SessionOptions o = session_options();
    o.n_batch = 32;
    Session s(tiny_model(), o);
    s.set_evictor(chunked.get());
    s.prefill(prompt);
    EXPECT_EQ(s.kv_cache().total_entries(), int64_t{kLayers} * kHeadsKv * 48);
    for (int i = 0; i < 4; ++i) s.decode(5);
    EXPECT_EQ(s.kv_cache().total_entries(), int64_t{kLayers} * kHeadsKv * 48);  // re-selected at step 4
}

TEST(PolicyEngine, DecodeTimeEvictionHoldsTheBudget) {
    const auto prompt = prompt_tokens();
    for (const char* spec : {"h2o:budget=48,window=8,decode=1", "tova:budget=48,decode=1",
                             "snapkv:budget=48,window=8,decode=1",
                             "kvec:budget=48,window=8,decode=2", "streaming:budget=48,decode=1"}) {
        auto policy = make_policy(spec);
        Session s(tiny_model(), session_options());
        s.set_evictor(policy.get());
        s.prefill(prompt);
        for (int i = 0; i < 6; ++i) {
            s.decode(7);
            EXPECT_LE(s.kv_cache().total_entries(), int64_t{kLayers} * kHeadsKv * (48 + 1)) << spec;
        }
        EXPECT_EQ(s.kv_cache().total_entries(), int64_t{kLayers} * kHeadsKv * 48) << spec;
    }
}

TEST(PolicyEngine, ChunkedPrefillLowersThePeak) {
    const auto prompt = prompt_tokens();
    size_t peak[2] = {0, 0};
    for (int chunked = 0; chunked < 2; ++chunked) {
        auto policy = make_policy(std::string("snapkv:budget=48,window=8,chunked=") +
                                  (chunked ? "true" : "false"));
        Session s(tiny_model(), session_options());
        s.set_evictor(policy.get());
        s.prefill(prompt);
        EXPECT_EQ(s.kv_cache().total_entries(), int64_t{kLayers} * kHeadsKv * 48);
        peak[chunked] = s.kv_cache().peak_bytes();
    }
    EXPECT_LT(peak[1], peak[0]);
}

TEST(PolicyEngine, ChunkedPeakStaysWithinBudgetPlusChunkForEveryPolicy) {
    const auto prompt = prompt_tokens();
    const int64_t budget = 48, chunk = session_options().n_batch;
    const int64_t heads = int64_t{kLayers} * kHeadsKv;
    for (const PolicyEntry& entry : policies()) {
        if (entry.name == "full" || entry.name == "kvzip" || entry.name == "gemfilter") continue;  // one-shot only
        const bool fixed_window = entry.name == "streaming" || entry.name == "tova";
        std::vector<std::string> specs = {spec_of(entry.name, std::string("budget=48,chunked=true") + (fixed_window ? "" : ",window=8"))};
        if (entry.name == "streaming") specs.push_back("streaming:budget=48,chunked=true,rerotate=true");
        for (const std::string& spec : specs) {
            auto policy = make_policy(spec);
            Session s(tiny_model(), session_options());
            s.set_evictor(policy.get());
            s.prefill(prompt);  // 200 tokens in chunks of 64
            EXPECT_EQ(s.kv_cache().total_entries(), heads * budget) << spec;
            const size_t bound = static_cast<size_t>(heads * (budget + chunk)) * s.kv_cache().entry_bytes();
            EXPECT_LE(s.kv_cache().peak_bytes(), bound) << spec;
            // Only the layer being processed holds a chunk: L x H_kv x B + H_kv x C at most, for
            // policies whose layers share B alike (PyramidKV's shares move between early rounds)
            // (and Ada-PyramidKV) and compress each layer before the next runs (not all-layer policies: every layer
            // holds its chunk until the step's last layer).
            if (entry.name.find("pyramidkv") == std::string::npos && !policy->request().all_layers) {
                EXPECT_LE(s.kv_cache().peak_bytes(),
                          static_cast<size_t>(heads * budget + kHeadsKv * chunk) * s.kv_cache().entry_bytes())
                    << spec;
            }
            RecordProperty("peak_over_bound_" + entry.name,
                           std::to_string(static_cast<double>(s.kv_cache().peak_bytes()) / static_cast<double>(bound)));
        }
    }
}

TEST(PolicyEngine, KvecWithZeroCoefficientsKeepsWhatAdaSnapKvKeeps) {
    const auto prompt = prompt_tokens();
    for (const char* normalize : {"false", "true"}) {
        const std::string common = std::string("budget=40,window=8,normalize=") + normalize;
        std::vector<std::vector<int32_t>> kept[2];
        int i = 0;
        for (const std::string& spec : {"ada-snapkv:" + common, "kvec:layers=local,gamma=0,mu=0," + common}) {
            auto policy = make_policy(spec);
            Session s(tiny_model(), session_options());
            s.set_evictor(policy.get());
            s.prefill(prompt);
            kept[i++] = kept_positions(s);
        }
        EXPECT_EQ(kept[0], kept[1]) << normalize;
    }
}

TEST(PolicyEngine, KvecCoverageIsNeverBelowAdaSnapKv) {
    const auto prompt = prompt_tokens();
    for (const char* unit : {"position", "token"}) {
        CoverageReport report[2];
        int i = 0;
        for (const std::string& spec : {std::string("ada-snapkv:budget=40,window=8,normalize=true"),
                                        std::string("kvec:budget=40,window=8,layers=local,gamma=1,mu=1,normalize=true,unit=") + unit}) {
            auto policy = make_policy(spec);
            CoverageProbe probe(*policy, 8);
            Session s(tiny_model(), session_options());
            s.set_evictor(&probe);
            s.prefill(prompt);
            report[i++] = probe.report();
        }
        const bool tokens = std::string(unit) == "token";
        const auto& ada = tokens ? report[0].tokens : report[0].positions;
        const auto& kv = tokens ? report[1].tokens : report[1].positions;
        ASSERT_EQ(ada.size(), static_cast<size_t>(kLayers));
        ASSERT_EQ(kv.size(), static_cast<size_t>(kLayers));
        for (int l = 0; l < kLayers; ++l) {
            EXPECT_GE(kv[static_cast<size_t>(l)].union_units,
                      ada[static_cast<size_t>(l)].union_units)
                << unit << " layer " << l;
        }
        EXPECT_GT(report[1].mean_c_head(tokens), report[0].mean_c_head(tokens)) << unit;
        RecordProperty(std::string("c_head_ada_") + unit,
                       std::to_string(report[0].mean_c_head(tokens)));
        RecordProperty(std::string("c_head_kvec_") + unit,
                       std::to_string(report[1].mean_c_head(tokens)));
    }
}

// Compares, at the prompt's end, the engine's window rows (the last w queries, Prompt scope) with
// query_window_rows over the same w queries, which rotates the pre-RoPE queries itself.
class WindowRowsProbe : public Evictor {
public:
    ObservationRequest request() const override {
        ObservationRequest r;
        r.window = kWindow;
        r.queries = kWindow;
        r.window_scope = WindowScope::Prompt;
        return r;
    }
    bool on_prefill(const LayerView& view, KeepLists&) override {
        if (!view.final_chunk) return false;
        for (size_t h = 0; h < view.heads.size(); ++h) {
            const std::vector<float> rows = query_window_rows(view, h, kWindow);  // [group, n]
            const KvHeadView& head = view.heads[h];
            for (int64_t i = 0; i < int64_t{view.group} * head.n_entries; ++i) {
                max_diff = std::max(max_diff, std::abs(double{rows[static_cast<size_t>(i)]} - head.window_scores[i]));
                mass += rows[static_cast<size_t>(i)];
            }
        }
        ++layers;
        return false;
    }
    static constexpr int kWindow = 8;
    double max_diff = 0.0, mass = 0.0;
    int layers = 0;
};

TEST(PolicyEngine, FocusWindowRowsEqualTheEnginesWindowRows) {
    WindowRowsProbe probe;
    Session s(tiny_model(), session_options());
    s.set_evictor(&probe);
    s.prefill(prompt_tokens());  // 5 chunks: the last holds 8 queries
    EXPECT_EQ(probe.layers, kLayers);
    EXPECT_LT(probe.max_diff, 1e-5);
    // Every query row sums to 1: mass = layers x query heads.
    EXPECT_NEAR(probe.mass, double{kLayers} * kHeadsKv * tiny_model().config().n_group(), 1e-3);
}

std::vector<std::vector<int32_t>> kept_by(const std::string& spec, bool* met_budget = nullptr, int64_t budget = 0) {
    auto policy = make_policy(spec);
    Session s(tiny_model(), session_options());
    s.set_evictor(policy.get());
    s.prefill(prompt_tokens());
    if (met_budget != nullptr) *met_budget = s.kv_cache().total_entries() == int64_t{kLayers} * kHeadsKv * budget;
    return kept_positions(s);
}

TEST(PolicyEngine, KvecFocusWithNeutralSettingsKeepsThePoolsEntries) {
    const auto pool = kept_by("kvec:budget=40,window=8");
    EXPECT_EQ(kept_by("kvec:budget=40,window=8,design=focus,focus-gamma=0"), pool);
    EXPECT_EQ(kept_by("kvec:budget=40,window=8,design=focus,focus-gamma=0,focus-window=8,focus-share=1"), pool);
    EXPECT_NE(kept_by("kvec:budget=40,window=8,design=focus,focus-gamma=3"), pool);
}

TEST(PolicyEngine, KvecFocusHoldsTheBudgetOneShotAndChunked) {
    for (const char* mode : {"false", "true"}) {
        for (const char* rank : {"low-std", "high-std", "entropy", "random"}) {
            const std::string spec = std::string("kvec:budget=40,window=8,design=focus,focus-window=24,cross=1,chunked=") +
                                     mode + ",focus-rank=" + rank;
            bool met = false;
            const auto kept = kept_by(spec, &met, 40);
            EXPECT_TRUE(met) << spec;
            EXPECT_NE(kept, kept_by(std::string("kvec:budget=40,window=8,chunked=") + mode)) << spec;
        }
    }
    EXPECT_THROW(make_policy("kvec:design=focus,layers=local"), Error);
    EXPECT_THROW(make_policy("kvec:design=focus,normalize=true"), Error);
    EXPECT_THROW(make_policy("kvec:design=focus,window=32,focus-window=16"), Error);
}

TEST(PolicyEngine, HeadKvSpreadsTheBudgetByImportance) {
    // beta = 0: every head keeps B, as SnapKV.
    const std::string scores = ",scores=" + importance_file();
    EXPECT_EQ(kept_by("headkv:budget=40,window=8,beta=0" + scores), kept_by("snapkv:budget=40,window=8"));
    // beta = 1: b = 32 per head, L x H x b = 192 places by importance 0.1 0.5 0.9 0 0.3 0.2 (sum 2):
    // 9.6, 48, 86.4, 0, 28.8, 19.2 -> 9, 48, 86, 0, 28, 19 plus the 2 largest remainders (0.8 of
    // head 4, 0.6 of head 0): 10, 48, 86, 0, 29, 19; every head + w = 8 (192 candidates each).
    bool met = false;
    const auto kept = kept_by("headkv:budget=40,window=8,beta=1" + scores, &met, 40);
    EXPECT_TRUE(met);
    const std::vector<size_t> want = {10 + 8, 48 + 8, 86 + 8, 0 + 8, 29 + 8, 19 + 8};
    ASSERT_EQ(kept.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(kept[i].size(), want[i]) << i;
    // Chunked: the budget holds too.
    kept_by("headkv:budget=40,window=8,chunked=true" + scores, &met, 40);
    EXPECT_TRUE(met);
    // Scores of another shape: a clear error when the model is seen.
    HeadImportance other;
    other.scores = {{1.0}};
    const auto path = (std::filesystem::path(::testing::TempDir()) / "kvec-importance-other.json").string();
    write_head_importance(other, path);
    auto policy = make_policy("headkv:budget=40,scores=" + path);
    Session s(tiny_model(), session_options());
    s.set_evictor(policy.get());
    EXPECT_THROW(s.prefill(prompt_tokens()), Error);
}

// Forwards to a policy and keeps the prompt positions it selects.
class SelectionSpy : public Evictor {
public:
    explicit SelectionSpy(Evictor& inner) : inner_(inner) {}
    ObservationRequest request() const override { return inner_.request(); }
    void begin_sequence(int32_t n) override { inner_.begin_sequence(n); }
    bool on_prefill(const LayerView& view, KeepLists& keep) override { return inner_.on_prefill(view, keep); }
    bool select_prompt(std::vector<int32_t>& positions) override {
        const bool selects = inner_.select_prompt(positions);
        if (selects) selected = positions;
        return selects;
    }
    std::vector<int32_t> selected;

private:
    Evictor& inner_;
};

TEST(PolicyEngine, GemFilterPrefillsItsSelectionAgain) {
    const auto prompt = prompt_tokens();
    auto policy = make_policy("gemfilter:budget=48,window=8");
    SelectionSpy spy(*policy);
    Session s(tiny_model(), session_options());
    s.set_evictor(&spy);
    const auto lg = s.prefill(prompt);
    const std::vector<float> logits(lg.begin(), lg.end());
    // B tokens, ascending, the window's last 8 among them; every layer holds them at 0 .. B - 1.
    ASSERT_EQ(spy.selected.size(), 48u);
    EXPECT_TRUE(std::is_sorted(spy.selected.begin(), spy.selected.end()));
    for (int32_t p = kPrompt - 8; p < kPrompt; ++p) {
        EXPECT_NE(std::find(spy.selected.begin(), spy.selected.end(), p), spy.selected.end()) << p;
    }
    EXPECT_EQ(s.n_past(), 48);
    EXPECT_EQ(s.kv_cache().total_entries(), int64_t{kLayers} * kHeadsKv * 48);
    for (int32_t i = 0; i < 48; ++i) EXPECT_EQ(s.kv_cache().positions(kLayers - 1, 1)[i], i);
    // The same logits as the selected tokens prefilled on their own.
    std::vector<int32_t> tokens;
    for (int32_t p : spy.selected) tokens.push_back(prompt[static_cast<size_t>(p)]);
    Session plain(tiny_model(), session_options());
    const auto lp = plain.prefill(tokens);
    EXPECT_EQ(logits, std::vector<float>(lp.begin(), lp.end()));
    // A prompt of at most B tokens is left as it is.
    s.reset();
    s.prefill(std::span<const int32_t>(prompt).first(40));
    EXPECT_EQ(s.n_past(), 40);
    EXPECT_THROW(make_policy("gemfilter:chunked=true"), Error);
    EXPECT_THROW(make_policy("gemfilter:decode=1"), Error);
    EXPECT_THROW(make_policy("gemfilter:budget=8,window=8"), Error);
}

TEST(PolicyEngine, AdaPyramidKvWithFullSafeguardKeepsWhatPyramidKvKeeps) {
    // alpha = 1: every head of a layer gets the layer's share, as PyramidKV gives it.
    for (const char* chunked : {"false", "true"}) {
        const std::string common = std::string("budget=40,window=8,chunked=") + chunked;
        EXPECT_EQ(kept_by("ada-pyramidkv:alpha=1," + common), kept_by("pyramidkv:" + common)) << chunked;
    }
    EXPECT_NE(kept_by("ada-pyramidkv:budget=40,window=8"), kept_by("pyramidkv:budget=40,window=8"));
}

}  // namespace
}  // namespace kvec::policy
