// Tokenizer core: validation, special-token partitioning, SPM and byte-level BPE encoding,
// decoding, and the stream decoder. Behaviour follows llama.cpp's llama-vocab.cpp.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <array>
#include <cstring>
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace kvec {

namespace {

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Tokens that end a turn, found by their text as llama.cpp does when the GGUF names none.
// EOT candidates in priority order (the first present becomes eot()).
constexpr std::array<const char*, 7> kEotTexts = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek
};
// Every token with one of these texts ends generation (<|return|> and <|call|>: gpt-oss's harmony).
constexpr std::array<const char*, 10> kEogTexts = {
    "<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>",    "<EOT>",      "</s>",    "<|return|>",    "<|call|>",
};

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// "<0xAB>" -> 0xAB, or -1 if `t` is not a byte token's text.
int parse_byte_token(std::string_view t) {
    if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
    const int hi = hex_value(t[3]), lo = hex_value(t[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
}

// Length of the SPM symbol at s[pos]: one UTF-8 character, or a single byte where the text is
// not valid UTF-8 (llama.cpp takes utf8_len(lead byte) bytes, which for invalid input can swallow
// part of the next character and break the round trip; on valid UTF-8 both agree).
size_t spm_char_len(std::string_view s, size_t pos) {
    uint32_t cp;
    const size_t len = tok::decode_utf8(s, pos, &cp);
    return len == 0 ? 1 : len;
}

// The bytes of one character (1..4, as split by spm_char_len) packed into 32 bits.
uint32_t pack_char(std::string_view s, size_t pos, size_t len) {
    uint32_t v = 0;
    for (size_t k = 0; k < len; ++k)
        v |= static_cast<uint32_t>(static_cast<uint8_t>(s[pos + k])) << (8 * k);
    return v;
}

uint64_t pair_key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

void replace_all(std::string& s, std::string_view from, std::string_view to) {
    if (s.find(from) == std::string::npos) return;
    std::string out;
    out.reserve(s.size() + s.size() / 4);
    size_t pos = 0;
    while (true) {
        const size_t hit = s.find(from, pos);
        if (hit == std::string::npos) break;
        out.append(s, pos, hit - pos);
        out.append(to);
        pos = hit + from.size();
    }
    out.append(s, pos, std::string::npos);
    s.swap(out);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Construction and validation

void Tokenizer::Impl::check_id(int32_t id) const {
    if (id < 0 || id >= n_vocab) fail("tokenizer: token id {} out of range [0, {})", id, n_vocab);
}

int32_t Tokenizer::Impl::intern_symbol(std::string_view text) {
    const int32_t id = symbol_id(text);
    if (id >= 0) return id;
    const int32_t vid = n_vocab + static_cast<int32_t>(virtual_text.size());
    virtual_text.emplace_back(text);
    index.insert(virtual_text.back(), vid);
    return vid;
}

void Tokenizer::Impl::init() {
    // Model.
    if (d.model == "llama") {
        spm = true;
    } else if (d.model == "gpt2") {
        spm = false;
    } else {
        fail(
            "tokenizer: unknown tokenizer model '{}' (supported: llama (SentencePiece BPE), "
            "gpt2 (byte-level BPE))",
            d.model);
    }

    // Sizes.
    if (d.tokens.empty()) fail("tokenizer: the vocabulary has no tokens");
    if (d.tokens.size() > static_cast<size_t>(INT32_MAX) - (1u << 24)) {
        fail("tokenizer: vocabulary too large ({} tokens)", d.tokens.size());
    }
    n_vocab = static_cast<int32_t>(d.tokens.size());
    if (!d.scores.empty() && d.scores.size() != d.tokens.size()) {
        fail("tokenizer: {} scores for {} tokens", d.scores.size(), d.tokens.size());
    }
    for (size_t i = 0; i < d.scores.size(); ++i) {
        if (!std::isfinite(d.scores[i])) fail("tokenizer: token {} has the non-finite score {}", i, d.scores[i]);
    }
    if (d.types.empty()) d.types.assign(d.tokens.size(), TokenType::NORMAL);
    if (d.types.size() != d.tokens.size()) {
        fail("tokenizer: {} token types for {} tokens", d.types.size(), d.tokens.size());
    }
    for (size_t i = 0; i < d.types.size(); ++i) {
        const auto t = static_cast<int32_t>(d.types[i]);
        if (t < 0 || t > static_cast<int32_t>(TokenType::BYTE)) {
            fail("tokenizer: token {} ('{}') has invalid type {}", i, d.tokens[i], t);
        }
    }

    // Special ids.
    const std::pair<const char*, int32_t*> ids[] = {{"bos", &d.bos_id},
                                                    {"eos", &d.eos_id},
                                                    {"eot", &d.eot_id},
                                                    {"unknown", &d.unk_id},
                                                    {"padding", &d.pad_id}};
    for (const auto& [name, id] : ids) {
        if (*id < -1 || *id >= n_vocab) {
            fail("tokenizer: {} token id {} out of range [0, {})", name, *id, n_vocab);
        }
    }
    if (d.add_bos && d.bos_id < 0)
        fail("tokenizer: add_bos is set but the vocabulary has no BOS token");
    if (d.add_eos && d.eos_id < 0)
        fail("tokenizer: add_eos is set but the vocabulary has no EOS token");

    // Text -> id (empty texts are never matched).
    index.reserve(d.tokens.size() + d.merges.size() / 8);
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (d.tokens[i].empty()) continue;
        index.insert(d.tokens[i], i);
    }

    // EOT / EOG detection by text, as llama.cpp; such tokens become CONTROL.
    if (d.eot_id < 0) {
        for (const char* t : kEotTexts) {
            const int32_t id = find_token(t);
            if (id >= 0) {
                d.eot_id = id;
                break;
            }
        }
    }
    eog.assign(d.tokens.size(), 0);
    for (const char* t : kEogTexts) {
        const int32_t id = find_token(t);
        if (id >= 0) eog[id] = 1;
    }
    if (d.eos_id >= 0) eog[d.eos_id] = 1;
    if (d.eot_id >= 0) eog[d.eot_id] = 1;
    // Harmony (o200k_harmony): <|end|> closes a message (the analysis channel's too), not the
    // answer, which ends at <|return|> or <|call|>; llama.cpp drops <|end|> from the end tokens
    // when all three are there, and so does kvec.
    if (const int32_t end = find_token("<|end|>");
        end >= 0 && eog[end] && find_token("<|return|>") >= 0 && find_token("<|call|>") >= 0) {
        eog[end] = 0;
    }
    for (int32_t i = 0; i < n_vocab; ++i) {
        if (eog[i] && d.types[i] != TokenType::CONTROL && d.tokens[i].size() > 1 &&
            d.tokens[i].front() == '<' && d.tokens[i].back() == '>') {
            d.types[i] = TokenType::CONTROL;
        }
    }

    // Special tokens matched in the text, longest first (ties: lower id first).
    for (int32_t i = 0; i < n_vocab; ++i) {
        const TokenType t = d.types[i];
        if ((t == TokenType::CONTROL || t == TokenType::USER_DEFINED || t == TokenType::UNKNOWN) &&
            !d.tokens[i].empty()) {
            special_cache.push_back(i);
        }
    }
    std::stable_sort(special_cache.begin(), special_cache.end(),
                     [&](int32_t a, int32_t b) { return d.tokens[a].size() > d.tokens[b].size(); });

    // Pieces.
    piece.resize(d.tokens.size());
    const auto& bu = tok::byte_unicode();
    byte_token.fill(-1);
    byte_symbol.fill(-1);
    for (int32_t i = 0; i < n_vocab; ++i) {
        const std::string& text = d.tokens[i];
        const TokenType t = d.types[i];
        if (t == TokenType::CONTROL || t == TokenType::UNKNOWN || t == TokenType::USER_DEFINED) {
            piece[i] = text;
        } else if (spm && t == TokenType::NORMAL) {
            piece[i] = text;
            replace_all(piece[i], kSpace, " ");
        } else if (spm && t == TokenType::BYTE) {
            const int b = parse_byte_token(text);
            if (b < 0) fail("tokenizer: byte token {} has text '{}', expected <0xXX>", i, text);
            piece[i] = std::string(1, static_cast<char>(b));
        } else if (!spm && t == TokenType::NORMAL) {
            // Byte-level: every code point maps back to one byte.
            std::string& out = piece[i];
            size_t pos = 0;
            while (pos < text.size()) {
                uint32_t cp;
                const size_t len = tok::decode_utf8(text, pos, &cp);
                if (len == 0) {  // not valid UTF-8: keep the byte
                    out.push_back(text[pos]);
                    ++pos;
                    continue;
                }
                if (cp < bu.cp_to_byte.size() && bu.cp_to_byte[cp] >= 0) {
                    out.push_back(static_cast<char>(bu.cp_to_byte[cp]));
                } else {
                    out.append(text, pos, len);  // outside the byte alphabet: keep as text
                }
                pos += len;
            }
        }
        // UNUSED / UNDEFINED (and BYTE in a BPE vocabulary) decode to nothing, as llama.cpp.
    }

    if (spm) {
        // Byte fallback: <0xXX>, else the token whose text is that single byte.
        for (int b = 0; b < 256; ++b) {
            static const char* hex = "0123456789ABCDEF";
            const char buf[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
            int32_t id = find_token(buf);
            if (id < 0) id = find_token(std::string(1, static_cast<char>(b)));
            byte_token[b] = id;
        }
        size_t n_pairs = 0;
        for (const auto& t : d.tokens) n_pairs += t.size();
        spm_pairs.reserve(n_pairs);
        for (const auto& t : d.tokens) {
            size_t pos = 0, prev = 0, prev_len = 0;
            while (pos < t.size()) {
                const size_t len = spm_char_len(t, pos);
                if (pos > 0) {
                    const uint64_t key =
                        pair_key(pack_char(t, prev, prev_len), pack_char(t, pos, len));
                    if (key != ~uint64_t{0}) spm_pairs.insert_first(key, {0, 0});
                }
                prev = pos;
                prev_len = len;
                pos += len;
            }
        }
        return;
    }

    // Byte-level BPE.
    pre = tok::make_pretokenizer(d.pre);
    d.pre = pre->canonical;
    d.add_space_prefix = false;
    merges.reserve(d.merges.size());
    std::string joined;
    for (size_t r = 0; r < d.merges.size(); ++r) {
        const std::string& m = d.merges[r];
        const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
        if (sp == std::string::npos || sp + 1 >= m.size()) {
            fail("tokenizer: merge {} ('{}') is not two symbols separated by a space", r, m);
        }
        const std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
        const int32_t l = intern_symbol(left);
        const int32_t rr = intern_symbol(right);
        joined.assign(left);
        joined.append(right);
        const int32_t res = intern_symbol(joined);
        merges.insert_first(tok::MergeTable::key(l, rr), {static_cast<int32_t>(r), res});
    }
    for (int b = 0; b < 256; ++b) byte_symbol[b] = symbol_id(bu.byte_to_utf8[b]);
}

// ---------------------------------------------------------------------------------------------
// Special-token partition (llama.cpp's tokenizer_st_partition)

std::vector<Tokenizer::Impl::Fragment> Tokenizer::Impl::partition(std::string_view text,
                                                                  bool parse_special) const {
    std::vector<Fragment> frags;  // [n_fragments] in text order
    if (text.empty()) return frags;
    frags.push_back({-1, 0, text.size()});

    std::array<bool, 256> present{};  // bytes that occur in the text: a cheap filter
    for (unsigned char c : text) present[c] = true;

    std::vector<Fragment> next;
    for (const int32_t id : special_cache) {
        const TokenType t = d.types[id];
        // Control and unknown tokens are matched only with parse_special; user-defined ones
        // always (as llama.cpp and Hugging Face do for non-special added tokens).
        if (!parse_special && (t == TokenType::CONTROL || t == TokenType::UNKNOWN)) continue;
        const std::string& st = d.tokens[id];
        if (!present[static_cast<unsigned char>(st[0])]) continue;
        bool found = false;
        next.clear();
        for (const Fragment& f : frags) {
            if (f.token >= 0) {
                next.push_back(f);
                continue;
            }
            size_t pos = f.offset;
            const size_t end = f.offset + f.length;
            while (pos < end) {
                const size_t hit = text.substr(0, end).find(st, pos);
                if (hit == std::string_view::npos) break;
                if (hit > pos) next.push_back({-1, pos, hit - pos});
                next.push_back({id, hit, st.size()});
                pos = hit + st.size();
                found = true;
            }
            if (pos < end) next.push_back({-1, pos, end - pos});
        }
        if (found) frags.swap(next);
    }
    return frags;
}

// ---------------------------------------------------------------------------------------------
// SPM (llama.cpp's llm_tokenizer_spm_session)

bool Tokenizer::Impl::spm_pair_in_token(std::string_view text, size_t a, size_t a_len,
                                        size_t b_len) const {
    const uint64_t key = pair_key(pack_char(text, a, a_len), pack_char(text, a + a_len, b_len));
    if (key == ~uint64_t{0}) return true;  // the table's empty marker: assume it may be spanned
    return spm_pairs.find(key) != nullptr;
}

void Tokenizer::Impl::encode_spm(std::string_view text, std::vector<int32_t>& out,
                                 tok::WordCache& cache) const {
    size_t chunk_start = 0;
    size_t prev = 0, prev_len = 0;
    auto emit = [&](size_t end) {
        const std::string_view chunk = text.substr(chunk_start, end - chunk_start);
        if (chunk.size() > 256) {
            spm_chunk(chunk, out);
            return;
        }
        auto it = cache.find(chunk);
        if (it == cache.end()) {
            std::vector<int32_t> ids;
            spm_chunk(chunk, ids);
            it = cache.emplace(std::string(chunk), std::move(ids)).first;
        }
        out.insert(out.end(), it->second.begin(), it->second.end());
    };
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t len = spm_char_len(text, pos);
        if (pos > 0 && !spm_pair_in_token(text, prev, prev_len, len)) {
            emit(pos);
            chunk_start = pos;
        }
        prev = pos;
        prev_len = len;
        pos += len;
    }
    if (chunk_start < text.size()) emit(text.size());
}

void Tokenizer::Impl::spm_chunk(std::string_view text, std::vector<int32_t>& out) const {
    struct Symbol {
        int32_t prev, next;
        size_t offset, n;  // byte range of the symbol in `text`
    };
    struct Bigram {
        int32_t left, right;
        float score;
        size_t size;
    };
    struct Cmp {
        bool operator()(const Bigram& l, const Bigram& r) const {
            return l.score < r.score || (l.score == r.score && l.left > r.left);
        }
    };
    std::vector<Symbol> symbols;  // [n_chars] one per UTF-8 character initially
    symbols.reserve(text.size());
    size_t offs = 0;
    int32_t index = 0;
    while (offs < text.size()) {
        const size_t len = spm_char_len(text, offs);
        Symbol s{index - 1, offs + len == text.size() ? -1 : index + 1, offs, len};
        offs += len;
        ++index;
        symbols.push_back(s);
    }
    std::vector<Bigram> storage;
    storage.reserve(symbols.size());
    std::priority_queue<Bigram, std::vector<Bigram>, Cmp> queue(Cmp{}, std::move(storage));

    auto try_add = [&](int32_t left, int32_t right) {
        if (left == -1 || right == -1) return;
        const std::string_view t =
            text.substr(symbols[left].offset, symbols[left].n + symbols[right].n);
        const int32_t id = find_token(t);
        if (id < 0) return;
        queue.push({left, right, d.scores.empty() ? 0.0f : d.scores[id], t.size()});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
        const Bigram b = queue.top();
        queue.pop();
        Symbol& l = symbols[b.left];
        Symbol& r = symbols[b.right];
        if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
        l.n += r.n;
        r.n = 0;
        l.next = r.next;
        if (r.next >= 0) symbols[r.next].prev = b.left;
        try_add(l.prev, b.left);
        try_add(b.left, l.next);
    }

    if (symbols.empty()) return;
    for (int32_t i = 0; i != -1; i = symbols[i].next) {
        const Symbol& s = symbols[i];
        const std::string_view t = text.substr(s.offset, s.n);
        const int32_t id = find_token(t);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        // Not a token (only single characters get here): byte fallback.
        for (unsigned char c : t) {
            int32_t bt = byte_token[c];
            if (bt < 0) bt = d.unk_id;
            if (bt < 0) {
                fail("tokenizer: byte 0x{:02X} has no token (no <0x{:02X}> and no unknown token)",
                     c, c);
            }
            out.push_back(bt);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Byte-level BPE (llama.cpp's llm_tokenizer_bpe_session)

void Tokenizer::Impl::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
    const auto& bu = tok::byte_unicode();
    if (pre->ignore_merges) {
        std::string encoded;
        encoded.reserve(word.size() * 2);
        for (unsigned char c : word) encoded += bu.byte_to_utf8[c];
        const int32_t id = find_token(encoded);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }
    struct Symbol {
        int32_t id;  // symbol id (token, virtual, or -1)
        int32_t prev, next;
        uint32_t offset, n;  // bytes of `word`
    };
    struct Bigram {
        int32_t rank;
        int32_t left, right;
        int32_t left_id, right_id, result;
    };
    struct Cmp {
        bool operator()(const Bigram& l, const Bigram& r) const {
            return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
        }
    };
    const int32_t n = static_cast<int32_t>(word.size());
    std::vector<Symbol> symbols(n);  // [n_bytes] one per byte (= one GPT-2 character) initially
    for (int32_t i = 0; i < n; ++i) {
        symbols[i] = {byte_symbol[static_cast<unsigned char>(word[i])], i - 1,
                      i + 1 == n ? -1 : i + 1, static_cast<uint32_t>(i), 1};
    }
    std::priority_queue<Bigram, std::vector<Bigram>, Cmp> queue;
    auto try_add = [&](int32_t left, int32_t right) {
        if (left == -1 || right == -1) return;
        const int32_t a = symbols[left].id, b = symbols[right].id;
        if (a < 0 || b < 0) return;
        const tok::MergeTable::Merge* mg = merges.find(tok::MergeTable::key(a, b));
        if (mg == nullptr) return;
        queue.push({mg->rank, left, right, a, b, mg->result});
    };
    for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);
    while (!queue.empty()) {
        const Bigram bg = queue.top();
        queue.pop();
        Symbol& l = symbols[bg.left];
        Symbol& r = symbols[bg.right];
        if (l.n == 0 || r.n == 0 || l.id != bg.left_id || r.id != bg.right_id) continue;  // stale
        l.n += r.n;
        l.id = bg.result;
        r.n = 0;
        l.next = r.next;
        if (r.next >= 0) symbols[r.next].prev = bg.left;
        try_add(l.prev, bg.left);
        try_add(bg.left, l.next);
    }
    for (int32_t i = 0; i != -1 && n > 0; i = symbols[i].next) {
        const Symbol& s = symbols[i];
        if (s.id >= 0 && s.id < n_vocab) {
            out.push_back(s.id);
            continue;
        }
        // The merged string is no token: llama.cpp emits the tokens of its single bytes.
        std::string encoded;
        for (uint32_t k = 0; k < s.n; ++k)
            encoded += bu.byte_to_utf8[static_cast<unsigned char>(word[s.offset + k])];
        for (char c : encoded) {
            const int32_t id = find_token(std::string_view(&c, 1));
            if (id >= 0) out.push_back(id);
        }
    }
}

void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int32_t>& out,
                                 tok::WordCache& cache) const {
    std::string normalized;
    if (pre->nfc) {
        normalized = tok::nfc(text);
        text = normalized;
    }
    for (const auto& [b, e] : pre->split(text)) {
        const std::string_view word = text.substr(b, e - b);
        if (word.size() > 256) {  // long words (runs of spaces, base64, ...) are not cached
            bpe_word(word, out);
            continue;
        }
        auto it = cache.find(word);
        if (it == cache.end()) {
            std::vector<int32_t> ids;
            bpe_word(word, ids);
            it = cache.emplace(std::string(word), std::move(ids)).first;
        }
        out.insert(out.end(), it->second.begin(), it->second.end());
    }
}

// ---------------------------------------------------------------------------------------------
// Public API

Tokenizer::Tokenizer(VocabData data) : impl_(std::make_unique<Impl>()) {
    impl_->d = std::move(data);
    impl_->init();
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
    const Impl& m = *impl_;
    std::vector<int32_t> out;  // [n_tokens]
    out.reserve(text.size() / 3 + 4);
    if (add_special && m.d.add_bos) out.push_back(m.d.bos_id);
    const auto frags = m.partition(text, parse_special);
    tok::WordCache cache;
    if (m.spm) {
        bool prev_special = true;  // the first fragment gets the space prefix
        for (const auto& f : frags) {
            if (f.token >= 0) {
                out.push_back(f.token);
                prev_special = true;
                continue;
            }
            std::string s;
            s.reserve(f.length + 4);
            if (m.d.add_space_prefix && prev_special) s.push_back(' ');
            s.append(text.substr(f.offset, f.length));
            replace_all(s, " ", kSpace);
            m.encode_spm(s, out, cache);
            prev_special = false;
        }
    } else {
        for (const auto& f : frags) {
            if (f.token >= 0) {
                out.push_back(f.token);
            } else {
                m.encode_bpe(text.substr(f.offset, f.length), out, cache);
            }
        }
    }
    if (add_special && m.d.add_eos) out.push_back(m.d.eos_id);
    return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    const Impl& m = *impl_;
    std::string out;
    // SentencePiece: the space that encode() prefixed is removed from the first text token
    // (a leading BOS does not count), so decode(encode(x)) == x.
    bool strip_space = m.spm && m.d.add_space_prefix;
    for (const int32_t id : ids) {
        m.check_id(id);
        if (skip_special && m.is_special_type(id)) continue;
        const std::string& p = m.piece[id];
        if (strip_space && id == m.d.bos_id) {  // shown (unless skipped), does not count
            out += p;
            continue;
        }
        if (strip_space && !p.empty()) {
            out.append(p, p[0] == ' ' ? 1 : 0, std::string::npos);
            strip_space = false;
            continue;
        }
        out += p;
    }
    return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
    impl_->check_id(id);
    return impl_->piece[id];
}

int32_t Tokenizer::n_vocab() const { return impl_->n_vocab; }
int32_t Tokenizer::bos() const { return impl_->d.bos_id; }
int32_t Tokenizer::eos() const { return impl_->d.eos_id; }
int32_t Tokenizer::eot() const { return impl_->d.eot_id; }

bool Tokenizer::is_end_of_generation(int32_t id) const {
    return id >= 0 && id < impl_->n_vocab && impl_->eog[id] != 0;
}

const VocabData& Tokenizer::data() const { return impl_->d; }

std::string Tokenizer::apply_chat_template(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt) const {
    const VocabData& d = impl_->d;
    const std::string bos = d.bos_id >= 0 ? d.tokens[d.bos_id] : "";
    const std::string eos = d.eos_id >= 0 ? d.tokens[d.eos_id] : "";
    return tok::render_chat_template(d.chat_template, messages, add_generation_prompt, bos, eos);
}

// ---------------------------------------------------------------------------------------------
// StreamDecoder

std::string StreamDecoder::push(int32_t id) {
    pending_ += tokenizer_.token_to_piece(id);
    const size_t hold = tok::incomplete_utf8_tail(pending_);
    const std::string_view ready(pending_.data(), pending_.size() - hold);
    std::string out = tok::sanitize_utf8(ready);
    pending_.erase(0, ready.size());
    return out;
}

std::string StreamDecoder::flush() {
    std::string out = tok::sanitize_utf8(pending_);
    pending_.clear();
    return out;
}

}  // namespace kvec
