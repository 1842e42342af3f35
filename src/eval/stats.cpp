#include "eval/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "util/error.h"
#include "util/rng.h"

namespace kvec::eval {

Estimate bootstrap_mean(const std::vector<std::vector<double>>& values, const BootstrapOptions& o) {
    if (o.resamples < 1) fail("bootstrap: resamples must be >= 1, got {}", o.resamples);
    if (!(o.level > 0.0 && o.level < 1.0)) fail("bootstrap: level must be in (0, 1), got {}", o.level);
    std::vector<const std::vector<double>*> strata;  // [non-empty strata]
    Estimate e;
    for (const auto& s : values) {
        if (s.empty()) continue;
        strata.push_back(&s);
        e.n += static_cast<int64_t>(s.size());
    }
    if (strata.empty()) fail("bootstrap: no values");
    auto mean_of_means = [&](auto&& pick) {
        double sum = 0;
        for (size_t t = 0; t < strata.size(); ++t) {
            const std::vector<double>& s = *strata[t];
            double st = 0;
            for (size_t i = 0; i < s.size(); ++i) st += s[pick(s.size(), i)];
            sum += st / static_cast<double>(s.size());
        }
        // Differences of equal scores are 0 up to rounding (100 x 1/3 - 100 x 1/3 summed in another
        // order); snap them, so that ties read as 0 and never as a tiny effect in one direction.
        const double m = sum / static_cast<double>(strata.size());
        return std::fabs(m) < 1e-9 ? 0.0 : m;
    };
    e.mean = mean_of_means([](size_t, size_t i) { return i; });
    Rng rng(o.seed);
    std::vector<double> stat(static_cast<size_t>(o.resamples));  // [resamples]
    int64_t above = 0, below = 0;
    for (double& v : stat) {
        v = mean_of_means([&rng](size_t n, size_t) { return static_cast<size_t>(rng.below(n)); });
        if (v > 0) ++above;
        if (v < 0) ++below;
    }
    std::sort(stat.begin(), stat.end());
    // Percentiles by linear interpolation between order statistics (numpy's default).
    auto quantile = [&stat](double q) {
        const double pos = q * static_cast<double>(stat.size() - 1);
        const auto lo = static_cast<size_t>(std::floor(pos));
        const size_t hi = std::min(lo + 1, stat.size() - 1);
        return stat[lo] + (pos - static_cast<double>(lo)) * (stat[hi] - stat[lo]);
    };
    const double tail = (1.0 - o.level) / 2.0;
    e.lo = quantile(tail);
    e.hi = quantile(1.0 - tail);
    e.p_above = static_cast<double>(above) / static_cast<double>(stat.size());
    e.p_below = static_cast<double>(below) / static_cast<double>(stat.size());
    return e;
}

Estimate negated(const Estimate& e) {
    auto neg = [](double v) { return v == 0.0 ? 0.0 : -v; };  // a tie stays +0, never "-0.00"
    return {neg(e.mean), neg(e.hi), neg(e.lo), e.p_below, e.p_above, e.n};
}

std::string format_estimate(const Estimate& e, int decimals, bool signed_values) {
    auto num = [&](double v) {
        return signed_values ? fmt::format("{:+.{}f}", v, decimals) : fmt::format("{:.{}f}", v, decimals);
    };
    return fmt::format("{} [{}, {}]", num(e.mean), num(e.lo), num(e.hi));
}

}  // namespace kvec::eval
