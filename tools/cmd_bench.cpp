// kvec bench: prompt-processing (pp) and generation (tg) throughput, like llama-bench.
//
// Every parameter takes a comma list and the bench runs the cross product:
//   -m models, -t threads, -p prompt sizes, -n generation sizes, -d depths (tokens already in the
//   cache), --policy eviction policies, --budget budgets, -b chunk sizes, KV-cache types: --kv-type
//   (keys and values alike) or the cross product of -ctk/--cache-type-k and -ctv/--cache-type-v.
// Tests: `pp N` (a prefill of N tokens after the depth), `tg N` (N decode steps after the depth);
// with a depth they are named `pp N @ dD` / `tg N @ dD`. --parallel P (a list) runs each tg test
// as P sequences decoding together (`tg N x P`: Session::decode_batch, one forward step per
// token of all P, as `kvec serve` batches its slots; like llama-batched-bench): the depth prompt
// is prefilled once, saved, and restored into the other P - 1 sessions (each with its own policy
// object, as a restored server slot), and t/s counts the tokens of all P sequences. With a policy the depth prompt is
// prefilled with the policy attached (it compresses the prompt once after the prefill, or after
// every chunk with its `chunked=true` option); the decode steps then run over the compressed
// cache. For pp tests the policy is attached to the timed prefill itself (chunked eviction).
// Each test runs -r times: mean and sample standard deviation of tokens/s.
//
// Also reported: bytes of one KV entry (key + value + position, kv_row_bytes), KV bytes after the test and the peak (allocated bytes, KvCache::bytes()), the
// share of the timed section spent in eviction (Session::eviction_stats(): scoring, selection,
// compaction), the share spent in context reconstruction passes (KVzip's second forward pass,
// its own column), and for tg tests the
// bytes read per token (weights of the matrices + live KV entries) as a share of the measured
// streaming-read bandwidth (--bandwidth, on by default; measured before and after each tg test,
// the best of both, since on a shared machine it moves with the load), and the per-token fixed
// cost: the time per token not explained by those bytes at that bandwidth (`fixed µs/t`,
// 1 / (t/s) - bytes per token / bandwidth), which is what keeps small models from the limit.
//
// Output: -o md (default, a Markdown table), csv or json.
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#include "commands.h"
#include "engine/generator.h"
#include "engine/session_file.h"
#include "model/model.h"
#include "model/session.h"
#include "policy/registry.h"
#include "tensor/matmul.h"
#include "util/error.h"
#include "util/timer.h"
#include "util/threads.h"

