#pragma once
// Reproducible random numbers shared by the engine: splitmix64 and xoshiro256** (seeded through
// splitmix64). Own uniform draws instead of <random> distributions, whose results differ between
// standard libraries, so generated models, samples and synthetic data are portable byte for byte.

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "util/error.h"

namespace kvec {

// Advances `state` by the golden-ratio increment and returns the mixed value.
inline uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Uniform integer in [0, bound), bound > 0, by rejection on the low range (no modulo bias).
template <typename Next>
uint64_t uniform_below(Next&& next, uint64_t bound) {
    KVEC_CHECK(bound > 0);
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
        const uint64_t r = next();
        if (r >= threshold) return r % bound;
    }
}

class Rng {
public:
    explicit Rng(uint64_t seed = 0) { reseed(seed); }
    void reseed(uint64_t seed) {
        for (uint64_t& s : s_) s = splitmix64(seed);
    }
    uint64_t next() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1), 53 bits
    uint64_t below(uint64_t n) { return uniform_below([this] { return next(); }, n); }
    int64_t range(int64_t lo, int64_t hi) {  // inclusive
        return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
    }
    template <typename T>
    void shuffle(std::vector<T>& v) {  // Fisher-Yates
        for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
    }
    template <typename T>
    const T& pick(const std::vector<T>& v) {
        KVEC_CHECK(!v.empty());
        return v[below(v.size())];
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    std::array<uint64_t, 4> s_{};
};

}  // namespace kvec
