// Golden parity of the C++ forward pass with the independent PyTorch reference (python/kvec_ref):
//   - prefill logits and decode-after-prefill logits, for every architecture variant (F32) and
//     every tensor type (the reference dequantises the same file with its own code and computes
//     in float32, so the same tolerance holds);
//   - greedy generations token for token (F32);
//   - eviction: after a trivial sinks + recent evictor compresses the cache (one-shot, after every
//     prefill chunk, or during decoding), decode logits equal the reference run with the
//     matching --kv-visible mask;
//   - the observations given to eviction policies (window means, column sums, last row).
//
// Tolerance: max |logit_C++ - logit_ref| <= 1e-4 x max |logit_ref| of the case (the logit scale),
// and 2e-5 absolute for attention probabilities. Both implementations accumulate in float32 in
// different orders; measured differences are around 1e-6 relative.
//
// The cases are grouped in four tests; all cases of the tests the current run selects are prepared
// together and the reference runs once for them (`kvec_ref.cli batch`): a full run costs one
// torch start-up, a ctest run (one process per test) four.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "model/model.h"
#include "model/session.h"
#include "sampling/sampler.h"
#include "test_helpers.h"

namespace kvec {
namespace {

using namespace testing_helpers;

constexpr int kPrompt = 24;    // prompt tokens
constexpr int kContinue = 8;   // tokens decoded after the prompt
constexpr int kGreedy = 16;    // greedy tokens compared
constexpr int kWindow = 8;     // observation window
constexpr float kLogitTol = 1e-4f;
constexpr float kProbTol = 2e-5f;

enum class Kind { Logits, Evict, Observe };

struct Case {
    std::string group;  // the TEST that checks it: Variants, TensorTypes, Eviction, Observations
    std::string name;
    RandomModelSpec spec;
    Kind kind = Kind::Logits;
    bool greedy = false;
    int evict_chunk = 0;     // Evict: prefill chunk size (0: one chunk)
    int decode_interval = 0; // Evict: decode-time eviction every k steps
};

RandomModelSpec parity_spec(const std::string& arch = "llama") {
    RandomModelSpec s;
    s.arch = arch;
    s.n_layer = 2;
    s.n_embd = 256;  // multiples of 256 so that every K-quant applies
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 512;
    s.n_vocab = 512;
    s.n_ctx = 512;
    s.seed = 11;
    return s;
}

std::vector<Case> variant_cases() {
    std::vector<Case> v;
    auto add = [&](const std::string& name, RandomModelSpec s) { v.push_back({"Variants", name, s, Kind::Logits, true}); };
    RandomModelSpec s = parity_spec();
    s.n_head_kv = 4;
    add("llama_mha", s);
    add("llama_gqa", parity_spec());
    s = parity_spec();
    s.rope_scaling = "llama3";
    s.rope_factor = 8.0f;
    s.rope_base = 500000.0f;
    add("llama3_rope", s);
    s = parity_spec();
    s.rope_scaling = "linear";
    s.rope_factor = 4.0f;
    add("linear_rope", s);
    add("qwen2_bias", parity_spec("qwen2"));
    s = parity_spec("qwen3");
    s.head_dim = 128;  // q_dim 512 != n_embd, as in real Qwen3
    add("qwen3_qk_norm", s);
    s = parity_spec();
    s.tied = true;
    add("tied_output", s);
    return v;
}

const std::vector<GgmlType>& all_types() {
    static const std::vector<GgmlType> t = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                                            GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                                            GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
    return t;
}

std::vector<Case> type_cases() {
    std::vector<Case> v;
    for (GgmlType t : all_types()) {
        RandomModelSpec s = parity_spec();
        s.type = t;
        v.push_back({"TensorTypes", std::string("type_") + ggml_type_name(t), s, Kind::Logits, false});
    }
    return v;
}

std::vector<Case> eviction_cases() {
    std::vector<Case> v;
    v.push_back({"Eviction", "evict_one_shot", parity_spec(), Kind::Evict, false, 0, 0});
    v.push_back({"Eviction", "evict_chunked", parity_spec(), Kind::Evict, false, 8, 0});
    v.push_back({"Eviction", "evict_decode_time", parity_spec(), Kind::Evict, false, 0, 3});
    RandomModelSpec q = parity_spec("qwen2");
    q.type = GgmlType::Q4_K;
    v.push_back({"Eviction", "evict_qwen2_q4_K", q, Kind::Evict, false, 8, 2});
    v.push_back({"Observations", "observations", parity_spec(), Kind::Observe, false});
    return v;
}

std::vector<Case> all_cases() {
    std::vector<Case> v = variant_cases();
    for (auto* f : {&type_cases, &eviction_cases})
        for (auto& c : f()) v.push_back(c);
    return v;
}

std::vector<int32_t> sequence(int n) {
    std::vector<int32_t> t = {1};  // BOS
    uint64_t x = 12345;
    while (static_cast<int>(t.size()) < n) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        t.push_back(static_cast<int32_t>(3 + (x >> 33) % 509));
    }
    return t;
}

std::string join(const std::vector<int32_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) s += ',';
        s += std::to_string(v[i]);
    }
    return s;
}

