#include "server/metrics.h"

#include <fmt/format.h>

namespace kvec::server {

std::string path_label(const std::string& path) {
    for (const char* known : {"/", "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"}) {
        if (path == known) return path;
    }
    if (path.rfind("/slots/", 0) == 0) return "/slots";
    return "other";
}

void Metrics::count_request(const std::string& path, int status) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++requests_[{path_label(path), status}];
}

void Metrics::count_generation(int64_t prompt_tokens, int64_t generated_tokens, int64_t evicted, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    prompt_tokens_ += prompt_tokens;
    generated_tokens_ += generated_tokens;
    evicted_ += evicted;
    ++generations_;
    generation_seconds_ += seconds;
}

std::string Metrics::render(const SlotPool& slots) const {
    std::string out;
    auto header = [&](const char* name, const char* type, const char* help) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    };
    std::lock_guard<std::mutex> lock(mutex_);
    header("kvec_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
    for (const auto& [key, n] : requests_) {
        out += fmt::format("kvec_requests_total{{path=\"{}\",code=\"{}\"}} {}\n", key.first, key.second, n);
    }
    header("kvec_prompt_tokens_total", "counter", "Prompt tokens processed.");
    out += fmt::format("kvec_prompt_tokens_total {}\n", prompt_tokens_);
    header("kvec_generated_tokens_total", "counter", "Tokens generated.");
    out += fmt::format("kvec_generated_tokens_total {}\n", generated_tokens_);
    header("kvec_generations_total", "counter", "Generations run (finished, stopped or cancelled).");
    out += fmt::format("kvec_generations_total {}\n", generations_);
    header("kvec_generation_seconds_total", "counter", "Wall time of the generations, prefill and decode.");
    out += fmt::format("kvec_generation_seconds_total {:.6f}\n", generation_seconds_);
    header("kvec_kv_evicted_entries_total", "counter", "KV entries evicted by the requests' policies.");
    out += fmt::format("kvec_kv_evicted_entries_total {}\n", evicted_);
    const StepScheduler::Stats steps = slots.scheduler().stats();
    header("kvec_decode_batches_total", "counter", "Batched decode steps run (one forward pass each).");
    out += fmt::format("kvec_decode_batches_total {}\n", steps.batches);
    header("kvec_decode_batch_sequences_total", "counter",
           "Sequences decoded in those steps (divided by the batches: the mean batch size).");
    out += fmt::format("kvec_decode_batch_sequences_total {}\n", steps.sequences);
    header("kvec_decode_batch_largest", "gauge", "The largest decode batch so far.");
    out += fmt::format("kvec_decode_batch_largest {}\n", steps.largest);
    header("kvec_prefill_steps_total", "counter", "Prefill chunks (and reconstruction passes) run between the batches.");
    out += fmt::format("kvec_prefill_steps_total {}\n", steps.exclusive);
    header("kvec_kv_cache_bytes", "gauge", "KV-cache bytes allocated now, all slots.");
    out += fmt::format("kvec_kv_cache_bytes {}\n", slots.kv_bytes());
    header("kvec_kv_reserved_bytes", "gauge", "KV-cache bytes reserved by the running requests (--kv-memory).");
    out += fmt::format("kvec_kv_reserved_bytes {}\n", slots.kv_reserved());
    header("kvec_kv_memory_bytes", "gauge", "The bound on the KV-cache bytes of all slots (--kv-memory; 0: none).");
    out += fmt::format("kvec_kv_memory_bytes {}\n", slots.kv_memory());
    header("kvec_slot_kv_cache_bytes", "gauge", "KV-cache bytes allocated now, per slot.");
    for (int i = 0; i < slots.size(); ++i) out += fmt::format("kvec_slot_kv_cache_bytes{{slot=\"{}\"}} {}\n", i, slots.kv_bytes(i));
    header("kvec_slots", "gauge", "Slots (--parallel).");
    out += fmt::format("kvec_slots {}\n", slots.size());
    header("kvec_slots_busy", "gauge", "Slots serving a request now.");
    out += fmt::format("kvec_slots_busy {}\n", slots.busy());
    header("kvec_slots_kept", "gauge", "Idle slots keeping a conversation (kv.reuse, or restored).");
    out += fmt::format("kvec_slots_kept {}\n", slots.kept());
    header("kvec_queue_length", "gauge", "Requests waiting for a free slot.");
    out += fmt::format("kvec_queue_length {}\n", slots.queued());
    return out;
}

}  // namespace kvec::server
