#include <gtest/gtest.h>

#include "engine/generator.h"
#include "model/model.h"
#include "policy/registry.h"
#include "test_helpers.h"
#include "util/error.h"

namespace kvec {
namespace {

using namespace testing_helpers;

struct Fixture {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
};

const Fixture& fixture() {
    static Fixture f = [] {
        Fixture x;
        x.model = Model::load(write_model(tiny_spec(), "engine-tiny.gguf"));
        x.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(x.model->file()));
        return x;
    }();
    return f;
}

GenerateOptions greedy(int n) {
    GenerateOptions o;
    o.prompt = "Once upon a time";
    o.n_predict = n;
    o.sampling.temperature = 0.0f;
    return o;
}

TEST(Generator, GreedyGenerationStreamsAndCounts) {
    Session s(*fixture().model);
    Generator g(s, *fixture().tokenizer);
    std::string streamed;
    const auto r = g.generate(greedy(12), [&](std::string_view t) { streamed += t; });
    EXPECT_EQ(r.text, streamed);
    EXPECT_EQ(r.prompt_tokens.front(), fixture().tokenizer->bos());  // the SPM vocabulary adds BOS
    EXPECT_EQ(r.stats.n_prompt, static_cast<int32_t>(r.prompt_tokens.size()));
    if (r.stats.stop_reason == StopReason::Length) {
        EXPECT_EQ(r.stats.n_generated, 12);
        EXPECT_EQ(r.stats.n_decoded, 11);  // the last token needs no forward pass
    }
    StreamDecoder d(*fixture().tokenizer);  // the stream is the tokens' text, UTF-8 completed
    std::string expected;
    for (int32_t id : r.tokens) expected += d.push(id);
    expected += d.flush();
    EXPECT_EQ(r.text, expected);
    EXPECT_GT(r.stats.kv_bytes, 0u);
    EXPECT_EQ(r.stats.kv_entries, int64_t{2} * 2 * (r.stats.n_prompt + r.stats.n_decoded));
    EXPECT_GE(r.stats.kv_peak_bytes, r.stats.kv_bytes);

    // Greedy is deterministic; the same run gives the same tokens.
    const auto again = g.generate(greedy(12));
    EXPECT_EQ(again.tokens, r.tokens);
}

TEST(Generator, KeepGoingStopsBeforeTheNextForwardStep) {
    Session s(*fixture().model);
    Generator g(s, *fixture().tokenizer);
    GenerateOptions o = greedy(20);
    int calls = 0;
    o.keep_going = [&] { return ++calls <= 3; };  // the prefill and two decode steps
    StepScheduler scheduler;
    o.scheduler = &scheduler;
    const auto r = g.generate(o);
    EXPECT_EQ(r.stats.stop_reason, StopReason::Cancelled);
    EXPECT_EQ(calls, 4);
    EXPECT_EQ(r.stats.n_decoded, 2);
    EXPECT_EQ(r.stats.n_generated, 3);  // sampled after the prefill and after each decode step
    EXPECT_STREQ(stop_reason_name(r.stats.stop_reason), "cancelled");
    // The tokens are those of an uncancelled run, cut.
    const auto full = g.generate(greedy(20));
    ASSERT_GE(full.tokens.size(), 3u);
    EXPECT_EQ(r.tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + 3));
    // Cancelled before the prefill: nothing runs.
    o.keep_going = [] { return false; };
    const auto none = g.generate(o);
    EXPECT_EQ(none.stats.stop_reason, StopReason::Cancelled);
    EXPECT_EQ(none.stats.n_generated, 0);
    EXPECT_EQ(s.kv_cache().bytes(), 0u);
}

// stop_prefill is asked before each chunk of the prompt: a long prompt stops between chunks, the
// chunks before in the cache, nothing generated; the session then serves the next generation.
TEST(Generator, StopPrefillStopsBetweenChunks) {
    SessionOptions so;
    so.n_batch = 8;
    Session s(*fixture().model, so);
    Generator g(s, *fixture().tokenizer);
    GenerateOptions o = greedy(4);
    o.prompt = "Once upon a time there was a lighthouse keeper who counted the steps every evening";
    int calls = 0;
    o.stop_prefill = [&] { return ++calls == 3; };  // two chunks run, the third is stopped
    const auto r = g.generate(o);
    ASSERT_GT(r.stats.n_prompt, 3 * so.n_batch) << "the prompt must run as more than three chunks";
    EXPECT_EQ(r.stats.stop_reason, StopReason::Cancelled);
    EXPECT_EQ(calls, 3);
    EXPECT_EQ(r.stats.n_generated, 0);
    EXPECT_EQ(s.n_past(), 2 * so.n_batch);  // the session ends before the stopped chunk
    EXPECT_EQ(s.tokens().size(), static_cast<size_t>(2 * so.n_batch));
    EXPECT_EQ(s.kv_cache().size(0, 0), 2 * so.n_batch);
    // Never stopping changes nothing, with or without a scheduler.
    GenerateOptions plain = o;
    plain.stop_prefill = {};
    const std::vector<int32_t> expected = g.generate(plain).tokens;
    EXPECT_FALSE(expected.empty());
    StepScheduler scheduler;
    for (StepScheduler* sched : {static_cast<StepScheduler*>(nullptr), &scheduler}) {
        GenerateOptions again = o;
        again.stop_prefill = [] { return false; };
        again.scheduler = sched;
        EXPECT_EQ(g.generate(again).tokens, expected);
    }
}

