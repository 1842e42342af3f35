// Text from files the user does not control (metadata keys, tensor names, vocabulary entries,
// error messages quoting them) shown on a terminal: control characters are escaped so that a file
// cannot send escape sequences (cursor moves, title changes, hyperlinks) to the user's terminal.
#pragma once

#include <string>
#include <string_view>

namespace kvec {

// Escapes C0 controls (U+0000..U+001F) and DEL as \n, \t, \r or \xNN, C1 controls
// (U+0080..U+009F) as \u0080, and bytes that are not valid UTF-8 as \xNN; everything else, valid
// UTF-8 included, is kept. With keep_newlines, '\n' and '\t' stay as they are (generated text).
std::string escape_control(std::string_view text, bool keep_newlines = false);

// Whether escape_control would change the text.
bool has_control(std::string_view text);

}  // namespace kvec
