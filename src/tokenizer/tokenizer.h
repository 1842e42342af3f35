// Tokenizers of the llama.cpp ecosystem, built from GGUF metadata (tokenizer.ggml.*) or imported
// from a Hugging Face tokenizer.json (+ tokenizer_config.json):
//   - "llama": SentencePiece-style BPE over scores, byte fallback <0xXX>, "▁" for spaces;
//   - "gpt2": byte-level BPE over merges, with the pre-tokenizers default/gpt2, llama-bpe, qwen2.
// Special/control tokens are matched in the text only when parse_special is true.
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
    std::string pre = "default";      // pre-tokenizer: "default", "gpt2", "llama-bpe", "qwen2"
    std::vector<std::string> tokens;  // [n_vocab]
    std::vector<float> scores;        // [n_vocab] (SPM merge priority); empty allowed for BPE
    std::vector<TokenType> types;     // [n_vocab]
    std::vector<std::string> merges;  // BPE merges "a b", highest priority first
    int32_t bos_id = -1, eos_id = -1, eot_id = -1, unk_id = -1, pad_id = -1;
    bool add_bos = false, add_eos = false;
    bool add_space_prefix = true;     // SPM: prepend "▁" to the text
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

    // Concatenated pieces; special tokens rendered as their text unless skip_special.
    std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
    // Raw bytes of one token (may be a partial UTF-8 sequence for byte tokens).
    std::string token_to_piece(int32_t id) const;

    int32_t n_vocab() const;
    int32_t bos() const;
    int32_t eos() const;
    int32_t eot() const;                 // -1 if the vocabulary has none
    bool is_end_of_generation(int32_t id) const;  // EOS, EOT and other end-of-turn tokens
    const VocabData& data() const;

    // Renders a conversation with the model's chat template, recognised from its Jinja source
    // (Llama 3, Llama 2 / Mistral [INST], ChatML); throws kvec::Error for a template it does not know.
    std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                    bool add_generation_prompt = true) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Turns a stream of token ids into text, holding back incomplete UTF-8 sequences.
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
