#include "policy/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "util/error.h"

namespace kvec::policy {

namespace {

std::string_view trim(std::string_view s) {
    const auto not_space = [](char c) { return c != ' ' && c != '\t' && c != '\n' && c != '\r'; };
    while (!s.empty() && !not_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && !not_space(s.back())) s.remove_suffix(1);
    return s;
}

std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
    return out;
}

std::string format_number(double v, OptionType type) {
    if (type == OptionType::Bool) return v != 0.0 ? "true" : "false";
    return fmt::format("{}", v);
}

}  // namespace

OptionSpec int_option(std::string name, int64_t default_value, int64_t min, int64_t max,
                      std::string help) {
    OptionSpec s;
    s.name = std::move(name);
    s.type = OptionType::Int;
    s.default_value = std::to_string(default_value);
    s.help = std::move(help);
    s.min = static_cast<double>(min);
    s.max = static_cast<double>(max);
    s.int_min = min;
    s.int_max = max;
    return s;
}

OptionSpec float_option(std::string name, double default_value, double min, double max,
                        std::string help) {
    OptionSpec s;
    s.name = std::move(name);
    s.type = OptionType::Float;
    s.default_value = fmt::format("{}", default_value);
    s.help = std::move(help);
    s.min = min;
    s.max = max;
    return s;
}

OptionSpec bool_option(std::string name, bool default_value, std::string help) {
    OptionSpec s;
    s.name = std::move(name);
    s.type = OptionType::Bool;
    s.default_value = default_value ? "true" : "false";
    s.help = std::move(help);
    return s;
}

OptionSpec choice_option(std::string name, std::string default_value,
                         std::vector<std::string> choices, std::string help) {
    OptionSpec s;
    s.name = std::move(name);
    s.type = OptionType::Choice;
    s.default_value = std::move(default_value);
    s.choices = std::move(choices);
    s.help = std::move(help);
    return s;
}

OptionSpec string_option(std::string name, std::string default_value, std::string help) {
    OptionSpec s;
    s.name = std::move(name);
    s.type = OptionType::String;
    s.default_value = std::move(default_value);
    s.help = std::move(help);
    return s;
}

std::string format_policy_spec(const PolicySpec& spec) {
    std::string text = spec.name;
    char sep = ':';
    for (const auto& [key, value] : spec.options) {
        text += sep + key + "=" + value;
        sep = ',';
    }
    return text;
}

PolicySpec parse_policy_spec(std::string_view text) {
    PolicySpec out;
    const size_t colon = text.find(':');
    out.name = std::string(trim(text.substr(0, colon)));
    if (out.name.empty()) {
        fail("policy '{}': missing policy name (see `kvec policies`)", text);
    }
    if (colon == std::string_view::npos) return out;
    std::string_view rest = text.substr(colon + 1);
    if (trim(rest).empty()) {
        fail("policy '{}': no options after ':' (write {} alone, or {}:key=value)", text, out.name, out.name);
    }
    while (true) {
        const size_t comma = rest.find(',');
        const std::string_view item = trim(rest.substr(0, comma));
        const size_t eq = item.find('=');
        if (eq == std::string_view::npos) {
            fail("policy '{}': option '{}' must be written key=value", text, item);
        }
        const std::string key(trim(item.substr(0, eq)));
        const std::string value(trim(item.substr(eq + 1)));
        if (key.empty()) fail("policy '{}': option '{}' has an empty name", text, item);
        if (!out.options.emplace(key, value).second) {
            fail("policy '{}': option '{}' is given twice", text, key);
        }
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
    }
    return out;
}

