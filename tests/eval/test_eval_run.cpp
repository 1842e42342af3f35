// kvec eval's machinery on tiny random models: prefill sharing is bit-identical to attaching each
// policy, the sweep gives the same records in both modes, perplexity matches an independent
// computation from Session logits, fidelity is exact for the full cache, and the helpers
// (SHA-256, policy lists, plots) behave.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "engine/generator.h"
#include "error_of.h"
#include "eval/eval_items.h"
#include "eval/fidelity.h"
#include "eval/head_scores.h"
#include "eval/plot.h"
#include "eval/prefill_share.h"
#include "eval/report.h"
#include "util/sha256.h"
#include "eval/sweep.h"
#include "eval/synthetic.h"
#include "eval/text_source.h"
#include "model/model.h"
#include "model/session.h"
#include "policy/coverage_probe.h"
#include "policy/registry.h"
#include "test_helpers.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvec::eval {
namespace {

using testing_helpers::temp_path;
using testing_support::error_of;
using ::testing::HasSubstr;
using testing_helpers::write_model;

// A tiny model with GQA (group 2) and a 512-token vocabulary.
const Model& tiny_model() {
    static std::unique_ptr<Model> model = [] {
        RandomModelSpec s = testing_helpers::tiny_spec();
        s.n_ctx = 512;
        return Model::load(write_model(s, "eval-tiny.gguf"));
    }();
    return *model;
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t vocab) {
    std::vector<int32_t> t(n);
    uint32_t x = seed;
    for (auto& v : t) {
        x = x * 1664525u + 1013904223u;
        v = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab - 3)) + 3;
    }
    t[0] = 1;  // BOS
    return t;
}

EvalItem item_with(std::vector<int32_t> prompt, int max_new) {
    EvalItem item;
    item.id = "x";
    item.task = "niah_single";
    item.metric = "string_match_all";
    item.references = {"123"};
    item.prompt = std::move(prompt);
    item.max_new_tokens = max_new;
    item.end_tokens = {-5};  // nothing ends generation early: every step is compared
    return item;
}

TEST(Sha256, KnownVectors) {
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    Sha256 h;  // one million 'a', fed in pieces that straddle the 64-byte blocks
    const std::string piece(1000, 'a');
    for (int i = 0; i < 1000; ++i) h.update(piece);
    EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    const std::string path = temp_path("hash.txt");
    std::ofstream(path, std::ios::binary) << "abc";
    EXPECT_EQ(sha256_file(path), sha256_hex("abc"));
    EXPECT_THROW(sha256_file(temp_path("absent")), Error);
}

TEST(PolicyList, AliasesOptionsAndErrors) {
    const auto p = parse_policy_list("full, streamingllm,kvec:gamma=0.5,mu=0,adakv");
    ASSERT_EQ(p.size(), 4u);
    EXPECT_EQ(p[0].name, "full");
    EXPECT_FALSE(p[0].budgeted);
    EXPECT_EQ(p[1].label, "streamingllm");
    EXPECT_EQ(p[1].name, "streaming");
    EXPECT_EQ(p[2].label, "kvec:gamma=0.5,mu=0");
    EXPECT_EQ(p[2].spec, "kvec:gamma=0.5,mu=0");
    EXPECT_EQ(p[3].name, "ada-snapkv");
    const auto combos = make_combos(p, {64, 128});
    ASSERT_EQ(combos.size(), 1u + 2 * 3);
    EXPECT_EQ(combos[0].budget, 0);
    EXPECT_EQ(combos[1].spec, "streaming:budget=64");
    EXPECT_EQ(combos[3].spec, "kvec:gamma=0.5,mu=0,budget=64");
    EXPECT_THROW(parse_policy_list("nosuch"), Error);
    EXPECT_THROW(parse_policy_list("snapkv:budget=5"), Error);
    EXPECT_THROW(parse_policy_list("snapkv:nosuchoption=1"), Error);
    EXPECT_THROW(parse_policy_list("snapkv,snapkv"), Error);
    EXPECT_THROW(make_combos(parse_policy_list("snapkv"), {16}), Error);  // below the window 32
    EXPECT_THROW(make_combos(parse_policy_list("snapkv"), {}), Error);
    // Compression ratios (kvpress's view) as budget columns: the policy's ratio option.
    EXPECT_EQ(compression_code(0.875), -875);
    EXPECT_EQ(budget_label(-875), "c=0.875");
    EXPECT_EQ(budget_label(128), "B=128");
    const auto ratio = make_combos(parse_policy_list("full,snapkv"), {compression_code(0.75)});
    ASSERT_EQ(ratio.size(), 2u);
    EXPECT_EQ(ratio[1].spec, "snapkv:ratio=0.25");
    EXPECT_EQ(ratio[1].budget, -750);
    EXPECT_THROW(compression_code(1.0), Error);
    EXPECT_THROW(compression_code(0.0), Error);
    EXPECT_THROW(compression_code(0.1234), Error);
}

