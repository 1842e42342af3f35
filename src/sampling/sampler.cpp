#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "util/error.h"

namespace kvec {

void validate(const SamplerParams& p) {
    if (!std::isfinite(p.temperature)) fail("temperature must be a finite number");
    if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) fail("top-p must be in (0, 1], got {}", p.top_p);
    if (!(p.min_p >= 0.0f && p.min_p < 1.0f)) fail("min-p must be in [0, 1), got {}", p.min_p);
    if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty)) {
        fail("repeat penalty must be a positive number, got {}", p.repeat_penalty);
    }
    if (p.repeat_last_n < -1) fail("repeat-last-n must be >= -1, got {}", p.repeat_last_n);
}

int32_t argmax(std::span<const float> logits) {
    KVEC_CHECK(!logits.empty());
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) {
    validate(params);
}

std::vector<Candidate> Sampler::distribution(std::span<const float> logits,
                                             std::span<const int32_t> history) const {
    const auto n_vocab = static_cast<int32_t>(logits.size());
    KVEC_CHECK(n_vocab > 0);
    std::vector<float> l(logits.begin(), logits.end());  // [n_vocab] working logits

    // Repetition penalty over the distinct tokens of the recent history.
    if (params_.repeat_penalty != 1.0f && !history.empty()) {
        size_t start = 0;
        if (params_.repeat_last_n >= 0 && history.size() > static_cast<size_t>(params_.repeat_last_n)) {
            start = history.size() - static_cast<size_t>(params_.repeat_last_n);
        }
        std::unordered_set<int32_t> seen(history.begin() + static_cast<ptrdiff_t>(start), history.end());
        for (int32_t id : seen) {
            if (id < 0 || id >= n_vocab) continue;
            float& v = l[static_cast<size_t>(id)];
            v = v > 0.0f ? v / params_.repeat_penalty : v * params_.repeat_penalty;
        }
    }

    if (params_.temperature <= 0.0f) return {{argmax(l), 1.0f}};

    // Candidates sorted by logit, truncated to top-k.
    std::vector<Candidate> c(static_cast<size_t>(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) c[static_cast<size_t>(i)] = {i, l[static_cast<size_t>(i)]};
    auto by_logit = [](const Candidate& a, const Candidate& b) {
        return a.p > b.p || (a.p == b.p && a.id < b.id);
    };
    size_t keep = c.size();
    if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) keep = static_cast<size_t>(params_.top_k);
    std::partial_sort(c.begin(), c.begin() + static_cast<ptrdiff_t>(keep), c.end(), by_logit);
    c.resize(keep);

    // Probabilities at temperature 1 over the survivors (logits kept aside for the temperature).
    std::vector<float> logit(c.size());
    for (size_t i = 0; i < c.size(); ++i) logit[i] = c[i].p;
    auto normalise = [&](float temperature) {
        const float mx = logit[0];
        double sum = 0.0;
        for (size_t i = 0; i < c.size(); ++i) {
            c[i].p = std::exp((logit[i] - mx) / temperature);
            sum += c[i].p;
        }
        for (Candidate& x : c) x.p = static_cast<float>(x.p / sum);
    };
    normalise(1.0f);

    // Top-p: the smallest prefix whose probability reaches top_p.
    if (params_.top_p < 1.0f) {
        double cum = 0.0;
        size_t n = c.size();
        for (size_t i = 0; i < c.size(); ++i) {
            cum += c[i].p;
            if (cum >= params_.top_p) {
                n = i + 1;
                break;
            }
        }
        c.resize(n);
        logit.resize(n);
    }
    // Min-p: drop candidates below min_p times the most probable one.
    if (params_.min_p > 0.0f) {
        const float threshold = params_.min_p * c[0].p;
        size_t n = 1;
        while (n < c.size() && c[n].p >= threshold) ++n;
        c.resize(n);
        logit.resize(n);
    }
    normalise(params_.temperature);
    return c;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
    const std::vector<Candidate> c = distribution(logits, history);
    if (c.size() == 1) return c[0].id;
    const double u = rng_.uniform();
    double cum = 0.0;
    for (const Candidate& x : c) {
        cum += x.p;
        if (u < cum) return x.id;
    }
    return c.back().id;  // rounding: u beyond the accumulated total
}

}  // namespace kvec
