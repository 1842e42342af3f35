// Random operands for the tensor tests: n floats from N(0, sigma^2), reproducible from the seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kvec::test {

inline std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = dist(rng);
    return v;
}

}  // namespace kvec::test