// For each one-shot policy: the cache derived from one recorded prefill equals the cache of a
// session with the policy attached (positions, keys, values), coverage is the same, and greedy
// generation from both gives the same tokens. Chunks of 16 over a 150-token prompt exercise the
// prompt-scope window across chunks (final chunk shorter than the window).
TEST(PrefillShare, ReplayEqualsAttachedPolicy) {
    const Model& model = tiny_model();
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    SessionOptions so;
    so.n_batch = 16;
    Session session(model, so);
    const std::vector<int32_t> prompt = random_tokens(150, 11, model.config().n_vocab);
    const EvalItem item = item_with(prompt, 12);
    const ops::RopeParams rope = rope_params(model);
    const std::vector<std::string> specs = {
        "full",           "snapkv:budget=48",     "h2o:budget=40",         "streaming:budget=40",
        "streaming:budget=40,rerotate=true",      "pyramidkv:budget=64",   "ada-snapkv:budget=48",
        "kvec:budget=48", "kvec:budget=48,unit=token", "kvec:budget=48,layers=global", "tova:budget=40",   "keydiff:budget=40",
        "random:budget=40,seed=3", "snapkv:budget=64,window=8", "knorm:budget=40",
        "lagkv:budget=40,lag=16",  "lagkv:budget=48,lag=8,cross=true,ada=true",
        "expected-attention:budget=40,queries=24", "expected-attention:budget=48,window=8,ada=true",
        "kvzip:budget=40,chunk=64", "kvzip:budget=40,ada=false,window=8", "ada-pyramidkv:budget=48",
        "kvec:budget=48,design=focus,focus-window=40,cross=1", "kvec:budget=48,design=focus,focus-rank=entropy,focus-stat=pooled"};
    for (const std::string& spec : specs) {
        SCOPED_TRACE(spec);
        const std::string name = policy::parse_policy_spec(spec).name;
        // Attached.
        auto p1 = policy::make_policy(spec);
        ASSERT_TRUE(is_one_shot(*p1, name));
        policy::CoverageProbe probe1(*p1);
        session.reset();
        session.set_evictor(&probe1);
        std::vector<float> logits1;
        {
            const auto l = session.prefill(prompt);
            logits1.assign(l.begin(), l.end());
        }
        const KvCache& kv1 = session.kv_cache();
        std::vector<std::vector<int32_t>> pos1;
        std::vector<std::vector<float>> keys1, vals1;
        for (int l = 0; l < kv1.n_layer(); ++l) {
            for (int h = 0; h < kv1.n_head_kv(); ++h) {
                const int32_t n = kv1.size(l, h);
                pos1.emplace_back(kv1.positions(l, h), kv1.positions(l, h) + n);
                keys1.emplace_back(size_t(n) * kv1.head_dim());
                vals1.emplace_back(size_t(n) * kv1.head_dim());
                kv1.read_keys(l, h, 0, n, keys1.back().data());
                kv1.read_values(l, h, 0, n, vals1.back().data());
            }
        }
        const int32_t next1 = session.n_past();
        const auto gen1 = greedy_generate(session, tok, logits1, item);
        const policy::CoverageReport cov1 = probe1.report();
        session.reset();
        session.set_evictor(nullptr);

        // Shared.
        auto p2 = policy::make_policy(spec);
        policy::CoverageProbe probe2(*p2);
        const PrefillSnapshot snap = record_prefill(session, prompt, merge_requests({p2->request()}));
        EXPECT_EQ(snap.logits, logits1);
        ReplayResult rr = replay_policy(snap, probe2, rope);
        EXPECT_EQ(rr.next_position, next1);
        size_t i = 0;
        for (int l = 0; l < rr.cache.n_layer(); ++l) {
            for (int h = 0; h < rr.cache.n_head_kv(); ++h, ++i) {
                const int32_t n = rr.cache.size(l, h);
                ASSERT_EQ(std::vector<int32_t>(rr.cache.positions(l, h), rr.cache.positions(l, h) + n), pos1[i]);
                std::vector<float> k(size_t(n) * rr.cache.head_dim()), v(k.size());
                rr.cache.read_keys(l, h, 0, n, k.data());
                rr.cache.read_values(l, h, 0, n, v.data());
                EXPECT_EQ(k, keys1[i]);
                EXPECT_EQ(v, vals1[i]);
            }
        }
        adopt_cache(session, std::move(rr.cache), rr.next_position, prompt.back());
        EXPECT_EQ(session.n_past(), next1);
        const auto gen2 = greedy_generate(session, tok, snap.logits, item);
        EXPECT_EQ(gen1, gen2);
        EXPECT_EQ(gen1.size(), 12u);
        const policy::CoverageReport& cov2 = probe2.report();
        EXPECT_DOUBLE_EQ(cov1.mean_c_head(false), cov2.mean_c_head(false));
        EXPECT_DOUBLE_EQ(cov1.c_layer_positions, cov2.c_layer_positions);
        EXPECT_DOUBLE_EQ(cov1.mean_c_head(true), cov2.mean_c_head(true));
        session.reset();
    }
}

// The sweep lets window-less policies join any group, the reconstruction's included: one recorded
// prefill (with KVzip's pass) serves KVzip, Knorm, LagKV and Expected Attention (fewer recent
// queries than recorded) exactly as their own prefills would.
TEST(PrefillShare, ReconstructionGroupServesWindowlessPolicies) {
    const Model& model = tiny_model();
    SessionOptions so;
    so.n_batch = 32;
    Session session(model, so);
    const std::vector<int32_t> prompt = random_tokens(120, 5, model.config().n_vocab);
    const std::vector<std::string> specs = {"kvzip:budget=40,chunk=50", "knorm:budget=40",
                                            "lagkv:budget=40,lag=16", "expected-attention:budget=40,queries=16",
                                            "expected-attention:budget=40,queries=64"};
    std::vector<ObservationRequest> requests;
    for (const auto& spec : specs) requests.push_back(policy::make_policy(spec)->request());
    EXPECT_EQ(share_group_key(requests[1]), 0);
    EXPECT_LT(share_group_key(requests[0]), 0);
    const ObservationRequest merged = merge_requests(requests);
    EXPECT_EQ(merged.queries, 64);
    EXPECT_EQ(merged.reconstruct_chunk, 50);
    const PrefillSnapshot snap = record_prefill(session, prompt, merged);
    const ops::RopeParams rope = rope_params(model);
    for (const auto& spec : specs) {
        SCOPED_TRACE(spec);
        auto attached = policy::make_policy(spec);
        session.reset();
        session.set_evictor(attached.get());
        session.prefill(prompt);
        auto replayed = policy::make_policy(spec);
        ReplayResult rr = replay_policy(snap, *replayed, rope);
        for (int l = 0; l < rr.cache.n_layer(); ++l) {
            for (int h = 0; h < rr.cache.n_head_kv(); ++h) {
                const KvCache& kv = session.kv_cache();
                ASSERT_EQ(std::vector<int32_t>(rr.cache.positions(l, h), rr.cache.positions(l, h) + rr.cache.size(l, h)),
                          std::vector<int32_t>(kv.positions(l, h), kv.positions(l, h) + kv.size(l, h)));
            }
        }
        session.reset();
        session.set_evictor(nullptr);
    }
    ObservationRequest window;
    window.window = 32;
    EXPECT_THROW(merge_requests({requests[0], window}), Error);
    ObservationRequest other = requests[0];
    other.reconstruct_chunk = 64;
    EXPECT_THROW(merge_requests({requests[0], other}), Error);
    EXPECT_NE(share_group_key(requests[0]), share_group_key(other));
}

TEST(PrefillShare, NotShareableAndMismatchedRequests) {
    EXPECT_FALSE(is_one_shot(*policy::make_policy("snapkv:chunked=true"), "snapkv"));
    EXPECT_FALSE(is_one_shot(*policy::make_policy("h2o:decode=1"), "h2o"));
    EXPECT_TRUE(is_one_shot(*policy::make_policy("h2o"), "h2o"));
    ObservationRequest a, b;
    a.window = 32;
    b.window = 8;
    EXPECT_THROW(merge_requests({a, b}), Error);
    b.window = 0;
    b.column_sums = true;
    const ObservationRequest m = merge_requests({a, b});
    EXPECT_EQ(m.window, 32);
    EXPECT_TRUE(m.column_sums);
}

