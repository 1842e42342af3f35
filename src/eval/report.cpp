#include "eval/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>

#include "eval/plot.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace kvec::eval {

namespace {

std::string fmt_score(double v) { return std::isfinite(v) ? fmt::format("{:.2f}", v) : "-"; }

std::string fmt_bytes(double b) {
    if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
    if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
    return fmt::format("{:.0f} B", b);
}

const Cell* find_cell(const SweepSummary& s, const std::string& policy, int64_t budget) {
    const auto it = s.cells.find({policy, budget});
    return it == s.cells.end() ? nullptr : &it->second;
}

// Every cell present, in table order: policies as given, each with its budgets (an unbudgeted
// policy with its single budget 0).
void for_each_cell(const SweepSummary& s,
                   const std::function<void(const std::string& policy, int64_t budget, const Cell&)>& fn) {
    for (size_t p = 0; p < s.policies.size(); ++p) {
        const std::vector<int64_t> budgets = s.budgeted[p] ? s.budgets : std::vector<int64_t>{0};
        for (int64_t b : budgets) {
            if (const Cell* c = find_cell(s, s.policies[p], b)) fn(s.policies[p], b, *c);
        }
    }
}

// The cell shown for (policy, budget column): an unbudgeted policy's single cell everywhere.
const Cell* column_cell(const SweepSummary& s, size_t p, int64_t budget) {
    return find_cell(s, s.policies[p], s.budgeted[p] ? budget : 0);
}

std::string budget_text(int64_t b) {
    return b == 0 ? "-" : is_compression(b) ? budget_label(b) : std::to_string(b);
}


}  // namespace

std::string csv_quote(const std::string& v) {
    if (v.find_first_of(",\"\n") == std::string::npos) return v;
    std::string q(1, '"');
    for (char c : v) {
        q.push_back(c);
        if (c == '"') q.push_back('"');
    }
    q.push_back('"');
    return q;
}

bool SweepSummary::counts(size_t task) const {
    return std::find(excluded_tasks.begin(), excluded_tasks.end(), tasks[task]) == excluded_tasks.end();
}

