// One evaluation sweep: every item x every (policy, budget), greedy generation, scoring, and the
// predictions file that makes a sweep resumable. See docs/evaluation.md.
//
// Modes (per combination, reported in every record and in metrics.json):
//   shared   - one-shot policies: the item is prefilled once per observation window with a
//              PrefillRecorder, and each (policy, budget) cache is derived by replay_policy
//              (prefill_share.h); bit-identical to a separate run.
//   separate - the policy is attached to the session and the prompt prefilled for it alone
//              (chunked compression, decode-time eviction, or --no-share-prefill).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "eval/eval_items.h"
#include "model/session.h"
#include "policy/coverage_probe.h"

namespace kvec {
class Tokenizer;
}

namespace kvec::eval {

// A policy as the user named it, e.g. "kvec:gamma=0.5"; budgets are added per combination.
struct PolicyChoice {
    std::string label;     // as given ("adakv"), the name used in tables
    std::string name;      // registry name ("ada-snapkv")
    std::string spec;      // registry spec without budget ("ada-snapkv:alpha=0.2")
    bool budgeted = true;  // false: the policy has no budget option (full): run once, budget 0
};

// Splits a --policies list: commas separate policies, except that a piece holding '=' but no ':'
// continues the options of the previous policy ("full,kvec:gamma=0.5,mu=0,snapkv" is three).
// Aliases: streamingllm -> streaming, adakv / ada-kv -> ada-snapkv. kvec::Error for an unknown
// policy or option, or a budget given inside a policy (use --budgets).
std::vector<PolicyChoice> parse_policy_list(const std::string& list);

// A budget column of a sweep: B > 0 entries per KV head per layer, or a compression ratio c in
// (0, 1) (kvpress's view: each head keeps (1 - c) x the compressed prompt's tokens, the policy's
// ratio option), stored wherever a budget is (records, tables, resume keys) as -round(1000 c).
int64_t compression_code(double c);  // kvec::Error unless 0 < c < 1 in steps of 0.001
inline bool is_compression(int64_t budget) { return budget < 0; }
inline double compression_of(int64_t budget) { return static_cast<double>(-budget) / 1000.0; }
std::string budget_label(int64_t budget);  // "B=128" / "c=0.75"

struct Combo {
    size_t policy = 0;   // index into the policy choices
    int64_t budget = 0;  // 0 for an unbudgeted policy; < 0: a compression ratio (compression_code)
    std::string spec;    // full registry spec with the budget ("snapkv:budget=128")
};
// policies x budgets (unbudgeted policies once; a compression code gives the policy's ratio
// option). Checks every spec builds (kvec::Error naming the combination otherwise, e.g. a budget
// below a policy's window).
std::vector<Combo> make_combos(const std::vector<PolicyChoice>& policies,
                               const std::vector<int64_t>& budgets);

// One line of predictions.jsonl.
struct EvalRecord {
    std::string id;
    std::string task;
    std::string policy;  // label
    int64_t budget = 0;
    std::string prediction;
    std::vector<std::string> references;
    double score = 0;              // [0, 1]
    int64_t kv_bytes = 0;          // keys + values + positions kept after the prompt
    int64_t kv_entries = 0;        // entries kept after the prompt (all layers and heads)
    double c_head = 1;             // mean over layers of cross-head coverage (position units)
    double c_layer = 1;            // union over layers and heads / prefix
    double redundancy = 1;         // mean over layers of sum_h |S_h| / |union_h S_h|
    double c_head_tokens = 1;      // cross-head coverage in token-identity units
    std::vector<double> kept_tenths;  // [10] share of the kept prefix entries per tenth of the prefix (empty: unknown)
    int32_t n_prompt = 0;
    int32_t n_generated = 0;
    std::string mode;              // "shared" / "separate"
};
nlohmann::ordered_json to_json(const EvalRecord& r);
EvalRecord record_from_json(const nlohmann::json& j, std::string_view where);

// Greedy generation from a prefilled session: `logits` are the prompt's last logits. Stops at an
// end token (item.end_tokens if set, else the vocabulary's end-of-generation tokens; suppressed
// before min_new_tokens), after max_new_tokens, or at a full context.
std::vector<int32_t> greedy_generate(Session& session, const Tokenizer& tokenizer,
                                     std::span<const float> logits, const EvalItem& item);

struct SweepStats {
    double wall_seconds = 0;
    double prefill_seconds = 0;   // prompt processing (recorded or per policy)
    double replay_seconds = 0;    // policy replays on recorded prefills
    double decode_seconds = 0;    // generation
    int64_t prefills = 0;
    int64_t generations = 0;
    int64_t shared_generations = 0;
    int64_t skipped = 0;          // already in predictions.jsonl
};

// What a policy compresses (docs/evaluation.md, "Protocols"):
//   QueryAware    - the whole prompt, question included (the published LongBench protocol: the
//                   observation window holds the question);
//   QueryAgnostic - the context alone (EvalItem::n_context tokens) before the question is seen;
//                   the question is then appended to the compressed cache, uncompressed, and
//                   answered (NVIDIA kvpress's protocol). Consecutive items with the same context
//                   (niah_askmany) share one compressed cache: after each question and answer
//                   the session rolls back to the compressed context ("compress once, ask many").
enum class Protocol { QueryAware, QueryAgnostic };
const char* protocol_name(Protocol p);               // "query-aware" / "query-agnostic"
Protocol parse_protocol(std::string_view text);      // kvec::Error for anything else

// The end of the items compressed as one group starting at `begin`: under the query-agnostic
// protocol, consecutive items with the same context tokens; otherwise the one item.
size_t compression_group_end(const std::vector<EvalItem>& items, size_t begin, Protocol protocol);

struct SweepOptions {
    Protocol protocol = Protocol::QueryAware;
    bool share_prefill = true;
    int64_t coverage_window = 32;  // w of the coverage definition (policy/coverage_probe.h)
    // Called after every finished record (append it to predictions.jsonl); and for progress.
    std::function<void(const EvalRecord&)> on_record;
    std::function<void(int64_t done, int64_t total)> on_progress;
    // Called after every record with this sweep's stats so far (wall_seconds included), so that a
    // caller can keep the cost of a run that is killed later.
    std::function<void(const SweepStats&)> on_stats;
    // Shared-prefill combinations of an item decode together, up to this many sessions in one
    // batched forward pass per token (Session::decode_batch: the weights read once for all);
    // 1 decodes them one after another. Greedy choices are the same as alone up to the last bits
    // of the logits (docs/evaluation.md, "Batched decoding").
    int decode_batch = 16;
};

// Detaches the evictor and empties the session when a scope ends (also on errors).
struct SessionGuard {
    explicit SessionGuard(Session& s) : session(s) {}
    SessionGuard(const SessionGuard&) = delete;
    SessionGuard& operator=(const SessionGuard&) = delete;
    Session& session;
    ~SessionGuard() {
        session.reset();
        session.set_evictor(nullptr);
    }
};

// One combination's cache after a prompt, as for_each_policy_cache hands it over: `session`
// holds the cache (the policy's evictions applied) and is ready to decode the next token.
struct PreparedCache {
    size_t combo = 0;                  // index into the combinations
    std::span<const float> logits;     // [n_vocab] logits of the prompt's last token
    int64_t entries = 0;               // KV entries kept after the prompt
    policy::CoverageReport coverage;   // of the policy's selection
    const char* mode = "";             // "shared" or "separate" (see the top of this file)
    Session* session = nullptr;        // where the cache is
};

// Builds the cache of every combination in `which` (indices into `combos`) for `prompt` and calls
// `use` with each; the session is reset and detached after each call, also on errors. With
// share_prefill, the one-shot combinations are prefilled once per observation window (window-less
// ones join the first group) and replayed; the rest prefill with the policy attached. Adds prefill
// and replay seconds and the prefill count to `stats` when given. With `target`, a replayed cache
// goes into the session target(combo) returns (a session of the same model and options without
// a policy, which the caller owns and may keep decoding after `use` returns) instead of `session`.
void for_each_policy_cache(Session& session, std::span<const int32_t> prompt,
                           const std::vector<PolicyChoice>& policies, const std::vector<Combo>& combos,
                           const std::vector<size_t>& which, bool share_prefill, int64_t coverage_window,
                           const std::function<void(const PreparedCache&)>& use, SweepStats* stats = nullptr,
                           const std::function<Session&(size_t combo)>& target = {});

// Greedy generation for several items at once, sessions[i] holding item i's cache and logits[i]
// the logits of its last token: every step decodes the sequences still running in one
// Session::decode_batch. Each sequence stops as greedy_generate stops it.
std::vector<std::vector<int32_t>> greedy_generate_batch(std::span<Session* const> sessions, const Tokenizer& tokenizer,
                                                        std::span<const std::vector<float>> logits,
                                                        std::span<const EvalItem* const> items);

// Key of a finished record: (id, policy label, budget).
using RecordKey = std::tuple<std::string, std::string, int64_t>;

// Runs every (item, combination) not in `done`. The session must have no evictor attached.
SweepStats run_sweep(Session& session, const Tokenizer& tokenizer,
                     const std::vector<EvalItem>& items, const std::vector<PolicyChoice>& policies,
                     const std::vector<Combo>& combos, const std::set<RecordKey>& done,
                     const SweepOptions& options);

// A progress line on stderr: "[#####     ] 12/28 43% 1m02s, ETA 1m22s" (\r-updated on a
// terminal, one line every 10% or 60 s otherwise).
class ProgressBar {
public:
    ProgressBar(std::string label, int64_t total);
    void update(int64_t done);
    void set_total(int64_t total) { total_ = total; }
    void finish();

private:
    std::string label_;
    int64_t total_ = 0;
    int64_t start_done_ = -1;
    double start_ = 0;
    double last_print_ = -1e9;
    int last_decile_ = -1;
    bool tty_ = false;
};

}  // namespace kvec::eval
