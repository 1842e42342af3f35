// Server counters and their Prometheus text exposition (GET /metrics): requests by endpoint and
// status code, prompt and generated tokens, evicted entries, and the gauges read from the slot
// pool at scrape time (KV bytes per slot and in total, busy slots, queue length).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "server/slots.h"

namespace kvec::server {

class Metrics {
public:
    void count_request(const std::string& path, int status);
    // One finished generation: its token counts and the entries its policy evicted.
    void count_generation(int64_t prompt_tokens, int64_t generated_tokens, int64_t evicted, double seconds);

    // The exposition, version 0.0.4 text format.
    std::string render(const SlotPool& slots) const;

private:
    mutable std::mutex mutex_;
    std::map<std::pair<std::string, int>, int64_t> requests_;  // (path, status) -> count
    int64_t prompt_tokens_ = 0;
    int64_t generated_tokens_ = 0;
    int64_t evicted_ = 0;
    int64_t generations_ = 0;
    double generation_seconds_ = 0;
};

// The path as a metrics label: the known endpoints as they are, anything else "other" (so that
// clients cannot grow the label set without bound).
std::string path_label(const std::string& path);

}  // namespace kvec::server
