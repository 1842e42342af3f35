// Chat-template rendering: the input is a template's Jinja source (what tokenizer.chat_template
// holds), optionally followed by a NUL byte and a message text; rendering a conversation with it
// either works or throws kvec::Error (an unknown template).
#include <memory>
#include <vector>

#include "fuzz_common.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

const kvec::VocabData& base_vocab() {
    static const kvec::VocabData d = [] {
        auto f = kvec::gguf::File::open(kvec::fuzz::source_path("data/tokenizer-vectors/ggml-vocab-llama-spm.gguf"));
        return kvec::Tokenizer::from_gguf(*f).data();
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
