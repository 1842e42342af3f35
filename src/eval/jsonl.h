// JSON Lines input: one JSON value per line, errors that name the file and the line.
//
// Line handling: lines end at "\n"; a trailing "\r" is JSON whitespace and is ignored; a UTF-8
// byte-order mark at the start of the file is skipped; lines holding only whitespace are skipped
// (Python's json.loads would reject them; skipping them is the only leniency). Everything else
// that is not one valid JSON value (RFC 8259, UTF-8) is a kvec::Error "<path>:<line>: ...".
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvec::eval {

// One parsed line and where it came from.
struct JsonlRecord {
    nlohmann::json value;
    size_t line = 0;  // 1-based line number in the file
};

// Streams a JSONL file line by line (files of LongBench size do not need to be held whole).
class JsonlReader {
  public:
    explicit JsonlReader(const std::string& path);  // throws kvec::Error if it cannot be opened

    // Parses the next non-blank line into `value`; false at the end of the file.
    bool next(nlohmann::json& value);

    const std::string& path() const { return path_; }
    size_t line() const { return line_; }  // number of the line last returned (0 before any)
    std::string where() const;             // "<path>:<line>", for error messages

  private:
    std::string path_;
    std::ifstream in_;
    size_t line_ = 0;
};

// Reads a whole JSONL file.
std::vector<JsonlRecord> read_jsonl(const std::string& path);

// Parses JSONL text held in memory; `name` stands for the file name in error messages.
std::vector<JsonlRecord> parse_jsonl(std::string_view text, const std::string& name);

// Parses one line; `where` ("<file>:<line>") prefixes the error message. Returns nullopt for a
// line holding only whitespace.
std::optional<nlohmann::json> parse_jsonl_line(std::string_view line, const std::string& where);

// Typed field access for JSON objects read from a JSONL line. Each throws kvec::Error
// "<where>: field '<key>' ..." when the field has the wrong type (or is missing, if required).
// A JSON null counts as missing.
std::string json_required_string(const nlohmann::json& obj, std::string_view key,
                                 std::string_view where);
std::optional<std::string> json_optional_string(const nlohmann::json& obj, std::string_view key,
                                                std::string_view where);
std::optional<int64_t> json_optional_int(const nlohmann::json& obj, std::string_view key,
                                         std::string_view where);
// A list whose items are strings; integers are accepted and converted as Python's str() does
// (LongBench answers are strings, but a hand-written file may hold passage counts as numbers).
std::optional<std::vector<std::string>> json_optional_string_list(const nlohmann::json& obj,
                                                                  std::string_view key,
                                                                  std::string_view where);

}  // namespace kvec::eval
