// Bootstrap statistics of evaluation results: intervals of scores and paired comparisons of
// policies over the same items (docs/evaluation.md, "Intervals and paired comparisons").
//
// Items are stratified: values[t] holds the per-item values of stratum t (a task; one stratum for
// the segments of a text). A resample draws, within each stratum, as many items as it has,
// uniformly with replacement, and the statistic is the unweighted mean over strata of the stratum
// means: the aggregation of the average score over tasks. The interval is the percentile
// interval of that statistic over the resamples. A paired comparison of policies A and B runs the
// same bootstrap on the per-item differences A - B (the same items, so item difficulty cancels);
// it is significant when its interval excludes 0.
//
// Determinism: the resamples come from the project's own xoshiro256** (util/rng.h) seeded with
// `seed`, so the same values give the same interval on every platform.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvec::eval {

constexpr int kBootstrapResamples = 2000;
constexpr uint64_t kBootstrapSeed = 20261201;

struct BootstrapOptions {
    int resamples = kBootstrapResamples;
    uint64_t seed = kBootstrapSeed;
    double level = 0.95;  // coverage of the two-sided percentile interval
};

struct Estimate {
    double mean = 0;      // mean over strata of the stratum means (no resampling)
    double lo = 0;        // percentile interval of the resampled statistic
    double hi = 0;
    double p_above = 0;   // share of resamples whose statistic is > 0
    double p_below = 0;   // share of resamples whose statistic is < 0 (ties count in neither)
    int64_t n = 0;        // items in all strata
    // The interval excludes 0 (for differences: one side is significantly better).
    bool significant() const { return lo > 0 || hi < 0; }
};

// values: [strata][items of the stratum]; empty strata are ignored. kvec::Error if every stratum
// is empty, resamples < 1 or level outside (0, 1).
Estimate bootstrap_mean(const std::vector<std::vector<double>>& values, const BootstrapOptions& options = {});

// The estimate of -X from that of X (a difference read the other way round): interval and shares
// swapped; 0 stays +0.
Estimate negated(const Estimate& e);

// "+1.23 [+0.20, +2.30]" (signed: a difference) or "39.20 [36.10, 42.30]".
std::string format_estimate(const Estimate& e, int decimals, bool signed_values);

}  // namespace kvec::eval
