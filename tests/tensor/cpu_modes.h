// The kernel widths a tensor test runs on this CPU: 256-bit, and 512-bit where it has AVX-512F
// (kernels::set_avx512). Each test that covers both loops over avx512_modes(); the guard
// restores the start-up choice.
#pragma once

#include <vector>

#include "tensor/kernels.h"

namespace kvec::test {

inline std::vector<bool> avx512_modes() {
    if (kernels::avx512_supported()) return {false, true};
    return {false};
}

class Avx512Guard {
public:
    Avx512Guard() : saved_(kernels::avx512_enabled()) {}
    ~Avx512Guard() { kernels::set_avx512(saved_); }
    Avx512Guard(const Avx512Guard&) = delete;
    Avx512Guard& operator=(const Avx512Guard&) = delete;

private:
    bool saved_;
};

}  // namespace kvec::test