namespace kvec::tools {

namespace {

struct BenchOptions {
    std::vector<std::string> models;
    LoadMode load = LoadMode::Auto;
    std::vector<int> n_prompt = {512};
    std::vector<int> n_gen = {128};
    std::vector<int> depth = {0};
    std::vector<int> threads = {0};
    std::vector<int> chunk = {512};
    std::vector<int> parallel = {1};  // tg tests: sequences decoding together
    std::vector<std::pair<KvType, KvType>> kv_types = {{KvType::F16, KvType::F16}};  // (keys, values)
    std::vector<std::string> policy = {"full"};
    std::vector<int> budget;
    int reps = 5;
    std::string output = "md";
    bool bandwidth = true;
    double bandwidth_gib = 0.25;
};

// Splits a comma list of integers (CLI11 gives us the raw strings so that "1,2" works).
std::vector<int> parse_int_list(const std::string& s, const char* flag, int min_value) {
    std::vector<int> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) fail("{}: empty item in the list '{}'", flag, s);
        size_t used = 0;
        long v = 0;
        try {
            v = std::stol(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != item.size()) fail("{}: '{}' is not an integer", flag, item);
        if (v < min_value || v > 1'000'000'000) fail("{}: {} is out of range (minimum {})", flag, v, min_value);
        out.push_back(static_cast<int>(v));
    }
    if (out.empty()) fail("{}: empty list", flag);
    return out;
}

std::vector<std::string> parse_string_list(const std::string& s, const char* flag) {
    if (s.empty()) fail("{}: empty list", flag);
    std::vector<std::string> out;
    for (size_t start = 0;;) {
        const size_t comma = s.find(',', start);
        out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (out.back().empty()) fail("{}: empty item in the list '{}'", flag, s);
        if (comma == std::string::npos) return out;
        start = comma + 1;
    }
}

// Policies are comma-separated, but a policy's own options are too ("kvec:budget=256,gamma=0.5"):
// an item with '=' and no ':' continues the previous policy's options.
std::vector<std::string> parse_policy_list(const std::string& s) {
    std::vector<std::string> out;
    for (const std::string& item : parse_string_list(s, "--policy")) {
        const bool continues = item.find('=') != std::string::npos && item.find(':') == std::string::npos;
        if (continues && !out.empty()) {
            out.back() += "," + item;
        } else {
            out.push_back(item);
        }
    }
    return out;
}

// The (keys, values) type pairs to run: --kv-type's types for both, or the cross product of
// --cache-type-k and --cache-type-v (either one missing: --kv-type's list in its place).
std::vector<std::pair<KvType, KvType>> parse_kv_types(const std::string& both, const std::string& k,
                                                      const std::string& v) {
    auto types = [](const std::string& list, const char* flag) {
        std::vector<KvType> out;
        for (const std::string& s : parse_string_list(list, flag)) out.push_back(parse_kv_type(s, flag));
        return out;
    };
    const std::vector<KvType> all = types(both, "--kv-type");
    std::vector<std::pair<KvType, KvType>> out;
    if (k.empty() && v.empty()) {
        for (KvType t : all) out.emplace_back(t, t);
        return out;
    }
    const std::vector<KvType> ks = k.empty() ? all : types(k, "--cache-type-k");
    const std::vector<KvType> vs = v.empty() ? all : types(v, "--cache-type-v");
    for (KvType kt : ks) {
        for (KvType vt : vs) out.emplace_back(kt, vt);
    }
    return out;
}

std::string policy_name(const std::string& spec) { return spec.substr(0, spec.find(':')); }

bool spec_has_option(const std::string& spec, const std::string& key) {
    const size_t colon = spec.find(':');
    if (colon == std::string::npos) return false;
    std::stringstream ss(spec.substr(colon + 1));
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.rfind(key + "=", 0) == 0) return true;
    }
    return false;
}

// The spec with the budget added (unless the spec names one or the policy has no budget).
std::string with_budget(const std::string& spec, int budget) {
    if (budget <= 0 || policy_name(spec) == "full" || spec_has_option(spec, "budget")) return spec;
    return spec + (spec.find(':') == std::string::npos ? ":" : ",") + fmt::format("budget={}", budget);
}

struct BenchTest {
    enum class Kind { Prompt, Generation } kind;
    int n_tokens;
    int depth;
    int sequences = 1;  // tg: sequences decoding together (--parallel)
    std::string name() const {
        std::string s = fmt::format("{}{}", kind == Kind::Prompt ? "pp" : "tg", n_tokens);
        if (sequences > 1) s += fmt::format(" x{}", sequences);
        if (depth > 0) s += fmt::format(" @ d{}", depth);
        return s;
    }
};

struct Stats {
    std::vector<double> v;
    double mean() const {
        double s = 0;
        for (double x : v) s += x;
        return v.empty() ? 0.0 : s / static_cast<double>(v.size());
    }
    double stddev() const {
        if (v.size() < 2) return 0.0;
        const double m = mean();
        double s = 0;
        for (double x : v) s += (x - m) * (x - m);
        return std::sqrt(s / static_cast<double>(v.size() - 1));
    }
};

