// Policy options: typed option descriptions (name, type, default, range, help) and the parsing
// of "name" / "name:key=value,key=value" policy strings, with clear errors for unknown names,
// unknown options and bad values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvec::policy {

enum class OptionType { Int, Float, Bool, Choice, String };

struct OptionSpec {
    std::string name;
    OptionType type = OptionType::Int;
    std::string default_value;  // in the same text form a user writes
    std::string help;
    std::vector<std::string> choices;  // Choice only
    double min = -1e300;               // Float: inclusive range (Int: the same, rounded)
    double max = 1e300;
    int64_t int_min = INT64_MIN;       // Int: inclusive range, exact
    int64_t int_max = INT64_MAX;
};

// Convenience constructors.
OptionSpec int_option(std::string name, int64_t default_value, int64_t min, int64_t max,
                      std::string help);
OptionSpec float_option(std::string name, double default_value, double min, double max,
                        std::string help);
OptionSpec bool_option(std::string name, bool default_value, std::string help);
OptionSpec choice_option(std::string name, std::string default_value,
                         std::vector<std::string> choices, std::string help);
// Free text (a file path); it cannot hold ',' (the option separator).
OptionSpec string_option(std::string name, std::string default_value, std::string help);

// "snapkv:budget=256, window=8" -> name "snapkv", {budget: 256, window: 8}. Whitespace around
// names, keys and values is ignored. Throws kvec::Error on an empty name, an option without
// '=', an empty key or a repeated key.
struct PolicySpec {
    std::string name;
    std::map<std::string, std::string> options;
};
PolicySpec parse_policy_spec(std::string_view text);
// "name" or "name:key=value,..." with the options in key order (as given: no defaults added).
std::string format_policy_spec(const PolicySpec& spec);

// Validated option values of one policy: every option of `specs` has a value (given or default).
class OptionValues {
public:
    // Throws kvec::Error naming the policy for an unknown option (listing the known ones) or a
    // value that does not parse or lies outside the option's range / choices.
    OptionValues(std::string policy, std::vector<OptionSpec> specs,
                 const std::map<std::string, std::string>& given);

    const std::string& policy() const { return policy_; }
    int64_t get_int(std::string_view name) const;
    double get_float(std::string_view name) const;
    bool get_bool(std::string_view name) const;
    const std::string& get_choice(std::string_view name) const;
    const std::string& get_string(std::string_view name) const;
    bool is_given(std::string_view name) const;  // set explicitly by the user

    // "name:key=value,..." with every option (canonical values), for logs and result files.
    std::string canonical() const;

private:
    const OptionSpec& spec(std::string_view name, OptionType type) const;

    std::string policy_;
    std::vector<OptionSpec> specs_;
    std::map<std::string, std::string, std::less<>> text_;  // canonical text per option
    std::map<std::string, double, std::less<>> number_;     // Float / Bool values
    std::map<std::string, int64_t, std::less<>> integer_;   // Int values (exact: never through a double)
    std::vector<std::string> given_;
};

}  // namespace kvec::policy
