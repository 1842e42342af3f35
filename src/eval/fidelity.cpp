#include "eval/fidelity.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "eval/plot.h"
#include "eval/prefill_share.h"
#include "eval/report.h"
#include "policy/coverage_probe.h"
#include "policy/registry.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvec::eval {

namespace {

size_t sz(int64_t n) { return static_cast<size_t>(n); }

// Feeds the continuation one decode step at a time; rows [C, V] of the logits after each token.
std::vector<float> feed(Session& session, std::span<const int32_t> continuation) {
    const auto V = sz(session.n_vocab());
    std::vector<float> rows(continuation.size() * V);  // [C, V]
    for (size_t i = 0; i < continuation.size(); ++i) {
        const std::span<const float> logits = session.decode(continuation[i]);
        std::copy(logits.begin(), logits.end(), rows.begin() + static_cast<int64_t>(i * V));
    }
    return rows;
}

}  // namespace

double log_prob(std::span<const float> logits, int32_t token) {
    KVEC_CHECK(token >= 0 && sz(token) < logits.size());
    double mx = -INFINITY;
    for (float v : logits) mx = std::max(mx, static_cast<double>(v));
    double sum = 0;
    for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
    return static_cast<double>(logits[sz(token)]) - mx - std::log(sum);
}

DistributionDiff compare_logits(std::span<const float> p_logits, std::span<const float> q_logits) {
    KVEC_CHECK(p_logits.size() == q_logits.size() && !p_logits.empty());
    auto lse = [](std::span<const float> x) {
        double mx = -INFINITY;
        for (float v : x) mx = std::max(mx, static_cast<double>(v));
        double s = 0;
        for (float v : x) s += std::exp(static_cast<double>(v) - mx);
        return mx + std::log(s);
    };
    const double lp = lse(p_logits), lq = lse(q_logits);
    double kl = 0;
    for (size_t i = 0; i < p_logits.size(); ++i) {
        const double a = p_logits[i] - lp, b = q_logits[i] - lq;
        kl += std::exp(a) * (a - b);
    }
    return {std::max(0.0, kl), argmax(p_logits) == argmax(q_logits)};
}

