// Tokenizer encode/decode on any text: the SentencePiece (llama-spm) and byte-level BPE (gpt-2)
// vocabularies of the source tree. First byte: vocabulary and flags; the rest: the text, then its
// bytes as token ids for decode and the stream decoder.
#include <memory>
#include <vector>

#include "fuzz_common.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace {

const kvec::Tokenizer& vocab(int which) {
    static std::unique_ptr<kvec::Tokenizer> t[2];
    if (!t[which]) {
        const char* name = which == 0 ? "llama-spm" : "gpt-2";
        auto f = kvec::gguf::File::open(kvec::fuzz::source_path(std::string("data/tokenizer-vectors/ggml-vocab-") + name + ".gguf"));
        t[which] = std::make_unique<kvec::Tokenizer>(kvec::Tokenizer::from_gguf(*f));
    }
    return *t[which];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1 || size > 16384) return 0;
    const uint8_t flags = data[0];
    const kvec::Tokenizer& tok = vocab(flags & 1);
    const std::string_view text = kvec::fuzz::as_text(data + 1, size - 1);
    try {
        const std::vector<int32_t> ids = tok.encode(text, (flags & 2) != 0, (flags & 4) != 0);
        const std::string back = tok.decode(ids, (flags & 8) != 0);
        // Without special tokens, SPM and byte-level BPE are lossless on valid UTF-8 text: not
        // asserted (normalisation differs per vocabulary), but decoded.
        volatile size_t sink = back.size();
        (void)sink;
        // Arbitrary ids (two bytes each, taken modulo the vocabulary) through decode and the stream decoder.
        std::vector<int32_t> raw;
        for (size_t i = 1; i + 1 < size; i += 2) raw.push_back((data[i] | (data[i + 1] << 8)) % tok.n_vocab());
        kvec::StreamDecoder d(tok);
        std::string streamed;
        for (int32_t id : raw) streamed += d.push(id);
        streamed += d.flush();
        sink = streamed.size() + tok.decode(raw, true).size();
    } catch (const kvec::Error&) {
    }
    return 0;
}
