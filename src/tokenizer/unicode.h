// UTF-8 helpers and the GPT-2 byte <-> unicode mapping used by byte-level BPE (internal).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvec::tok {

// Length of the UTF-8 sequence that starts with byte `c` (1 for continuation/invalid bytes),
// as llama.cpp's unicode_len_utf8 does.
inline size_t utf8_len(uint8_t c) {
    static constexpr uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

// Appends the UTF-8 encoding of code point `cp` (must be <= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cp);

// Decodes one code point at `s[pos]`; returns the number of bytes of a valid, shortest-form
// sequence, or 0 if the bytes there are not valid UTF-8 (truncated, overlong, surrogate, ...).
size_t decode_utf8(std::string_view s, size_t pos, uint32_t* cp);

// Number of bytes at the end of `s` that form an incomplete but so-far valid UTF-8 sequence
// (0..3): a stream decoder holds these back until more bytes arrive.
size_t incomplete_utf8_tail(std::string_view s);

// Replaces every invalid byte with U+FFFD; valid input is returned unchanged.
std::string sanitize_utf8(std::string_view s);

// NFC normalisation via utf8proc; input that is not valid UTF-8 is returned unchanged.
std::string nfc(std::string_view s);

// GPT-2's reversible byte -> printable code point mapping (bytes 33..126, 161..172, 174..255 map
// to themselves; the rest to 256 + n in order).
struct ByteUnicode {
    std::array<std::string, 256> byte_to_utf8;  // UTF-8 text of the code point of each byte
    std::array<int16_t, 324> cp_to_byte;        // code point (< 324) -> byte, -1 if none
    ByteUnicode();
};
const ByteUnicode& byte_unicode();

}  // namespace kvec::tok