// The query-agnostic baselines in a sweep beside SnapKV: shared and separate modes give the same
// records; per item one prefill for SnapKV's window and one with KVzip's reconstruction, which the
// window-less policies join.
TEST(Sweep, QueryAgnosticBaselinesSharedEqualsSeparate) {
    const Model& model = tiny_model();
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    SessionOptions so;
    so.n_batch = 32;
    Session session(model, so);
    std::vector<EvalItem> items;
    for (int i = 0; i < 2; ++i) {
        EvalItem it = item_with(random_tokens(110 + 20 * i, 40 + i, model.config().n_vocab), 5);
        it.id = "item" + std::to_string(i);
        items.push_back(it);
    }
    const auto policies =
        parse_policy_list("full,snapkv,knorm,lagkv:lag=16,expected-attention:queries=32,kvzip:chunk=64,h2o,tova");
    const auto combos = make_combos(policies, {40, 64});
    auto run = [&](bool share, SweepStats* stats) {
        std::vector<EvalRecord> recs;
        SweepOptions o;
        o.share_prefill = share;
        o.on_record = [&](const EvalRecord& r) { recs.push_back(r); };
        *stats = run_sweep(session, tok, items, policies, combos, {}, o);
        std::sort(recs.begin(), recs.end(), [](const EvalRecord& a, const EvalRecord& b) {
            return std::tie(a.id, a.policy, a.budget) < std::tie(b.id, b.policy, b.budget);
        });
        return recs;
    };
    SweepStats s1, s2;
    const auto shared = run(true, &s1);
    const auto separate = run(false, &s2);
    ASSERT_EQ(shared.size(), items.size() * combos.size());
    ASSERT_EQ(shared.size(), separate.size());
    for (size_t i = 0; i < shared.size(); ++i) {
        SCOPED_TRACE(shared[i].policy + " " + std::to_string(shared[i].budget));
        EXPECT_EQ(shared[i].prediction, separate[i].prediction);
        EXPECT_EQ(shared[i].kv_entries, separate[i].kv_entries);
        EXPECT_DOUBLE_EQ(shared[i].c_head, separate[i].c_head);
        EXPECT_EQ(shared[i].mode, "shared");
    }
    // Two prefills per item: KVzip's reconstruction with the window-less policies that observe no
    // attention (full, knorm, lagkv, expected-attention), and the window group (snapkv) with the
    // column sums and last row of h2o and tova, which a reconstruction cannot record.
    EXPECT_EQ(s1.prefills, static_cast<int64_t>(items.size() * 2));
    // Without a window group those two need a prefill of their own.
    const auto no_window = parse_policy_list("knorm,kvzip:chunk=64,h2o");
    SweepOptions o;
    SweepStats st = run_sweep(session, tok, items, no_window, make_combos(no_window, {40}), {}, o);
    EXPECT_EQ(st.prefills, static_cast<int64_t>(items.size() * 2));
}

// The whole sweep: shared and separate modes give identical records; chunked and decode-time
// policies run separately in both.
TEST(Sweep, SharedAndSeparateModesGiveIdenticalRecords) {
    const Model& model = tiny_model();
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    SessionOptions so;
    so.n_batch = 32;
    Session session(model, so);
    std::vector<EvalItem> items;
    for (int i = 0; i < 2; ++i) {
        EvalItem it = item_with(random_tokens(100 + 30 * i, 20 + i, model.config().n_vocab), 6);
        it.id = "item" + std::to_string(i);
        it.end_tokens.clear();
        items.push_back(it);
    }
    const auto policies =
        parse_policy_list("full,snapkv,h2o,kvec,snapkv:window=8,snapkv:chunked=true,h2o:decode=2,gemfilter:window=8");
    const auto combos = make_combos(policies, {40, 64});
    // decode_batch: the shared combinations decode in batches (3: the lanes fill and are
    // decoded in the middle of an item's combinations) or one after another (1).
    auto run = [&](bool share, SweepStats* stats, int decode_batch = 16, bool sorted = true) {
        std::vector<EvalRecord> recs;
        SweepOptions o;
        o.share_prefill = share;
        o.decode_batch = decode_batch;
        o.on_record = [&](const EvalRecord& r) { recs.push_back(r); };
        *stats = run_sweep(session, tok, items, policies, combos, {}, o);
        if (sorted) {
            std::sort(recs.begin(), recs.end(), [](const EvalRecord& a, const EvalRecord& b) {
                return std::tie(a.id, a.policy, a.budget) < std::tie(b.id, b.policy, b.budget);
            });
        }
        return recs;
    };
    SweepStats s1, s2, s3, s4;
    const auto shared = run(true, &s1);
    const auto separate = run(false, &s2);
    // Batched or not, the same records in the same order (the model's F32 weights take the same
    // kernels at every row count, so even the last bits agree).
    const auto one_by_one = run(true, &s3, 1, false);
    const auto batches_of_3 = run(true, &s4, 3, false);
    ASSERT_EQ(one_by_one.size(), batches_of_3.size());
    for (size_t i = 0; i < one_by_one.size(); ++i) {
        EXPECT_EQ(one_by_one[i].id, batches_of_3[i].id);
        EXPECT_EQ(one_by_one[i].policy, batches_of_3[i].policy);
        EXPECT_EQ(one_by_one[i].budget, batches_of_3[i].budget);
        EXPECT_EQ(one_by_one[i].prediction, batches_of_3[i].prediction);
        EXPECT_EQ(one_by_one[i].kv_entries, batches_of_3[i].kv_entries);
    }
    EXPECT_EQ(s3.shared_generations, s4.shared_generations);
    ASSERT_EQ(shared.size(), items.size() * combos.size());
    ASSERT_EQ(shared.size(), separate.size());
    for (size_t i = 0; i < shared.size(); ++i) {
        SCOPED_TRACE(shared[i].policy + " " + std::to_string(shared[i].budget));
        EXPECT_EQ(shared[i].prediction, separate[i].prediction);
        EXPECT_EQ(shared[i].kv_entries, separate[i].kv_entries);
        EXPECT_DOUBLE_EQ(shared[i].c_head, separate[i].c_head);
        EXPECT_EQ(shared[i].score, separate[i].score);
        const bool one_shot = shared[i].policy.find("chunked") == std::string::npos &&
                              shared[i].policy.find("decode") == std::string::npos;
        EXPECT_EQ(shared[i].mode, one_shot ? "shared" : "separate");
        EXPECT_EQ(separate[i].mode, "separate");
    }
    // Per item: one prefill for the window-32 (and window-less) one-shot combinations, one for
    // window 8, one for each of the 4 chunked / decode-time combinations, and GemFilter's prefill
    // of its selection at each of the 2 budgets.
    EXPECT_EQ(s1.prefills, static_cast<int64_t>(items.size() * (2 + 4 + 2)));
    EXPECT_EQ(s2.prefills, static_cast<int64_t>(items.size() * combos.size()));
    // Compression bites: full keeps every prompt entry, snapkv at 40 keeps 40 per head.
    const auto& cfg = model.config();
    for (const auto& r : shared) {
        if (r.policy == "full") {
            EXPECT_EQ(r.kv_entries, int64_t{r.n_prompt} * cfg.n_layer * cfg.n_head_kv);
            EXPECT_DOUBLE_EQ(r.c_head, 1.0);
        }
        if (r.policy == "snapkv" && r.budget == 40) {
            EXPECT_EQ(r.kv_entries, 40 * cfg.n_layer * cfg.n_head_kv);
            EXPECT_LT(r.c_head, 1.0);
        }
    }

    // Skipping what is done: nothing runs again.
    std::set<RecordKey> done;
    for (const auto& r : shared) done.insert({r.id, r.policy, r.budget});
    SweepOptions o;
    int64_t calls = 0;
    o.on_record = [&](const EvalRecord&) { ++calls; };
    const SweepStats s5 = run_sweep(session, tok, items, policies, combos, done, o);
    EXPECT_EQ(calls, 0);
    EXPECT_EQ(s5.skipped, static_cast<int64_t>(shared.size()));

    // Records survive their JSON form.
    const EvalRecord back = record_from_json(nlohmann::json::parse(to_json(shared[3]).dump()), "t");
    EXPECT_EQ(back.prediction, shared[3].prediction);
    EXPECT_EQ(back.c_head, shared[3].c_head);
    ASSERT_EQ(shared[3].kept_tenths.size(), 10u);
    EXPECT_EQ(back.kept_tenths, shared[3].kept_tenths);
    EXPECT_NEAR(std::accumulate(back.kept_tenths.begin(), back.kept_tenths.end(), 0.0), 1.0, 1e-9);
    nlohmann::json short_tenths = to_json(shared[3]);
    short_tenths["coverage"]["kept_tenths"] = {0.5, 0.5};
    EXPECT_THROW(record_from_json(short_tenths, "t"), Error);
    EXPECT_THROW(record_from_json(nlohmann::json::parse("{\"id\": 1}"), "t"), Error);
    // Integer fields out of their range, or floats far beyond int64 (found by fuzz_longbench).
    for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
             {"kv_bytes", 1e28}, {"budget", -1e300}, {"n_prompt", int64_t{1} << 40}, {"kv_entries", -1}}) {
        nlohmann::json bad = to_json(shared[3]);
        bad[key] = value;
        try {
            record_from_json(bad, "t:9");
            ADD_FAILURE() << key << " = " << value.dump() << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
        }
    }
}

