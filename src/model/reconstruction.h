// KVzip's context reconstruction inputs (docs/eviction-interface.md, "Context reconstruction"):
// the "repeat the previous context" prompts in the model's own tokens, as NVIDIA kvpress's
// KVzipPress writes them. Chunk i of the context is reconstructed from
//   (i == 0 ? first : later + the last `overlap` tokens of chunk i - 1) + suffix + chunk i.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/gguf.h"

namespace kvec {

struct RepeatPrompts {
    std::vector<int32_t> first;   // "\n\nRepeat the previous context exactly."
    std::vector<int32_t> later;   // "\n\nRepeat the part of the previous context exactly, starting with"
    std::vector<int32_t> suffix;  // the chat template's end of the user turn and assistant header, or "\n"
    int32_t overlap = 8;          // tokens of the previous chunk repeated after `later`
};

// From the file's tokenizer (and chat template, when the tokenizer can render it). A file without
// a tokenizer gets empty prompts: the context chunks are then repeated bare.
RepeatPrompts repeat_prompts(const gguf::File& file);

}  // namespace kvec
