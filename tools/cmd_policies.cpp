// kvec policies: the eviction policies with their options, defaults and ranges (from the policy
// registry, so the listing is always what `kvec run --policy` accepts).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "commands.h"
#include "policy/registry.h"

namespace kvec::tools {

namespace {

struct PoliciesOptions {
    std::string name;  // empty: every policy
};

int list_policies(const PoliciesOptions& o) {
    if (o.name.empty()) {
        fmt::print("{}", policy::format_policy_list());
        fmt::print("\nUse: kvec run ... --policy NAME[:option=value,...] [--budget B | --ratio R] [--chunk C] "
                   "[--decode-evict[=K]]\n");
        return 0;
    }
    const policy::PolicyEntry& e = policy::find_policy(o.name);  // kvec::Error listing the names
    fmt::print("{}", policy::format_policy_entry(e));
    return 0;
}

}  // namespace

void add_policies_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<PoliciesOptions>();
    CLI::App* cmd = app.add_subcommand("policies", "list the KV-cache eviction policies with their options and defaults");
    cmd->add_option("name", o->name, "show one policy only");
    cmd->callback([o, &action] { action = [o] { return list_policies(*o); }; });
}

}  // namespace kvec::tools
