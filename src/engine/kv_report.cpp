#include "engine/kv_report.h"

#include <algorithm>


namespace kvec {

double KvReport::kept_percent() const {
    return full_bytes > 0 ? 100.0 * static_cast<double>(prompt_bytes) / static_cast<double>(full_bytes) : 0.0;
}

KvReport kv_report(const Session& session, const Evictor* policy, const GenerationStats& s) {
    const ModelConfig& c = session.model().config();
    KvReport r;
    r.heads = int64_t{c.n_layer} * c.n_head_kv;
    r.entry_bytes = session.kv_cache().entry_bytes();
    r.full_entries = r.heads * s.n_prompt;
    r.full_bytes = static_cast<size_t>(r.full_entries) * r.entry_bytes;
    r.prompt_entries = s.kv_prompt_entries;
    r.prompt_bytes = s.kv_prompt_bytes;
    r.end_entries = s.kv_entries;
    r.end_bytes = s.kv_bytes;
    r.peak_bytes = s.kv_peak_bytes;
    r.prompt_peak_bytes = s.kv_prompt_peak_bytes;
    r.chunk = session.options().n_batch;
    r.eviction = session.eviction_stats();
    if (const auto plan = policy != nullptr ? policy->budget_plan(s.n_prompt) : std::nullopt) {
        r.budget = plan->budget;
        r.budget_entries = r.heads * std::min<int64_t>(r.budget, s.n_prompt);
        r.budget_held = r.prompt_entries <= r.budget_entries;
        r.chunked = plan->chunked;
        if (r.chunked) r.prompt_peak_bound = static_cast<size_t>(r.heads * (r.budget + r.chunk)) * r.entry_bytes;
    }
    return r;
}

}  // namespace kvec