struct BenchResult {
    std::string model, model_type;
    size_t model_bytes = 0;
    int64_t model_params = 0;
    int threads = 0, chunk = 0;
    std::string kv_type, policy;  // kv_type: kv_types_name; policy: the full spec
    size_t kv_entry_bytes = 0;    // bytes of one entry (KvCache::entry_bytes)
    BenchTest test{};
    Stats tokens_per_second;      // one per repetition
    Stats seconds;                // timed section per repetition
    Stats evict_share;            // eviction time / timed section
    Stats recon_share;            // context reconstruction time / timed section
    Stats depth_seconds;          // untimed depth prefill (incl. its eviction)
    Stats depth_evict_seconds;    // eviction work of the depth prefill
    size_t kv_bytes = 0;          // allocated KV bytes after the test (last repetition)
    size_t kv_peak = 0;           // peak allocated KV bytes during the repetition
    size_t kv_entries = 0;        // entries after the depth prefill (compressed size)
    double bytes_per_token = 0;   // tg: weights + live KV read per decode step
    double bandwidth = 0;         // tg: streaming-read bytes/s measured around the test (best)
    double bw_share = -1;         // tg: bytes_per_token * t/s / bandwidth
    double fixed_seconds = -1;    // tg: time per token not explained by its bytes, 1/(t/s) - bytes_per_token / bandwidth
};

std::vector<int32_t> random_tokens(int n, int n_vocab, std::mt19937& rng) {
    std::uniform_int_distribution<int32_t> d(0, n_vocab - 1);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = d(rng);
    return t;
}

double eviction_seconds(const EvictionStats& s) { return s.policy_seconds + s.observe_seconds + s.compact_seconds; }

// Bytes of the weight matrices one decode step reads (every layer matrix and the output; the
// embedding table contributes one row).
double weight_bytes_per_token(const Model& m) {
    auto bytes = [](const WeightView& w) { return static_cast<double>(w.row_bytes) * static_cast<double>(w.n_out); };
    double b = bytes(m.weights().output) + static_cast<double>(m.weights().token_embd.row_bytes);
    for (const LayerWeights& L : m.weights().layers) {
        b += bytes(L.wq) + bytes(L.wk) + bytes(L.wv) + bytes(L.wo) + bytes(L.w_gate) + bytes(L.w_up) + bytes(L.w_down);
    }
    return b;
}

// Streaming read bandwidth with the current thread count: the best of several passes over a
// buffer far larger than the caches (each thread sums its own contiguous slice), bytes/second.
class BandwidthProbe {
public:
    explicit BandwidthProbe(size_t bytes) : buf_(bytes / sizeof(uint64_t)) {
        const auto n = static_cast<int64_t>(buf_.size());
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) buf_[static_cast<size_t>(i)] = static_cast<uint64_t>(i);  // map every page
    }
    double measure(int passes) {
        const auto n = static_cast<int64_t>(buf_.size());
        double best = 0;
        for (int pass = 0; pass < passes; ++pass) {
            Timer t;
            uint64_t total = 0;
#pragma omp parallel reduction(+ : total)
            {
                const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
                const int64_t b = n * id / nt, e = n * (id + 1) / nt;
                total += stream_read_sum(buf_.data() + b, e - b);
            }
            const double s = t.seconds();
            sink_ += total;
            best = std::max(best, static_cast<double>(n) * sizeof(uint64_t) / s);
        }
        return best;
    }
    uint64_t sink() const { return sink_; }

private:
    std::vector<uint64_t> buf_;  // [bytes / 8]
    uint64_t sink_ = 0;          // keeps the sums alive
};

struct RunConfig {
    int threads, chunk;
    KvType kv_type_k, kv_type_v;
    std::string policy;
};

// The other sequences of a --parallel tg test start from session 0's depth prompt, as a server
// slot restores a saved conversation: saved once, restored into each (its own policy object).
void copy_depth_prompt(const Session& from, const std::vector<std::unique_ptr<Session>>& to,
                       std::vector<std::unique_ptr<Evictor>>& policies, const std::string& spec) {
    const std::string path = fmt::format("{}/kvec-bench-{}.slot", std::filesystem::temp_directory_path().string(),
                                         ::getpid());
    struct Remove {
        const std::string& path;
        ~Remove() { std::filesystem::remove(path); }
    } remove{path};
    save_session(from, path, "", spec);
    const SessionFile file = SessionFile::read(path);
    for (size_t i = 1; i < to.size(); ++i) {
        to[i]->reset();
        to[i]->set_evictor(nullptr);
        policies[i] = policy_name(spec) != "full" ? policy::make_policy(spec) : nullptr;
        to[i]->set_evictor(policies[i].get());
        file.restore(*to[i]);
    }
}