SweepSummary summarize(const std::vector<EvalItem>& items, const std::vector<PolicyChoice>& policies,
                       const std::vector<int64_t>& budgets, const std::vector<EvalRecord>& records,
                       double task_floor) {
    SweepSummary s;
    s.budgets = budgets;
    s.task_floor = task_floor;
    for (const PolicyChoice& p : policies) {
        s.policies.push_back(p.label);
        s.policy_names.push_back(p.name);
        s.budgeted.push_back(p.budgeted);
    }
    std::map<std::string, size_t> item_index;
    for (size_t i = 0; i < items.size(); ++i) {
        item_index[items[i].id] = i;
        const auto t = std::find(s.tasks.begin(), s.tasks.end(), items[i].task);
        s.item_task.push_back(static_cast<size_t>(t - s.tasks.begin()));
        if (t == s.tasks.end()) s.tasks.push_back(items[i].task);
    }
    int64_t combos = 0;
    for (const PolicyChoice& p : policies) combos += p.budgeted ? static_cast<int64_t>(budgets.size()) : 1;
    s.expected = combos * static_cast<int64_t>(items.size());

    // (policy, budget) -> item index -> record
    std::map<std::pair<std::string, int64_t>, std::map<size_t, const EvalRecord*>> by_cell;
    for (const EvalRecord& r : records) {
        const auto it = item_index.find(r.id);
        if (it == item_index.end()) continue;
        const auto p = std::find_if(policies.begin(), policies.end(), [&](const PolicyChoice& c) { return c.label == r.policy; });
        if (p == policies.end()) continue;
        if (p->budgeted && std::find(budgets.begin(), budgets.end(), r.budget) == budgets.end()) continue;
        if (!p->budgeted && r.budget != 0) continue;
        by_cell[{r.policy, r.budget}][it->second] = &r;
    }
    for (const auto& [key, recs] : by_cell) {
        Cell cell;
        std::map<std::string, std::pair<std::vector<const EvalItem*>, std::vector<std::string>>> per_task;
        for (const auto& [idx, r] : recs) {  // item order
            auto& [its, preds] = per_task[items[idx].task];
            its.push_back(&items[idx]);
            preds.push_back(r->prediction);
            cell.item_scores[idx] = 100.0 * score_item(items[idx], r->prediction);
            cell.c_head += r->c_head;
            cell.c_layer += r->c_layer;
            cell.c_head_tokens += r->c_head_tokens;
            cell.redundancy += r->redundancy;
            cell.kv_bytes += static_cast<double>(r->kv_bytes);
            cell.kv_entries += static_cast<double>(r->kv_entries);
            ++cell.n;
        }
        const auto n = static_cast<double>(cell.n);
        cell.c_head /= n;
        cell.c_layer /= n;
        cell.c_head_tokens /= n;
        cell.redundancy /= n;
        cell.kv_bytes /= n;
        cell.kv_entries /= n;
        for (const auto& [task, v] : per_task) cell.task_scores[task] = task_score(v.first, v.second);
        for (size_t t = 0; t < s.tasks.size(); ++t) {
            std::vector<double> scores;
            for (const auto& [idx, v] : cell.item_scores) {
                if (s.item_task[idx] == t) scores.push_back(v);
            }
            if (!scores.empty()) cell.task_ci[s.tasks[t]] = bootstrap_mean({scores});
        }
        s.present += cell.n;
        s.cells[key] = std::move(cell);
    }
    // The tasks the full cache cannot do, then every cell's average over the others.
    if (task_floor > 0) {
        for (size_t p = 0; p < policies.size(); ++p) {
            if (policies[p].name != "full") continue;
            const Cell* full = find_cell(s, s.policies[p], 0);
            if (full == nullptr) continue;
            for (const auto& [task, score] : full->task_scores) {
                if (score < task_floor) s.excluded_tasks.push_back(task);
            }
            break;
        }
    }
    for (auto& [key, cell] : s.cells) {
        double sum = 0;
        int kept = 0;
        std::vector<std::vector<double>> strata(s.tasks.size());  // [tasks][items] scores
        for (const auto& [idx, v] : cell.item_scores) {
            if (s.counts(s.item_task[idx])) strata[s.item_task[idx]].push_back(v);
        }
        for (const auto& [task, score] : cell.task_scores) {
            const size_t t = static_cast<size_t>(std::find(s.tasks.begin(), s.tasks.end(), task) - s.tasks.begin());
            if (!s.counts(t)) continue;
            sum += score;
            ++kept;
        }
        cell.average = kept == 0 ? 0.0 : sum / kept;
        cell.average_ci = bootstrap_mean(strata);
    }
    return s;
}

std::vector<PairedComparison> paired_comparisons(const SweepSummary& s) {
    std::vector<PairedComparison> out;
    for (int64_t budget : s.budgets) {
        for (size_t a = 0; a < s.policies.size(); ++a) {
            for (size_t b = a + 1; b < s.policies.size(); ++b) {
                if (!s.budgeted[a] && !s.budgeted[b]) continue;  // no budget involved: not per column
                const Cell* ca = column_cell(s, a, budget);
                const Cell* cb = column_cell(s, b, budget);
                if (ca == nullptr || cb == nullptr) continue;
                std::vector<std::vector<double>> diffs(s.tasks.size());  // [tasks][common items]
                bool any = false;
                for (const auto& [idx, va] : ca->item_scores) {
                    const auto it = cb->item_scores.find(idx);
                    if (it == cb->item_scores.end() || !s.counts(s.item_task[idx])) continue;
                    diffs[s.item_task[idx]].push_back(va - it->second);
                    any = true;
                }
                if (any) out.push_back({a, b, budget, bootstrap_mean(diffs)});
            }
        }
    }
    return out;
}

std::vector<size_t> reference_policies(const SweepSummary& s) {
    std::vector<size_t> refs;
    for (size_t p = 0; p < s.policies.size(); ++p) {
        if (s.policy_names[p] == "kvec") refs.push_back(p);
    }
    if (refs.empty()) {
        for (size_t p = 0; p < s.policies.size(); ++p) {
            if (s.budgeted[p]) return {p};
        }
    }
    return refs;
}

