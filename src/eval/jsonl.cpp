#include "eval/jsonl.h"

#include <fmt/format.h>

#include "util/error.h"

namespace kvec::eval {

namespace {

bool is_json_whitespace_only(std::string_view line) {
    for (char c : line) {
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
    }
    return true;
}

std::string_view strip_bom(std::string_view line) {
    constexpr std::string_view kBom = "\xEF\xBB\xBF";
    if (line.substr(0, kBom.size()) == kBom) line.remove_prefix(kBom.size());
    return line;
}

const nlohmann::json* find_field(const nlohmann::json& obj, std::string_view key,
                                 std::string_view where) {
    if (!obj.is_object()) fail("{}: expected a JSON object, found {}", where, obj.type_name());
    auto it = obj.find(std::string(key));
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

// Python's str() of a JSON scalar that stands for a string (see json_optional_string_list).
std::optional<std::string> scalar_as_string(const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_integer()) return v.dump();  // same digits as Python's str(int)
    if (v.is_number_float()) return v.dump();    // nlohmann prints the shortest round-trip form
    return std::nullopt;
}

}  // namespace

JsonlReader::JsonlReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) fail("cannot open '{}' for reading", path);
}

bool JsonlReader::next(nlohmann::json& value) {
    std::string line;
    while (std::getline(in_, line)) {
        ++line_;
        std::string_view view = line;
        if (line_ == 1) view = strip_bom(view);
        auto parsed = parse_jsonl_line(view, where());
        if (parsed) {
            value = std::move(*parsed);
            return true;
        }
    }
    if (in_.bad()) fail("{}: read error", where());
    return false;
}

std::string JsonlReader::where() const { return fmt::format("{}:{}", path_, line_); }

std::optional<nlohmann::json> parse_jsonl_line(std::string_view line, const std::string& where) {
    if (is_json_whitespace_only(line)) return std::nullopt;
    try {
        return nlohmann::json::parse(line.begin(), line.end());
    } catch (const nlohmann::json::exception& e) {
        fail("{}: invalid JSON: {}", where, e.what());
    }
}

std::vector<JsonlRecord> read_jsonl(const std::string& path) {
    std::vector<JsonlRecord> records;
    JsonlReader reader(path);
    nlohmann::json value;
    while (reader.next(value)) records.push_back({std::move(value), reader.line()});
    return records;
}

std::vector<JsonlRecord> parse_jsonl(std::string_view text, const std::string& name) {
    std::vector<JsonlRecord> records;
    size_t line_no = 0;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        ++line_no;
        if (line_no == 1) line = strip_bom(line);
        auto parsed = parse_jsonl_line(line, fmt::format("{}:{}", name, line_no));
        if (parsed) records.push_back({std::move(*parsed), line_no});
        pos = end + 1;
    }
    return records;
}

std::string json_required_string(const nlohmann::json& obj, std::string_view key,
                                 std::string_view where) {
    auto value = json_optional_string(obj, key, where);
    if (!value) fail("{}: missing required string field '{}'", where, key);
    return *value;
}

std::optional<std::string> json_optional_string(const nlohmann::json& obj, std::string_view key,
                                                std::string_view where) {
    const nlohmann::json* v = find_field(obj, key, where);
    if (!v) return std::nullopt;
    if (!v->is_string())
        fail("{}: field '{}' must be a string, found {}", where, key, v->type_name());
    return v->get<std::string>();
}

std::optional<int64_t> json_optional_int(const nlohmann::json& obj, std::string_view key,
                                         std::string_view where) {
    const nlohmann::json* v = find_field(obj, key, where);
    if (!v) return std::nullopt;
    if (v->is_number_integer()) {
        if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) {
            fail("{}: field '{}' is out of range: {}", where, key, v->dump());
        }
        return v->get<int64_t>();
    }
    // 3.0 is accepted as 3 (some writers emit whole numbers as floats); 3.5 is not.
    if (v->is_number_float()) {
        double d = v->get<double>();
        if (d >= -9.0e18 && d <= 9.0e18 && d == static_cast<double>(static_cast<int64_t>(d))) {  // range first
            return static_cast<int64_t>(d);
        }
    }
    fail("{}: field '{}' must be an integer, found {}", where, key, v->dump());
}

std::optional<std::vector<std::string>> json_optional_string_list(const nlohmann::json& obj,
                                                                  std::string_view key,
                                                                  std::string_view where) {
    const nlohmann::json* v = find_field(obj, key, where);
    if (!v) return std::nullopt;
    if (!v->is_array()) {
        fail("{}: field '{}' must be a list of strings, found {}", where, key, v->type_name());
    }
    std::vector<std::string> out;
    out.reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
        auto s = scalar_as_string((*v)[i]);
        if (!s) {
            fail("{}: field '{}' item {} must be a string, found {}", where, key, i,
                 (*v)[i].type_name());
        }
        out.push_back(std::move(*s));
    }
    return out;
}

}  // namespace kvec::eval