TEST(Generator, StopStringCutsTheOutput) {
    Session s(*fixture().model);
    Generator g(s, *fixture().tokenizer);
    const auto full = g.generate(greedy(24));
    ASSERT_GE(full.text.size(), 6u);
    GenerateOptions o = greedy(24);
    const std::string stop = full.text.substr(full.text.size() / 2, 3);
    o.stop = {stop};
    const auto cut = g.generate(o);
    EXPECT_EQ(cut.stats.stop_reason, StopReason::StopString);
    EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
}

TEST(Generator, SeededSamplingIsReproducible) {
    Session s(*fixture().model);
    Generator g(s, *fixture().tokenizer);
    GenerateOptions o = greedy(16);
    o.sampling.temperature = 1.0f;
    o.sampling.seed = 1234;
    const auto a = g.generate(o), b = g.generate(o);
    EXPECT_EQ(a.tokens, b.tokens);
    o.sampling.seed = 99;
    EXPECT_NE(g.generate(o).tokens, a.tokens);
}

TEST(Generator, PromptLongerThanContextIsAClearError) {
    SessionOptions so;
    so.n_ctx = 4;
    Session s(*fixture().model, so);
    Generator g(s, *fixture().tokenizer);
    try {
        g.generate(greedy(4));
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("context holds 4"), std::string::npos) << e.what();
    }
}

TEST(Generator, ContextFullStopsGeneration) {
    SessionOptions so;
    so.n_ctx = 12;
    Session s(*fixture().model, so);
    Generator g(s, *fixture().tokenizer);
    GenerateOptions o = greedy(-1);
    const auto r = g.generate(o);
    if (r.stats.stop_reason != StopReason::EndOfGeneration) {
        EXPECT_EQ(r.stats.stop_reason, StopReason::ContextFull);
        EXPECT_EQ(r.stats.n_prompt + r.stats.n_decoded, 12);
    }
}

// -n -1 stops at a full context even when decode-time eviction with re-rotation keeps the
// positions from ever running out (issue 23: StreamingLLM's rerotate=true never stopped).
TEST(Generator, UnlimitedGenerationStopsAtAFullContextWithReRotation) {
    SessionOptions so;
    so.n_ctx = 24;
    Session s(*fixture().model, so);
    std::unique_ptr<Evictor> ev = policy::make_policy("streaming:budget=8,sinks=2,decode=1,rerotate=true");
    s.set_evictor(ev.get());
    Generator g(s, *fixture().tokenizer);
    GenerateOptions o = greedy(-1);
    int pieces = 0;
    const auto r = g.generate(o, [&](std::string_view) {
        if (++pieces > 200) throw std::runtime_error("generation did not stop at a full context");
    });
    if (r.stats.stop_reason != StopReason::EndOfGeneration) {
        EXPECT_EQ(r.stats.stop_reason, StopReason::ContextFull);
        EXPECT_EQ(r.stats.n_prompt + r.stats.n_decoded, 24);  // as without eviction (ContextFullStopsGeneration)
    }
}

TEST(Generator, EvictionKeepsTheCacheSmall) {
    SinkRecentEvictor ev(2, 4);
    Session s(*fixture().model);
    s.set_evictor(&ev);
    Generator g(s, *fixture().tokenizer);
    GenerateOptions o = greedy(5);
    o.prompt = "The quick brown fox jumps over the lazy dog, again and again and again.";
    const auto r = g.generate(o);
    ASSERT_GT(r.stats.n_prompt, 6);
    EXPECT_EQ(r.stats.kv_entries, int64_t{2} * 2 * (6 + r.stats.n_decoded));
}

}  // namespace
}  // namespace kvec