// One test, -r repetitions. For tg tests the bandwidth is measured just before and just after
// the repetitions (best of both): on a shared machine it changes with the load.
void run_test(const Model& model, const RunConfig& rc, const BenchTest& t, int reps, BandwidthProbe* probe,
              std::mt19937& rng, BenchResult& r) {
    SessionOptions so;
    so.n_ctx = t.depth + t.n_tokens + 1;
    so.n_batch = std::max(rc.chunk, t.sequences);
    so.kv_type_k = rc.kv_type_k;
    so.kv_type_v = rc.kv_type_v;
    std::vector<std::unique_ptr<Session>> sessions;  // [sequences]; 0 runs pp tests and the depth prompt
    std::vector<std::unique_ptr<Evictor>> evictors;  // [sequences]
    for (int i = 0; i < t.sequences; ++i) {
        sessions.push_back(std::make_unique<Session>(model, so));
        evictors.push_back(policy_name(rc.policy) != "full" ? policy::make_policy(rc.policy) : nullptr);
        sessions.back()->set_evictor(evictors.back().get());
    }
    Session& session = *sessions[0];
    std::vector<Session*> batch;  // [sequences]
    for (const auto& s : sessions) batch.push_back(s.get());
    auto kv_total = [&](auto bytes_of) {
        size_t b = 0;
        for (const Session* s : batch) b += bytes_of(s->kv_cache());
        return b;
    };
    // Warm-up: touches every weight page and starts the thread team.
    session.prefill(random_tokens(std::min(16, so.n_ctx - 1), session.n_vocab(), rng));
    session.decode(0);
    const double weight_bytes = weight_bytes_per_token(model);
    const bool gen = t.kind == BenchTest::Kind::Generation;
    if (gen && probe != nullptr) r.bandwidth = probe->measure(3);
    for (int rep = 0; rep < reps; ++rep) {
        session.reset();
        if (t.depth > 0) {
            Timer dt;
            session.prefill(random_tokens(t.depth, session.n_vocab(), rng));
            r.depth_seconds.v.push_back(dt.seconds());
            r.depth_evict_seconds.v.push_back(eviction_seconds(session.eviction_stats()));
            r.kv_entries = session.kv_cache().total_entries();
            if (t.sequences > 1) copy_depth_prompt(session, sessions, evictors, rc.policy);
        } else {
            for (Session* s : batch) s->reset();
        }
        const double evict_before = eviction_seconds(session.eviction_stats());
        const double recon_before = session.eviction_stats().reconstruct_seconds;
        const size_t kv_used_before = kv_total([](const KvCache& kv) { return kv.used_bytes(); });
        // [n_tokens, sequences] the tokens of every step
        const auto tokens = random_tokens(t.n_tokens * t.sequences, session.n_vocab(), rng);
        Timer timer;
        if (t.kind == BenchTest::Kind::Prompt) {
            session.prefill(tokens);
        } else {
            for (int step = 0; step < t.n_tokens; ++step) {
                const auto first = static_cast<size_t>(step) * static_cast<size_t>(t.sequences);
                Session::decode_batch(batch, std::span<const int32_t>(tokens).subspan(first, batch.size()));
            }
        }
        const double s = timer.seconds();
        r.seconds.v.push_back(s);
        r.tokens_per_second.v.push_back(static_cast<double>(t.n_tokens) * t.sequences / s);
        r.evict_share.v.push_back((eviction_seconds(session.eviction_stats()) - evict_before) / s);
        r.recon_share.v.push_back((session.eviction_stats().reconstruct_seconds - recon_before) / s);
        r.kv_bytes = kv_total([](const KvCache& kv) { return kv.bytes(); });
        r.kv_entry_bytes = session.kv_cache().entry_bytes();
        r.kv_peak = kv_total([](const KvCache& kv) { return kv.peak_bytes(); });
        if (t.kind == BenchTest::Kind::Generation) {
            // Live KV bytes grow by one entry per head and layer per step: the mean over the test.
            // The weights are read once per step for all sequences.
            const double kv_mean =
                0.5 * static_cast<double>(kv_used_before + kv_total([](const KvCache& kv) { return kv.used_bytes(); }));
            r.bytes_per_token = (weight_bytes + kv_mean) / t.sequences;
        }
    }
    if (gen && probe != nullptr) {
        r.bandwidth = std::max(r.bandwidth, probe->measure(3));
        r.bw_share = r.bytes_per_token * r.tokens_per_second.mean() / r.bandwidth;
        // The per-token fixed cost: what synchronisation, small ops, the output head and the
        // sampler add to the bytes' streaming time (the gap to the bandwidth limit, in time).
        r.fixed_seconds = (1.0 - r.bw_share) / r.tokens_per_second.mean();
    }
}

