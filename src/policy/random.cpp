// Random: a uniform random subset of each head's prefix (seeded per sequence position, layer and
// head) plus the window. The sanity floor of the tables.
#include <limits>

#include "policy/policy.h"
#include "policy/registry.h"

namespace kvec::policy {

namespace {

class RandomPolicy : public FramePolicy {
public:
    RandomPolicy(const FrameOptions& frame, uint64_t seed)
        : FramePolicy("random", frame, frame.window, window_text(frame.window)), seed_(seed) {}

protected:
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        const int64_t w = frame().window;
        HeadSelection prefix(view.heads.size());  // [H][kept]
        for (size_t h = 0; h < view.heads.size(); ++h) {
            const int64_t n = view.heads[h].n_entries;
            const int64_t m = prefix_count(n, w);
            const uint64_t seed = mix_seed(seed_, static_cast<uint64_t>(view.n_past),
                                           static_cast<uint64_t>(view.layer), h);
            prefix[h] = n <= budget ? iota_indices(m) : random_subset(m, budget - w, seed);
        }
        keep_with_window(view, prefix, w, keep);
    }

private:
    uint64_t seed_;
};

}  // namespace

PolicyEntry random_entry() {
    std::vector<OptionSpec> options = frame_option_specs(32);
    options.push_back(int_option("seed", 0, 0, std::numeric_limits<int64_t>::max(),
                                 "random seed (same seed, same prompt -> same selection)"));
    return {"random", "uniform random prefix entries per head (seeded) + window", options,
            [](const OptionValues& v) {
                return std::make_unique<RandomPolicy>(read_frame_options(v),
                                                      static_cast<uint64_t>(v.get_int("seed")));
            }};
}

}  // namespace kvec::policy
