#include "eval/sweep.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "eval/jsonl.h"
#include "eval/prefill_share.h"
#include "policy/coverage_probe.h"
#include "policy/registry.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/timer.h"

namespace kvec::eval {

namespace {

std::string trim(std::string s) {
    const auto b = s.find_first_not_of(" \t");
    const auto e = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string canonical_name(const std::string& name) {
    if (name == "streamingllm") return "streaming";
    if (name == "adakv" || name == "ada-kv" || name == "adasnapkv") return "ada-snapkv";
    return name;
}

// Valid UTF-8 (invalid bytes -> U+FFFD), as the JSON file will hold it.
std::string valid_utf8(const std::string& s) {
    const std::string dumped =
        nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return nlohmann::json::parse(dumped).get<std::string>();
}

double now_seconds() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string format_duration(double s) {
    if (!std::isfinite(s) || s < 0) return "?";
    const auto t = static_cast<int64_t>(std::llround(s));
    if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
    if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
    return fmt::format("{}s", t);
}

}  // namespace

size_t compression_group_end(const std::vector<EvalItem>& items, size_t begin, Protocol protocol) {
    size_t end = begin + 1;
    if (protocol != Protocol::QueryAgnostic) return end;
    const EvalItem& a = items[begin];
    auto same_context = [&a](const EvalItem& b) {
        return b.n_context == a.n_context &&
               std::equal(a.prompt.begin(), a.prompt.begin() + a.n_context, b.prompt.begin());
    };
    while (end < items.size() && same_context(items[end])) ++end;
    return end;
}

const char* protocol_name(Protocol p) { return p == Protocol::QueryAgnostic ? "query-agnostic" : "query-aware"; }

Protocol parse_protocol(std::string_view text) {
    if (text == "query-aware") return Protocol::QueryAware;
    if (text == "query-agnostic") return Protocol::QueryAgnostic;
    fail("unknown protocol '{}' (expected query-aware or query-agnostic)", text);
}

std::vector<PolicyChoice> parse_policy_list(const std::string& list) {
    std::vector<std::string> pieces;
    size_t start = 0;
    while (start <= list.size()) {
        const size_t comma = list.find(',', start);
        const std::string piece = trim(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (!piece.empty()) {
            const bool continues = piece.find('=') != std::string::npos && piece.find(':') == std::string::npos;
            if (continues && !pieces.empty()) {
                pieces.back() += "," + piece;
            } else {
                pieces.push_back(piece);
            }
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    if (pieces.empty()) fail("--policies is empty");
    std::vector<PolicyChoice> out;
    for (const std::string& piece : pieces) {
        PolicyChoice c;
        c.label = piece;
        policy::PolicySpec spec = policy::parse_policy_spec(piece);
        spec.name = canonical_name(spec.name);
        const policy::PolicyEntry& entry = policy::find_policy(spec.name);
        if (spec.options.count("budget") != 0 || spec.options.count("ratio") != 0) {
            fail("policy '{}': give budgets with --budgets, not inside the policy", piece);
        }
        c.name = entry.name;
        c.budgeted = std::any_of(entry.options.begin(), entry.options.end(),
                                 [](const policy::OptionSpec& o) { return o.name == "budget"; });
        c.spec = policy::format_policy_spec(spec);
        (void)policy::policy_options(c.spec);  // validates the options
        for (const PolicyChoice& p : out) {
            if (p.label == c.label) fail("policy '{}' is listed twice", c.label);
        }
        out.push_back(std::move(c));
    }
    return out;
}

int64_t compression_code(double c) {
    const double code = std::round(c * 1000.0);
    if (!(c > 0.0 && c < 1.0) || std::fabs(code - c * 1000.0) > 1e-6) {
        fail("a compression ratio is a share of the prompt's entries evicted, in (0, 1) in steps of 0.001; got {}", c);
    }
    return -static_cast<int64_t>(code);
}

std::string budget_label(int64_t budget) {
    return is_compression(budget) ? fmt::format("c={}", compression_of(budget)) : fmt::format("B={}", budget);
}

std::vector<Combo> make_combos(const std::vector<PolicyChoice>& policies, const std::vector<int64_t>& budgets) {
    if (budgets.empty()) fail("--budgets is empty");
    for (int64_t b : budgets) {
        if (b == 0) fail("budgets must be positive, got {}", b);
        if (is_compression(b)) (void)compression_code(compression_of(b));  // validates the code
    }
    std::vector<Combo> out;
    for (size_t p = 0; p < policies.size(); ++p) {
        const PolicyChoice& pc = policies[p];
        if (!pc.budgeted) {
            out.push_back({p, 0, pc.spec});
            continue;
        }
        for (int64_t b : budgets) {
            Combo c;
            c.policy = p;
            c.budget = b;
            c.spec = pc.spec + (pc.spec.find(':') == std::string::npos ? ":" : ",") +
                     (is_compression(b) ? fmt::format("ratio={}", 1.0 - compression_of(b)) : fmt::format("budget={}", b));
            try {
                (void)policy::make_policy(c.spec);
            } catch (const Error& e) {
                fail("policy '{}' at {}: {}", pc.label, budget_label(b), e.what());
            }
            out.push_back(std::move(c));
        }
    }
    return out;
}

nlohmann::ordered_json to_json(const EvalRecord& r) {
    nlohmann::ordered_json j;
    j["id"] = r.id;
    j["task"] = r.task;
    j["policy"] = r.policy;
    j["budget"] = r.budget;
    if (is_compression(r.budget)) j["compression"] = compression_of(r.budget);
    j["prediction"] = r.prediction;
    j["references"] = r.references;
    j["score"] = r.score;
    j["kv_bytes"] = r.kv_bytes;
    j["kv_entries"] = r.kv_entries;
    j["coverage"] = {{"c_head", r.c_head},
                     {"c_layer", r.c_layer},
                     {"redundancy", r.redundancy},
                     {"c_head_tokens", r.c_head_tokens}};
    if (!r.kept_tenths.empty()) j["coverage"]["kept_tenths"] = r.kept_tenths;
    j["n_prompt"] = r.n_prompt;
    j["n_generated"] = r.n_generated;
    j["mode"] = r.mode;
    return j;
}

EvalRecord record_from_json(const nlohmann::json& j, std::string_view where) {
    // Integer fields are range-checked here: nlohmann's get<int64_t>() casts a float such as 1e28
    // without a check (undefined behaviour; found by fuzz_longbench) and get<int32_t>() truncates.
    const auto integer = [&](const char* key, int64_t lo, int64_t hi) -> int64_t {
        const std::optional<int64_t> v = json_optional_int(j, key, where);
        if (!v) fail("{}: not a prediction record: no integer field '{}'", where, key);
        if (*v < lo || *v > hi) fail("{}: not a prediction record: '{}' is out of range: {}", where, key, *v);
        return *v;
    };
    constexpr int64_t i64_max = std::numeric_limits<int64_t>::max();
    constexpr int64_t i32_max = std::numeric_limits<int32_t>::max();
    try {
        EvalRecord r;
        r.id = j.at("id").get<std::string>();
        r.task = j.at("task").get<std::string>();
        r.policy = j.at("policy").get<std::string>();
        r.budget = integer("budget", std::numeric_limits<int64_t>::min(), i64_max);
        r.prediction = j.at("prediction").get<std::string>();
        r.references = j.at("references").get<std::vector<std::string>>();
        r.score = j.at("score").get<double>();
        r.kv_bytes = integer("kv_bytes", 0, i64_max);
        r.kv_entries = integer("kv_entries", 0, i64_max);
        const auto& c = j.at("coverage");
        r.c_head = c.at("c_head").get<double>();
        r.c_layer = c.at("c_layer").get<double>();
        r.redundancy = c.at("redundancy").get<double>();
        r.c_head_tokens = c.at("c_head_tokens").get<double>();
        if (c.contains("kept_tenths")) {
            r.kept_tenths = c.at("kept_tenths").get<std::vector<double>>();
            if (r.kept_tenths.size() != 10) fail("{}: 'kept_tenths' has {} values, not 10", where, r.kept_tenths.size());
        }
        r.n_prompt = static_cast<int32_t>(integer("n_prompt", 0, i32_max));
        r.n_generated = static_cast<int32_t>(integer("n_generated", 0, i32_max));
        r.mode = j.at("mode").get<std::string>();
        return r;
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not a prediction record: {}", where, e.what());
    }
}

namespace {

// Greedy decoding of one item, one token at a time: what greedy_generate and
// greedy_generate_batch share.
class GreedyRun {
public:
    GreedyRun(const Tokenizer& tokenizer, const EvalItem& item, int32_t n_vocab) : tokenizer_(tokenizer), item_(item) {
        if (item.min_new_tokens > 0) {
            for (int32_t id = 0; id < n_vocab; ++id) {
                if (is_end(id)) ends_.push_back(id);
            }
        }
    }
    // Takes the logits after the last token; returns the token to decode next, or -1 when the
    // generation is over (an end token, the item's token limit, or a full context).
    int32_t step(std::span<const float> logits, const Session& session) {
        int32_t id = 0;
        if (static_cast<int>(out_.size()) < item_.min_new_tokens && !ends_.empty()) {
            masked_.assign(logits.begin(), logits.end());
            for (int32_t e : ends_) masked_[static_cast<size_t>(e)] = -std::numeric_limits<float>::infinity();
            id = argmax(masked_);
        } else {
            id = argmax(logits);
        }
        if (is_end(id)) return -1;
        out_.push_back(id);
        if (static_cast<int>(out_.size()) >= item_.max_new_tokens) return -1;
        if (session.n_past() >= session.n_ctx()) return -1;
        return id;
    }
    std::vector<int32_t>& tokens() { return out_; }
    bool empty_budget() const { return item_.max_new_tokens <= 0; }

private:
    bool is_end(int32_t id) const {
        if (!item_.end_tokens.empty()) {
            return std::find(item_.end_tokens.begin(), item_.end_tokens.end(), id) != item_.end_tokens.end();
        }
        return id < tokenizer_.n_vocab() && tokenizer_.is_end_of_generation(id);
    }
    const Tokenizer& tokenizer_;
    const EvalItem& item_;
    std::vector<int32_t> ends_;    // end tokens, for suppression before min_new_tokens
    std::vector<int32_t> out_;
    std::vector<float> masked_;    // [V] logits with end tokens suppressed
};

}  // namespace

std::vector<int32_t> greedy_generate(Session& session, const Tokenizer& tokenizer,
                                     std::span<const float> logits, const EvalItem& item) {
    GreedyRun run(tokenizer, item, session.n_vocab());
    if (run.empty_budget()) return {};
    for (int32_t id; (id = run.step(logits, session)) >= 0;) logits = session.decode(id);
    return std::move(run.tokens());
}

std::vector<std::vector<int32_t>> greedy_generate_batch(std::span<Session* const> sessions, const Tokenizer& tokenizer,
                                                        std::span<const std::vector<float>> logits,
                                                        std::span<const EvalItem* const> items) {
    if (sessions.size() != logits.size() || sessions.size() != items.size()) {
        fail("greedy_generate_batch: {} sessions, {} logits and {} items", sessions.size(), logits.size(), items.size());
    }
    std::vector<GreedyRun> runs;
    runs.reserve(sessions.size());
    std::vector<Session*> active;   // [running] the sessions still generating
    std::vector<int32_t> next;      // [running] their next token
    std::vector<size_t> index;      // [running] into sessions
    for (size_t i = 0; i < sessions.size(); ++i) {
        runs.emplace_back(tokenizer, *items[i], sessions[i]->n_vocab());
        const int32_t id = runs[i].empty_budget() ? -1 : runs[i].step(logits[i], *sessions[i]);
        if (id >= 0) active.push_back(sessions[i]), next.push_back(id), index.push_back(i);
    }
    while (!active.empty()) {
        Session::decode_batch(active, next);
        size_t kept = 0;
        for (size_t j = 0; j < active.size(); ++j) {
            const int32_t id = runs[index[j]].step(active[j]->last_logits(), *active[j]);
            if (id < 0) continue;
            active[kept] = active[j], next[kept] = id, index[kept] = index[j];
            ++kept;
        }
        active.resize(kept), next.resize(kept), index.resize(kept);
    }
    std::vector<std::vector<int32_t>> out;
    for (GreedyRun& r : runs) out.push_back(std::move(r.tokens()));
    return out;
}

void for_each_policy_cache(Session& session, std::span<const int32_t> prompt,
                           const std::vector<PolicyChoice>& policies, const std::vector<Combo>& combos,
                           const std::vector<size_t>& which, bool share_prefill, int64_t coverage_window,
                           const std::function<void(const PreparedCache&)>& use, SweepStats* stats,
                           const std::function<Session&(size_t combo)>& target) {
    const ops::RopeParams rope = rope_params(session.model(), session.n_ctx());
    SweepStats local;
    SweepStats& st = stats != nullptr ? *stats : local;
    // Group the shareable combinations by observation window (window-less ones join any).
    std::map<int, std::vector<size_t>> groups;  // window -> combos
    std::vector<size_t> separate;
    std::vector<ObservationRequest> request_of(combos.size());  // [combos] of the shareable ones
    for (size_t c : which) {
        auto p = policy::make_policy(combos[c].spec);
        if (share_prefill && is_one_shot(*p, policies[combos[c].policy].name)) {
            request_of[c] = p->request();
            groups[share_group_key(request_of[c])].push_back(c);
        } else {
            separate.push_back(c);
        }
    }
    // Window-less combinations join another group's prefill: the first one, except that those
    // observing attention (column sums, the last row) cannot join a context reconstruction
    // (negative keys) and join the first window group instead, or keep their own prefill.
    if (groups.size() > 1 && groups.count(0) != 0) {
        const std::vector<size_t> any = std::move(groups[0]);
        groups.erase(0);
        const auto window_group = groups.upper_bound(0);
        for (size_t c : any) {
            const bool observes = request_of[c].column_sums || request_of[c].last_row;
            auto& target = !observes ? groups.begin()->second
                           : window_group != groups.end() ? window_group->second
                                                          : groups[0];
            target.push_back(c);
        }
        for (auto& [key, members] : groups) std::sort(members.begin(), members.end());
    }
    for (const auto& [key, members] : groups) {
        std::vector<ObservationRequest> requests;
        for (size_t c : members) requests.push_back(request_of[c]);
        Timer t;
        const PrefillSnapshot snap = record_prefill(session, prompt, merge_requests(requests));
        st.prefill_seconds += t.seconds();
        ++st.prefills;
        for (size_t c : members) {
            Session& dst = target ? target(c) : session;
            std::optional<SessionGuard> guard;
            if (!target) guard.emplace(session);
            auto p = policy::make_policy(combos[c].spec);
            policy::CoverageProbe probe(*p, coverage_window);
            t.reset();
            ReplayResult rr = replay_policy(snap, probe, rope);
            std::vector<int32_t> selected;  // [k] prompt positions (GemFilter): prefilled again alone
            if (probe.select_prompt(selected)) {
                std::vector<int32_t> tokens;  // [k]
                for (int32_t p : selected) tokens.push_back(prompt[static_cast<size_t>(p)]);
                dst.reset();
                const std::span<const float> lg = dst.prefill(tokens);
                const std::vector<float> logits(lg.begin(), lg.end());
                st.prefill_seconds += t.seconds();  // the selection's own prefill
                ++st.prefills;
                use({c, logits, dst.kv_cache().total_entries(), probe.report(), "shared", &dst});
                continue;
            }
            const int64_t entries = rr.entries;
            adopt_cache(dst, std::move(rr.cache), rr.next_position, prompt.back());
            st.replay_seconds += t.seconds();
            use({c, snap.logits, entries, probe.report(), "shared", &dst});
        }
    }
    for (size_t c : separate) {
        SessionGuard guard{session};
        auto p = policy::make_policy(combos[c].spec);
        policy::CoverageProbe probe(*p, coverage_window);
        session.reset();
        session.set_evictor(&probe);
        Timer t;
        const std::span<const float> logits = session.prefill(prompt);
        st.prefill_seconds += t.seconds();
        ++st.prefills;
        use({c, logits, session.kv_cache().total_entries(), probe.report(), "separate", &session});
    }
}

SweepStats run_sweep(Session& session, const Tokenizer& tokenizer, const std::vector<EvalItem>& items,
                     const std::vector<PolicyChoice>& policies, const std::vector<Combo>& combos,
                     const std::set<RecordKey>& done, const SweepOptions& options) {
    if (session.evictor() != nullptr) fail("run_sweep: the session must not have a policy attached");
    SweepStats stats;
    Timer wall;
    const int64_t total = static_cast<int64_t>(items.size() * combos.size());
    int64_t finished = 0;
    const int64_t entry_bytes = kv_entry_bytes(session.kv_cache().config());

    auto emit = [&](const EvalItem& item, const Combo& combo, const std::vector<int32_t>& generated,
                    int64_t entries, const policy::CoverageReport& cov, const char* mode) {
        EvalRecord r;
        r.id = item.id;
        r.task = item.task;
        r.policy = policies[combo.policy].label;
        r.budget = combo.budget;
        r.prediction = valid_utf8(tokenizer.decode(generated, /*skip_special=*/true));
        r.references = item.references;
        r.score = score_item(item, r.prediction);
        r.kv_entries = entries;
        r.kv_bytes = entries * entry_bytes;
        if (!cov.positions.empty()) {
            r.c_head = cov.mean_c_head(false);
            r.c_layer = cov.c_layer_positions;
            r.redundancy = cov.mean_redundancy(false);
            r.c_head_tokens = cov.mean_c_head(true);
            r.kept_tenths = cov.kept_tenth_shares();
        }
        r.n_prompt = static_cast<int32_t>(item.prompt.size());
        r.n_generated = static_cast<int32_t>(generated.size());
        r.mode = mode;
        ++stats.generations;
        if (options.on_record) options.on_record(r);
        if (options.on_stats) {
            stats.wall_seconds = wall.seconds();
            options.on_stats(stats);
        }
        ++finished;
        if (options.on_progress) options.on_progress(finished, total);
    };

    const bool agnostic = options.protocol == Protocol::QueryAgnostic;
    if (agnostic) {
        for (const Combo& c : combos) {
            if (policy::make_policy(c.spec)->request().decode_interval > 0) {
                fail("policy '{}': decode-time eviction does not apply to the query-agnostic protocol (the "
                     "context is compressed once, then the question and the answer run uncompressed)",
                     policies[c.policy].label);
            }
        }
        for (const EvalItem& item : items) {
            if (item.n_context <= 0 || item.n_context >= static_cast<int32_t>(item.prompt.size())) {
                fail("sample '{}': where its question starts is not known, which the query-agnostic protocol "
                     "needs", item.id);
            }
        }
    }
    auto is_done = [&](const EvalItem& item, const Combo& c) {
        return done.count({item.id, policies[c.policy].label, c.budget}) != 0;
    };
    std::vector<std::unique_ptr<Session>> lanes;  // [decode_batch] sessions for batched decoding
    for (size_t begin = 0; begin < items.size();) {
        const size_t end = compression_group_end(items, begin, options.protocol);
        const std::span<const EvalItem> group(items.data() + begin, end - begin);
        begin = end;
        std::vector<size_t> pending;  // combos with an item of the group still to run
        for (size_t c = 0; c < combos.size(); ++c) {
            bool any = false;
            for (const EvalItem& item : group) {
                if (is_done(item, combos[c])) {
                    ++stats.skipped;
                    ++finished;
                } else {
                    any = true;
                }
            }
            if (any) pending.push_back(c);
        }
        if (options.on_progress) options.on_progress(finished, total);
        if (pending.empty()) continue;

        const std::vector<int32_t>& prompt = group.front().prompt;
        const std::span<const int32_t> compressed =
            agnostic ? std::span<const int32_t>(prompt.data(), static_cast<size_t>(group.front().n_context))
                     : std::span<const int32_t>(prompt);
        // Decodes the group's items on a prepared cache of `session`: under query-agnostic, each
        // question after the compressed context (rolled back to it between questions).
        auto answer = [&](Session& s, const PreparedCache& pc) {
            const int32_t n_compressed = s.n_past();
            bool first = true;
            for (const EvalItem& item : group) {
                if (is_done(item, combos[pc.combo])) continue;
                std::span<const float> logits = pc.logits;
                if (agnostic) {
                    // The question after the compressed context, which is not compressed further.
                    if (!first) s.rollback(n_compressed);
                    s.pause_eviction(true);
                    Timer tq;
                    logits = s.prefill(std::span<const int32_t>(item.prompt).subspan(static_cast<size_t>(item.n_context)));
                    stats.prefill_seconds += tq.seconds();
                }
                first = false;
                Timer t;
                const std::vector<int32_t> generated = greedy_generate(s, tokenizer, logits, item);
                stats.decode_seconds += t.seconds();
                if (std::string_view(pc.mode) == "shared") ++stats.shared_generations;
                emit(item, combos[pc.combo], generated, pc.entries, pc.coverage, pc.mode);
            }
        };
        // Batched decoding: each shared combination's cache goes into a lane session; when the
        // lanes are full (and at the end) they decode together, one question of the group at a
        // time, and the records come out in the order of the unbatched sweep.
        struct Pending {
            PreparedCache pc;
            std::vector<float> logits;  // [n_vocab] after the compressed prompt
            int32_t n_compressed = 0;
        };
        std::vector<Pending> pending_lanes;
        auto flush = [&] {
            if (pending_lanes.empty()) return;
            std::vector<std::vector<std::vector<int32_t>>> generated(pending_lanes.size());  // [lane][item]
            for (const EvalItem& item : group) {
                std::vector<Session*> ss;
                std::vector<std::vector<float>> first;
                std::vector<const EvalItem*> its;
                std::vector<size_t> which;
                for (size_t l = 0; l < pending_lanes.size(); ++l) {
                    Pending& pl = pending_lanes[l];
                    if (is_done(item, combos[pl.pc.combo])) continue;
                    Session& lane = *lanes[l];
                    if (agnostic) {
                        if (lane.n_past() != pl.n_compressed) lane.rollback(pl.n_compressed);
                        Timer tq;
                        const std::span<const float> lg = lane.prefill(
                            std::span<const int32_t>(item.prompt).subspan(static_cast<size_t>(item.n_context)));
                        stats.prefill_seconds += tq.seconds();
                        first.emplace_back(lg.begin(), lg.end());
                    } else {
                        first.push_back(pl.logits);
                    }
                    ss.push_back(&lane);
                    its.push_back(&item);
                    which.push_back(l);
                }
                Timer t;
                std::vector<std::vector<int32_t>> out = greedy_generate_batch(ss, tokenizer, first, its);
                stats.decode_seconds += t.seconds();
                for (size_t j = 0; j < which.size(); ++j) generated[which[j]].push_back(std::move(out[j]));
            }
            for (size_t l = 0; l < pending_lanes.size(); ++l) {
                const Pending& pl = pending_lanes[l];
                size_t k = 0;
                for (const EvalItem& item : group) {
                    if (is_done(item, combos[pl.pc.combo])) continue;
                    ++stats.shared_generations;
                    emit(item, combos[pl.pc.combo], generated[l][k++], pl.pc.entries, pl.pc.coverage, pl.pc.mode);
                }
            }
            pending_lanes.clear();
        };
        std::function<Session&(size_t)> target;
        if (options.decode_batch > 1) {
            target = [&](size_t) -> Session& {
                if (pending_lanes.size() == static_cast<size_t>(options.decode_batch)) flush();
                if (lanes.size() == pending_lanes.size()) {
                    lanes.push_back(std::make_unique<Session>(session.model(), session.options()));
                }
                return *lanes[pending_lanes.size()];
            };
        }
        for_each_policy_cache(
            session, compressed, policies, combos, pending, options.share_prefill, options.coverage_window,
            [&](const PreparedCache& pc) {
                if (pc.session != &session) {  // a lane: decoded in the next flush
                    pending_lanes.push_back({pc, std::vector<float>(pc.logits.begin(), pc.logits.end()),
                                             pc.session->n_past()});
                    pending_lanes.back().pc.logits = {};
                    return;
                }
                flush();  // the lanes' records first, in the order of the unbatched sweep
                answer(session, pc);
            },
            &stats, target);
        flush();
    }
    stats.wall_seconds = wall.seconds();
    return stats;
}

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)), total_(total), start_(now_seconds()), tty_(isatty(fileno(stderr)) != 0) {}

void ProgressBar::update(int64_t done) {
    if (start_done_ < 0) {
        start_done_ = done;
        start_ = now_seconds();
    }
    const double t = now_seconds();
    const double elapsed = t - start_;
    const int decile = total_ > 0 ? static_cast<int>(10 * done / total_) : 10;
    const bool due = tty_ ? (t - last_print_ >= 0.2 || done == total_)
                          : (decile != last_decile_ || t - last_print_ >= 60 || done == total_);
    if (!due) return;
    last_print_ = t;
    last_decile_ = decile;
    const int width = 24;
    const int filled = total_ > 0 ? static_cast<int>(width * done / total_) : width;
    const int64_t run_done = done - start_done_;
    const double eta = run_done > 0 ? elapsed / static_cast<double>(run_done) * static_cast<double>(total_ - done)
                                    : std::numeric_limits<double>::quiet_NaN();
    const std::string line = fmt::format("{} [{}{}] {}/{} {}% {}, ETA {}", label_, std::string(filled, '#'),
                                         std::string(width - filled, ' '), done, total_,
                                         total_ > 0 ? 100 * done / total_ : 100, format_duration(elapsed),
                                         done == total_ ? "0s" : format_duration(eta));
    if (tty_) {
        fmt::print(stderr, "\r{}\x1b[K", line);
    } else {
        fmt::print(stderr, "{}\n", line);
    }
    std::fflush(stderr);
}

void ProgressBar::finish() {
    if (tty_) fmt::print(stderr, "\n");
}

}  // namespace kvec::eval
