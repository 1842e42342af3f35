// Full: no eviction; the reference row of every table.
#include "policy/registry.h"

namespace kvec::policy {

namespace {

class FullPolicy : public Evictor {
public:
    ObservationRequest request() const override { return {}; }
    bool on_prefill(const LayerView&, KeepLists&) override { return false; }
};

}  // namespace

PolicyEntry full_entry() {
    return {"full", "no eviction (the reference row of every table)", {}, [](const OptionValues&) {
                return std::make_unique<FullPolicy>();
            }};
}

}  // namespace kvec::policy