std::vector<float> read_f32(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return {};
    const auto n = static_cast<size_t>(in.tellg());
    std::vector<float> v(n / sizeof(float));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    return v;
}

// Records which positions each eviction removed and when, to build the reference's mask
// kv_visible[l, h, j] = the sequence index from which key j is no longer visible.
class RecordingEvictor : public Evictor {
public:
    RecordingEvictor(Evictor& inner, int n_layer, int n_head_kv, int n_total)
        : inner_(inner), n_head_kv_(n_head_kv), n_total_(n_total),
          mask_(static_cast<size_t>(n_layer) * n_head_kv * n_total, n_total) {}
    ObservationRequest request() const override { return inner_.request(); }
    bool on_prefill(const LayerView& v, KeepLists& keep) override { return record(v, keep, inner_.on_prefill(v, keep)); }
    bool on_decode(const LayerView& v, KeepLists& keep) override { return record(v, keep, inner_.on_decode(v, keep)); }
    const std::vector<int32_t>& mask() const { return mask_; }
    int evicted = 0;

private:
    bool record(const LayerView& v, const KeepLists& keep, bool changed) {
        if (!changed) return false;
        for (int h = 0; h < v.n_head_kv; ++h) {
            const KvHeadView& hv = v.heads[static_cast<size_t>(h)];
            std::set<int32_t> kept(keep[static_cast<size_t>(h)].begin(), keep[static_cast<size_t>(h)].end());
            for (int32_t i = 0; i < hv.n_entries; ++i) {
                if (kept.count(i)) continue;
                mask_[(static_cast<size_t>(v.layer) * n_head_kv_ + h) * n_total_ + hv.positions[i]] = v.chunk_end;
                ++evicted;
            }
        }
        return true;
    }
    Evictor& inner_;
    int n_head_kv_, n_total_;
    std::vector<int32_t> mask_;  // [n_layer, n_head_kv, n_total]
};

struct Prepared {
    Case c;
    std::string model_path;
    int n_vocab = 0;
    std::vector<float> cpp;        // Logits/Evict: [kPrompt + kContinue, n_vocab]; Observe: [L, H, 3, kPrompt]
    std::vector<int32_t> greedy;   // C++ greedy tokens
    std::string ref_out;           // reference output file
    int greedy_line = -1;          // line of the reference's stdout with its greedy tokens
    int evicted = 0;
    std::vector<float> uncompressed;  // Evict: decode logits without eviction [kContinue, n_vocab]
};

SessionOptions exact(int n_batch = 512) {
    SessionOptions o;
    o.kv_type = KvType::F32;  // exact parity: no fp16 rounding of keys and values
    o.n_batch = n_batch;
    return o;
}