FidelityReport run_fidelity(Session& session, const std::vector<int32_t>& tokens,
                            const std::vector<PolicyChoice>& policies, const std::vector<Combo>& combos,
                            const FidelityOptions& o) {
    if (session.evictor() != nullptr) fail("fidelity: the session must not have a policy attached");
    if (o.reference != nullptr && (o.reference->evictor() != nullptr || o.reference->n_ctx() != session.n_ctx() ||
                                   o.reference->n_vocab() != session.n_vocab())) {
        fail("fidelity: the reference session must have no policy and the session's context and vocabulary");
    }
    if (o.continuation < 1) fail("--continuation must be at least 1, got {}", o.continuation);
    const int32_t P = o.prefix > 0 ? o.prefix : session.n_ctx() - o.continuation - 1;
    if (P < 2) fail("fidelity: the context {} leaves no room for a prompt before {} continuation tokens",
                    session.n_ctx(), o.continuation);
    if (int64_t{P} + o.continuation + 1 > session.n_ctx()) {
        fail("fidelity: prompt {} + continuation {} tokens do not fit the context {} (use -c)", P,
             o.continuation, session.n_ctx());
    }
    const int64_t seg_len = int64_t{P} + o.continuation;
    const int available = static_cast<int>(static_cast<int64_t>(tokens.size()) / seg_len);
    if (available < 1) {
        fail("fidelity: the text has {} tokens, fewer than one segment of {} (prompt {} + continuation {})",
             tokens.size(), seg_len, P, o.continuation);
    }
    FidelityReport report;
    report.prefix = P;
    report.continuation = o.continuation;
    report.segments = std::min(std::max(1, o.segments), available);
    const int64_t entry_bytes = kv_entry_bytes(session.kv_cache().config());
    const auto V = sz(session.n_vocab());

    struct Acc {
        double kl = 0, kl_max = 0, top1 = 0, kv = 0, c_head = 0;
        int64_t steps = 0;
        int segs = 0;
        std::string mode;
        std::vector<double> nll;  // [segments]
    };
    // Mean NLL of the continuation: token 0 from the prompt's last logits, token i from row i - 1.
    auto continuation_nll = [V](std::span<const float> last, const std::vector<float>& rows,
                                const std::vector<int32_t>& cont) {
        double sum = -log_prob(last, cont[0]);
        for (size_t i = 1; i < cont.size(); ++i) {
            sum -= log_prob(std::span<const float>(rows).subspan((i - 1) * V, V), cont[i]);
        }
        return sum / static_cast<double>(cont.size());
    };
    std::vector<Acc> acc(combos.size());
    const int64_t total = int64_t{report.segments} * static_cast<int64_t>(combos.size());
    int64_t done = 0;

    for (int s = 0; s < report.segments; ++s) {
        const auto begin = tokens.begin() + s * seg_len;
        const std::vector<int32_t> prompt(begin, begin + P);
        const std::vector<int32_t> cont(begin + P, begin + seg_len);
        // Reference: the full cache.
        std::vector<float> ref;  // [C, V]
        {
            Session& rs = o.reference != nullptr ? *o.reference : session;
            SessionGuard guard{rs};
            rs.reset();
            const std::span<const float> last = rs.prefill(prompt);
            const std::vector<float> last_copy(last.begin(), last.end());  // [V]
            ref = feed(rs, cont);
            report.full_segment_nll.push_back(continuation_nll(last_copy, ref, cont));
        }
        auto score = [&](size_t c, std::span<const float> last, const std::vector<float>& rows, int64_t entries,
                         const policy::CoverageReport& cov, const char* mode) {
            Acc& a = acc[c];
            a.nll.push_back(continuation_nll(last, rows, cont));
            for (size_t i = 0; i < cont.size(); ++i) {
                const DistributionDiff d = compare_logits(std::span<const float>(ref).subspan(i * V, V),
                                                          std::span<const float>(rows).subspan(i * V, V));
                a.kl += d.kl;
                a.kl_max = std::max(a.kl_max, d.kl);
                a.top1 += d.top1_equal ? 1 : 0;
                ++a.steps;
            }
            a.kv += static_cast<double>(entries * entry_bytes);
            a.c_head += cov.positions.empty() ? 1.0 : cov.mean_c_head(false);
            ++a.segs;
            a.mode = mode;
            ++done;
            if (o.on_progress) o.on_progress(done, total);
        };
        std::vector<size_t> all(combos.size());
        std::iota(all.begin(), all.end(), size_t{0});
        for_each_policy_cache(session, prompt, policies, combos, all, o.share_prefill, o.coverage_window,
                              [&](const PreparedCache& pc) {
                                  const std::vector<float> last(pc.logits.begin(), pc.logits.end());  // [V]
                                  score(pc.combo, last, feed(session, cont), pc.entries, pc.coverage, pc.mode);
                              });
    }
    for (size_t c = 0; c < combos.size(); ++c) {
        const Acc& a = acc[c];
        FidelityRow row;
        row.policy = policies[combos[c].policy].label;
        row.budget = combos[c].budget;
        row.steps = a.steps;
        row.kl_mean = a.steps > 0 ? a.kl / static_cast<double>(a.steps) : 0;
        row.kl_max = a.kl_max;
        row.top1 = a.steps > 0 ? a.top1 / static_cast<double>(a.steps) : 0;
        row.kv_bytes = a.segs > 0 ? a.kv / a.segs : 0;
        row.c_head = a.segs > 0 ? a.c_head / a.segs : 0;
        row.mode = a.mode;
        row.segment_nll = a.nll;
        row.nll_mean = a.nll.empty() ? 0 : std::accumulate(a.nll.begin(), a.nll.end(), 0.0) / static_cast<double>(a.nll.size());
        report.rows.push_back(row);
    }
    report.full_nll_mean = std::accumulate(report.full_segment_nll.begin(), report.full_segment_nll.end(), 0.0) /
                           static_cast<double>(report.full_segment_nll.size());
    return report;
}

