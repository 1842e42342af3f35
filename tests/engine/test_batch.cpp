// Continuous batching: Session::decode_batch gives every session what its own decode step gives
// (its own cache, policy, positions and cache types), and StepScheduler batches the decode steps
// of generations running on several threads without changing their tokens.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/generator.h"
#include "engine/step_scheduler.h"
#include "model/model.h"
#include "policy/registry.h"
#include "test_helpers.h"
#include "util/error.h"

namespace kvec {
namespace {

using namespace testing_helpers;

const Model& llama_model() {
    static const auto m = Model::load(write_model(tiny_spec(), "batch-llama.gguf"));
    return *m;
}

const Model& gemma_model() {  // 3 sliding-window layers (window 8) and a global one
    static const auto m = [] {
        RandomModelSpec s = random_model_preset("gemma3-test");
        s.n_layer = 4;
        s.swa_pattern = 4;
        s.sliding_window = 8;
        s.n_embd = 128;
        s.n_head = 4;
        s.n_head_kv = 2;
        s.head_dim = 32;
        s.n_ff = 256;
        s.n_vocab = 512;
        s.n_ctx = 512;
        return Model::load(write_model(s, "batch-gemma3.gguf"));
    }();
    return *m;
}

const Model& gptoss_model() {  // sinks, YaRN, layer 0 sliding-window (window 32), biased experts
    static const auto m = [] {
        RandomModelSpec s = random_model_preset("gpt-oss-test");
        s.n_vocab = 512;
        s.n_ctx = 512;
        return Model::load(write_model(s, "batch-gptoss.gguf"));
    }();
    return *m;
}

std::vector<int32_t> some_tokens(int n, int seed) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 37 + seed * 11 + 5) % 512;
    return t;
}

// One sequence of the batch: its policy, prompt length and cache types.
struct SequenceSpec {
    std::string policy;  // "" = full cache
    int prompt;
    KvType kv_type = KvType::F32;
};

// A session set up for a spec (prefilled), with its policy object.
struct Sequence {
    std::unique_ptr<Evictor> policy;
    std::unique_ptr<Session> session;
};

Sequence start(const Model& model, const SequenceSpec& spec, int seed) {
    Sequence s;
    SessionOptions o;
    o.kv_type_k = o.kv_type_v = spec.kv_type;
    o.n_batch = 16;  // prompts run as several chunks
    s.session = std::make_unique<Session>(model, o);
    if (!spec.policy.empty()) {
        s.policy = policy::make_policy(spec.policy);
        s.session->set_evictor(s.policy.get());
    }
    s.session->prefill(some_tokens(spec.prompt, seed));
    return s;
}

