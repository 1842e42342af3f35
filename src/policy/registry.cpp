#include "policy/registry.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/error.h"

// One line per policy; each policy file defines `PolicyEntry <id>_entry()`.
#define KVEC_POLICY_LIST(X) \
    X(full)                 \
    X(random)               \
    X(streaming)            \
    X(h2o)                  \
    X(tova)                 \
    X(snapkv)               \
    X(pyramidkv)            \
    X(ada_snapkv)           \
    X(ada_pyramidkv)        \
    X(keydiff)              \
    X(kvec)                 \
    X(knorm)                \
    X(lagkv)                \
    X(expected_attention)   \
    X(kvzip)                \
    X(headkv)               \
    X(gemfilter)

namespace kvec::policy {

#define KVEC_DECLARE_POLICY(id) PolicyEntry id##_entry();
KVEC_POLICY_LIST(KVEC_DECLARE_POLICY)
#undef KVEC_DECLARE_POLICY

const std::vector<PolicyEntry>& policies() {
#define KVEC_POLICY_ENTRY(id) id##_entry(),
    static const std::vector<PolicyEntry> list = {KVEC_POLICY_LIST(KVEC_POLICY_ENTRY)};
#undef KVEC_POLICY_ENTRY
    return list;
}

const PolicyEntry& find_policy(std::string_view name) {
    std::string names;
    for (const PolicyEntry& e : policies()) {
        if (e.name == name) return e;
        names += (names.empty() ? "" : ", ") + e.name;
    }
    fail("unknown eviction policy '{}' (policies: {})", name, names);
}

OptionValues policy_options(std::string_view spec) {
    const PolicySpec parsed = parse_policy_spec(spec);
    const PolicyEntry& entry = find_policy(parsed.name);
    return OptionValues(entry.name, entry.options, parsed.options);
}

bool has_option(const PolicyEntry& entry, std::string_view key) {
    return std::any_of(entry.options.begin(), entry.options.end(), [&](const OptionSpec& o) { return o.name == key; });
}

namespace {

// `spec` parsed, with the overrides added; `entry` is set to its policy's entry.
PolicySpec fold_overrides(std::string_view spec, const std::vector<OptionOverride>& overrides,
                          std::string_view spec_source, const PolicyEntry*& entry) {
    PolicySpec parsed = parse_policy_spec(spec);
    entry = &find_policy(parsed.name);
    for (const OptionOverride& o : overrides) {
        if (!has_option(*entry, o.key)) {
            fail("{} does not apply to policy {} (it has no option '{}')", o.source, entry->name, o.key);
        }
        if (parsed.options.count(o.key) != 0) {
            fail("{} given twice: in {} ({}={}) and as {}", o.key, spec_source, o.key, parsed.options.at(o.key), o.source);
        }
        parsed.options[o.key] = o.value;
    }
    return parsed;
}

}  // namespace

ResolvedPolicy resolve(std::string_view spec, const std::vector<OptionOverride>& overrides,
                       std::string_view spec_source) {
    const PolicyEntry* entry = nullptr;
    const PolicySpec parsed = fold_overrides(spec, overrides, spec_source, entry);
    const OptionValues values(entry->name, entry->options, parsed.options);
    return {values.canonical(), entry->create(values)};
}

std::unique_ptr<Evictor> make_policy(std::string_view spec) {
    const OptionValues values = policy_options(spec);
    return find_policy(values.policy()).create(values);
}

namespace {

// What values an option takes: "(max | avg)", "(true | false)", "[1, 1001]", "[0, 1]".
std::string value_range(const OptionSpec& o) {
    switch (o.type) {
        case OptionType::Bool:
            return "true | false";
        case OptionType::Choice: {
            std::string s;
            for (const auto& c : o.choices) s += (s.empty() ? "" : " | ") + c;
            return s;
        }
        case OptionType::Int:
            return fmt::format("integer {}..{}", o.int_min, o.int_max);
        case OptionType::Float:
            return fmt::format("number {}..{}", o.min, o.max);
        case OptionType::String:
            return "text";
    }
    return "";
}

}  // namespace

std::string format_policy_entry(const PolicyEntry& e) {
    std::string out = fmt::format("{:<12} {}\n", e.name, e.summary);
    for (const OptionSpec& o : e.options) {
        out += fmt::format("    {:<24} {} ({})\n", o.name + "=" + o.default_value, o.help, value_range(o));
    }
    return out;
}

std::string format_policy_list() {
    std::string out;
    for (const PolicyEntry& e : policies()) out += format_policy_entry(e);
    return out;
}

}  // namespace kvec::policy