namespace {

nlohmann::ordered_json estimate_json(const Estimate& e) {
    return {{"mean", e.mean}, {"lo", e.lo}, {"hi", e.hi}, {"p_above", e.p_above}, {"n", e.n}};
}

}  // namespace

nlohmann::ordered_json metrics_json(const SweepSummary& s) {
    nlohmann::ordered_json j;
    j["tasks"] = s.tasks;
    if (s.task_floor > 0) j["task_floor"] = {{"floor", s.task_floor}, {"excluded", s.excluded_tasks}};
    j["budgets"] = s.budgets;
    j["records"] = s.present;
    j["expected_records"] = s.expected;
    j["complete"] = s.present == s.expected;
    nlohmann::ordered_json results = nlohmann::ordered_json::array();
    for_each_cell(s, [&](const std::string& policy, int64_t b, const Cell& c) {
        nlohmann::ordered_json row;
        row["policy"] = policy;
        row["budget"] = b;
        row["scores"] = c.task_scores;
        row["average"] = c.average;
        row["average_ci"] = estimate_json(c.average_ci);
        nlohmann::ordered_json task_ci;
        for (const auto& [t, e] : c.task_ci) task_ci[t] = estimate_json(e);
        row["scores_ci"] = task_ci;
        row["c_head"] = c.c_head;
        row["c_layer"] = c.c_layer;
        row["c_head_tokens"] = c.c_head_tokens;
        row["redundancy"] = c.redundancy;
        row["kv_bytes"] = c.kv_bytes;
        row["kv_entries"] = c.kv_entries;
        row["samples"] = c.n;
        results.push_back(row);
    });
    j["results"] = results;
    nlohmann::ordered_json paired = nlohmann::ordered_json::array();
    for (const PairedComparison& pc : paired_comparisons(s)) {
        nlohmann::ordered_json row = estimate_json(pc.diff);
        row["policy_a"] = s.policies[pc.a];
        row["policy_b"] = s.policies[pc.b];
        row["budget"] = pc.budget;
        paired.push_back(row);
    }
    j["bootstrap"] = {{"resamples", kBootstrapResamples}, {"seed", kBootstrapSeed}, {"level", 0.95},
                      {"strata", "tasks"}};
    j["paired"] = paired;
    return j;
}