// Session::rollback returns the cache to its state before a continuation: the same entries, and
// the same logits when the continuation is processed again; pause_eviction keeps a policy from
// touching what follows a compressed context.
TEST(Session, RollbackAndPausedEviction) {
    const Model& model = tiny_model();
    SessionOptions so;
    so.n_batch = 32;
    Session session(model, so);
    const auto context = random_tokens(120, 21, model.config().n_vocab);
    const auto question = random_tokens(20, 22, model.config().n_vocab);
    auto policy = policy::make_policy("snapkv:budget=48");
    session.set_evictor(policy.get());
    session.prefill(context);
    const int64_t compressed = session.kv_cache().total_entries();
    const int32_t n = session.n_past();
    const int L = model.config().n_layer, H = model.config().n_head_kv;
    EXPECT_EQ(compressed, int64_t{48} * L * H);
    session.pause_eviction(true);
    session.prefill(std::span(question).subspan(1));
    // The paused policy evicted nothing: every question token joined each head.
    EXPECT_EQ(session.kv_cache().total_entries(), compressed + int64_t{19} * L * H);
    const float a = session.decode(5)[7];
    session.rollback(n);
    EXPECT_EQ(session.n_past(), n);
    EXPECT_EQ(session.kv_cache().total_entries(), compressed);
    for (int l = 0; l < L; ++l) {
        for (int h = 0; h < H; ++h) {
            const int32_t k = session.kv_cache().size(l, h);
            EXPECT_LT(session.kv_cache().positions(l, h)[k - 1], n);
        }
    }
    session.prefill(std::span(question).subspan(1));
    EXPECT_EQ(session.decode(5)[7], a);  // bit for bit: the same cache, the same computation
    EXPECT_THROW(session.rollback(session.n_past() + 1), Error);
    session.reset();
    EXPECT_FALSE(session.eviction_paused());
    session.set_evictor(nullptr);
}

// The query-agnostic protocol: the context (n_context tokens) is compressed alone, the question
// is appended uncompressed. The sweep equals that computation done by hand with the policy
// attached, in both sharing modes; items with the same context (niah_askmany) share one
// compressed cache and give what each would alone.
TEST(Sweep, QueryAgnosticProtocol) {
    const Model& model = tiny_model();
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    SessionOptions so;
    so.n_batch = 32;
    Session session(model, so);
    const auto context = random_tokens(150, 31, model.config().n_vocab);
    std::vector<EvalItem> items;
    for (int q = 0; q < 3; ++q) {
        std::vector<int32_t> prompt = context;
        const auto question = random_tokens(12 + 3 * q, 40 + q, model.config().n_vocab);
        prompt.insert(prompt.end(), question.begin() + 1, question.end());
        EvalItem item = item_with(prompt, 6);
        item.id = "q" + std::to_string(q);
        item.n_context = static_cast<int32_t>(context.size());
        items.push_back(item);
    }
    const auto policies = parse_policy_list("full,snapkv,kvec,streaming:rerotate=true,h2o:chunked=true,gemfilter:window=8");
    const auto combos = make_combos(policies, {40});
    auto run = [&](bool share, const std::vector<EvalItem>& its) {
        std::vector<EvalRecord> recs;
        SweepOptions o;
        o.protocol = Protocol::QueryAgnostic;
        o.share_prefill = share;
        o.on_record = [&](const EvalRecord& r) { recs.push_back(r); };
        run_sweep(session, tok, its, policies, combos, {}, o);
        return recs;
    };
    const auto shared = run(true, items);
    const auto separate = run(false, items);
    ASSERT_EQ(shared.size(), items.size() * combos.size());
    ASSERT_EQ(separate.size(), shared.size());
    for (const EvalRecord& r : shared) {
        const auto it = std::find_if(separate.begin(), separate.end(), [&](const EvalRecord& x) {
            return x.id == r.id && x.policy == r.policy;
        });
        ASSERT_NE(it, separate.end());
        EXPECT_EQ(r.prediction, it->prediction) << r.id << " " << r.policy;
        EXPECT_EQ(r.kv_entries, it->kv_entries);
        // By hand: attach, compress the context, pause, ask.
        const EvalItem& item = *std::find_if(items.begin(), items.end(), [&](const EvalItem& i) { return i.id == r.id; });
        const Combo& combo = *std::find_if(combos.begin(), combos.end(), [&](const Combo& c) {
            return policies[c.policy].label == r.policy;
        });
        auto p = policy::make_policy(combo.spec);
        session.reset();
        session.set_evictor(p.get());
        session.prefill(std::span(item.prompt).first(static_cast<size_t>(item.n_context)));
        session.pause_eviction(true);
        const auto logits = session.prefill(std::span(item.prompt).subspan(static_cast<size_t>(item.n_context)));
        const std::vector<int32_t> gen = greedy_generate(session, tok, logits, item);
        session.reset();
        session.set_evictor(nullptr);
        const std::string text = nlohmann::json(tok.decode(gen, true))
                                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        EXPECT_EQ(r.prediction, nlohmann::json::parse(text).get<std::string>()) << r.id << " " << r.policy;
        // Each item alone gives the same as within its group.
        const auto alone = run(true, {item});
        const auto a = std::find_if(alone.begin(), alone.end(), [&](const EvalRecord& x) { return x.policy == r.policy; });
        EXPECT_EQ(a->prediction, r.prediction) << r.id << " " << r.policy;
    }
    // Decode-time eviction and items without a known question are refused.
    SweepOptions o;
    o.protocol = Protocol::QueryAgnostic;
    EXPECT_THROW(run_sweep(session, tok, items, parse_policy_list("h2o:decode=1"), make_combos(parse_policy_list("h2o:decode=1"), {40}), {}, o), Error);
    std::vector<EvalItem> unknown = {items[0]};
    unknown[0].n_context = 0;
    EXPECT_THROW(run_sweep(session, tok, unknown, policies, combos, {}, o), Error);
}

