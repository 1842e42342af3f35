// Tokenizers of the llama.cpp ecosystem, built from GGUF metadata (tokenizer.ggml.*) or imported
// from a Hugging Face tokenizer.json (+ tokenizer_config.json):
//   - "llama": SentencePiece-style BPE over scores, byte fallback <0xXX>, "▁" for spaces;
//   - "gpt2": byte-level BPE over merges, with the pre-tokenizers of llama.cpp named by `pre`.
// Both give the ids llama.cpp's llama-vocab.cpp gives for the same vocabulary (qwen2 also
// NFC-normalises, as its Hugging Face normalizer does).
// Control (and unknown) tokens are matched in the text only when parse_special is true;
// user-defined tokens (Hugging Face added tokens with special = false) always are, longest first,
// as llama.cpp's tokenizer_st_partition and Hugging Face do.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvec {

namespace gguf {
class File;
class Writer;
}  // namespace gguf

// Token types as stored in tokenizer.ggml.token_type.
enum class TokenType : int32_t {
    UNDEFINED = 0,
    NORMAL = 1,
    UNKNOWN = 2,
    CONTROL = 3,
    USER_DEFINED = 4,
    UNUSED = 5,
    BYTE = 6,
};

struct ChatMessage {
    std::string role;  // "system", "user", "assistant"
    std::string content;
};

// Everything that defines a vocabulary; what GGUF's tokenizer.ggml.* keys hold.
struct VocabData {
    std::string model;                // "llama" (SPM) or "gpt2" (byte-level BPE)
    // Pre-tokenizer (gpt2 model only), llama.cpp's names: "gpt-2" (alias "gpt2": GPT-2 regex),
    // "llama-bpe" (aliases "llama3", "llama-v3": Llama 3 regex, whole-word tokens skip merges),
    // "qwen2" (Qwen2 regex, NFC-normalised text), "smollm" (digits split, then GPT-2 regex),
    // "default" (llama.cpp's fallback list of regexes). The constructor stores the canonical name.
    std::string pre = "default";
    std::vector<std::string> tokens;  // [n_vocab]
    std::vector<float> scores;        // [n_vocab] (SPM merge priority); empty allowed for BPE
    std::vector<TokenType> types;     // [n_vocab]
    std::vector<std::string> merges;  // BPE merges "a b", highest priority first
    // -1: none. eot_id < 0: the constructor looks for "<|eot_id|>", "<|im_end|>", ... by text.
    int32_t bos_id = -1, eos_id = -1, eot_id = -1, unk_id = -1, pad_id = -1;
    bool add_bos = false, add_eos = false;
    bool add_space_prefix = true;     // SPM: prepend "▁" to the text (always false for gpt2)
    std::string chat_template;        // Jinja source, as in tokenizer.chat_template ("" if none)
};

class Tokenizer {
public:
    explicit Tokenizer(VocabData data);  // validates; throws kvec::Error naming the problem
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    static Tokenizer from_gguf(const gguf::File& file);
    static Tokenizer from_hf(const std::string& tokenizer_json, const std::string& tokenizer_config = "");
    void write_gguf_metadata(gguf::Writer& writer) const;  // the tokenizer.ggml.* keys

    // add_special: prepend BOS (append EOS) as the vocabulary asks. parse_special: text such as
    // "<|eot_id|>" becomes the control token instead of being tokenized as characters.
    std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const;

    // Concatenated pieces; special tokens rendered as their text unless skip_special. SPM with
    // add_space_prefix: the leading space of the first text token (a BOS before it does not
    // count) is removed, so decode(encode(x)) == x. Throws kvec::Error for an id out of range.
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
    // Raw bytes of one token (may be a partial UTF-8 sequence for byte tokens).
    std::string token_to_piece(int32_t id) const;

    int32_t n_vocab() const;
    int32_t bos() const;
    int32_t eos() const;
    int32_t eot() const;                 // -1 if the vocabulary has none
    bool is_end_of_generation(int32_t id) const;  // EOS, EOT and other end-of-turn tokens
    // The vocabulary as validated and completed (types filled, EOT found, canonical pre name).
    const VocabData& data() const;

    // Renders a conversation with the model's chat template, recognised from its Jinja source
    // (Llama 3 / 3.1, Llama 2 / Mistral [INST], ChatML incl. Qwen3's <think> handling and default
    // system prompts); throws kvec::Error for a template it does not know. The leading BOS the
    // Jinja prints is left out: encode(prompt, add_special = true, parse_special = true) adds it.
    std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                    bool add_generation_prompt = true) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Turns a stream of token ids into text, holding back incomplete UTF-8 sequences. Every string it
// returns is valid UTF-8 (invalid bytes become U+FFFD).
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
    std::string push(int32_t id);  // text that became complete with this token
    std::string flush();           // whatever remains (replaces invalid bytes with U+FFFD)

private:
    const Tokenizer& tokenizer_;
    std::string pending_;
};

}  // namespace kvec
