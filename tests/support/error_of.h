// The message of the kvec::Error a callable throws: what tests of clear user errors compare.
// Included by every test through kvec_test (cmake/kvec.cmake).
#pragma once

#include <string>

#include "util/error.h"

namespace kvec::testing_support {

// The kvec::Error's message, or "(no error)" when `f` returns normally (any other exception
// propagates and fails the test).
template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace kvec::testing_support
