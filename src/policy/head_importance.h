// HeadKV's per-head importance (arXiv 2410.19258): one score per (layer, KV head) of a model,
// estimated on the model itself (`kvec head-scores`, src/eval/head_scores.h), and the per-head
// budgets the headkv policy derives from it. File format (JSON):
//   {"format": "kvec-head-importance", "version": 1, "model": "<file name>", "sha256": "<hex>",
//    "method": "<how it was estimated>", "items": <count>, "n_layer": L, "n_head_kv": H,
//    "scores": [[s_00, ..., s_0(H-1)], ..., [s_(L-1)0, ...]]}     scores finite and >= 0
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvec::policy {

struct HeadImportance {
    std::string model;   // the GGUF file name it was estimated on
    std::string sha256;  // that file's SHA-256 (hex)
    std::string method;
    int64_t items = 0;
    std::vector<std::vector<double>> scores;  // [L][H]
    int n_layer() const { return static_cast<int>(scores.size()); }
    int n_head_kv() const { return scores.empty() ? 0 : static_cast<int>(scores.front().size()); }
};

// kvec::Error naming the file and the problem: unreadable, not JSON, another format, a ragged or
// empty table, a negative or non-finite score.
HeadImportance read_head_importance(const std::string& path);
// Written atomically (util/atomic_file.h).
void write_head_importance(const HeadImportance& importance, const std::string& path);

// HeadKV's budgets for prefix budget b per head: every head keeps floor((1 - beta) b); the rest of
// the L x H x b places (the pool) goes to the heads in proportion to their scores (all equal when
// every score is 0), rounded down, then the places still missing to reach exactly L x H x b by
// largest remainder (larger fractional part first, then lower (layer, head)). -> [L][H], summing
// to L x H x b. beta in [0, 1], b >= 0 (kvec::Error otherwise).
std::vector<std::vector<int64_t>> headkv_budgets(const std::vector<std::vector<double>>& scores, int64_t b,
                                                 double beta);

}  // namespace kvec::policy
