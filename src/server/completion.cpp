#include "server/completion.h"

#include <algorithm>

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

KvReservation kv_reservation(const PreparedRequest& p, const Model& model, const SessionOptions& options,
                             int32_t n_ctx, int32_t reuse, size_t kept_bytes) {
    const ModelConfig& c = model.config();
    const Evictor* policy = p.request.kv.policy.get();
    const int64_t prompt = static_cast<int64_t>(p.prompt_tokens.size());
    const int64_t generated = p.request.max_tokens >= 0 ? p.request.max_tokens : std::max<int64_t>(0, n_ctx - prompt);
    const bool scores = policy != nullptr && policy->request().column_sums;
    const size_t entry = kv_row_bytes(options.kv_type_k, c.head_dim) + kv_row_bytes(options.kv_type_v, c.head_dim) +
                         sizeof(int32_t) + sizeof(float) * static_cast<size_t>(scores ? c.n_group() : 0);
    const auto bytes = [&](int64_t entries) {  // entries per head, with the decode growth
        entries = std::min<int64_t>(entries, n_ctx);
        entries += std::max<int64_t>(16, entries / 8);
        return static_cast<size_t>(int64_t{c.n_layer} * c.n_head_kv * entries) * entry;
    };
    KvReservation r;
    const auto plan = policy != nullptr ? policy->budget_plan(prompt) : std::nullopt;
    if (!plan) {
        r.peak = r.steady = bytes(prompt + generated);
        return r;
    }
    const int64_t budget = std::min<int64_t>(prompt, plan->budget);
    r.steady = bytes(budget + generated);
    if (reuse > 0) {  // the kept (compressed) conversation, then the rest of the prompt on top of it
        const int64_t rest = prompt - reuse;
        r.peak = std::max(kept_bytes + bytes(plan->chunked ? std::min<int64_t>(rest, options.n_batch) : rest),
                          r.steady);
        return r;
    }
    const int64_t held = plan->chunked ? std::min(prompt, budget + options.n_batch) : prompt;
    r.peak = std::max(bytes(held), r.steady);
    return r;
}

KvPicture kv_picture(const Session& session, int32_t n_prompt, bool runs) {
    const KvCache& kv = session.kv_cache();
    KvPicture p;
    p.n_prompt = n_prompt;
    if (n_prompt <= 0) return p;
    std::vector<uint8_t> any(static_cast<size_t>(n_prompt), 0);    // [n_prompt] kept by some head of some layer
    std::vector<uint8_t> layer(static_cast<size_t>(n_prompt), 0);  // [n_prompt] ... of this layer
    if (runs) p.runs.resize(static_cast<size_t>(kv.n_layer()));
    for (int l = 0; l < kv.n_layer(); ++l) {
        std::fill(layer.begin(), layer.end(), 0);
        for (int h = 0; h < kv.n_head_kv(); ++h) {
            const int32_t* pos = kv.positions(l, h);
            std::vector<int32_t> r;  // (start, length) pairs
            for (int32_t i = 0; i < kv.size(l, h) && pos[i] < n_prompt; ++i) {
                layer[static_cast<size_t>(pos[i])] = 1;
                if (!r.empty() && r[r.size() - 2] + r.back() == pos[i]) {
                    ++r.back();
                } else {
                    r.insert(r.end(), {pos[i], 1});
                }
            }
            if (runs) p.runs[static_cast<size_t>(l)].push_back(std::move(r));
        }
        int64_t kept = 0;
        for (size_t i = 0; i < layer.size(); ++i) {
            kept += layer[i];
            any[i] |= layer[i];
        }
        p.layer_coverage.push_back(static_cast<double>(kept) / n_prompt);
    }
    p.coverage = static_cast<double>(std::count(any.begin(), any.end(), 1)) / n_prompt;
    return p;
}

CompletionResult run_completion(const PreparedRequest& p, const Tokenizer& tokenizer, SlotLease& lease,
                                StepScheduler& scheduler, const std::function<bool(std::string_view)>& on_text,
                                const std::function<bool()>& gone) {
    Slot& slot = lease.slot();
    Session& session = *slot.session;
    // The policy attached for this generation: the kept conversation's, or the request's. The
    // slot keeps nothing while it generates, so a failure leaves it to be emptied on release.
    Slot::Kept policy = lease.reuse() > 0 && slot.kept ? *slot.kept : Slot::Kept{p.request.kv.spec, p.request.kv.policy};
    const int32_t reuse = lease.reuse() > 0 && slot.kept ? lease.reuse() : 0;
    slot.kept.reset();
    if (reuse == 0) {
        session.reset();
        session.set_evictor(policy.policy.get());
    }
    Generator generator(session, tokenizer);

    GenerateOptions g = p.options;
    g.reuse = reuse;
    bool listening = true;
    g.scheduler = &scheduler;
    int steps = 0;
    g.keep_going = [&] {
        slot.publish_kv_bytes();
        if (++steps == 2) lease.settle();  // before the first decode step: the prompt is in and evicted
        if (listening && gone && gone()) listening = false;
        return listening;
    };
    bool prefill_stopped = false;  // the session holds part of the prompt: not a conversation to keep
    if (gone) g.stop_prefill = [&] { return prefill_stopped = gone(); };
    Timer timer;
    const GenerationResult r = generator.generate_from_tokens(p.prompt_tokens, g, [&](std::string_view text) {
        if (listening && on_text && !on_text(text)) listening = false;
    });
    slot.publish_kv_bytes();
    if (p.request.kv.reuse && !prefill_stopped && session.eviction_stats().repositioned == 0) slot.kept = policy;

    CompletionResult out;
    out.seconds = timer.seconds();
    out.text = r.text;
    out.reason = r.stats.stop_reason;
    out.prompt_tokens = r.stats.n_prompt;
    out.completion_tokens = r.stats.n_generated;
    out.cached_tokens = r.stats.n_reused;
    out.kv = kv_report(session, policy.policy.get(), r.stats);
    out.picture = kv_picture(session, r.stats.n_prompt, p.request.kv.map);
    out.kv_spec = policy.spec;
    out.slot = slot.id;
    return out;
}

}  // namespace kvec::server