Estimate paired_nll(const FidelityReport& report, size_t a, int64_t b) {
    KVEC_CHECK(a < report.rows.size() && b < static_cast<int64_t>(report.rows.size()));
    const std::vector<double>& x = report.rows[a].segment_nll;
    const std::vector<double>& y = b < 0 ? report.full_segment_nll : report.rows[sz(b)].segment_nll;
    KVEC_CHECK(x.size() == y.size());
    std::vector<double> d(x.size());  // [segments]
    for (size_t i = 0; i < x.size(); ++i) d[i] = x[i] - y[i];
    return bootstrap_mean({d});
}

std::vector<int32_t> tokenize_for_perplexity(const Tokenizer& tokenizer, const std::string& text) {
    return tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/false);
}

PerplexityResult perplexity(Session& session, const Tokenizer& tokenizer, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& o) {
    if (session.evictor() != nullptr) fail("perplexity: the session must not have a policy attached");
    const int32_t n_ctx = o.n_ctx;
    if (n_ctx < 4) fail("perplexity: the context must be at least 4 tokens, got {}", n_ctx);
    if (n_ctx > session.n_ctx()) fail("perplexity: context {} exceeds the session's {}", n_ctx, session.n_ctx());
    if (static_cast<int64_t>(tokens.size()) < 2 * int64_t{n_ctx}) {
        fail("you need at least {} tokens to evaluate perplexity with a context of {}; the file tokenizes to "
             "only {}", 2 * int64_t{n_ctx}, n_ctx, tokens.size());
    }
    PerplexityResult r;
    r.n_tokens = static_cast<int64_t>(tokens.size());
    r.add_bos = tokenizer.data().add_bos && tokenizer.bos() >= 0;
    const int max_chunks = static_cast<int>(tokens.size() / sz(n_ctx));
    r.n_chunks = o.n_chunks < 0 ? max_chunks : std::min(o.n_chunks, max_chunks);
    if (r.n_chunks < 1) fail("perplexity: --chunks must be at least 1");
    if (o.score_last < 0 || o.score_last > n_ctx - 2) {
        fail("perplexity: the scored tokens per chunk must be in [1, {}] for a context of {}, got {}", n_ctx - 2, n_ctx,
             o.score_last);
    }
    // Logits at chunk indices first .. n_ctx - 2 score the tokens first + 1 .. n_ctx - 1.
    const int32_t first = o.score_last > 0 ? n_ctx - 1 - o.score_last : n_ctx / 2;
    const auto V = sz(session.n_vocab());
    const int64_t entry_bytes = kv_entry_bytes(session.kv_cache().config());
    double nll = 0, nll2 = 0, kv = 0, c_head = 0;
    for (int i = 0; i < r.n_chunks; ++i) {
        const size_t start = sz(int64_t{i} * n_ctx);
        std::vector<int32_t> chunk(tokens.begin() + static_cast<int64_t>(start),
                                   tokens.begin() + static_cast<int64_t>(start) + n_ctx);  // [n_ctx]
        if (r.add_bos) chunk[0] = tokenizer.bos();
        std::vector<float> rows;  // [n_ctx - first, V] logits of tokens first .. n_ctx - 1
        {
            SessionGuard guard{session};
            session.reset();
            if (o.policy_spec.empty()) {
                const std::span<const float> all = session.prefill(chunk, /*all_logits=*/true);
                rows.assign(all.begin() + static_cast<int64_t>(sz(first) * V), all.end());
                kv += static_cast<double>(session.kv_cache().total_entries() * entry_bytes);
                c_head += 1.0;
            } else {
                auto p = policy::make_policy(o.policy_spec);
                policy::CoverageProbe probe(*p, o.coverage_window);
                session.set_evictor(&probe);
                session.prefill(std::span<const int32_t>(chunk).first(sz(first)));
                kv += static_cast<double>(session.kv_cache().total_entries() * entry_bytes);
                c_head += probe.report().positions.empty() ? 1.0 : probe.report().mean_c_head(false);
                const std::span<const float> all =
                    session.prefill(std::span<const int32_t>(chunk).subspan(sz(first)), /*all_logits=*/true);
                rows.assign(all.begin(), all.end());
            }
        }
        for (int32_t j = first; j < n_ctx - 1; ++j) {
            const std::span<const float> row = std::span<const float>(rows).subspan(sz(j - first) * V, V);
            const double v = -log_prob(row, tokens[start + sz(j) + 1]);
            nll += v;
            nll2 += v * v;
        }
        r.count += n_ctx - first - 1;
        if (o.on_chunk) o.on_chunk(i + 1, std::exp(nll / static_cast<double>(r.count)));
    }
    const auto count = static_cast<double>(r.count);
    r.mean_nll = nll / count;
    r.ppl = std::exp(r.mean_nll);
    const double var = nll2 / count - r.mean_nll * r.mean_nll;
    r.ppl_error = var > 0 && r.count > 1 ? std::sqrt(var / (count - 1)) * r.ppl : NAN;
    r.kv_bytes = kv / r.n_chunks;
    r.c_head = c_head / r.n_chunks;
    return r;
}