// Runs the C++ side of a case and appends the reference commands it needs.
Prepared prepare(const Case& c, std::vector<std::string>& commands, int& n_greedy_lines) {
    Prepared p;
    p.c = c;
    p.model_path = write_model(c.spec, c.name + ".gguf");
    const auto model = Model::load(p.model_path);
    const int V = model->config().n_vocab;
    p.n_vocab = V;
    const auto seq = sequence(kPrompt + kContinue);
    const std::vector<int32_t> prompt(seq.begin(), seq.begin() + kPrompt);
    p.ref_out = temp_path(c.name + ".ref.f32");

    if (c.kind == Kind::Observe) {
        ObservationRequest req;
        req.window = kWindow;
        req.column_sums = true;
        req.last_row = true;
        SinkRecentEvictor keep_all(1 << 20, 0, 0, req);
        const ModelConfig& mc = model->config();
        p.cpp.assign(static_cast<size_t>(mc.n_layer) * mc.n_head * 3 * kPrompt, 0.0f);
        keep_all.inspect = [&](const LayerView& v) {
            for (int h = 0; h < v.n_head_kv; ++h) {
                const KvHeadView& hv = v.heads[static_cast<size_t>(h)];
                for (int g = 0; g < v.group; ++g) {
                    const int qh = h * v.group + g;
                    for (int32_t j = 0; j < hv.n_entries; ++j) {
                        const size_t base = ((static_cast<size_t>(v.layer) * mc.n_head + qh) * 3) * kPrompt;
                        p.cpp[base + 0 * kPrompt + static_cast<size_t>(j)] = hv.column_sums[g * hv.n_entries + j];
                        p.cpp[base + 1 * kPrompt + static_cast<size_t>(j)] = hv.window_scores[g * hv.n_entries + j];
                        p.cpp[base + 2 * kPrompt + static_cast<size_t>(j)] = hv.last_row[g * hv.n_entries + j];
                    }
                }
            }
        };
        Session s(*model, exact());
        s.set_evictor(&keep_all);
        s.prefill(prompt);
        commands.push_back(fmt::format("attn-stats --model {} --tokens {} --window {} --out {}", p.model_path,
                                       join(prompt), kWindow, p.ref_out));
        return p;
    }

    SinkRecentEvictor sink_recent(4, 6, /*head_skew=*/2,
                                  ObservationRequest{0, false, false, c.decode_interval});
    const int n_total = kPrompt + kContinue;
    RecordingEvictor recorder(sink_recent, model->config().n_layer, model->config().n_head_kv, n_total);
    Session s(*model, exact(c.evict_chunk > 0 ? c.evict_chunk : 512));
    if (c.kind == Kind::Evict) s.set_evictor(&recorder);
    const auto pl = s.prefill(prompt, true);
    p.cpp.assign(pl.begin(), pl.end());
    for (int i = kPrompt; i < n_total; ++i) {
        const auto l = s.decode(seq[static_cast<size_t>(i)]);
        p.cpp.insert(p.cpp.end(), l.begin(), l.end());
    }
    std::string mask_arg;
    if (c.kind == Kind::Evict) {
        // The same run without eviction, to show that the comparison is sensitive to the mask.
        Session plain(*model, exact());
        plain.prefill(prompt);
        for (int i = kPrompt; i < n_total; ++i) {
            const auto l = plain.decode(seq[static_cast<size_t>(i)]);
            p.uncompressed.insert(p.uncompressed.end(), l.begin(), l.end());
        }
        p.evicted = recorder.evicted;
        const std::string mask_path = temp_path(c.name + ".mask.i32");
        std::ofstream m(mask_path, std::ios::binary);
        m.write(reinterpret_cast<const char*>(recorder.mask().data()),
                static_cast<std::streamsize>(recorder.mask().size() * sizeof(int32_t)));
        mask_arg = " --kv-visible " + mask_path;
    }
    commands.push_back(fmt::format("logits --model {} --tokens {}{} --out {}", p.model_path, join(seq), mask_arg, p.ref_out));

    if (c.greedy) {
        Session g(*model, exact());
        auto logits = g.prefill(prompt);
        for (int i = 0; i < kGreedy; ++i) {
            const int32_t id = argmax(logits);
            p.greedy.push_back(id);
            if (i + 1 < kGreedy) logits = g.decode(id);
        }
        commands.push_back(fmt::format("generate --model {} --tokens {} -n {}", p.model_path, join(prompt), kGreedy));
        p.greedy_line = n_greedy_lines++;
    }
    return p;
}

class Suite {
public:
    static Suite& get() {
        static Suite s;
        return s;
    }
    const Prepared& operator[](const std::string& name) {
        auto it = cases_.find(name);
        if (it == cases_.end()) throw std::runtime_error("case not prepared: " + name);
        return it->second;
    }
    const std::string& error() const { return error_; }
    const std::vector<std::string>& greedy_lines() const { return greedy_lines_; }

private:
    Suite() {
        if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0) {
            error_ = "/usr/bin/python3 with torch and numpy is not available (Debian: python3-torch)";
            return;
        }
        // Prepare only the cases this run selected (ctest runs one test per process).
        std::set<std::string> wanted;
        const auto* ut = ::testing::UnitTest::GetInstance();
        for (int i = 0; i < ut->total_test_suite_count(); ++i) {
            const auto* suite = ut->GetTestSuite(i);
            for (int j = 0; j < suite->total_test_count(); ++j) {
                const auto* info = suite->GetTestInfo(j);
                if (info->should_run()) wanted.insert(info->name());
            }
        }
        std::vector<std::string> commands;
        int n_greedy = 0;
        for (const Case& c : all_cases()) {
            if (wanted.count(c.group)) cases_.emplace(c.name, prepare(c, commands, n_greedy));
        }
        const std::string cmd_file = temp_path("reference-commands.txt");
        const std::string out_file = temp_path("reference-stdout.txt");
        const std::string err_file = temp_path("reference-stderr.txt");
        {
            std::ofstream f(cmd_file);
            for (const auto& c : commands) f << c << "\n";
        }
        const std::string cmd = fmt::format(
            "cd '{}' && OMP_NUM_THREADS=2 PYTHONPATH='{}/python' /usr/bin/python3 -m kvec_ref.cli batch --file '{}' > '{}' 2> '{}'",
            KVEC_SOURCE_DIR, KVEC_SOURCE_DIR, cmd_file, out_file, err_file);
        if (std::system(cmd.c_str()) != 0) {
            std::ifstream e(err_file);
            std::stringstream ss;
            ss << e.rdbuf();
            error_ = "the reference failed: " + ss.str();
            return;
        }
        std::ifstream out(out_file);
        for (std::string line; std::getline(out, line);) greedy_lines_.push_back(line);
    }

    std::map<std::string, Prepared> cases_;
    std::vector<std::string> greedy_lines_;
    std::string error_;
};