std::string pm(const Stats& s, int digits) {
    return fmt::format("{:.{}f} ± {:.{}f}", s.mean(), digits, s.stddev(), digits);
}

std::string budget_column(const std::string& spec) {
    if (policy_name(spec) == "full") return "-";
    const size_t p = spec.find("budget=");
    if (p == std::string::npos) return "default";
    return spec.substr(p + 7, spec.find(',', p) == std::string::npos ? std::string::npos : spec.find(',', p) - p - 7);
}

void print_markdown(const std::vector<BenchResult>& rs) {
    fmt::print("| model | size | params | threads | kv | KV B/entry | chunk | policy | budget | test | t/s | KV bytes | KV peak | "
               "evict % | recon % | GB/s | bw % | fixed µs/t |\n");
    fmt::print("| --- | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const BenchResult& r : rs) {
        fmt::print("| {} {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.model, r.model_type,
                   format_bytes(r.model_bytes), format_count(r.model_params), r.threads, r.kv_type, r.kv_entry_bytes,
                   r.chunk, r.policy, budget_column(r.policy), r.test.name(), pm(r.tokens_per_second, 2),
                   format_bytes(r.kv_bytes), format_bytes(r.kv_peak),
                   fmt::format("{:.1f}", 100.0 * r.evict_share.mean()),
                   r.recon_share.mean() > 0 ? fmt::format("{:.1f}", 100.0 * r.recon_share.mean()) : std::string("-"),
                   r.bandwidth > 0 ? fmt::format("{:.1f}", r.bandwidth / 1e9) : std::string("-"),
                   r.bw_share >= 0 ? fmt::format("{:.0f}", 100.0 * r.bw_share) : std::string("-"),
                   r.fixed_seconds >= 0 ? fmt::format("{:.0f}", 1e6 * r.fixed_seconds) : std::string("-"));
    }
}

std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string out = "\"";
    for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
}

void print_csv(const std::vector<BenchResult>& rs) {
    fmt::print("model,type,model_bytes,params,threads,kv_type,chunk,policy,test,kind,n_tokens,depth,reps,tps_mean,"
               "tps_stddev,seconds_mean,kv_entry_bytes,kv_bytes,kv_peak_bytes,kv_entries,evict_share,reconstruct_share,depth_prefill_seconds,"
               "depth_evict_seconds,bytes_per_token,bandwidth_bytes_per_second,bandwidth_share,sequences,fixed_seconds_per_token\n");
    for (const BenchResult& r : rs) {
        fmt::print("{},{},{},{},{},{},{},{},{},{},{},{},{},{:.4f},{:.4f},{:.6f},{},{},{},{},{:.5f},{:.5f},{:.4f},{:.4f},{:.0f},{:.0f},{:.4f},{},{:.9f}\n",
                   csv_field(r.model), r.model_type, r.model_bytes, r.model_params, r.threads, r.kv_type, r.chunk,
                   csv_field(r.policy), r.test.name(), r.test.kind == BenchTest::Kind::Prompt ? "pp" : "tg",
                   r.test.n_tokens, r.test.depth, r.tokens_per_second.v.size(), r.tokens_per_second.mean(),
                   r.tokens_per_second.stddev(), r.seconds.mean(), r.kv_entry_bytes, r.kv_bytes, r.kv_peak, r.kv_entries,
                   r.evict_share.mean(), r.recon_share.mean(), r.depth_seconds.mean(), r.depth_evict_seconds.mean(),
                   r.bytes_per_token, r.bandwidth, r.bw_share, r.test.sequences, r.fixed_seconds);
    }
}