void write_fidelity_outputs(const FidelityReport& rep, const std::vector<PolicyChoice>& policies,
                            const std::vector<int64_t>& budgets, const std::string& dir, const std::string& header) {
    nlohmann::ordered_json j;
    j["prefix"] = rep.prefix;
    j["continuation"] = rep.continuation;
    j["segments"] = rep.segments;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    std::string md = header;
    md += fmt::format("\nPrompt {} tokens, continuation {} tokens (teacher-forced), {} segment(s).\n\n", rep.prefix,
                      rep.continuation, rep.segments);
    md += fmt::format("Continuation NLL with the full cache: {:.4f} nats per token (PPL {:.3f}). Intervals: 95 % "
                      "bootstrap over segments ({} resamples, seed {}); paired over the same segments.\n\n",
                      rep.full_nll_mean, std::exp(rep.full_nll_mean), kBootstrapResamples, kBootstrapSeed);
    md += "| policy | budget | KL mean (nats) | KL max | top-1 agreement | NLL | PPL | NLL - full NLL | C_head | KV bytes | mode |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
    std::string csv = "policy,budget,kl_mean,kl_max,top1,nll,ppl,dnll_full,dnll_full_lo,dnll_full_hi,c_head,kv_bytes,steps,mode\n";
    for (size_t i = 0; i < rep.rows.size(); ++i) {
        const auto& r = rep.rows[i];
        const Estimate vs_full = paired_nll(rep, i, -1);
        rows.push_back({{"policy", r.policy}, {"budget", r.budget}, {"kl_mean", r.kl_mean}, {"kl_max", r.kl_max},
                        {"top1", r.top1}, {"nll", r.nll_mean}, {"dnll_full", {{"mean", vs_full.mean}, {"lo", vs_full.lo}, {"hi", vs_full.hi}}},
                        {"segment_nll", r.segment_nll}, {"c_head", r.c_head}, {"kv_bytes", r.kv_bytes}, {"steps", r.steps},
                        {"mode", r.mode}});
        md += fmt::format("| {} | {} | {:.5f} | {:.5f} | {:.4f} | {:.4f} | {:.3f} | {} | {:.3f} | {:.0f} | {} |\n", r.policy,
                          r.budget == 0 ? std::string("-") : std::to_string(r.budget), r.kl_mean, r.kl_max, r.top1,
                          r.nll_mean, std::exp(r.nll_mean), format_estimate(vs_full, 4, true), r.c_head,
                          r.kv_bytes, r.mode);
        csv += fmt::format("{},{},{:.8f},{:.8f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.1f},{},{}\n", csv_quote(r.policy),
                           r.budget, r.kl_mean, r.kl_max, r.top1, r.nll_mean, std::exp(r.nll_mean), vs_full.mean,
                           vs_full.lo, vs_full.hi, r.c_head, r.kv_bytes, r.steps, r.mode);
    }
    // Paired NLL differences between the policies at each budget: every pair in the CSV, the
    // comparisons of the kvec policies (registry name) in the table.
    std::string pcsv = "policy_a,policy_b,budget,dnll,lo,hi,p_above,segments\n";
    std::string ptable;
    for (size_t a = 0; a < rep.rows.size(); ++a) {
        for (size_t b = 0; b < rep.rows.size(); ++b) {
            if (a == b || rep.rows[a].budget != rep.rows[b].budget || rep.rows[a].budget == 0) continue;
            const Estimate d = paired_nll(rep, a, static_cast<int64_t>(b));
            if (a < b) {
                pcsv += fmt::format("{},{},{},{:.6f},{:.6f},{:.6f},{:.4f},{}\n", csv_quote(rep.rows[a].policy),
                                    csv_quote(rep.rows[b].policy),
                                    rep.rows[a].budget, d.mean, d.lo, d.hi, d.p_above, d.n);
            }
            const auto pa = std::find_if(policies.begin(), policies.end(),
                                         [&](const PolicyChoice& p) { return p.label == rep.rows[a].policy; });
            if (pa != policies.end() && pa->name == "kvec") {
                ptable += fmt::format("| {} | {} | {} | {} {}|\n", rep.rows[a].policy, rep.rows[b].policy,
                                      rep.rows[a].budget, format_estimate(d, 4, true),
                                      d.hi < 0 ? "▲ lower NLL " : d.lo > 0 ? "▼ higher NLL " : "");
            }
        }
    }
    if (!ptable.empty()) {
        md += "\nPaired per-segment NLL difference (first - second, nats per token; negative = the first predicts the "
              "continuation better; ▲/▼ where the interval excludes 0):\n\n| policy | against | budget | NLL difference |\n"
              "|---|---|---:|---:|\n" + ptable;
    }
    write_text_file(dir + "/fidelity_paired.csv", pcsv);
    j["results"] = rows;
    write_text_file(dir + "/fidelity.json", j.dump(2) + "\n");
    write_text_file(dir + "/fidelity.md", md);
    write_text_file(dir + "/fidelity.csv", csv);
    std::vector<std::string> labels;  // [policies]
    std::vector<bool> budgeted;       // [policies]
    for (const auto& p : policies) {
        labels.push_back(p.label);
        budgeted.push_back(p.budgeted);
    }
    auto plot = [&](const std::string& title, const std::string& ylabel, auto value, const std::string& file,
                    double y_min, double y_max) {
        auto y = [&](size_t p, int64_t b) {
            double v = NAN;
            for (const auto& r : rep.rows) {
                if (r.policy == labels[p] && (!budgeted[p] || r.budget == b)) v = value(r);
            }
            return v;
        };
        write_line_plot_png(budget_plot(title, ylabel, budgets, labels, budgeted, y, y_min, y_max),
                                  dir + "/" + file);
    };
    plot("Fidelity: KL(full || compressed) vs KV budget", "mean KL divergence (nats)",
         [](const FidelityRow& r) { return r.kl_mean; }, "fidelity_kl.png", 0.0, NAN);
    plot("Fidelity: top-1 agreement with the full cache vs KV budget", "top-1 agreement",
         [](const FidelityRow& r) { return r.top1; }, "fidelity_top1.png", 0.0, 1.05);
    fmt::print("{}", md);
}

}  // namespace kvec::eval
