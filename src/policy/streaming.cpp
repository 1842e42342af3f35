// StreamingLLM (arXiv 2309.17453): the first `sinks` entries plus the most recent B - sinks, the
// same for every head and layer. Keys keep their original positions.
#include "policy/policy.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {

namespace {

class StreamingPolicy : public FramePolicy {
public:
    StreamingPolicy(const FrameOptions& frame, int64_t sinks)
        : FramePolicy("streaming", frame, sinks, fmt::format("the {} sink entries", sinks)),
          sinks_(sinks) {}

protected:
    void select(const LayerView& view, int64_t budget, KeepLists& keep) override {
        for (size_t h = 0; h < view.heads.size(); ++h) {
            keep[h] = streaming_select(view.heads[h].n_entries, budget, sinks_);
        }
    }

private:
    int64_t sinks_;
};

}  // namespace

PolicyEntry streaming_entry() {
    std::vector<OptionSpec> options = frame_option_specs(-1);
    options.push_back(
        int_option("sinks", 4, 0, 1 << 20, "attention-sink entries kept at the start"));
    options.push_back(bool_option(
        "rerotate", false,
        "re-rotate kept keys to contiguous positions (the original method; not supported by the "
        "engine yet)"));
    return {"streaming", "StreamingLLM: attention sinks + most recent entries", options,
            [](const OptionValues& v) -> std::unique_ptr<Evictor> {
                if (v.get_bool("rerotate")) {
                    fail(
                        "policy streaming: rerotate=true needs the engine to re-rotate kept keys "
                        "to new positions, which the eviction interface does not support yet");
                }
                return std::make_unique<StreamingPolicy>(read_frame_options(v, 0),
                                                         v.get_int("sinks"));
            }};
}

}  // namespace kvec::policy
