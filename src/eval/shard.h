// Sharding an evaluation sweep across machines (docs/evaluation.md, "Sharding and merging"):
// `kvec eval ... --shard K/N` runs only the items of shard K of N, and `kvec eval merge` joins the
// N output directories into the outputs of one unsharded run (eval/merge.h).
//
// The partition is by item identity: an item belongs to shard
//   first 8 bytes of SHA-256(item id), big-endian, mod N
// the same on every machine, whatever the order or number of items. Every (policy, budget) of an
// item runs in the item's shard (prefill sharing still pays), and items the sweep compresses as
// one (query-agnostic: consecutive items with the same context, eval/sweep.h) follow the first
// item of their group.
//
// Shard indices are 0-based: K in [0, N). A job script needs no arithmetic:
//   --shard K/N     explicit;
//   --shard slurm   K = SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN, N = SLURM_ARRAY_TASK_COUNT
//                   (so --array=0-3 and --array=1-4 both give shards 0..3 of 4; the array must
//                   be contiguous, step 1);
//   --shard k8s/N   K = JOB_COMPLETION_INDEX (a Kubernetes Indexed Job, 0-based), N given.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/eval_items.h"
#include "eval/sweep.h"

namespace kvec::eval {

struct Shard {
    int64_t index = 0;  // 0-based, < count
    int64_t count = 1;  // >= 1
    std::string source = "explicit";  // where K and N came from: "explicit", "slurm", "k8s"
};

// An environment variable's value, or nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
EnvLookup process_env();  // getenv

// Parses a --shard value ("K/N", "slurm", "k8s/N"). kvec::Error naming the problem: garbage,
// N < 1, K >= N, a missing or non-numeric environment variable, a non-contiguous Slurm array.
Shard parse_shard(std::string_view text, const EnvLookup& env = process_env());

std::string shard_name(const Shard& s);  // "1/4" (0-based index / count)

// The shard of an item id among `count` shards (see the top of this file). count >= 1.
int64_t shard_of(std::string_view id, int64_t count);

// The indices (in item order) of the items of shard `s`: whole compression groups of the
// protocol, each group in the shard of its first item's id.
std::vector<size_t> shard_items(const std::vector<EvalItem>& items, Protocol protocol, const Shard& s);

}  // namespace kvec::eval
