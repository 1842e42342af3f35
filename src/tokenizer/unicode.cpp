#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace kvec::tok {

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

size_t decode_utf8(std::string_view s, size_t pos, uint32_t* cp) {
    const size_t n = s.size();
    const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
    const uint8_t c0 = b(pos);
    if (c0 < 0x80) {
        *cp = c0;
        return 1;
    }
    size_t len;
    uint32_t v;
    if (c0 >= 0xC2 && c0 <= 0xDF) {
        len = 2;
        v = c0 & 0x1F;
    } else if (c0 >= 0xE0 && c0 <= 0xEF) {
        len = 3;
        v = c0 & 0x0F;
    } else if (c0 >= 0xF0 && c0 <= 0xF4) {
        len = 4;
        v = c0 & 0x07;
    } else {
        return 0;
    }
    if (pos + len > n) return 0;
    for (size_t i = 1; i < len; ++i) {
        const uint8_t c = b(pos + i);
        if ((c & 0xC0) != 0x80) return 0;
        v = (v << 6) | (c & 0x3F);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
        (v >= 0xD800 && v <= 0xDFFF)) {
        return 0;
    }
    *cp = v;
    return len;
}

size_t incomplete_utf8_tail(std::string_view s) {
    // Look at most 3 bytes back for a lead byte whose sequence is cut off by the end of `s`.
    const size_t n = s.size();
    for (size_t back = 1; back <= 3 && back <= n; ++back) {
        const uint8_t c = static_cast<uint8_t>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
        size_t need = 0;
        if (c >= 0xC2 && c <= 0xDF)
            need = 2;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 3;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 4;
        if (need <= back) return 0;  // complete (or not a lead byte at all)
        // Check that the bytes present are a valid prefix (second-byte ranges included).
        if (back >= 2) {
            const uint8_t c1 = static_cast<uint8_t>(s[n - back + 1]);
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
                (c == 0xF4 && c1 > 0x8F)) {
                return 0;
            }
        }
        return back;
    }
    return 0;
}

namespace {

// Length of the maximal subpart at s[pos] where decoding failed: a lead byte followed by the
// continuation bytes that could still belong to it (at least 1).
size_t invalid_sequence_length(std::string_view s, size_t pos) {
    const uint8_t c = static_cast<uint8_t>(s[pos]);
    size_t need = 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 3;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 4;
    size_t k = 1;
    while (k < need && pos + k < s.size()) {
        const uint8_t c1 = static_cast<uint8_t>(s[pos + k]);
        bool ok = (c1 & 0xC0) == 0x80;
        if (k == 1) {
            ok = ok && !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 > 0x9F) &&
                 !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 > 0x8F);
        }
        if (!ok) break;
        ++k;
    }
    return k;
}

}  // namespace

std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (pos < s.size()) {
        uint32_t cp;
        const size_t len = decode_utf8(s, pos, &cp);
        if (len == 0) {
            // One U+FFFD per maximal subpart: a truncated but otherwise valid sequence counts once.
            out += "\xEF\xBF\xBD";
            pos += invalid_sequence_length(s, pos);
        } else {
            out.append(s.substr(pos, len));
            pos += len;
        }
    }
    return out;
}

std::string nfc(std::string_view s) {
    // Fast path: pure ASCII is already NFC.
    bool ascii = true;
    for (char c : s) {
        if (static_cast<uint8_t>(c) >= 0x80) {
            ascii = false;
            break;
        }
    }
    if (ascii) return std::string(s);
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                     static_cast<utf8proc_ssize_t>(s.size()), &out,
                     static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) return std::string(s);  // invalid UTF-8: leave the bytes as they are
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(out, &std::free);
    return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

ByteUnicode::ByteUnicode() {
    cp_to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
        const bool printable =
            (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        const uint32_t cp =
            printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + extra++);
        append_utf8(byte_to_utf8[b], cp);
        cp_to_byte[cp] = static_cast<int16_t>(b);
    }
}

const ByteUnicode& byte_unicode() {
    static const ByteUnicode table;
    return table;
}

}  // namespace kvec::tok
