// Text generation: tokenize (BOS as the vocabulary asks; optional chat template), prefill in chunks
// (with the session's eviction policy, if any), then sample and decode token by token, streaming
// the text (complete UTF-8 only) until end-of-generation, a stop string, the token limit or a full
// context.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/step_scheduler.h"
#include "model/session.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace kvec {

struct GenerateOptions {
    std::string prompt;
    bool chat = false;               // wrap the prompt with the model's chat template
    std::string system_prompt;       // chat only; "" = none
    // chat only: the whole conversation (system, user, assistant turns) instead of system_prompt
    // and prompt; the template adds the assistant's generation prompt after it.
    std::vector<ChatMessage> messages;
    int32_t n_predict = 128;         // < 0: until end of generation or a full context
    std::vector<std::string> stop;   // stop strings (not included in the output)
    SamplerParams sampling;
    bool parse_special = true;       // special-token text in the prompt becomes the token
    // Called before every forward step (the prefill, each decode step) on the generating thread;
    // false stops the generation there (StopReason::Cancelled). A server stops a stream whose
    // client has gone, and reads the cache's size at each step.
    std::function<bool()> keep_going;
    // Asked before each forward step of the prompt's prefill (a long prompt runs as chunks of
    // n_batch); true stops the generation there, part of the prompt in the cache, nothing
    // generated (StopReason::Cancelled). A server stops the prefill of a client that has gone.
    std::function<bool()> stop_prefill;
    // When set, every forward step goes through it: the prefill chunk by chunk, each decode step
    // batched with those of the other generations under the same scheduler (kvec serve).
    StepScheduler* scheduler = nullptr;
    // The session already holds the first `reuse` prompt tokens (a conversation kept from an
    // earlier request, `kvec serve`): the session is rolled back to there (Session::rollback)
    // instead of reset, and only the rest of the prompt is prefilled. 0 <= reuse < prompt tokens,
    // and the session's tokens must start with them (kvec::Error otherwise).
    int32_t reuse = 0;
};

enum class StopReason { EndOfGeneration, StopString, Length, ContextFull, Cancelled };
const char* stop_reason_name(StopReason r);

struct GenerationStats {
    int32_t n_prompt = 0;            // prompt tokens
    int32_t n_reused = 0;            // of which taken from the session's cache (GenerateOptions::reuse)
    double prompt_seconds = 0;       // prefill time (eviction included)
    int32_t n_generated = 0;         // sampled tokens (end-of-generation token excluded)
    int32_t n_decoded = 0;           // decode steps run
    double decode_seconds = 0;       // time in decode steps
    double sample_seconds = 0;       // time in the sampler
    size_t kv_prompt_bytes = 0;      // cache bytes right after the prompt (after its eviction)
    int64_t kv_prompt_entries = 0;   // entries right after the prompt
    size_t kv_prompt_peak_bytes = 0; // largest cache allocation during the prompt
    size_t kv_bytes = 0;             // cache bytes at the end
    size_t kv_peak_bytes = 0;        // largest cache allocation during the run
    int64_t kv_entries = 0;          // entries at the end (all layers and heads)
    StopReason stop_reason = StopReason::Length;

    double prompt_tokens_per_second() const { return prompt_seconds > 0 ? n_prompt / prompt_seconds : 0; }
    double decode_tokens_per_second() const { return decode_seconds > 0 ? n_decoded / decode_seconds : 0; }
};

struct GenerationResult {
    std::string text;              // what was streamed
    std::vector<int32_t> prompt_tokens;
    std::vector<int32_t> tokens;   // generated tokens
    GenerationStats stats;
};

// kvec::Error unless every token of the tokenizer has a row in the model (what Generator checks;
// `kvec info` checks it too, so that it calls runnable only what `kvec run` runs).
void check_tokenizer_fits(const Tokenizer& tokenizer, int32_t model_vocab);

// The prompt as tokens (chat template applied if asked; one BOS at most): what Generator::generate
// runs. kvec::Error from the chat template (no template, a role it does not take).
std::vector<int32_t> tokenize_prompt(const Tokenizer& tokenizer, const GenerateOptions& options);

class Generator {
public:
    Generator(Session& session, const Tokenizer& tokenizer);

    // kvec::tokenize_prompt with this generator's tokenizer.
    std::vector<int32_t> tokenize_prompt(const GenerateOptions& options) const;

    // Resets the session (or rolls it back: GenerateOptions::reuse) and generates. on_text
    // receives the text as it becomes final.
    GenerationResult generate(const GenerateOptions& options,
                              const std::function<void(std::string_view)>& on_text = {});
    // The same from prompt tokens.
    GenerationResult generate_from_tokens(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                          const std::function<void(std::string_view)>& on_text = {});

private:
    Session& session_;
    const Tokenizer& tokenizer_;
};

}  // namespace kvec