void compare_logits(const Prepared& p) {
    const auto ref = read_f32(p.ref_out);
    ASSERT_EQ(ref.size(), p.cpp.size()) << "reference output " << p.ref_out;
    float scale = 0, worst = 0;
    for (float x : ref) scale = std::max(scale, std::fabs(x));
    ASSERT_GT(scale, 0.5f) << "degenerate logits";
    const size_t V = static_cast<size_t>(p.n_vocab);
    for (size_t row = 0; row < ref.size() / V; ++row) {
        float d = 0;
        for (size_t i = 0; i < V; ++i) d = std::max(d, std::fabs(ref[row * V + i] - p.cpp[row * V + i]));
        worst = std::max(worst, d);
        EXPECT_LE(d, kLogitTol * scale) << "row " << row << (row < kPrompt ? " (prefill)" : " (decode)")
                                        << ", logit scale " << scale;
    }
    ::testing::Test::RecordProperty("max_abs_diff_over_scale", std::to_string(worst / scale));
    std::printf("  [%s] max |C++ - reference| = %.3g (%.3g of the logit scale %.3g)\n", p.c.name.c_str(), worst,
                worst / scale, scale);
}

void check_case(const Case& c) {
    SCOPED_TRACE("case " + c.name);
    Suite& suite = Suite::get();
    ASSERT_TRUE(suite.error().empty()) << suite.error();
    const Prepared& p = suite[c.name];
    if (p.c.kind == Kind::Observe) {
        const auto ref = read_f32(p.ref_out);
        ASSERT_EQ(ref.size(), p.cpp.size());
        float worst = 0;
        for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(ref[i] - p.cpp[i]));
        EXPECT_LE(worst, kProbTol);
        std::printf("  [observations] max |C++ - reference| = %.3g\n", worst);
        return;
    }
    compare_logits(p);
    if (p.c.kind == Kind::Evict) {
        EXPECT_GT(p.evicted, 0) << "the evictor removed nothing";
        const size_t off = static_cast<size_t>(kPrompt) * p.n_vocab;
        float change = 0;
        for (size_t i = 0; i < p.uncompressed.size(); ++i)
            change = std::max(change, std::fabs(p.uncompressed[i] - p.cpp[off + i]));
        EXPECT_GT(change, 0.01f) << "eviction did not change the decode logits: the test would not see a wrong mask";
    }
    if (p.c.greedy) {
        std::istringstream line(suite.greedy_lines().at(static_cast<size_t>(p.greedy_line)));
        std::vector<int32_t> ref;
        for (int32_t id; line >> id;) ref.push_back(id);
        EXPECT_EQ(p.greedy, ref) << "greedy generations differ";
    }
}

// One test per group: each starts the reference once for all its cases.
TEST(Parity, Variants) {  // llama MHA/GQA, llama3 and linear RoPE scaling, qwen2, qwen3, tied; F32
    for (const Case& c : variant_cases()) check_case(c);
}

TEST(Parity, TensorTypes) {  // every weight type on the llama GQA model
    for (const Case& c : type_cases()) check_case(c);
}

TEST(Parity, Eviction) {  // one-shot, chunked-prefill and decode-time eviction vs --kv-visible
    for (const Case& c : eviction_cases())
        if (c.group == "Eviction") check_case(c);
}

TEST(Parity, Observations) {  // window means, column sums, last row vs attn-stats
    for (const Case& c : eviction_cases())
        if (c.group == "Observations") check_case(c);
}

}  // namespace
}  // namespace kvec
