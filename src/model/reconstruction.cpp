#include "model/reconstruction.h"

#include <string>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvec {

RepeatPrompts repeat_prompts(const gguf::File& file) {
    RepeatPrompts r;
    if (!file.has("tokenizer.ggml.model")) return r;
    const Tokenizer tok = Tokenizer::from_gguf(file);
    r.first = tok.encode("\n\nRepeat the previous context exactly.", false);
    r.later = tok.encode("\n\nRepeat the part of the previous context exactly, starting with", false);
    // The text a chat template puts after a user message: render one around a marker and keep what
    // follows it (kvpress does the same with a dummy context).
    std::string suffix = "\n";
    if (file.has("tokenizer.chat_template")) {
        const std::string marker = "\x01kvec-context\x01";
        try {
            const std::string text = tok.apply_chat_template({{"user", marker}}, true);
            const size_t at = text.find(marker);
            if (at != std::string::npos) suffix = text.substr(at + marker.size());
        } catch (const Error&) {
            // A template the tokenizer cannot render: no chat formatting, as for a file without one.
        }
    }
    r.suffix = tok.encode(suffix, false, /*parse_special=*/true);
    return r;
}

}  // namespace kvec
