// The query-agnostic policies (Knorm, LagKV, Expected Attention, KVzip) against the independent
// PyTorch reference (python/kvec_ref/policies.py, run with Debian's /usr/bin/python3):
//   - the scores the engine's policy computes from the views the forward pass gives it
//     (ScoredPolicy::scores) equal the reference's scores of the same prompt, entry by entry;
//   - the entries the policy keeps are the top of the reference's scores: per head (B - w each),
//     or for KVzip's default per-layer pool (ada, alpha 0) the layer's top H_kv x (B - w); entries
//     within 1e-5 of the selection boundary may go either way.
// Models: random llama and qwen3 models written by `kvec gen-model` (the CTest fixture
// policy_reference_models; run alone, the test writes the same shapes itself) and the bundled
// model models/kvec-tiny.gguf.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "model/model.h"
#include "model/reconstruction.h"
#include "model/session.h"
#include "policy/policy.h"
#include "policy/registry.h"
#include "test_helpers.h"

namespace kvec {
namespace {

using testing_helpers::temp_path;

constexpr int kPrompt = 96;
constexpr int kBudget = 40;
constexpr float kScoreTol = 1e-4f;  // of the largest finite reference score of the case
constexpr double kBoundaryTol = 1e-5;

struct PolicyCase {
    std::string spec;      // the engine's policy
    std::string ref_args;  // the reference's policy-scores arguments
    int64_t window = 0;    // w of the spec
    // Kept sets: each head's top B - w, the layer's top H_kv x (B - w) (ada with alpha 0), or the
    // model's top L x H_kv x (B - w) (layers=global, alpha 0).
    enum class Pool { Head, Layer, Model } pool = Pool::Head;
};

std::vector<PolicyCase> policy_cases() {
    const std::string b = fmt::format("budget={}", kBudget);
    return {
        {"knorm:" + b + ",window=8", "--policy knorm", 8},
        {"lagkv:" + b + ",lag=8", "--policy lagkv --lag 8 --sinks 4", 0},
        {"lagkv:" + b + ",lag=8,sinks=2,cross=true", "--policy lagkv --lag 8 --sinks 2 --cross", 0},
        {"expected-attention:" + b + ",queries=24,future=64", "--policy expected-attention --queries 24 --future 64", 0},
        {"expected-attention:" + b + ",window=8,sinks=1,covariance=false,vnorm=false",
         "--policy expected-attention --sinks 1 --no-covariance --no-vnorm", 8},
        {"kvzip:" + b + ",chunk=32", "--policy kvzip --chunk 32", 0, PolicyCase::Pool::Model},
        {"kvzip:" + b + ",chunk=32,layers=local", "--policy kvzip --chunk 32", 0, PolicyCase::Pool::Layer},
        {"kvzip:" + b + ",ada=false,layers=local,window=4", "--policy kvzip --chunk 2048", 4},
    };
}

std::string join(const std::vector<int32_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s;
}

std::vector<float> read_f32(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) return {};
    std::vector<float> v(static_cast<size_t>(in.tellg()) / sizeof(float));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    return v;
}

// Wraps a ScoredPolicy: per layer, its prefix scores and the positions it kept at the compression
// after the prompt.
class Capture : public Evictor {
public:
    explicit Capture(policy::ScoredPolicy& inner) : inner_(inner) {}
    ObservationRequest request() const override { return inner_.request(); }
    void begin_sequence(int32_t n) override { inner_.begin_sequence(n); }
    void observe(const LayerView& v) override { inner_.observe(v); }
    bool on_prefill(const LayerView& v, KeepLists& keep) override {
        if (!inner_.on_prefill(v, keep)) return false;
        if (scores.size() < static_cast<size_t>(v.n_layer)) {
            scores.resize(static_cast<size_t>(v.n_layer));
            kept.resize(static_cast<size_t>(v.n_layer));
        }
        scores[static_cast<size_t>(v.layer)] = inner_.scores(v);
        auto& k = kept[static_cast<size_t>(v.layer)];
        k.assign(static_cast<size_t>(v.n_head_kv), {});
        for (int h = 0; h < v.n_head_kv; ++h) {
            for (int32_t i : keep[static_cast<size_t>(h)]) k[static_cast<size_t>(h)].push_back(v.heads[static_cast<size_t>(h)].positions[i]);
        }
        return true;
    }
    std::vector<std::vector<std::vector<float>>> scores;  // [L][H][m_h]
    std::vector<std::vector<std::vector<int32_t>>> kept;  // [L][H][kept] positions

private:
    policy::ScoredPolicy& inner_;
};

// Runs every case on the model and the reference once for all of them; checks the results.
void check_model(const std::string& model_path, const std::string& tag) {
    if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0) {
        GTEST_SKIP() << "/usr/bin/python3 with torch and numpy is not available (Debian: python3-torch)";
    }
    const auto model = Model::load(model_path);
    const ModelConfig& mc = model->config();
    std::vector<int32_t> prompt = {1};  // BOS
    uint64_t x = 977;
    while (static_cast<int>(prompt.size()) < kPrompt) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        prompt.push_back(static_cast<int32_t>(3 + (x >> 33) % static_cast<uint64_t>(mc.n_vocab - 3)));
    }
    const RepeatPrompts rp = repeat_prompts(model->file());
    std::vector<std::string> commands;
    std::vector<std::unique_ptr<Evictor>> policies;
    std::vector<std::unique_ptr<Capture>> captures;
    std::vector<std::string> outs;
    const std::vector<PolicyCase> cases = policy_cases();
    for (const PolicyCase& c : cases) {
        policies.push_back(policy::make_policy(c.spec));
        auto* scored = dynamic_cast<policy::ScoredPolicy*>(policies.back().get());
        EXPECT_NE(scored, nullptr) << c.spec;
        if (scored == nullptr) return;
        captures.push_back(std::make_unique<Capture>(*scored));
        SessionOptions so;
        so.kv_type_k = so.kv_type_v = KvType::F32;
        so.n_batch = 16;
        Session s(*model, so);
        s.set_evictor(captures.back().get());
        s.prefill(prompt);
        outs.push_back(temp_path(fmt::format("{}-{}.ref.f32", tag, outs.size())));
        std::string cmd = fmt::format("policy-scores --model {} --tokens {} {} --out {}", model_path, join(prompt),
                                      c.ref_args, outs.back());
        if (c.spec.rfind("kvzip", 0) == 0) {
            cmd += fmt::format(" --overlap {}", rp.overlap);
            if (!rp.first.empty()) cmd += " --repeat-first " + join(rp.first);
            if (!rp.later.empty()) cmd += " --repeat-later " + join(rp.later);
            if (!rp.suffix.empty()) cmd += " --repeat-suffix " + join(rp.suffix);
        }
        commands.push_back(cmd);
    }
    const std::string cmd_file = temp_path(tag + "-commands.txt"), err_file = temp_path(tag + "-stderr.txt");
    {
        std::ofstream f(cmd_file);
        for (const auto& c : commands) f << c << "\n";
    }
    const std::string run = fmt::format(
        "cd '{}' && OMP_NUM_THREADS=2 PYTHONPATH='{}/python' /usr/bin/python3 -m kvec_ref.cli batch --file '{}' 2> '{}'",
        KVEC_SOURCE_DIR, KVEC_SOURCE_DIR, cmd_file, err_file);
    if (std::system(run.c_str()) != 0) {
        std::ifstream e(err_file);
        std::stringstream ss;
        ss << e.rdbuf();
        FAIL() << "the reference failed: " << ss.str();
    }
    const int L = mc.n_layer, H = mc.n_head_kv;
    for (size_t k = 0; k < captures.size(); ++k) {
        const PolicyCase& c = cases[k];
        SCOPED_TRACE(tag + " " + c.spec);
        const auto ref = read_f32(outs[k]);  // [L, H, kPrompt]
        ASSERT_EQ(ref.size(), static_cast<size_t>(L) * H * kPrompt);
        const Capture& cap = *captures[k];
        ASSERT_EQ(cap.scores.size(), static_cast<size_t>(L)) << "the policy did not compress every layer";
        auto r = [&](int l, int h, int j) { return static_cast<double>(ref[(static_cast<size_t>(l) * H + h) * kPrompt + j]); };
        const int m = kPrompt - static_cast<int>(c.window);  // prefix candidates
        double scale = 0.0, worst = 0.0;
        for (int l = 0; l < L; ++l) {
            for (int h = 0; h < H; ++h) {
                for (int j = 0; j < m; ++j) {
                    if (std::isfinite(r(l, h, j))) scale = std::max(scale, std::fabs(r(l, h, j)));
                }
            }
        }
        ASSERT_GT(scale, 0.0);
        for (int l = 0; l < L; ++l) {
            for (int h = 0; h < H; ++h) {
                const auto& s = cap.scores[static_cast<size_t>(l)][static_cast<size_t>(h)];
                ASSERT_EQ(s.size(), static_cast<size_t>(m));
                for (int j = 0; j < m; ++j) {
                    const double want = r(l, h, j), got = s[static_cast<size_t>(j)];
                    if (std::isinf(want) || std::isinf(got)) {
                        EXPECT_EQ(want, got) << "layer " << l << " head " << h << " entry " << j;
                        continue;
                    }
                    worst = std::max(worst, std::fabs(got - want));
                    EXPECT_LE(std::fabs(got - want), kScoreTol * scale) << "layer " << l << " head " << h << " entry " << j;
                }
            }
        }
        std::printf("  [%s %s] max |C++ - reference| score = %.3g (scale %.3g)\n", tag.c_str(), c.spec.c_str(), worst, scale);
        // Kept sets from the reference's scores.
        const int64_t b = kBudget - c.window;
        auto boundary_of = [&](std::vector<double> v, int64_t k) {
            std::sort(v.begin(), v.end(), std::greater<>());
            return v[static_cast<size_t>(k - 1)];
        };
        double model_boundary = 0.0;
        if (c.pool == PolicyCase::Pool::Model) {
            std::vector<double> all;  // [L * H * m] every candidate of the model
            for (int l = 0; l < L; ++l) {
                for (int h = 0; h < H; ++h) {
                    for (int j = 0; j < m; ++j) all.push_back(r(l, h, j));
                }
            }
            model_boundary = boundary_of(all, int64_t{L} * H * b);
        }
        int64_t model_total = 0;
        for (int l = 0; l < L; ++l) {
            double layer_boundary = model_boundary;
            if (c.pool == PolicyCase::Pool::Layer) {
                std::vector<double> pool;  // the layer's candidates
                for (int h = 0; h < H; ++h) {
                    for (int j = 0; j < m; ++j) pool.push_back(r(l, h, j));
                }
                layer_boundary = boundary_of(pool, H * b);
            }
            int64_t kept_total = 0;
            for (int h = 0; h < H; ++h) {
                SCOPED_TRACE(fmt::format("layer {} head {}", l, h));
                std::vector<double> head;
                for (int j = 0; j < m; ++j) head.push_back(r(l, h, j));
                const double boundary = c.pool == PolicyCase::Pool::Head ? boundary_of(head, b) : layer_boundary;
                const auto& kept_v = cap.kept[static_cast<size_t>(l)][static_cast<size_t>(h)];
                const std::set<int32_t> kept(kept_v.begin(), kept_v.end());
                kept_total += static_cast<int64_t>(kept.size());
                if (c.pool == PolicyCase::Pool::Head) {
                    EXPECT_EQ(kept.size(), static_cast<size_t>(kBudget));
                }
                for (int j = m; j < kPrompt; ++j) EXPECT_TRUE(kept.count(j)) << "window entry " << j;
                const double tol = kBoundaryTol * (std::isinf(boundary) ? 1.0 : std::max(1.0, std::fabs(boundary)));
                for (int j = 0; j < m; ++j) {
                    if (r(l, h, j) > boundary + tol) {
                        EXPECT_TRUE(kept.count(j)) << "entry " << j << " score " << r(l, h, j);
                    } else if (r(l, h, j) < boundary - tol) {
                        EXPECT_FALSE(kept.count(j)) << "entry " << j << " score " << r(l, h, j);
                    }
                }
            }
            if (c.pool != PolicyCase::Pool::Model) EXPECT_EQ(kept_total, int64_t{H} * kBudget) << "layer " << l;
            model_total += kept_total;
        }
        EXPECT_EQ(model_total, int64_t{L} * H * kBudget);
    }
}

std::string reference_model(const std::string& name, const std::string& arch) {
    // Under CTest: the files the fixture wrote with `kvec gen-model` (loading fails if it did not).
    if (const char* dir = std::getenv("KVEC_POLICY_REF_DIR")) return std::string(dir) + "/" + name;
    // Run alone: the fixture's shapes (tests/parity/CMakeLists.txt).
    RandomModelSpec s;
    s.arch = arch;
    s.n_layer = 2;
    s.n_embd = 128;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 256;
    s.n_vocab = 512;
    s.n_ctx = 1024;
    s.type = GgmlType::F32;
    s.seed = 5;
    return testing_helpers::write_model(s, name);
}

TEST(PolicyReference, RandomLlama) { check_model(reference_model("llama.gguf", "llama"), "llama"); }

TEST(PolicyReference, RandomQwen3) { check_model(reference_model("qwen3.gguf", "qwen3"), "qwen3"); }

TEST(PolicyReference, BundledModel) {
    const std::string path = std::string(KVEC_SOURCE_DIR) + "/models/kvec-tiny.gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not in this checkout";
    check_model(path, "bundled");
}

}  // namespace
}  // namespace kvec
