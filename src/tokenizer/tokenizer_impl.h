// Internal state of kvec::Tokenizer, shared by the files of src/tokenizer/.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvec {

namespace tok {

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
// Word bytes -> token ids, for repeated words within one encode call.
using WordCache =
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>;

// Open-addressing hash index text -> id. It holds views of texts stored elsewhere (the
// vocabulary), which must stay in place: compact and cache-friendly for the 100k+ lookups of
// loading and for the hot paths of encoding.
class TextIndex {
public:
    void reserve(size_t n) {  // only before the first insert
        size_t cap = 16;
        while (cap < n * 2) cap *= 2;
        if (size_ == 0 && cap > slots_.size()) {
            slots_.assign(cap, Slot{});
            mask_ = cap - 1;
        }
    }
    // The id stored for `s`, or -1.
    int32_t find(std::string_view s) const {
        if (slots_.empty()) return -1;
        const uint64_t h = hash(s);
        const uint32_t tag = static_cast<uint32_t>(h >> 32);
        for (size_t i = h & mask_;; i = (i + 1) & mask_) {
            const Slot& slot = slots_[i];
            if (slot.id < 0) return -1;
            if (slot.tag == tag && slot.text == s) return slot.id;
        }
    }
    // Stores id for `s` (a view that must outlive the index), replacing the id of an equal text.
    void insert(std::string_view s, int32_t id) {
        if ((size_ + 1) * 2 > slots_.size()) grow();
        const uint64_t h = hash(s);
        const uint32_t tag = static_cast<uint32_t>(h >> 32);
        for (size_t i = h & mask_;; i = (i + 1) & mask_) {
            Slot& slot = slots_[i];
            if (slot.id < 0) {
                slot = {s, tag, id};
                ++size_;
                return;
            }
            if (slot.tag == tag && slot.text == s) {
                slot.id = id;
                return;
            }
        }
    }

private:
    struct Slot {
        std::string_view text;
        uint32_t tag = 0;  // upper hash bits, to skip most string compares
        int32_t id = -1;   // -1: empty
    };
    static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
    void grow() {
        std::vector<Slot> old;
        old.swap(slots_);
        slots_.assign(std::max<size_t>(16, old.size() * 2), Slot{});
        mask_ = slots_.size() - 1;
        size_ = 0;
        for (const Slot& s : old) {
            if (s.id >= 0) insert(s.text, s.id);
        }
    }
    std::vector<Slot> slots_;  // [capacity] power of two, at most half full
    size_t mask_ = 0;
    size_t size_ = 0;
};

// Open-addressing map (left symbol, right symbol) -> BPE merge.
class MergeTable {
public:
    struct Merge {
        int32_t rank;
        int32_t result;  // symbol id of the merged string
    };
    void reserve(size_t n) {
        size_t cap = 16;
        while (cap < n * 2) cap *= 2;
        slots_.assign(cap, Slot{});
        mask_ = cap - 1;
    }
    static uint64_t key(int32_t l, int32_t r) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
    }
    const Merge* find(uint64_t k) const {
        if (slots_.empty()) return nullptr;
        for (size_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.key == kEmpty) return nullptr;
            if (s.key == k) return &s.merge;
        }
    }
    // Keeps the first merge inserted for a pair (the best rank), as llama.cpp's emplace.
    void insert_first(uint64_t k, Merge m) {
        for (size_t i = mix(k) & mask_;; i = (i + 1) & mask_) {
            Slot& s = slots_[i];
            if (s.key == k) return;
            if (s.key == kEmpty) {
                s = {k, m};
                return;
            }
        }
    }

private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    static uint64_t mix(uint64_t k) {
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdULL;
        k ^= k >> 33;
        return k;
    }
    struct Slot {
        uint64_t key = kEmpty;
        Merge merge{0, 0};
    };
    std::vector<Slot> slots_;  // [capacity] power of two, at most half full
    size_t mask_ = 0;
};

// Renders messages with the template family recognised in `tmpl` (chat_template.cpp).
std::string render_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const std::string& bos_text,
                                 const std::string& eos_text);

}  // namespace tok

struct Tokenizer::Impl {
    VocabData d;       // validated and completed (types filled, eot detected)
    bool spm = false;  // model "llama"; otherwise byte-level BPE ("gpt2")
    int32_t n_vocab = 0;

    // Text -> symbol id for tokens (a later duplicate wins, as llama.cpp) and virtual symbols.
    tok::TextIndex index;
    std::vector<int32_t> special_cache;  // CONTROL / USER_DEFINED / UNKNOWN ids, longest text first
    std::vector<uint8_t> eog;            // [n_vocab] 1 for end-of-generation tokens
    std::vector<std::string> piece;      // [n_vocab] bytes each token decodes to (specials as text)

    // SPM: token of each byte for byte fallback (<0xXX>, else the 1-byte token), -1 if none.
    std::array<int32_t, 256> byte_token{};
    // SPM: every pair of adjacent characters inside some token. Where the text has a pair not in
    // this set no bigram can ever span, so the text is cut there and the pieces are merged
    // independently (same result as one pass over the whole text, far faster on long texts).
    tok::MergeTable spm_pairs;

    // Byte-level BPE. Symbols are ids: 0..n_vocab-1 are tokens; ids from n_vocab on name the
    // strings that merges mention but the vocabulary lacks ("virtual" symbols).
    std::unique_ptr<tok::PreTokenizer> pre;
    std::deque<std::string> virtual_text;    // [n_virtual] text of id n_vocab + i (stable storage)
    tok::MergeTable merges;                  // (left id, right id) -> merge
    std::array<int32_t, 256> byte_symbol{};  // symbol id of each byte's GPT-2 character, -1

    void init();  // builds every table from d; throws kvec::Error on invalid data

    int32_t find_token(std::string_view text) const {
        const int32_t id = symbol_id(text);
        return id < n_vocab ? id : -1;
    }
    int32_t symbol_id(std::string_view text) const {  // token or virtual id, -1 if neither
        return index.find(text);
    }
    int32_t intern_symbol(std::string_view text);  // symbol_id, creating a virtual id

    std::string_view symbol_text(int32_t sym) const {
        return sym < n_vocab ? std::string_view(d.tokens[sym])
                             : std::string_view(virtual_text[sym - n_vocab]);
    }

    TokenType type_of(int32_t id) const { return d.types[id]; }
    bool is_special_type(int32_t id) const {
        const TokenType t = d.types[id];
        return t == TokenType::CONTROL || t == TokenType::UNKNOWN;
    }

    // One raw-text fragment or a special token, as llama.cpp's fragment_buffer_variant.
    struct Fragment {
        int32_t token;  // -1 for raw text
        size_t offset;  // raw text: byte range in the input
        size_t length;
    };
    std::vector<Fragment> partition(std::string_view text, bool parse_special) const;

    void encode_spm(std::string_view text, std::vector<int32_t>& out, tok::WordCache& cache) const;
    void spm_chunk(std::string_view text, std::vector<int32_t>& out) const;
    bool spm_pair_in_token(std::string_view text, size_t a, size_t a_len, size_t b_len) const;
    void encode_bpe(std::string_view text, std::vector<int32_t>& out, tok::WordCache& cache) const;
    void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
    void check_id(int32_t id) const;
};

}  // namespace kvec
