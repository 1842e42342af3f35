// Hugging Face tokenizer.json import (Tokenizer::from_hf): any bytes import or throw
// kvec::Error. The input is tokenizer.json, optionally followed by a NUL byte and
// tokenizer_config.json; an imported tokenizer encodes and decodes a short text.
#include <string>

#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > (1u << 20)) return 0;
    const std::string_view all = kvec::fuzz::as_text(data, size);
    const size_t nul = all.find('\0');
    const std::string json(all.substr(0, nul));
    const std::string config = nul == std::string_view::npos ? std::string() : std::string(all.substr(nul + 1));
    try {
        const kvec::Tokenizer tok = kvec::Tokenizer::from_hf(json, config);
        const std::vector<int32_t> ids = tok.encode("Hello world, hello <s> 42!", true, true);
        volatile size_t sink = tok.decode(ids).size();
        (void)sink;
    } catch (const kvec::Error&) {
    }
    return 0;
}