std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (static_cast<unsigned char>(c) < 0x20) {
            out += fmt::format("\\u{:04x}", static_cast<int>(c));
        } else {
            out += c;
        }
    }
    return out + "\"";
}

std::string json_array(const std::vector<double>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.6g}", i ? ", " : "", v[i]);
    return s + "]";
}

void print_json(const std::vector<BenchResult>& rs, double bandwidth, const std::string& backend) {
    fmt::print("{{\n  \"backend\": {},\n  \"bandwidth_bytes_per_second\": {:.6g},\n  \"results\": [\n",
               json_string(backend), bandwidth);
    for (size_t i = 0; i < rs.size(); ++i) {
        const BenchResult& r = rs[i];
        fmt::print("    {{\"model\": {}, \"type\": {}, \"model_bytes\": {}, \"params\": {}, \"threads\": {}, "
                   "\"kv_type\": {}, \"chunk\": {}, \"policy\": {}, \"test\": {}, \"n_tokens\": {}, \"depth\": {}, "
                   "\"tokens_per_second\": {}, \"tps_mean\": {:.4f}, \"tps_stddev\": {:.4f}, \"seconds\": {}, "
                   "\"kv_entry_bytes\": {}, \"kv_bytes\": {}, \"kv_peak_bytes\": {}, \"kv_entries\": {}, \"evict_share\": {:.5f}, "
                   "\"reconstruct_share\": {:.5f}, "
                   "\"depth_prefill_seconds\": {:.4f}, \"depth_evict_seconds\": {:.4f}, \"bytes_per_token\": {:.0f}, "
                   "\"bandwidth_bytes_per_second\": {:.0f}, \"bandwidth_share\": {:.4f}, \"sequences\": {}, "
                   "\"fixed_seconds_per_token\": {:.9f}}}{}\n",
                   json_string(r.model), json_string(r.model_type), r.model_bytes, r.model_params, r.threads,
                   json_string(r.kv_type), r.chunk, json_string(r.policy), json_string(r.test.name()), r.test.n_tokens,
                   r.test.depth, json_array(r.tokens_per_second.v), r.tokens_per_second.mean(),
                   r.tokens_per_second.stddev(), json_array(r.seconds.v), r.kv_entry_bytes, r.kv_bytes, r.kv_peak, r.kv_entries,
                   r.evict_share.mean(), r.recon_share.mean(), r.depth_seconds.mean(), r.depth_evict_seconds.mean(), r.bytes_per_token,
                   r.bandwidth, r.bw_share, r.test.sequences, r.fixed_seconds, i + 1 < rs.size() ? "," : "");
    }
    fmt::print("  ]\n}}\n");
}