float max_abs_diff(std::span<const float> a, std::span<const float> b) {
    float m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

// Decodes `steps` tokens on every spec twice, alone and batched, and compares logits, positions
// and what every (layer, KV head) of the caches holds.
void expect_batch_matches_alone_on(const Model& model, const std::vector<SequenceSpec>& specs, int steps) {
    std::vector<Sequence> alone, batched;
    for (size_t i = 0; i < specs.size(); ++i) {
        alone.push_back(start(model, specs[i], static_cast<int>(i)));
        batched.push_back(start(model, specs[i], static_cast<int>(i)));
    }
    std::vector<Session*> sessions;
    for (Sequence& s : batched) sessions.push_back(s.session.get());
    for (int step = 0; step < steps; ++step) {
        std::vector<int32_t> tokens;  // [B] the next token of each sequence
        for (size_t i = 0; i < specs.size(); ++i) tokens.push_back(static_cast<int32_t>((step * 53 + i * 101 + 7) % 512));
        Session::decode_batch(sessions, tokens);
        for (size_t i = 0; i < specs.size(); ++i) {
            SCOPED_TRACE("sequence " + std::to_string(i) + " (" + specs[i].policy + "), step " + std::to_string(step));
            Session& a = *alone[i].session;
            const Session& b = *sessions[i];
            const std::span<const float> expected = a.decode(tokens[i]);
            ASSERT_LT(max_abs_diff(expected, b.last_logits()), 1e-4f);
            ASSERT_EQ(a.n_past(), b.n_past());
            ASSERT_EQ(a.tokens(), b.tokens());
            for (int l = 0; l < a.kv_cache().n_layer(); ++l) {
                for (int h = 0; h < a.kv_cache().n_head_kv(); ++h) {
                    const int32_t n = a.kv_cache().size(l, h);
                    ASSERT_EQ(n, b.kv_cache().size(l, h)) << "layer " << l << " head " << h;
                    const std::vector<int32_t> pa(a.kv_cache().positions(l, h), a.kv_cache().positions(l, h) + n);
                    const std::vector<int32_t> pb(b.kv_cache().positions(l, h), b.kv_cache().positions(l, h) + n);
                    ASSERT_EQ(pa, pb) << "layer " << l << " head " << h;
                }
            }
        }
    }
}

// Both ways a batched step runs its attention (Session::attention): with 2 threads the sequences
// are shared out over the threads, with more threads than sequences each one uses them all.
void expect_batch_matches_alone(const Model& model, const std::vector<SequenceSpec>& specs, int steps) {
    const int threads = omp_get_max_threads();
    for (const int t : {2, static_cast<int>(specs.size()) + 1}) {
        SCOPED_TRACE(std::to_string(t) + " threads");
        omp_set_num_threads(t);
        expect_batch_matches_alone_on(model, specs, steps);
        omp_set_num_threads(threads);
        if (::testing::Test::HasFatalFailure()) return;
    }
}

TEST(DecodeBatch, EverySequenceGetsItsOwnDecodeStep) {
    // Full cache, budgets kept while decoding (window scores from recent queries), queries
    // before RoPE (Expected Attention), re-positioning (StreamingLLM's re-rotation), and caches
    // of other element types, all in one batch.
    expect_batch_matches_alone(llama_model(),
                               {{"", 21},
                                {"kvec:budget=24,window=4,decode=3", 45},
                                {"h2o:budget=20,window=4,decode=2", 33, KvType::F16},
                                {"expected-attention:budget=24", 40},
                                {"streaming:budget=16,sinks=2,decode=4,rerotate=true", 30},
                                {"snapkv:budget=16,window=4", 18, KvType::Q8_0}},
                               12);
}

TEST(DecodeBatch, SlidingWindowLayersKeepTheirWindowPerSequence) {
    // 36 steps: the sliding-window layers drop their oldest entries while decoding (32 at a time).
    expect_batch_matches_alone(gemma_model(), {{"", 40}, {"snapkv:budget=16,window=4", 50}, {"", 9}}, 36);
}

TEST(DecodeBatch, GptOssSinksWindowAndExpertsPerSequence) {
    // Each sequence's queries meet its own cache with the sinks, its sliding window and its own
    // experts (the batch's tokens route to different experts).
    expect_batch_matches_alone(
        gptoss_model(), {{"", 40}, {"snapkv:budget=16,window=4", 50}, {"", 9, KvType::Q8_0}}, 30);
}

TEST(DecodeBatch, ABatchOfOneIsDecode) {
    Sequence a = start(llama_model(), {"", 10}, 1), b = start(llama_model(), {"", 10}, 1);
    const std::span<const float> decoded = a.session->decode(5);
    const std::vector<float> one(decoded.begin(), decoded.end());
    Session* s = b.session.get();
    const int32_t token = 5;
    Session::decode_batch(std::span<Session* const>(&s, 1), std::span<const int32_t>(&token, 1));
    EXPECT_EQ(max_abs_diff(one, s->last_logits()), 0.0f);
}

TEST(DecodeBatch, RefusesBadBatchesBeforeChangingAnything) {
    Sequence a = start(llama_model(), {"", 10}, 1), b = start(llama_model(), {"", 12}, 2);
    Sequence other = start(gemma_model(), {"", 10}, 1);
    const auto error_of = [](std::vector<Session*> sessions, std::vector<int32_t> tokens) -> std::string {
        try {
            Session::decode_batch(sessions, tokens);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    };
    Session* sa = a.session.get();
    Session* sb = b.session.get();
    EXPECT_NE(error_of({sa, sb}, {1}).find("one token per session"), std::string::npos);
    EXPECT_NE(error_of({}, {}).find("one token per session"), std::string::npos);
    EXPECT_NE(error_of({sa, sa}, {1, 2}).find("twice"), std::string::npos);
    EXPECT_NE(error_of({sa, other.session.get()}, {1, 2}).find("different models"), std::string::npos);
    EXPECT_NE(error_of({sa, sb}, {1, 9999}).find("outside the model's vocabulary"), std::string::npos);
    std::vector<Session*> many(17, sa);  // more than n_batch = 16
    EXPECT_NE(error_of(many, std::vector<int32_t>(17, 1)).find("exceeds the batch size"), std::string::npos);
    EXPECT_EQ(sa->n_past(), 10);  // nothing ran
    EXPECT_EQ(sb->n_past(), 12);
    EXPECT_EQ(sa->kv_cache().size(0, 0), 10);
}

// Generations on several threads under one scheduler: the same tokens as one after the other,
// with their decode steps batched.
TEST(StepScheduler, ConcurrentGenerationsBatchAndKeepTheirTokens) {
    const Model& model = llama_model();
    const Tokenizer tokenizer = Tokenizer::from_gguf(model.file());
    const std::vector<std::string> prompts = {"Once upon a time", "The sea was calm and", "In the beginning",
                                              "Call me Ishmael. Some years ago, never mind how long"};
    const std::vector<std::string> policies = {"", "snapkv:budget=8,window=2", "h2o:budget=8,window=2,decode=2", ""};
    const auto options = [&](size_t i) {
        GenerateOptions o;
        o.prompt = prompts[i];
        o.n_predict = 12;
        o.sampling.temperature = 0.0f;
        return o;
    };
    const auto session_options = [] {
        SessionOptions so;
        so.n_batch = 4;  // the longer prompts run as several chunks, between decode batches
        return so;
    };
    std::vector<std::vector<int32_t>> expected;
    for (size_t i = 0; i < prompts.size(); ++i) {
        Session s(model, session_options());
        const auto policy = policies[i].empty() ? nullptr : policy::make_policy(policies[i]);
        s.set_evictor(policy.get());
        expected.push_back(Generator(s, tokenizer).generate(options(i)).tokens);
    }

    // A long gather wait: a batch starts once every decoding generation has queued its step.
    StepScheduler scheduler(std::chrono::seconds(2));
    std::vector<std::vector<int32_t>> got(prompts.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < prompts.size(); ++i) {
        threads.emplace_back([&, i] {
            Session s(model, session_options());
            const auto policy = policies[i].empty() ? nullptr : policy::make_policy(policies[i]);
            s.set_evictor(policy.get());
            GenerateOptions o = options(i);
            o.scheduler = &scheduler;
            got[i] = Generator(s, tokenizer).generate(o).tokens;
        });
    }
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(got, expected);
    const StepScheduler::Stats st = scheduler.stats();
    int64_t decoded = 0;
    for (const auto& t : expected) decoded += static_cast<int64_t>(t.size()) - 1;  // the last token needs no step
    EXPECT_EQ(st.sequences, decoded);
    EXPECT_GE(st.largest, 2);
    EXPECT_LT(st.batches, decoded);
    EXPECT_GE(st.exclusive, static_cast<int64_t>(prompts.size()));  // a prefill step at least each
}

// An error of one generation's step (a token the model does not have) stays its own.
TEST(StepScheduler, AnErrorStaysWithItsSession) {
    Sequence a = start(llama_model(), {"", 10}, 1);
    StepScheduler scheduler;
    EXPECT_THROW(scheduler.decode(*a.session, 99999), Error);
    EXPECT_EQ(a.session->n_past(), 10);
    const std::span<const float> logits = scheduler.decode(*a.session, 3);
    EXPECT_EQ(logits.size(), 512u);
    EXPECT_EQ(a.session->n_past(), 11);
}

}  // namespace
}  // namespace kvec