OptionValues::OptionValues(std::string policy, std::vector<OptionSpec> specs,
                           const std::map<std::string, std::string>& given)
    : policy_(std::move(policy)), specs_(std::move(specs)) {
    for (const auto& entry : given) {
        const std::string& key = entry.first;  // (clang 14 cannot capture a structured binding)
        const bool known = std::any_of(specs_.begin(), specs_.end(),
                                       [&](const OptionSpec& s) { return s.name == key; });
        if (!known) {
            std::vector<std::string> names;
            for (const auto& s : specs_) names.push_back(s.name);
            if (names.empty()) fail("policy {} takes no options (got '{}')", policy_, key);
            fail("policy {} has no option '{}' (options: {})", policy_, key, join(names));
        }
        given_.push_back(key);
    }
    for (const OptionSpec& s : specs_) {
        const auto it = given.find(s.name);
        const std::string& raw = it != given.end() ? it->second : s.default_value;
        const auto bad = [&](const std::string& expected) {
            fail("policy {}: option {} expects {}, got '{}'", policy_, s.name, expected, raw);
        };
        switch (s.type) {
            case OptionType::Int: {
                int64_t v = 0;
                const auto [end, ec] = std::from_chars(raw.data(), raw.data() + raw.size(), v);
                const std::string range = fmt::format("an integer in [{}, {}]", s.int_min, s.int_max);
                if (ec != std::errc() || end != raw.data() + raw.size()) bad(range);
                if (v < s.int_min || v > s.int_max) bad(range);
                integer_[s.name] = v;
                text_[s.name] = std::to_string(v);
                break;
            }
            case OptionType::Float: {
                const std::string range = fmt::format("a number in [{}, {}]", s.min, s.max);
                char* end = nullptr;
                const double v = raw.empty() ? NAN : std::strtod(raw.c_str(), &end);
                if (raw.empty() || end != raw.c_str() + raw.size() || !std::isfinite(v)) bad(range);
                if (v < s.min || v > s.max) bad(range);
                number_[s.name] = v;
                break;
            }
            case OptionType::Bool: {
                std::string lower(raw);
                std::transform(lower.begin(), lower.end(), lower.begin(),
                               [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
                if (lower == "true" || lower == "1" || lower == "yes" || lower == "on") {
                    number_[s.name] = 1.0;
                } else if (lower == "false" || lower == "0" || lower == "no" || lower == "off") {
                    number_[s.name] = 0.0;
                } else {
                    bad("true or false");
                }
                break;
            }
            case OptionType::Choice:
                if (std::find(s.choices.begin(), s.choices.end(), raw) == s.choices.end()) {
                    bad("one of " + join(s.choices));
                }
                text_[s.name] = raw;
                break;
            case OptionType::String:
                text_[s.name] = raw;
                break;
        }
        if (s.type == OptionType::Float || s.type == OptionType::Bool) {
            text_[s.name] = format_number(number_[s.name], s.type);
        }
    }
}

const OptionSpec& OptionValues::spec(std::string_view name, OptionType type) const {
    for (const auto& s : specs_) {
        if (s.name == name) {
            KVEC_CHECK(s.type == type);
            return s;
        }
    }
    fail("internal error: policy {} has no option '{}'", policy_, name);
}

int64_t OptionValues::get_int(std::string_view name) const {
    spec(name, OptionType::Int);
    return integer_.find(name)->second;
}

double OptionValues::get_float(std::string_view name) const {
    spec(name, OptionType::Float);
    return number_.find(name)->second;
}

bool OptionValues::get_bool(std::string_view name) const {
    spec(name, OptionType::Bool);
    return number_.find(name)->second != 0.0;
}

const std::string& OptionValues::get_choice(std::string_view name) const {
    spec(name, OptionType::Choice);
    return text_.find(name)->second;
}

const std::string& OptionValues::get_string(std::string_view name) const {
    spec(name, OptionType::String);
    return text_.find(name)->second;
}

bool OptionValues::is_given(std::string_view name) const {
    return std::find(given_.begin(), given_.end(), name) != given_.end();
}

std::string OptionValues::canonical() const {
    std::string out = policy_;
    for (size_t i = 0; i < specs_.size(); ++i) {
        out += (i == 0 ? ":" : ",") + specs_[i].name + "=" + text_.find(specs_[i].name)->second;
    }
    return out;
}

}  // namespace kvec::policy
