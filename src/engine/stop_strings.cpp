#include "engine/stop_strings.h"

#include <algorithm>

namespace kvec {

StopStrings::StopStrings(std::vector<std::string> stops) {
    for (auto& s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStrings::push(std::string_view text) {
    if (stopped_) return {};
    pending_ += text;
    size_t first = std::string::npos;
    for (const std::string& s : stops_) {
        const size_t at = pending_.find(s);
        if (at < first) {
            first = at;
            matched_ = s;
        }
    }
    if (first != std::string::npos) {
        stopped_ = true;
        std::string out = pending_.substr(0, first);
        pending_.clear();
        return out;
    }
    // Hold back the longest tail that is a proper prefix of a stop string.
    size_t hold = 0;
    for (const std::string& s : stops_) {
        for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
            if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, out.size());
    return out;
}

std::string StopStrings::flush() {
    std::string out;
    out.swap(pending_);
    return stopped_ ? std::string() : out;
}

}  // namespace kvec