// Items of the bundled model's synthetic suite know where their question starts (n_context), for
// the completion form and for the LongBench fixture; niah_askmany gives one item per question,
// all with the same context tokens; the dev and test splits use disjoint held-out text.
TEST(EvalItems, ContextSplitAskManyAndHeldoutSplits) {
    const auto model = Model::load(std::string(KVEC_SOURCE_DIR) + "/models/kvec-tiny.gguf");
    const Tokenizer tok = Tokenizer::from_gguf(model->file());
    Session session(*model);
    Generator generator(session, tok);
    ItemOptions o;
    o.suite = "synthetic-1k";
    o.samples = 2;
    o.split = HeldoutSplit::Dev;
    o.seed = default_seed(o.split);
    const std::vector<EvalItem> dev = build_items(o, tok, generator, session.n_ctx());
    // The same instances, to compare with their text.
    SynthConfig sc;
    sc.split = Split::Eval;
    const TextSource dev_text = TextSource::heldout(default_text_dir(), HeldoutSplit::Dev);
    SynthGenerator gen(dev_text, &tok, sc);
    size_t next = 0;
    int askmany = 0;
    for (const auto& [task, n] : find_suite("synthetic-1k").tasks) {
        for (int i = 0; i < 2; ++i) {
            const SynthInstance inst = gen.generate(task, o.seed, i, 1024);
            const size_t n_items = inst.asks.empty() ? 1 : inst.asks.size();
            for (size_t q = 0; q < n_items; ++q) {
                ASSERT_LT(next, dev.size());
                const EvalItem& item = dev[next++];
                SCOPED_TRACE(item.id);
                const std::string& prompt = inst.asks.empty() ? inst.prompt : inst.asks[q].prompt;
                ASSERT_GT(item.n_context, 0);
                ASSERT_LT(item.n_context, static_cast<int32_t>(item.prompt.size()));
                const auto split = item.prompt.begin() + item.n_context;
                const std::string before = tok.decode(std::vector<int32_t>(item.prompt.begin(), split), true);
                const std::string after = tok.decode(std::vector<int32_t>(split, item.prompt.end()), true);
                // The tokens split the text at the question (a token that spans the boundary, if
                // any, goes with the question).
                EXPECT_EQ(before + after, prompt);
                EXPECT_LE(before.size(), inst.context_end);
                EXPECT_GE(before.size() + 8, inst.context_end);
                EXPECT_NE(after.find(inst.asks.empty() ? inst.input : inst.asks[q].input), std::string::npos);
                if (item.task == "niah_askmany") {
                    ++askmany;
                    EXPECT_EQ(item.references, inst.asks[q].answers);
                }
            }
        }
    }
    EXPECT_EQ(next, dev.size());
    EXPECT_EQ(askmany, 2 * 4);  // 2 instances x 4 questions
    const auto first = std::find_if(dev.begin(), dev.end(), [](const EvalItem& i) { return i.task == "niah_askmany"; });
    for (int q = 0; q < 4; ++q) {
        const EvalItem& item = first[q];
        EXPECT_EQ(item.id, first->id.substr(0, first->id.size() - 1) + std::to_string(q));
        EXPECT_EQ(item.n_context, first->n_context);
        EXPECT_TRUE(std::equal(item.prompt.begin(), item.prompt.begin() + item.n_context, first->prompt.begin()));
        if (q > 0) {
            EXPECT_NE(item.prompt, first->prompt);
        }
    }
    // The test split: other text, other seed, other prompts.
    o.split = HeldoutSplit::Test;
    o.seed = default_seed(o.split);
    const std::vector<EvalItem> test = build_items(o, tok, generator, session.n_ctx());
    ASSERT_EQ(test.size(), dev.size());
    EXPECT_NE(test[0].prompt, dev[0].prompt);
    const TextSource d = TextSource::heldout(default_text_dir(), HeldoutSplit::Dev);
    const TextSource t = TextSource::heldout(default_text_dir(), HeldoutSplit::Test);
    const TextSource all = TextSource::heldout();
    EXPECT_EQ(d.n_documents() + t.n_documents(), all.n_documents());
    EXPECT_EQ(d.n_sentences() + t.n_sentences(), all.n_sentences());
    size_t shared = 0;
    for (size_t i = 0; i < t.n_sentences(); i += 7) shared += d.count_shared_sentences(t.sentence(i)) > 0 ? 1 : 0;
    EXPECT_LT(shared, 3u);  // a stock phrase may recur across addresses, not the text
    EXPECT_THROW(parse_heldout_split("train"), Error);

    // LongBench: the question part follows the template's {context}.
    ItemOptions lb;
    for (const auto& e : std::filesystem::directory_iterator(std::string(KVEC_SOURCE_DIR) + "/data/longbench/fixture")) {
        if (e.path().extension() == ".jsonl") lb.data_files.push_back(e.path().string());
    }
    std::sort(lb.data_files.begin(), lb.data_files.end());
    lb.samples = 1;
    lb.max_length = 1000;
    for (const EvalItem& item : build_items(lb, tok, generator, session.n_ctx())) {
        SCOPED_TRACE(item.id);
        EXPECT_GT(item.n_context, 0);
        EXPECT_LT(item.n_context, static_cast<int32_t>(item.prompt.size()));
    }
}