std::string summary_markdown(const SweepSummary& s, const std::string& header) {
    std::string out = header;
    auto pivot = [&](const std::string& title, const std::string& note, auto value) {
        out += fmt::format("\n## {}\n\n{}\n\n| policy |", title, note);
        for (int64_t b : s.budgets) out += fmt::format(" {} |", budget_label(b));
        out += "\n|---|";
        for (size_t i = 0; i < s.budgets.size(); ++i) out += "---:|";
        out += "\n";
        for (size_t p = 0; p < s.policies.size(); ++p) {
            out += fmt::format("| {}{} |", s.policies[p], s.budgeted[p] ? "" : " (no eviction)");
            for (int64_t b : s.budgets) {
                const Cell* c = column_cell(s, p, b);
                out += fmt::format(" {} |", c == nullptr ? "-" : value(*c));
            }
            out += "\n";
        }
    };
    if (s.task_floor > 0) {
        std::vector<std::string> kept_out;
        for (const std::string& t : s.excluded_tasks) {
            for (const auto& [key, c] : s.cells) {
                if (key.second != 0) continue;
                const auto it = c.task_scores.find(t);
                if (it != c.task_scores.end()) kept_out.push_back(fmt::format("{} ({})", t, fmt_score(it->second)));
                break;
            }
        }
        out += kept_out.empty()
                   ? fmt::format("\nEvery task scores at least {} with the full cache: all count in the averages.\n",
                                 fmt_score(s.task_floor))
                   : fmt::format("\nKept out of every average and paired comparison, because the full cache scores "
                                 "below {} on them (shown in the per-task tables, marked *): {}.\n",
                                 fmt_score(s.task_floor), fmt::join(kept_out, ", "));
    }
    pivot("Average score", "Unweighted mean of the task scores (0-100).",
          [](const Cell& c) { return fmt_score(c.average); });
    pivot("Average score with 95 % interval",
          fmt::format("Stratified bootstrap over items ({} resamples, seed {}, tasks as strata): the interval of the "
                      "average a new draw of items from the same tasks would give.",
                      kBootstrapResamples, kBootstrapSeed),
          [](const Cell& c) { return format_estimate(c.average_ci, 2, false); });
    pivot("Cross-head coverage", "C_head: |union over heads of kept prefix positions| / prefix, mean over "
                                 "layers and samples (prefix = prompt minus the last 32 positions).",
          [](const Cell& c) { return fmt::format("{:.3f}", c.c_head); });
    pivot("KV-cache bytes", "Keys, values and positions kept after the prompt, mean per sample.",
          [](const Cell& c) { return fmt_bytes(c.kv_bytes); });

    // A table with one row per (policy, budget) cell and one column per task, then `tail_columns`.
    auto per_task_table = [&](const std::string& title, const std::string& tail_columns, size_t n_tail,
                              const std::function<std::string(const Cell&, const std::string& task)>& task_cell,
                              const std::function<std::string(const Cell&)>& tail) {
        out += fmt::format("\n## {}\n\n| policy | budget |", title);
        for (size_t t = 0; t < s.tasks.size(); ++t) out += fmt::format(" {}{} |", s.tasks[t], s.counts(t) ? "" : "*");
        out += tail_columns + "\n|---|---:|";
        for (size_t i = 0; i < s.tasks.size() + n_tail; ++i) out += "---:|";
        out += "\n";
        for_each_cell(s, [&](const std::string& policy, int64_t b, const Cell& c) {
            out += fmt::format("| {} | {} |", policy, budget_text(b));
            for (const std::string& t : s.tasks) out += fmt::format(" {} |", task_cell(c, t));
            out += tail(c) + "\n";
        });
    };
    per_task_table(
        "Scores per task", " average | C_head | C_layer | KV bytes | n |", 5,
        [](const Cell& c, const std::string& t) {
            const auto it = c.task_scores.find(t);
            return it == c.task_scores.end() ? std::string("-") : fmt_score(it->second);
        },
        [](const Cell& c) {
            return fmt::format(" {} | {:.3f} | {:.3f} | {} | {} |", fmt_score(c.average), c.c_head, c.c_layer,
                               fmt_bytes(c.kv_bytes), c.n);
        });

    // Paired comparisons of the reference policies against every other policy.
    const std::vector<PairedComparison> pairs = paired_comparisons(s);
    for (size_t ref : reference_policies(s)) {
        out += fmt::format("\n## Paired: {} against each policy\n\n"
                           "Mean over tasks of the per-item score difference ({} - other, points) with its 95 % "
                           "bootstrap interval over the same items; ▲ significantly better, ▼ significantly worse "
                           "(the interval excludes 0), P = share of resamples above 0.\n\n| other policy |",
                           s.policies[ref], s.policies[ref]);
        for (int64_t b : s.budgets) out += fmt::format(" {} |", budget_label(b));
        out += "\n|---|";
        for (size_t i = 0; i < s.budgets.size(); ++i) out += "---:|";
        out += "\n";
        for (size_t p = 0; p < s.policies.size(); ++p) {
            if (p == ref) continue;
            out += fmt::format("| {} |", s.policies[p]);
            for (int64_t b : s.budgets) {
                std::string cell = "-";
                for (const PairedComparison& pc : pairs) {
                    if (pc.budget != b || !((pc.a == ref && pc.b == p) || (pc.a == p && pc.b == ref))) continue;
                    const Estimate d = pc.a == ref ? pc.diff : negated(pc.diff);  // stored as p - ref: flip
                    cell = fmt::format("{} {}P={:.2f}", format_estimate(d, 2, true),
                                       d.lo > 0 ? "▲ " : d.hi < 0 ? "▼ " : "", d.p_above);
                }
                out += fmt::format(" {} |", cell);
            }
            out += "\n";
        }
    }
    per_task_table(
        "Per-task 95 % intervals", "", 0,
        [](const Cell& c, const std::string& t) {
            const auto it = c.task_ci.find(t);
            return it == c.task_ci.end() ? std::string("-")
                                         : fmt::format("[{:.1f}, {:.1f}]", it->second.lo, it->second.hi);
        },
        [](const Cell&) { return std::string(); });
    if (s.present != s.expected) {
        out += fmt::format("\nIncomplete: {} of {} predictions present (run the same command again to "
                           "continue).\n", s.present, s.expected);
    }
    return out;
}

