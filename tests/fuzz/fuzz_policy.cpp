// Policy option parsing: a --policy string (make_policy, the canonical form) and a --policies list
// of kvec eval (aliases, options, combinations with budgets) build or throw kvec::Error.
#include <string>

#include "eval/sweep.h"
#include "fuzz_common.h"
#include "policy/registry.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 4096) return 0;
    const std::string text(kvec::fuzz::as_text(data, size));
    try {
        const kvec::policy::OptionValues v = kvec::policy::policy_options(text);
        volatile size_t sink = v.canonical().size();
        (void)sink;
        auto p = kvec::policy::make_policy(text);
        sink = p != nullptr ? 1 : 0;
    } catch (const kvec::Error&) {
    }
    try {
        const auto policies = kvec::eval::parse_policy_list(text);
        const auto combos = kvec::eval::make_combos(policies, {64, kvec::eval::compression_code(0.5)});
        volatile size_t sink = combos.size();
        (void)sink;
    } catch (const kvec::Error&) {
    }
    return 0;
}
