// Chat-template rendering: the input is a template's Jinja source (what tokenizer.chat_template
// holds), optionally followed by a NUL byte and a message text; rendering a conversation with it
// either works or throws kvec::Error (an unknown template).
#include <memory>
#include <vector>

#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

// A tiny byte-level vocabulary with BOS and EOS: rendering reads only their texts, and building a
// Tokenizer from a full vocabulary on every input made this harness run at 3 inputs a second.
const kvec::VocabData& base_vocab() {
    static const kvec::VocabData d = [] {
        kvec::VocabData v;
        v.model = "gpt2";
        v.pre = "gpt-2";
        v.tokens = {"a", "b", "ab", "<s>", "</s>", "<|im_end|>"};
        v.types = {kvec::TokenType::NORMAL, kvec::TokenType::NORMAL, kvec::TokenType::NORMAL,
                   kvec::TokenType::CONTROL, kvec::TokenType::CONTROL, kvec::TokenType::CONTROL};
        v.merges = {"a b"};
        v.bos_id = 3;
        v.eos_id = 4;
        return v;
    }();
    return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 65536) return 0;
    const std::string_view all = kvec::fuzz::as_text(data, size);
    const size_t nul = all.find('\0');
    kvec::VocabData d = base_vocab();
    d.chat_template = std::string(all.substr(0, nul));
    const std::string content = nul == std::string_view::npos ? std::string("Hi {{ there }} <|im_end|>")
                                                              : std::string(all.substr(nul + 1));
    try {
        const kvec::Tokenizer tok(std::move(d));
        const std::vector<kvec::ChatMessage> msgs = {
            {"system", "Be brief."}, {"user", content}, {"assistant", "Sure."}, {"user", content}};
        volatile size_t sink = tok.apply_chat_template(msgs, true).size() +
                               tok.apply_chat_template({{"user", content}}, false).size();
        (void)sink;
    } catch (const kvec::Error&) {
    }
    return 0;
}
