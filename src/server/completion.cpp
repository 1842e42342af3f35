#include "server/completion.h"

#include "server/api_error.h"
#include "util/error.h"
#include "util/timer.h"

namespace kvec::server {

PreparedRequest prepare_request(CompletionRequest request, const Tokenizer& tokenizer, int32_t n_ctx) {
    PreparedRequest p;
    GenerateOptions& g = p.options;
    g.chat = request.endpoint == Endpoint::Chat;
    g.messages = request.messages;
    g.prompt = request.prompt;
    g.n_predict = request.max_tokens;
    g.stop = request.stop;
    g.sampling = request.sampling;
    try {
        p.prompt_tokens = tokenize_prompt(tokenizer, g);
    } catch (const Error& e) {
        bad_request("invalid_prompt", "the prompt cannot be tokenized: {}", e.what());
    }
    if (p.prompt_tokens.empty()) bad_request("empty_prompt", "the prompt is empty (no tokens)");
    if (static_cast<int64_t>(p.prompt_tokens.size()) > n_ctx) {
        bad_request("context_length_exceeded", "the prompt has {} tokens but the context holds {} (the server's -c)",
                    p.prompt_tokens.size(), n_ctx);
    }
    p.request = std::move(request);
    return p;
}

CompletionResult run_completion(const PreparedRequest& p, const Tokenizer& tokenizer, Slot& slot,
                                std::mutex& forward_mutex, const std::function<bool(std::string_view)>& on_text) {
    Session& session = *slot.session;
    session.reset();
    session.set_evictor(p.request.kv.policy.get());
    Generator generator(session, tokenizer);

    GenerateOptions g = p.options;
    bool listening = true;
    g.forward_mutex = &forward_mutex;
    g.keep_going = [&] {
        slot.publish_kv_bytes();
        return listening;
    };
    Timer timer;
    const GenerationResult r = generator.generate_from_tokens(p.prompt_tokens, g, [&](std::string_view text) {
        if (listening && on_text && !on_text(text)) listening = false;
    });
    slot.publish_kv_bytes();

    CompletionResult out;
    out.seconds = timer.seconds();
    out.text = r.text;
    out.reason = r.stats.stop_reason;
    out.prompt_tokens = r.stats.n_prompt;
    out.completion_tokens = r.stats.n_generated;
    out.kv = kv_report(session, p.request.kv.policy.get(), r.stats);
    out.kv_spec = p.request.kv.spec;
    out.slot = slot.id;
    return out;
}

}  // namespace kvec::server