int bench(const BenchOptions& o) {
    if (o.models.empty()) fail("no model given (-m)");
    for (const std::string& m : o.models) check_readable_file(m, "model file");
    if (o.reps <= 0) fail("-r must be positive, got {}", o.reps);
    if (std::all_of(o.n_prompt.begin(), o.n_prompt.end(), [](int v) { return v == 0; }) &&
        std::all_of(o.n_gen.begin(), o.n_gen.end(), [](int v) { return v == 0; })) {
        fail("nothing to measure: -p and -n are all 0");
    }
    if (o.output != "md" && o.output != "csv" && o.output != "json") fail("-o: '{}' is not md, csv or json", o.output);
    if (!(o.bandwidth_gib >= 0.01 && o.bandwidth_gib <= 64)) fail("--bandwidth-gib must be in [0.01, 64]");
    // Policy specs (with budgets), validated before any model is loaded.
    std::vector<std::string> specs;
    for (const std::string& p : o.policy) {
        if (policy_name(p) == "full" || o.budget.empty()) {
            specs.push_back(p);
        } else {
            for (int b : o.budget) specs.push_back(with_budget(p, b));
        }
    }
    for (const std::string& s : specs) {
        if (policy_name(s) != "full") (void)policy::make_policy(s);
    }

    std::vector<BenchTest> tests;
    for (int d : o.depth) {
        for (int p : o.n_prompt) {
            if (p > 0) tests.push_back({BenchTest::Kind::Prompt, p, d});
        }
        for (int n : o.n_gen) {
            for (int seqs : o.parallel) {
                if (n > 0) tests.push_back({BenchTest::Kind::Generation, n, d, seqs});
            }
        }
    }

    std::vector<BenchResult> results;
    double last_bandwidth = 0;
    for (const std::string& path : o.models) {
        auto model = Model::load(path, o.load);
        // The tests' contexts come from the flags: bounded by the model's, as `kvec run -c` is.
        for (const BenchTest& t : tests) {
            const int64_t need = int64_t{t.depth} + t.n_tokens + 1;
            if (need > model->config().n_ctx_train) {
                fail("{}: -d {} + {} {} needs a context of {} tokens, more than the model's {}", path, t.depth,
                     t.kind == BenchTest::Kind::Prompt ? "-p" : "-n", t.n_tokens, need, model->config().n_ctx_train);
            }
        }
        for (int threads : o.threads) {
            set_num_threads(threads);
            std::unique_ptr<BandwidthProbe> probe;
            double bandwidth = 0;
            if (o.bandwidth) {
                probe = std::make_unique<BandwidthProbe>(static_cast<size_t>(o.bandwidth_gib * (1ull << 30)));
                bandwidth = probe->measure(5);
                last_bandwidth = std::max(last_bandwidth, bandwidth);
            }
            fmt::print(stderr, "model: {} ({})\nmatmul: {} (precision: {})\nthreads: {}, repetitions: {}{}\n", path,
                       model->summary(), matmul_backend_description(),
                       matmul_precision() == MatmulPrecision::Fast ? "fast" : "exact", num_threads(), o.reps,
                       o.bandwidth ? fmt::format(", streaming read bandwidth: {:.1f} GB/s", bandwidth / 1e9) : "");
            std::mt19937 rng(1234);
            for (int chunk : o.chunk) {
                for (const auto& [kv_k, kv_v] : o.kv_types) {
                    for (const std::string& spec : specs) {
                        for (const BenchTest& t : tests) {
                            BenchResult r;
                            r.model = model->config().arch_name;
                            r.model_type = model->weight_type_name();
                            r.model_bytes = model->n_bytes();
                            r.model_params = model->n_params();
                            r.threads = num_threads();
                            r.chunk = chunk;
                            r.kv_type = kv_types_name(kv_k, kv_v);
                            r.policy = spec;
                            r.test = t;
                            run_test(*model, {threads, chunk, kv_k, kv_v, spec}, t, o.reps, probe.get(), rng, r);
                            fmt::print(stderr, "  {} {} t={} {}: {:.2f} t/s{}\n", r.model_type, spec, r.threads,
                                       t.name(), r.tokens_per_second.mean(),
                                       r.bw_share >= 0 ? fmt::format(" ({:.1f} GB/s of weights and KV, {:.0f} % of the "
                                                                     "streaming read)",
                                                                     r.bytes_per_token * r.tokens_per_second.mean() / 1e9,
                                                                     100.0 * r.bw_share)
                                                       : std::string());
                            results.push_back(std::move(r));
                        }
                    }
                }
            }
        }
        fmt::print(stderr, "weights: {}\n", model->residency());  // after the tests: what they touched
    }
    if (o.output == "csv") {
        print_csv(results);
    } else if (o.output == "json") {
        print_json(results, last_bandwidth, matmul_backend_description());
    } else {
        print_markdown(results);
    }
    return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<BenchOptions>();
    // Raw comma lists, parsed in the callback.
    struct Raw {
        std::string models, p = "512", n = "128", d = "0", t = "0", b = "512", kv = "f16", policy = "full", budget;
        std::string parallel = "1";
        std::string ctk, ctv;  // empty: --kv-type
    };
    auto raw = std::make_shared<Raw>();
    CLI::App* cmd = app.add_subcommand(
        "bench", "measure prompt-processing and generation speed (like llama-bench); every list flag takes a comma list");
    cmd->add_option("-m,--model", raw->models, "model file(s) (GGUF), comma-separated")->required();
    add_load_flags(cmd, o->load);
    cmd->add_option("-p,--n-prompt", raw->p, "prompt tokens per pp test; 0 = skip")->capture_default_str();
    cmd->add_option("-n,--n-gen", raw->n, "generated tokens per tg test; 0 = skip")->capture_default_str();
    cmd->add_option("-d,--depth", raw->d, "tokens already in the KV cache before each test")->capture_default_str();
    cmd->add_option("-t,--threads", raw->t, "threads (0: all hardware threads)")->capture_default_str();
    cmd->add_option("-b,--chunk,--batch-size", raw->b, "prefill chunk size")->capture_default_str();
    cmd->add_option("--kv-type,--cache-type", raw->kv,
                    std::string("KV-cache element types of keys and values alike: ") + kv_type_list())
        ->capture_default_str();
    cmd->add_option("--cache-type-k", raw->ctk, "KV-cache element types of the keys (-ctk; crossed with -ctv)")
        ->check(non_empty());
    cmd->add_option("--cache-type-v", raw->ctv, "KV-cache element types of the values (-ctv; crossed with -ctk)")
        ->check(non_empty());
    cmd->add_option("--policy", raw->policy,
                    "eviction policies, e.g. full,kvec or kvec:chunked=true (a policy's own options follow it)")
        ->capture_default_str();
    cmd->add_option("--budget", raw->budget, "KV budgets (entries per head) for the policies other than full");
    cmd->add_option("--parallel", raw->parallel,
                    "sequences decoding together in tg tests (batched decode, aggregate t/s), e.g. 1,4,8,16")
        ->capture_default_str();
    cmd->add_option("-r,--repetitions", o->reps, "repetitions of each test")->capture_default_str();
    cmd->add_option("-o,--output", o->output, "output format: md, csv, json")->capture_default_str();
    cmd->add_flag("--bandwidth,!--no-bandwidth", o->bandwidth,
                  "measure the streaming-read bandwidth and report tg speed as a share of it (default on)");
    cmd->add_option("--bandwidth-gib", o->bandwidth_gib, "buffer size of the bandwidth measurement (GiB)")
        ->capture_default_str();
    cmd->callback([o, raw, &action] {
        // Parsed when the action runs, so that a bad list is reported as "error: ..." by main().
        action = [o, raw] {
            o->models = parse_string_list(raw->models, "-m");
            o->n_prompt = parse_int_list(raw->p, "-p", 0);
            o->n_gen = parse_int_list(raw->n, "-n", 0);
            o->depth = parse_int_list(raw->d, "-d", 0);
            o->threads = parse_int_list(raw->t, "-t", 0);
            o->chunk = parse_int_list(raw->b, "-b", 1);
            o->parallel = parse_int_list(raw->parallel, "--parallel", 1);
            o->kv_types = parse_kv_types(raw->kv, raw->ctk, raw->ctv);
            o->policy = parse_policy_list(raw->policy);
            o->budget = raw->budget.empty() ? std::vector<int>{} : parse_int_list(raw->budget, "--budget", 1);
            return bench(*o);
        };
    });
}

}  // namespace kvec::tools
