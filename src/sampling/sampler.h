// Token sampling: greedy, temperature, top-k, top-p (nucleus), min-p, repetition penalty, with a
// seeded generator whose sequence is the same on every platform (reproducible runs).
//
// Order of the steps (as llama.cpp's default chain): repetition penalty -> top-k -> top-p ->
// min-p -> temperature -> draw. top-p and min-p look at the probabilities at temperature 1.
// temperature <= 0 means greedy: the argmax after the repetition penalty.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "util/rng.h"

namespace kvec {

struct SamplerParams {
    float temperature = 0.8f;     // <= 0: greedy
    int top_k = 40;               // <= 0: off
    float top_p = 0.95f;          // >= 1: off
    float min_p = 0.05f;          // <= 0: off
    float repeat_penalty = 1.0f;  // 1: off; > 1 discourages tokens seen in the last repeat_last_n
    int repeat_last_n = 64;       // how many recent tokens the penalty looks at (-1: all)
    uint64_t seed = 0;
};

// Throws kvec::Error naming the first invalid parameter (negative penalty, top-p outside (0, 1]...).
void validate(const SamplerParams& params);

// Index of the largest logit (the first one on ties).
int32_t argmax(std::span<const float> logits);

struct Candidate {
    int32_t id;
    float p;  // probability after every filter and the temperature
};

class Sampler {
public:
    explicit Sampler(const SamplerParams& params);  // validates

    const SamplerParams& params() const { return params_; }

    // Picks the next token. history: the tokens so far (for the repetition penalty).
    int32_t sample(std::span<const float> logits, std::span<const int32_t> history = {});

    // The distribution sample() draws from: the surviving candidates, most probable first,
    // probabilities summing to 1 (one candidate with p = 1 when greedy).
    std::vector<Candidate> distribution(std::span<const float> logits,
                                        std::span<const int32_t> history = {}) const;

    void reseed(uint64_t seed) { rng_.reseed(seed); }

private:
    SamplerParams params_;
    Rng rng_;
};

}  // namespace kvec