// A classification sample without all_classes is refused instead of scored 0, and the same data
// file given twice (also by another path) is refused instead of counting its samples twice
// (issue 23).
// kvpress's shape (the Python package's Model.answer): questions about one context share its
// tokens, so the query-agnostic sweep compresses the context once for all of them.
TEST(EvalItems, QuestionItemsShareTheirContext) {
    const auto model = Model::load(std::string(KVEC_SOURCE_DIR) + "/models/kvec-tiny.gguf");
    const Tokenizer tok = Tokenizer::from_gguf(model->file());
    Session session(*model);
    Generator generator(session, tok);
    const std::string context = "The key is 4711 and the door is red. The garden lies behind the house.";
    const EvalItem a = question_item(tok, generator, "a", context, "\n\nWhat is the key?", false, 8, session.n_ctx());
    const EvalItem b = question_item(tok, generator, "b", context, "\n\nWhich colour is the door?", false, 8, session.n_ctx());
    ASSERT_GT(a.n_context, 0);
    EXPECT_EQ(a.n_context, b.n_context);
    EXPECT_TRUE(std::equal(a.prompt.begin(), a.prompt.begin() + a.n_context, b.prompt.begin()));
    // The context's tokens are those of the context alone (BOS included).
    GenerateOptions g;
    g.prompt = context;
    const std::vector<int32_t> alone = generator.tokenize_prompt(g);
    ASSERT_LE(static_cast<size_t>(a.n_context), alone.size());
    EXPECT_TRUE(std::equal(a.prompt.begin(), a.prompt.begin() + a.n_context, alone.begin()));
    EXPECT_EQ(a.max_new_tokens, 8);
    const std::vector<EvalItem> items = {a, b};
    EXPECT_EQ(compression_group_end(items, 0, Protocol::QueryAgnostic), 2u);
    EXPECT_EQ(compression_group_end(items, 0, Protocol::QueryAware), 1u);

    EXPECT_THAT(error_of([&] { question_item(tok, generator, "q", "", "?", false, 8, 1024); }),
                HasSubstr("the context is empty"));
    EXPECT_THAT(error_of([&] { question_item(tok, generator, "q", context, "", false, 8, 1024); }),
                HasSubstr("question 'q' is empty"));
    EXPECT_THAT(error_of([&] { question_item(tok, generator, "q", context, "?", false, 0, 1024); }),
                HasSubstr("max_new_tokens must be >= 1"));
    EXPECT_THAT(error_of([&] { question_item(tok, generator, "q", context, "?", true, 8, 1024); }),
                HasSubstr("no chat template"));
    EXPECT_THAT(error_of([&] { question_item(tok, generator, "q", context, "?", false, 8, 8); }),
                HasSubstr("the context holds 8"));
}

TEST(EvalItems, RefusesClassesMissingAndTheSameFileTwice) {
    const Model& model = tiny_model();
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    Session session(model);
    Generator generator(session, tok);
    const std::string dir = temp_path("items-dup");
    std::filesystem::create_directories(dir);
    {
        std::ofstream f(dir + "/trec.jsonl");
        f << R"({"input": "Q?", "context": "C", "answers": ["City"], "all_classes": null, "_id": "a"})" << "\n";
    }
    ItemOptions o;
    o.data_files = {dir + "/trec.jsonl"};
    o.max_length = 200;
    try {
        build_items(o, tok, generator, session.n_ctx());
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("needs 'all_classes'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("trec.jsonl:1"), std::string::npos) << e.what();
    }
    const std::string qa = std::string(KVEC_SOURCE_DIR) + "/data/longbench/fixture/hotpotqa.jsonl";
    o.data_files = {qa, std::string(KVEC_SOURCE_DIR) + "/data/longbench/../longbench/fixture/hotpotqa.jsonl"};
    o.samples = 1;
    try {
        build_items(o, tok, generator, session.n_ctx());
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("are the same file"), std::string::npos) << e.what();
    }
    o.data_files = {qa};
    EXPECT_EQ(build_items(o, tok, generator, session.n_ctx()).size(), 1u);
}

TEST(Sweep, GreedyRespectsMinTokensAndEndTokens) {
    const Model& model = tiny_model();
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    Session session(model);
    const auto prompt = random_tokens(20, 5, model.config().n_vocab);
    EvalItem item = item_with(prompt, 8);
    session.reset();
    std::vector<float> logits;
    {
        const auto l = session.prefill(prompt);
        logits.assign(l.begin(), l.end());
    }
    const int32_t first = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    // The greedy first token as the only end token: nothing is generated...
    item.end_tokens = {first};
    EXPECT_TRUE(greedy_generate(session, tok, logits, item).empty());
    // ...unless at least one token is required: then the runner-up comes first.
    item.min_new_tokens = 1;
    const auto out = greedy_generate(session, tok, logits, item);
    ASSERT_FALSE(out.empty());
    EXPECT_NE(out[0], first);
}

// Perplexity equals exp(mean NLL) computed here from one all-logits prefill per chunk, with the
// llama.cpp chunking (BOS replacing each chunk's first token, second half scored).
TEST(Perplexity, MatchesIndependentComputation) {
    const Model& model = tiny_model();
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    SessionOptions so;
    so.n_ctx = 64;
    so.n_batch = 24;
    Session session(model, so);
    const auto tokens = random_tokens(64 * 3 + 10, 99, model.config().n_vocab);
    PerplexityOptions po;
    po.n_ctx = 64;
    const PerplexityResult r = perplexity(session, tok, tokens, po);
    EXPECT_EQ(r.n_chunks, 3);
    EXPECT_EQ(r.count, 3 * (64 - 32 - 1));

    // exp(mean NLL) of the tokens after chunk index `first`, from one all-logits prefill per chunk.
    Session ref(model, so);
    const bool add_bos = tok.data().add_bos;
    auto reference = [&](int first, int64_t& count) {
        double nll = 0;
        count = 0;
        for (int c = 0; c < 3; ++c) {
            std::vector<int32_t> chunk(tokens.begin() + c * 64, tokens.begin() + (c + 1) * 64);
            if (add_bos) chunk[0] = tok.bos();
            ref.reset();
            const auto all = ref.prefill(chunk, true);
            const size_t V = size_t(model.config().n_vocab);
            for (int j = first; j < 63; ++j) {
                double mx = -1e300, s = 0;
                for (size_t v = 0; v < V; ++v) mx = std::max(mx, double(all[j * V + v]));
                for (size_t v = 0; v < V; ++v) s += std::exp(double(all[j * V + v]) - mx);
                nll -= double(all[j * V + size_t(tokens[c * 64 + j + 1])]) - mx - std::log(s);
                ++count;
            }
        }
        return std::exp(nll / double(count));
    };
    int64_t count = 0;
    EXPECT_NEAR(r.ppl, reference(32, count), 1e-9 * r.ppl);
    EXPECT_EQ(count, r.count);
    EXPECT_GT(r.ppl, 1.0);
    EXPECT_TRUE(std::isfinite(r.ppl_error));

    // The policy path with nothing to evict (full; a budget above the first half) gives the same.
    po.policy_spec = "full";
    EXPECT_NEAR(perplexity(session, tok, tokens, po).ppl, r.ppl, 1e-5 * r.ppl);
    po.policy_spec = "snapkv:budget=40";
    EXPECT_NEAR(perplexity(session, tok, tokens, po).ppl, r.ppl, 1e-5 * r.ppl);
    // A real compression changes it and is reported.
    po.policy_spec = "streaming:budget=8,sinks=4";
    const PerplexityResult c = perplexity(session, tok, tokens, po);
    EXPECT_NE(c.ppl, r.ppl);
    EXPECT_LT(c.kv_bytes, r.kv_bytes);

    po.policy_spec.clear();
    EXPECT_THROW(perplexity(session, tok, std::vector<int32_t>(100, 5), po), Error);  // < 2 chunks

    // --score-last 10: the last 10 tokens of each chunk, all the tokens before them as context.
    po.score_last = 10;
    const PerplexityResult last = perplexity(session, tok, tokens, po);
    EXPECT_EQ(last.count, 3 * 10);
    EXPECT_NEAR(last.ppl, reference(53, count), 1e-9 * last.ppl);
    po.score_last = 63;  // no token left as context
    EXPECT_THROW(perplexity(session, tok, tokens, po), Error);
}

