// Errors: every failure a user can cause (bad file, bad flag, bad input) is reported by throwing
// kvec::Error with one clear message naming the problem. Tools catch it at the top level and
// print "error: <message>". Internal invariants use assert-like KVEC_CHECK instead.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kvec {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws kvec::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace kvec

// Checks an internal invariant (a bug if it fails, not a user error); active in every build.
#define KVEC_CHECK(cond)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            throw ::kvec::Error(fmt::format("internal error: {}:{}: check failed: {}",     \
                                            __FILE__, __LINE__, #cond));                   \
        }                                                                                  \
    } while (0)
