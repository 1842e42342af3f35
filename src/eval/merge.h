// `kvec eval merge OUT SHARD_DIR...`: the output directories of the N shards of one sweep
// (`kvec eval ... --shard K/N`, eval/shard.h) joined into the outputs of one unsharded run:
// predictions.jsonl, metrics.json, summary.md/.csv, paired.csv and the plots, with every
// statistic (intervals, paired comparisons) computed from the merged items. See
// docs/evaluation.md, "Sharding and merging".
//
// A shard's directory holds an ordinary run's files (config.json whose "run" carries
// {"shard": {"index", "count"}}) and shard.json, written once its items are built:
//   {"shard": {"index": K, "count": N, "source": "explicit"|"slurm"|"k8s"},
//    "format": "completion",                 // the items' prompt format (summary header)
//    "items_total": T,
//    "item_ids": [T ids, in the order of the unsharded run],
//    "items": [{"index": i, "id", "task", "longbench", "metric", "references", "all_classes",
//               "length"}, ...]}             // the shard's own items: what scoring needs
//
// The merge refuses (kvec::Error naming the directories, items or keys) shards that were not made
// by the same command (config.json "run" apart from "shard", the model's SHA-256 included), the
// same kvec version and commit, and the same item list; shards that do not cover every item
// exactly once (naming the missing or repeated items and shards); and shards that are not
// finished (a prediction of one of their items x combinations missing).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/eval_items.h"
#include "eval/report.h"
#include "eval/shard.h"
#include "eval/sweep.h"

namespace kvec::eval {

// shard.json of shard `s` of the run over `items` (all of them), `mine` its own (shard_items).
nlohmann::ordered_json shard_manifest(const std::vector<EvalItem>& items, const std::vector<size_t>& mine,
                                      const Shard& s, const std::string& format);

// The shards of one run, checked and joined (nothing written).
struct MergedRun {
    nlohmann::ordered_json config;           // the first shard's config.json, "run" without "shard"
    std::vector<std::string> dirs;           // [shards] in shard order
    std::vector<Shard> shards;               // [shards] sorted by index
    std::vector<EvalItem> items;             // [T] in run order, no prompt tokens (scoring only)
    std::vector<PolicyChoice> policies;
    std::vector<int64_t> budgets;            // as config.json "run"/"budgets" (compression codes < 0)
    std::vector<EvalRecord> records;         // every shard's, in item order
    std::string format;                      // of the items (shard.json)
    std::vector<nlohmann::json> metrics;     // [shards] each shard's metrics.json (empty when absent)
};

// Reads and checks the shard directories (see the top of this file); kvec::Error otherwise.
MergedRun read_shards(const std::vector<std::string>& dirs);

// `kvec eval merge`: locks the shard directories (a shard still running is refused, naming it),
// read_shards, then writes config.json (with "merged_from"), predictions.jsonl
// and the outputs of one run (write_sweep_outputs) into `out`, which must not be a shard's
// directory nor hold another run (a previous merge is replaced). Returns summary.md's text.
std::string merge_shards(const std::string& out, const std::vector<std::string>& dirs);

}  // namespace kvec::eval