TEST(Fidelity, KlAndTop1) {
    // p = softmax(0, ln 3) = (1/4, 3/4), q uniform: KL = 1/4 ln(1/2) + 3/4 ln(3/2).
    const std::vector<float> p = {0.0f, std::log(3.0f)}, q = {0.0f, 0.0f};
    const DistributionDiff d = compare_logits(p, q);
    EXPECT_NEAR(d.kl, 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-6);
    EXPECT_FALSE(d.top1_equal);  // argmax p = 1, argmax q = 0 (first of the ties)
    EXPECT_NEAR(compare_logits(p, p).kl, 0.0, 1e-12);
    EXPECT_NEAR(log_prob(p, 1), std::log(0.75), 1e-7);

    const Model& model = tiny_model();
    SessionOptions so;
    so.n_ctx = 128;
    so.n_batch = 32;
    Session session(model, so);
    const auto tokens = random_tokens(300, 3, model.config().n_vocab);
    const auto policies = parse_policy_list("full,streaming,snapkv");
    const auto combos = make_combos(policies, {40, 64});
    FidelityOptions fo;
    fo.prefix = 96;
    fo.continuation = 16;
    fo.segments = 2;
    const FidelityReport rep = run_fidelity(session, tokens, policies, combos, fo);
    ASSERT_EQ(rep.rows.size(), combos.size());
    EXPECT_EQ(rep.segments, 2);
    for (const auto& r : rep.rows) {
        EXPECT_EQ(r.steps, 32);
        if (r.policy == "full") {
            EXPECT_NEAR(r.kl_mean, 0.0, 1e-9);
            EXPECT_EQ(r.top1, 1.0);
        } else {
            EXPECT_GT(r.kl_mean, 0.0);  // 96-token prompts compressed to 40 or 64 entries
        }
    }
    fo.share_prefill = false;
    const FidelityReport sep = run_fidelity(session, tokens, policies, combos, fo);
    for (size_t i = 0; i < rep.rows.size(); ++i) EXPECT_EQ(rep.rows[i].kl_mean, sep.rows[i].kl_mean);
}

TEST(Plot, WritesAPngAndTicksAreNice) {
    PlotSpec spec;
    spec.title = "t";
    spec.x_label = "x";
    spec.y_label = "y";
    spec.log2_x = true;
    spec.x_ticks = {64, 128, 256, 512};
    spec.series.push_back({"a", {64, 128, 256, 512}, {10, 20, 35, 50}, false});
    spec.series.push_back({"full", {64, 512}, {60, 60}, true});
    const std::string path = temp_path("plot.png");
    write_line_plot_png(spec, path);
    std::ifstream in(path, std::ios::binary);
    char sig[8] = {};
    in.read(sig, 8);
    EXPECT_EQ(std::string(sig + 1, 3), "PNG");
    EXPECT_GT(std::filesystem::file_size(path), 2000u);
    auto near = [](const std::vector<double>& a, const std::vector<double>& b) {
        if (a.size() != b.size()) return false;
        for (size_t i = 0; i < a.size(); ++i) {
            if (std::fabs(a[i] - b[i]) > 1e-12) return false;
        }
        return true;
    };
    EXPECT_TRUE(near(nice_ticks(0, 1, 5), {0, 0.2, 0.4, 0.6, 0.8, 1.0}));
    EXPECT_TRUE(near(nice_ticks(3, 47, 5), {10, 20, 30, 40}));
    EXPECT_TRUE(near(nice_ticks(-0.3, 0.3, 6), {-0.3, -0.2, -0.1, 0, 0.1, 0.2, 0.3}));
    PlotSpec empty;
    EXPECT_THROW(write_line_plot_png(empty, path), Error);
}

