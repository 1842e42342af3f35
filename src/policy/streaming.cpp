// StreamingLLM (arXiv 2309.17453): the first `sinks` entries plus the most recent B - sinks, the
// same for every head and layer. Keys keep their original positions by default; rerotate=true
// is the original method: the kept entries move to contiguous positions 0 .. k-1 (the engine
// re-rotates their keys) and new tokens continue at k, so positions never outgrow the cache.
#include <algorithm>

#include "policy/policy.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {

namespace {

class StreamingPolicy : public FramePolicy {
public:
    StreamingPolicy(const FrameOptions& frame, int64_t sinks, bool rerotate)
        : FramePolicy("streaming", frame, sinks, fmt::format("the {} sink entries", sinks)),
          sinks_(sinks),
          rerotate_(rerotate) {}

    bool reposition(const LayerView& view, const KeepLists& keep, Repositioning& out) override {
        if (!rerotate_) return false;
        out.positions.assign(keep.size(), {});
        size_t longest = 0;
        for (size_t h = 0; h < keep.size(); ++h) {
            out.positions[h].resize(keep[h].size());
            for (size_t i = 0; i < keep[h].size(); ++i) {
                out.positions[h][i] = static_cast<int32_t>(i);
            }
            longest = std::max(longest, keep[h].size());
        }
        out.next_position = static_cast<int32_t>(longest);
        return true;
    }

protected:
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        for (size_t h = 0; h < view.heads.size(); ++h) {
            keep[h] = streaming_select(view.heads[h].n_entries, budget, sinks_);
        }
    }

private:
    int64_t sinks_;
    bool rerotate_;
};

}  // namespace

PolicyEntry streaming_entry() {
    std::vector<OptionSpec> options = frame_option_specs(-1);
    options.push_back(
        int_option("sinks", 4, 0, 1 << 20, "attention-sink entries kept at the start"));
    options.push_back(bool_option(
        "rerotate", false,
        "re-rotate kept keys to contiguous positions, new tokens continue from the compacted "
        "length (the original method)"));
    return {"streaming", "StreamingLLM: attention sinks + most recent entries", options,
            [](const OptionValues& v) -> std::unique_ptr<Evictor> {
                return std::make_unique<StreamingPolicy>(
                    read_frame_options(v, 0), v.get_int("sinks"), v.get_bool("rerotate"));
            }};
}

}  // namespace kvec::policy