std::string paired_csv(const SweepSummary& s) {
    std::string out = "policy_a,policy_b,budget,diff,lo,hi,p_above,n\n";
    for (const PairedComparison& pc : paired_comparisons(s)) {
        out += fmt::format("{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{}\n", csv_quote(s.policies[pc.a]), csv_quote(s.policies[pc.b]),
                           pc.budget, pc.diff.mean, pc.diff.lo, pc.diff.hi, pc.diff.p_above, pc.diff.n);
    }
    return out;
}

std::string summary_csv(const SweepSummary& s) {
    std::string out = "policy,budget";
    for (const std::string& t : s.tasks) {
        out.push_back(',');
        out += csv_quote(t);
    }
    out += ",average,average_lo,average_hi,c_head,c_layer,c_head_tokens,redundancy,kv_bytes,kv_entries,samples\n";
    for_each_cell(s, [&](const std::string& policy, int64_t b, const Cell& c) {
        out += csv_quote(policy);
        out += fmt::format(",{}", b);
        for (const std::string& t : s.tasks) {
            const auto it = c.task_scores.find(t);
            out.push_back(',');
            if (it != c.task_scores.end()) out += fmt::format("{:.2f}", it->second);
        }
        out += fmt::format(",{:.4f},{:.4f},{:.4f},{:.6f},{:.6f},{:.6f},{:.6f},{:.1f},{:.1f},{}\n", c.average,
                           c.average_ci.lo, c.average_ci.hi, c.c_head, c.c_layer, c.c_head_tokens,
                           c.redundancy, c.kv_bytes, c.kv_entries, c.n);
    });
    return out;
}

void write_sweep_plots(const SweepSummary& s, const std::string& dir, const std::string& what) {
    if (s.budgets.empty() || s.cells.empty()) return;
    auto make = [&](const std::string& title, const std::string& y_label, auto value, double y_min, double y_max) {
        return budget_plot(title, y_label, s.budgets, s.policies, s.budgeted, [&](size_t p, int64_t b) {
            const Cell* c = column_cell(s, p, b);
            return c == nullptr ? NAN : value(*c);
        }, y_min, y_max);
    };
    write_line_plot_png(make(fmt::format("{}: average score vs KV budget", what), "average score (0-100)",
                             [](const Cell& c) { return c.average; }, NAN, NAN),
                        dir + "/score_vs_budget.png");
    write_line_plot_png(make(fmt::format("{}: cross-head coverage vs KV budget", what),
                             "cross-head coverage C_head", [](const Cell& c) { return c.c_head; }, 0.0, 1.05),
                        dir + "/coverage_vs_budget.png");
}

std::string sweep_title(const SweepTitle& t) {
    return fmt::format("# kvec eval: {}\n\nModel `{}` (sha256 {}), {} samples, format {}, protocol {}{}, kvec {} ({}).\n",
                       t.what, t.model_file, t.model_sha256.substr(0, 12), t.samples, t.format, t.protocol,
                       t.split.empty() ? std::string() : fmt::format(", split {} (seed {})", t.split, t.seed),
                       t.version, t.commit);
}

std::string write_sweep_outputs(const SweepSummary& summary, const std::string& dir, const std::string& header,
                                const nlohmann::ordered_json& extra, const std::string& what) {
    nlohmann::ordered_json metrics = metrics_json(summary);
    for (const auto& [key, value] : extra.items()) metrics[key] = value;
    write_text_file(dir + "/metrics.json", metrics.dump(2) + "\n");
    const std::string md = summary_markdown(summary, header);
    write_text_file(dir + "/summary.md", md);
    write_text_file(dir + "/summary.csv", summary_csv(summary));
    write_text_file(dir + "/paired.csv", paired_csv(summary));
    write_sweep_plots(summary, dir, what);
    return md;
}

void write_text_file(const std::string& path, const std::string& text) { write_file_atomic(path, text); }

}  // namespace kvec::eval
