// The tables and plots of a sweep: scores per task x policy x budget (LongBench eval.py or RULER
// aggregation), average over tasks, cross-head coverage and KV bytes; written as metrics.json,
// summary.md, summary.csv, score_vs_budget.png and coverage_vs_budget.png.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/eval_items.h"
#include "eval/stats.h"
#include "eval/sweep.h"

namespace kvec::eval {

struct Cell {
    std::map<std::string, double> task_scores;  // task -> score (0..100)
    double average = 0;                          // unweighted mean over the tasks present
    std::map<size_t, double> item_scores;        // item index -> score (0..100)
    std::map<std::string, Estimate> task_ci;     // task -> bootstrap interval of its mean score
    Estimate average_ci;                         // bootstrap interval of the average (tasks as strata)
    double c_head = 0;                           // means over the samples
    double c_layer = 0;
    double c_head_tokens = 0;
    double redundancy = 0;
    double kv_bytes = 0;
    double kv_entries = 0;
    int64_t n = 0;                               // records
};

struct SweepSummary {
    std::vector<std::string> tasks;     // in item order
    std::vector<size_t> item_task;      // [items] index into tasks
    std::vector<std::string> policies;  // labels, in --policies order
    std::vector<std::string> policy_names;  // [policies] registry names
    std::vector<int64_t> budgets;       // in --budgets order
    std::vector<bool> budgeted;         // [policies] false: one cell at budget 0 (full)
    std::map<std::pair<std::string, int64_t>, Cell> cells;  // (policy, budget) -> cell
    int64_t expected = 0;               // items x combinations
    int64_t present = 0;                // records found
    // Tasks kept out of every average and paired comparison because the full cache scores below
    // task_floor on them (a task the model cannot do says nothing about eviction); their columns
    // are still shown. Empty unless task_floor > 0 and the sweep has the `full` policy.
    double task_floor = 0;
    std::vector<std::string> excluded_tasks;
    bool counts(size_t task) const;     // not excluded
};

// A paired comparison of two policies at one budget over the items both have: a - b.
struct PairedComparison {
    size_t a = 0;         // policy indices
    size_t b = 0;
    int64_t budget = 0;   // the budget column (an unbudgeted policy's single cell serves every one)
    Estimate diff;        // of the average score (tasks as strata), points
};

// Aggregates the records of the run's items and combinations (other records are ignored), with
// bootstrap intervals (stats.h). task_floor > 0: tasks where the `full` policy scores below it
// are excluded from the averages and paired comparisons (SweepSummary::excluded_tasks).
SweepSummary summarize(const std::vector<EvalItem>& items, const std::vector<PolicyChoice>& policies,
                       const std::vector<int64_t>& budgets, const std::vector<EvalRecord>& records,
                       double task_floor = 0);

// Every pair of policies (a before b in --policies order) at every budget column where both have
// records for some common items.
std::vector<PairedComparison> paired_comparisons(const SweepSummary& summary);

// The policies whose comparisons summary.md shows: those named kvec (the registry name), else the
// first budgeted policy.
std::vector<size_t> reference_policies(const SweepSummary& summary);

nlohmann::ordered_json metrics_json(const SweepSummary& summary);
std::string summary_markdown(const SweepSummary& summary, const std::string& header);
std::string summary_csv(const SweepSummary& summary);
// policy_a,policy_b,budget,diff,lo,hi,p_above,n: one line per paired comparison.
std::string paired_csv(const SweepSummary& summary);

// score_vs_budget.png and coverage_vs_budget.png in `dir`; unbudgeted policies as dashed
// horizontal lines. `what` names the score in the titles ("synthetic-2k", "LongBench").
void write_sweep_plots(const SweepSummary& summary, const std::string& dir, const std::string& what);

// The first lines of summary.md, e.g. "# kvec eval: synthetic-2k\n\nModel `m.gguf` (sha256
// 0123456789ab), 48 samples, format completion, protocol query-aware, split all (seed 1), kvec
// 0.1.0 (<commit>).\n".
struct SweepTitle {
    std::string what;          // the suite, or "LongBench"
    std::string model_file;    // file name
    std::string model_sha256;
    int64_t samples = 0;
    std::string format;        // the items' prompt format
    std::string protocol;      // protocol_name
    std::string split;         // the synthetic suite's held-out split; "" for LongBench
    uint64_t seed = 0;         // with a split
    std::string version;       // engine_version
    std::string commit;        // git_commit
};
std::string sweep_title(const SweepTitle& t);

// The outputs of a sweep in `dir`: metrics.json (metrics_json followed by the keys of `extra`:
// mode, timing, totals), summary.md (`header`, then the tables), summary.csv, paired.csv and the
// plots (write_sweep_plots). Returns summary.md's text.
std::string write_sweep_outputs(const SweepSummary& summary, const std::string& dir, const std::string& header,
                                const nlohmann::ordered_json& extra, const std::string& what);

// A CSV field, quoted (with doubled quotes) when it holds a comma, a quote or a newline (policy
// labels such as "kvec:kernel=7,layers=local" do).
std::string csv_quote(const std::string& v);

// Writes `text` to `path` atomically (util/atomic_file.h; kvec::Error if it cannot).
void write_text_file(const std::string& path, const std::string& text);

}  // namespace kvec::eval
