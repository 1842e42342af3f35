// The policy registry: name -> factory, summary and option descriptions (with defaults), for
// `kvec policies`, the command line and the evaluation. Policies are selected by strings such as
// "snapkv" or "kvec:budget=256,gamma=0.5,unit=token".
//
// Adding a policy: one file defining `PolicyEntry <id>_entry()` plus one line in the
// KVEC_POLICY_LIST of registry.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvcache/eviction.h"
#include "policy/options.h"

namespace kvec::policy {

struct PolicyEntry {
    std::string name;                 // what users write, e.g. "ada-snapkv"
    std::string summary;              // one line for the listing
    std::vector<OptionSpec> options;  // every option, with its default
    std::function<std::unique_ptr<Evictor>(const OptionValues&)> create;
};

// Every registered policy, in listing order.
const std::vector<PolicyEntry>& policies();

// The entry called `name`; throws kvec::Error listing the known names otherwise.
const PolicyEntry& find_policy(std::string_view name);

// Parses and validates "name[:key=value,...]" (unknown policy / option, bad value -> kvec::Error).
OptionValues policy_options(std::string_view spec);

// Whether the policy has an option called `key`.
bool has_option(const PolicyEntry& entry, std::string_view key);

// A value for one of a policy's options given outside its string: a command-line flag such as
// --budget, or a field of a server request such as kv.budget (`source` names it in messages).
struct OptionOverride {
    std::string key;
    std::string value;
    std::string source;
};

// A ready policy from "name[:key=value,...]". Throws kvec::Error on any problem of the string.
std::unique_ptr<Evictor> make_policy(std::string_view spec);

// A policy string and its overrides resolved once: what run and serve turn --policy / kv.policy
// plus --budget, --ratio, kv.budget... into.
struct ResolvedPolicy {
    std::string spec;                 // canonical "name:key=value,..." with every option
    std::unique_ptr<Evictor> policy;  // ready to attach
};
// `spec` ("name[:key=value,...]") with the overrides added as options, parsed and validated once.
// kvec::Error for an unknown policy, a bad option, an override of an option the policy does not
// have, or one the string already sets (spec_source names the string).
ResolvedPolicy resolve(std::string_view spec, const std::vector<OptionOverride>& overrides = {},
                       std::string_view spec_source = "--policy");

// Human-readable list of the policies and their options with defaults (`kvec policies`).
std::string format_policy_list();
// The same for one policy: its summary line, then one line per option "name=default help (values)".
std::string format_policy_entry(const PolicyEntry& entry);

}  // namespace kvec::policy