TEST(Report, TablesFollowTheRecords) {
    std::vector<EvalItem> items(3);
    const char* tasks[] = {"niah_single", "niah_single", "qa"};
    for (int i = 0; i < 3; ++i) {
        items[i].id = "i" + std::to_string(i);
        items[i].task = tasks[i];
        items[i].metric = i < 2 ? "string_match_all" : "string_match_part";
        items[i].references = {"42"};
    }
    const auto policies = parse_policy_list("full,snapkv");
    std::vector<EvalRecord> recs;
    auto add = [&](int i, const std::string& p, int64_t b, const std::string& pred, double c_head) {
        EvalRecord r;
        r.id = items[i].id;
        r.task = items[i].task;
        r.policy = p;
        r.budget = b;
        r.prediction = pred;
        r.c_head = c_head;
        r.kv_bytes = 100 * (b + 1);
        recs.push_back(r);
    };
    add(0, "full", 0, "42", 1), add(1, "full", 0, "41", 1), add(2, "full", 0, "it is 42", 1);
    add(0, "snapkv", 64, "no", 0.25), add(1, "snapkv", 64, "42", 0.75), add(2, "snapkv", 64, "x", 0.5);
    const SweepSummary s = summarize(items, policies, {64}, recs);
    EXPECT_EQ(s.present, 6);
    EXPECT_EQ(s.expected, 6);
    const Cell& full = s.cells.at({"full", 0});
    EXPECT_DOUBLE_EQ(full.task_scores.at("niah_single"), 50.0);
    EXPECT_DOUBLE_EQ(full.task_scores.at("qa"), 100.0);
    EXPECT_DOUBLE_EQ(full.average, 75.0);
    const Cell& snap = s.cells.at({"snapkv", 64});
    EXPECT_DOUBLE_EQ(snap.average, 25.0);
    EXPECT_DOUBLE_EQ(snap.c_head, 0.5);
    const std::string md = summary_markdown(s, "# t\n");
    EXPECT_NE(md.find("| full (no eviction) | 75.00 |"), std::string::npos) << md;
    EXPECT_NE(md.find("| snapkv | 25.00 |"), std::string::npos) << md;
    const std::string csv = summary_csv(s);
    EXPECT_NE(csv.find("snapkv,64,50.00,0.00,25.0000,"), std::string::npos) << csv;
    // Bootstrap over items with tasks as strata: niah_single {0, 100}, qa {0} give averages of 0,
    // 25 or 50 (probabilities 1/4, 1/2, 1/4), so the 95 % interval spans [0, 50].
    EXPECT_DOUBLE_EQ(snap.average_ci.mean, 25.0);
    EXPECT_DOUBLE_EQ(snap.average_ci.lo, 0.0);
    EXPECT_DOUBLE_EQ(snap.average_ci.hi, 50.0);
    EXPECT_DOUBLE_EQ(full.average_ci.lo, 50.0);  // niah_single {100, 0}, qa {100}: 50, 75 or 100
    EXPECT_DOUBLE_EQ(full.average_ci.hi, 100.0);
    // Paired full - snapkv over the same items: niah_single {+100, -100}, qa {+100}: mean 50.
    const std::vector<PairedComparison> pairs = paired_comparisons(s);
    ASSERT_EQ(pairs.size(), 1u);
    EXPECT_EQ(pairs[0].a, 0u);
    EXPECT_EQ(pairs[0].b, 1u);
    EXPECT_DOUBLE_EQ(pairs[0].diff.mean, 50.0);
    EXPECT_DOUBLE_EQ(pairs[0].diff.lo, 0.0);
    EXPECT_DOUBLE_EQ(pairs[0].diff.hi, 100.0);
    EXPECT_NE(paired_csv(s).find("full,snapkv,64,50.0000,0.0000,100.0000,"), std::string::npos) << paired_csv(s);
    const auto j = metrics_json(s);
    EXPECT_TRUE(j["complete"].get<bool>());
    EXPECT_EQ(j["paired"].size(), 1u);
    EXPECT_FALSE(j.contains("task_floor"));

    // A task floor of 60: the full cache scores 50 on niah_single, so only qa counts.
    const SweepSummary f = summarize(items, policies, {64}, recs, 60);
    ASSERT_EQ(f.excluded_tasks, std::vector<std::string>{"niah_single"});
    EXPECT_DOUBLE_EQ(f.cells.at({"full", 0}).average, 100.0);
    EXPECT_DOUBLE_EQ(f.cells.at({"snapkv", 64}).average, 0.0);
    EXPECT_DOUBLE_EQ(f.cells.at({"snapkv", 64}).task_scores.at("niah_single"), 50.0);  // still reported
    EXPECT_DOUBLE_EQ(f.cells.at({"full", 0}).average_ci.lo, 100.0);
    const std::vector<PairedComparison> fp = paired_comparisons(f);  // qa only: +100
    ASSERT_EQ(fp.size(), 1u);
    EXPECT_DOUBLE_EQ(fp[0].diff.mean, 100.0);
    EXPECT_EQ(fp[0].diff.n, 1);
    const std::string fmd = summary_markdown(f, "# t\n");
    EXPECT_NE(fmd.find("below 60.00 on them (shown in the per-task tables, marked *): niah_single (50.00)"),
              std::string::npos) << fmd;
    EXPECT_NE(fmd.find("| niah_single* |"), std::string::npos) << fmd;
    EXPECT_EQ(metrics_json(f)["task_floor"]["excluded"][0], "niah_single");
    // A floor every task clears excludes nothing and says so.
    const SweepSummary g = summarize(items, policies, {64}, recs, 50);
    EXPECT_TRUE(g.excluded_tasks.empty());
    EXPECT_DOUBLE_EQ(g.cells.at({"full", 0}).average, 75.0);
    EXPECT_NE(summary_markdown(g, "").find("all count in the averages"), std::string::npos);
}

TEST(HeadScores, CopyMassCountsTheTopEntriesCarryingTheTarget) {
    // Entries at positions 0..5 with tokens 7 9 7 3 9 9; the row's top 3 are entries 4 (0.4),
    // 2 (0.25) and 5 (0.2). Target 9: entries 4 and 5 carry it, 1 (0.05) is outside the top 3.
    const std::vector<float> p = {0.0f, 0.05f, 0.25f, 0.1f, 0.4f, 0.2f};
    const std::vector<int32_t> positions = {0, 1, 2, 3, 4, 5};
    const std::vector<int32_t> tokens = {7, 9, 7, 3, 9, 9};
    EXPECT_NEAR(copy_mass(p, positions, tokens, 6, 9, 3), 0.6, 1e-6);
    EXPECT_NEAR(copy_mass(p, positions, tokens, 6, 9, 6), 0.65, 1e-6);
    EXPECT_NEAR(copy_mass(p, positions, tokens, 5, 9, 3), 0.4, 1e-6);  // position 5 is not a source
    EXPECT_NEAR(copy_mass(p, positions, tokens, 6, 7, 3), 0.25, 1e-6);
    EXPECT_EQ(copy_mass(p, positions, tokens, 6, 4, 6), 0.0);
}

// On a random model the scores have the model's shape, are copy masses (in [0, 1]), and a prompt
// that holds the answer's tokens gives some head a positive score; an answer found nowhere in the
// prompt gives 0 everywhere.
TEST(HeadScores, EstimateOnARandomModel) {
    const Model& model = tiny_model();
    const Tokenizer tok = Tokenizer::from_gguf(model.file());
    Session session(model, SessionOptions{});
    std::vector<int32_t> prompt = random_tokens(120, 5, model.config().n_vocab);
    const std::string answer = "ab";
    const std::vector<int32_t> ids = tok.encode(answer, false);
    ASSERT_FALSE(ids.empty());
    for (size_t i = 0; i < 10; ++i) prompt[40 + i] = ids[i % ids.size()];
    EvalItem item = item_with(prompt, 4);
    item.references = {answer};
    const policy::HeadImportance h = estimate_head_importance(session, tok, {item, item}, HeadScoreOptions{});
    ASSERT_EQ(h.n_layer(), model.config().n_layer);
    ASSERT_EQ(h.n_head_kv(), model.config().n_head_kv);
    EXPECT_EQ(h.items, 2);
    double total = 0;
    for (const auto& row : h.scores) {
        for (double x : row) {
            EXPECT_GE(x, 0.0);
            EXPECT_LE(x, 1.0 + 1e-9);
            total += x;
        }
    }
    EXPECT_GT(total, 0.0);
    EXPECT_EQ(session.evictor(), nullptr);
    // The answer nowhere in the prompt: no copy mass anywhere.
    std::vector<int32_t> clean = random_tokens(120, 5, model.config().n_vocab);
    for (int32_t& t : clean) {
        if (std::find(ids.begin(), ids.end(), t) != ids.end()) t = 3;
    }
    EvalItem none = item_with(clean, 4);
    none.references = {answer};
    const policy::HeadImportance z = estimate_head_importance(session, tok, {none}, HeadScoreOptions{});
    for (const auto& row : z.scores) {
        for (double x : row) EXPECT_EQ(x, 0.0);
    }
    EvalItem empty = item_with(clean, 4);
    empty.references.clear();
    EXPECT_THROW(estimate_head_importance(session, tok, {empty}, HeadScoreOptions{}), Error);
}

}  // namespace
}  // namespace kvec::eval
