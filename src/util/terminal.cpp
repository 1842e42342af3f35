#include "util/terminal.h"

#include <fmt/format.h>

#include <cstdint>

namespace kvec {

namespace {

// Length of the valid UTF-8 sequence starting at text[i] (1..4), or 0 if it is not one;
// `cp` receives its code point.
size_t utf8_sequence(std::string_view text, size_t i, uint32_t& cp) {
    const auto b = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
    const uint8_t c = b(0);
    size_t n = 0;
    uint32_t min = 0;
    if (c < 0x80) {
        cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        n = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (i + n > text.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        if ((b(k) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (b(k) & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

}  // namespace

std::string escape_control(std::string_view text, bool keep_newlines) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        uint32_t cp = 0;
        const size_t n = utf8_sequence(text, i, cp);
        if (n == 0) {
            out += fmt::format("\\x{:02x}", static_cast<uint8_t>(text[i]));
            ++i;
            continue;
        }
        if (cp < 0x20 || cp == 0x7F) {
            if (keep_newlines && (cp == '\n' || cp == '\t')) out += static_cast<char>(cp);
            else if (cp == '\n') out += "\\n";
            else if (cp == '\t') out += "\\t";
            else if (cp == '\r') out += "\\r";
            else out += fmt::format("\\x{:02x}", cp);
        } else if (cp >= 0x80 && cp <= 0x9F) {
            out += fmt::format("\\u{:04x}", cp);
        } else {
            out.append(text.substr(i, n));
        }
        i += n;
    }
    return out;
}

bool has_control(std::string_view text) { return escape_control(text) != text; }

}  // namespace kvec
