#include "engine/generator.h"


#include <algorithm>
#include <optional>
#include <span>

#include "engine/stop_strings.h"
#include "util/error.h"
#include "util/timer.h"

namespace kvec {

const char* stop_reason_name(StopReason r) {
    switch (r) {
        case StopReason::EndOfGeneration: return "end of generation";
        case StopReason::StopString: return "stop string";
        case StopReason::Length: return "token limit";
        case StopReason::ContextFull: return "context full";
        case StopReason::Cancelled: return "cancelled";
    }
    return "?";
}

void check_tokenizer_fits(const Tokenizer& tokenizer, int32_t model_vocab) {
    if (tokenizer.n_vocab() > model_vocab) {
        fail("the tokenizer has {} tokens but the model's vocabulary only {}", tokenizer.n_vocab(), model_vocab);
    }
}

Generator::Generator(Session& session, const Tokenizer& tokenizer) : session_(session), tokenizer_(tokenizer) {
    check_tokenizer_fits(tokenizer, session.n_vocab());
}

std::vector<int32_t> Generator::tokenize_prompt(const GenerateOptions& o) const {
    return kvec::tokenize_prompt(tokenizer_, o);
}

std::vector<int32_t> tokenize_prompt(const Tokenizer& tokenizer, const GenerateOptions& o) {
    std::string text = o.prompt;
    if (o.chat) {
        std::vector<ChatMessage> messages = o.messages;
        if (messages.empty()) {
            if (!o.system_prompt.empty()) messages.push_back({"system", o.system_prompt});
            messages.push_back({"user", o.prompt});
        }
        text = tokenizer.apply_chat_template(messages, true);
    }
    std::vector<int32_t> tokens = tokenizer.encode(text, /*add_special=*/true, o.parse_special || o.chat);
    // A template that writes the BOS text itself would otherwise give two BOS tokens.
    const int32_t bos = tokenizer.bos();
    if (bos >= 0 && tokens.size() >= 2 && tokens[0] == bos && tokens[1] == bos) tokens.erase(tokens.begin());
    return tokens;
}

GenerationResult Generator::generate(const GenerateOptions& o,
                                     const std::function<void(std::string_view)>& on_text) {
    return generate_from_tokens(tokenize_prompt(o), o, on_text);
}

GenerationResult Generator::generate_from_tokens(const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                                 const std::function<void(std::string_view)>& on_text) {
    if (prompt.empty()) fail("the prompt is empty (no tokens)");
    if (static_cast<int64_t>(prompt.size()) > session_.n_ctx()) {
        fail("the prompt has {} tokens but the context holds {}: use a larger -c (the model was trained "
             "with {}) or a shorter prompt", prompt.size(), session_.n_ctx(), session_.model().config().n_ctx_train);
    }
    Sampler sampler(o.sampling);
    GenerationResult r;
    r.prompt_tokens = prompt;
    GenerationStats& st = r.stats;
    st.n_prompt = static_cast<int32_t>(prompt.size());
    auto emit = [&](const std::string& s) {
        if (s.empty()) return;
        r.text += s;
        if (on_text) on_text(s);
    };

    // Under a scheduler, the prefill's chunks take turns with other generations' decode batches
    // (the session's step gate, for this generation only) and each decode step joins a batch.
    // The gate also asks stop_prefill before each chunk.
    struct PrefillStopped {};
    struct Gate {
        Session* session = nullptr;
        ~Gate() {
            if (session != nullptr) session->set_step_gate({});
        }
    } gate;
    if (o.scheduler != nullptr || o.stop_prefill) {
        session_.set_step_gate([s = o.scheduler, &stop = o.stop_prefill](const std::function<void()>& run) {
            if (stop && stop()) throw PrefillStopped{};
            if (s != nullptr) {
                s->run_exclusive(run);
            } else {
                run();
            }
        });
        gate.session = &session_;
    }
    std::optional<StepScheduler::Decoding> decoding;  // from the first decode step on
    auto decode = [&](int32_t id) {
        return o.scheduler != nullptr ? o.scheduler->decode(session_, id) : session_.decode(id);
    };
    auto cancelled = [&] { return o.keep_going && !o.keep_going(); };

    const auto reuse = static_cast<size_t>(o.reuse);
    if (o.reuse < 0 || reuse >= prompt.size() || reuse > session_.tokens().size() ||
        !std::equal(prompt.begin(), prompt.begin() + o.reuse, session_.tokens().begin())) {
        fail("cannot reuse {} tokens of the session for a prompt of {} tokens: the session holds {} tokens and "
             "must start with them", o.reuse, prompt.size(), session_.tokens().size());
    }
    if (o.reuse > 0) {
        session_.rollback(o.reuse);
    } else {
        session_.reset();
    }
    st.n_reused = o.reuse;
    if (cancelled()) {
        st.stop_reason = StopReason::Cancelled;
        return r;
    }
    Timer timer;
    const std::span<const int32_t> fresh = std::span<const int32_t>(prompt).subspan(reuse);
    std::span<const float> logits;
    try {
        logits = session_.prefill(fresh);
    } catch (const PrefillStopped&) {  // between two chunks: those before it are in the cache
        st.prompt_seconds = timer.seconds();
        st.stop_reason = StopReason::Cancelled;
        return r;
    }
    st.prompt_seconds = timer.seconds();
    st.kv_prompt_bytes = session_.kv_cache().bytes();
    st.kv_prompt_entries = session_.kv_cache().total_entries();
    st.kv_prompt_peak_bytes = session_.kv_cache().peak_bytes();

    if (o.scheduler != nullptr) decoding.emplace(*o.scheduler);
    std::vector<int32_t> history = prompt;  // for the repetition penalty
    StreamDecoder decoder(tokenizer_);
    StopStrings stops(o.stop);
    while (true) {
        if (o.n_predict >= 0 && st.n_generated >= o.n_predict) {
            st.stop_reason = StopReason::Length;
            break;
        }
        timer.reset();
        const int32_t id = sampler.sample(logits, history);
        st.sample_seconds += timer.seconds();
        if (tokenizer_.is_end_of_generation(id)) {
            st.stop_reason = StopReason::EndOfGeneration;
            break;
        }
        ++st.n_generated;
        history.push_back(id);
        r.tokens.push_back(id);
        emit(stops.push(decoder.push(id)));
        if (stops.stopped()) {
            st.stop_reason = StopReason::StopString;
            break;
        }
        if (o.n_predict >= 0 && st.n_generated >= o.n_predict) {
            st.stop_reason = StopReason::Length;  // the last token needs no forward pass
            break;
        }
        // A full context: positions used up, or, with -1 (no token limit), as many tokens as the
        // context holds (prompt + decoded tokens, what n_past counts without eviction), so that an
        // evicting, re-rotating cache (whose positions never run out) still stops.
        if (session_.n_past() >= session_.n_ctx() ||
            (o.n_predict < 0 && int64_t{st.n_prompt} + st.n_decoded >= session_.n_ctx())) {
            st.stop_reason = StopReason::ContextFull;
            break;
        }
        if (cancelled()) {
            st.stop_reason = StopReason::Cancelled;
            break;
        }
        timer.reset();
        logits = decode(id);
        st.decode_seconds += timer.seconds();
        ++st.n_decoded;
    }
    if (!stops.stopped()) {
        emit(stops.push(decoder.flush()));
        emit(stops.flush());
    }
    st.kv_bytes = session_.kv_cache().bytes();
    st.kv_peak_bytes = session_.kv_cache().peak_bytes();
    st.kv_entries = session_.kv_cache().total_entries();
    return r;
}

}  // namespace kvec
