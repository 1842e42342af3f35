#include "model/random_model.h"

#include <fmt/format.h>

#include <cmath>
#include <unordered_set>

#include "gguf/gguf.h"
#include "model/config.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/rng.h"

namespace kvec {

namespace {

uint64_t hash_name(std::string_view s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (char ch : s) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
    return h;
}

// Approximately standard normal values: Irwin-Hall sum of four 16-bit uniforms, rescaled.
void fill_normal(float* out, int64_t n, uint64_t state, float mean, float std) {
    const float k = std * std::sqrt(3.0f) / 65536.0f;  // sum of 4 U(0,1) has variance 1/3
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t r = splitmix64(state);
        const float s = static_cast<float>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48)) -
                        2.0f * 65535.0f;
        out[i] = mean + s * k;
    }
}

int file_type_of(GgmlType t) {
    switch (t) {
        case GgmlType::F32: return 0;
        case GgmlType::F16: return 1;
        case GgmlType::Q4_0: return 2;
        case GgmlType::Q4_1: return 3;
        case GgmlType::Q8_0: return 7;
        case GgmlType::Q5_0: return 8;
        case GgmlType::Q5_1: return 9;
        case GgmlType::Q2_K: return 10;
        case GgmlType::Q3_K: return 11;
        case GgmlType::Q4_K: return 14;
        case GgmlType::Q5_K: return 16;
        case GgmlType::Q6_K: return 18;
        case GgmlType::IQ4_NL: return 25;
        case GgmlType::IQ4_XS: return 30;
        case GgmlType::BF16: return 32;
        case GgmlType::MXFP4: return 38;
        default: return 0;
    }
}

class Builder {
public:
    Builder(const RandomModelSpec& s, gguf::Writer& w) : s_(s), w_(w) {}

    // A matrix [n_in] x n_out rows in the spec's type, entries ~ N(0, std).
    void matrix(const std::string& name, int64_t n_in, int64_t n_out, float std) {
        const GgmlType type = s_.type;
        write_rows(name, type, n_in, n_out, std, {n_in, n_out});
    }

    // n_expert matrices [n_in] x n_out rows in the experts' type (RandomModelSpec::expert_type),
    // as one 3-D tensor [n_in, n_out, n_expert] (expert e: rows [e * n_out, (e + 1) * n_out)),
    // entries ~ N(0, std).
    void experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert,
                 float std) {
        write_rows(name, s_.expert_type.value_or(s_.type), n_in, n_out * n_expert, std,
                   {n_in, n_out, n_expert});
    }

    // An F32 matrix [n_in] x n_out rows ~ N(0, std) (MoE routers, kept F32 in every file; gpt-oss's
    // 2-D expert biases).
    void matrix_f32(const std::string& name, int64_t n_in, int64_t n_out, float std) {
        std::vector<float> m(static_cast<size_t>(n_in * n_out));  // [n_out, n_in]
        fill_normal(m.data(), n_in * n_out, s_.seed * 0x9E3779B97F4A7C15ull ^ hash_name(name), 0.0f,
                    std);
        w_.add_tensor(name, GgmlType::F32, {n_in, n_out}, m.data(), m.size() * sizeof(float));
    }

    // An F32 vector [n] ~ mean + N(0, std).
    void vector(const std::string& name, int64_t n, float mean, float std) {
        std::vector<float> v(static_cast<size_t>(n));
        fill_normal(v.data(), n, s_.seed * 0x9E3779B97F4A7C15ull ^ hash_name(name), mean, std);
        w_.add_tensor(name, GgmlType::F32, {n}, v.data(), v.size() * sizeof(float));
    }

private:
  // rows rows of [n_in] ~ N(0, std) in `type`, written as a tensor of shape dims.
  void write_rows(const std::string& name, GgmlType type, int64_t n_in, int64_t rows, float std,
                  const std::vector<int64_t>& dims) {
      const size_t row_bytes = ggml_row_size(type, n_in);
      std::vector<uint8_t> data(row_bytes * static_cast<size_t>(rows));  // [rows]
      const uint64_t base = s_.seed * 0x9E3779B97F4A7C15ull ^ hash_name(name);
#pragma omp parallel
      {
          std::vector<float> row(static_cast<size_t>(n_in));  // [n_in]
#pragma omp for schedule(static)
          for (int64_t r = 0; r < rows; ++r) {
              fill_normal(row.data(), n_in, base + static_cast<uint64_t>(r) * 0xD1B54A32D192ED03ull,
                          0.0f, std);
              quant::quantize_row(type, row.data(),
                                  data.data() + static_cast<size_t>(r) * row_bytes, n_in);
          }
      }
      w_.add_tensor(name, type, dims, data.data(), data.size());
  }

  const RandomModelSpec& s_;
  gguf::Writer& w_;
};

// Copies tokenizer.* keys, truncated to n_vocab tokens. Returns the vocabulary size to use.
int copy_vocabulary(const std::string& path, int n_vocab, gguf::Writer& w) {
    auto file = gguf::File::open(path);
    const gguf::Value* tokens = file->find("tokenizer.ggml.tokens");
    if (tokens == nullptr || tokens->type != gguf::ValueType::ARRAY || tokens->strings.empty()) {
        fail("'{}' holds no tokenizer vocabulary (tokenizer.ggml.tokens)", path);
    }
    const int full = static_cast<int>(tokens->strings.size());
    if (n_vocab < 0) fail("--vocab must be positive, got {}", n_vocab);
    if (n_vocab == 0) n_vocab = full;
    if (n_vocab > full) fail("--vocab {} is larger than the {} tokens of '{}'", n_vocab, full, path);
    std::unordered_set<std::string> kept(tokens->strings.begin(), tokens->strings.begin() + n_vocab);
    for (const auto& [key, value] : file->metadata()) {
        if (key.rfind("tokenizer.", 0) != 0) continue;
        gguf::Value v = value;
        if (v.type == gguf::ValueType::ARRAY && n_vocab < full) {
            if (key == "tokenizer.ggml.merges") {
                std::vector<std::string> merges;
                for (const std::string& m : v.strings) {
                    const size_t sp = m.find(' ');
                    if (sp == std::string::npos) continue;
                    const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
                    if (kept.count(a) && kept.count(b) && kept.count(a + b)) merges.push_back(m);
                }
                v.strings = std::move(merges);
            } else if (v.array_size() == static_cast<size_t>(full)) {
                if (!v.strings.empty()) v.strings.resize(static_cast<size_t>(n_vocab));
                if (!v.ints.empty()) v.ints.resize(static_cast<size_t>(n_vocab));
                if (!v.floats.empty()) v.floats.resize(static_cast<size_t>(n_vocab));
            }
        }
        // Special token ids past the truncated vocabulary are dropped.
        if (key.size() > 9 && key.compare(key.size() - 9, 9, "_token_id") == 0 && v.is_integer() &&
            v.i >= n_vocab) {
            continue;
        }
        w.set(key, std::move(v));
    }
    return n_vocab;
}

}  // namespace

std::string default_vocab_path() {
#ifdef KVEC_SOURCE_DIR
    return std::string(KVEC_SOURCE_DIR) + "/data/tokenizer-vectors/ggml-vocab-llama-spm.gguf";
#else
    return "data/tokenizer-vectors/ggml-vocab-llama-spm.gguf";
#endif
}

std::vector<std::string> random_model_presets() {
    return {"tinyllama-1.1b", "gemma3-test",   "gemma3-4b",     "gemma2-test",
            "phi3-test",      "phi4-mini",     "qwen3moe-test", "qwen2moe-test",
            "mixtral-test",   "qwen3-30b-a3b", "gpt-oss-test",  "gpt-oss-20b"};
}

namespace {

// Mixture-of-experts shapes: small ones for tests (2 layers, embd 256, vocabulary 4096) and
// Qwen3-30B-A3B as its converter writes it (48 layers, embd 2048, 32/4 heads of 128, 128 experts
// of ff 768, 8 used; the full vocabulary of the vocabulary file, not Qwen's 151936 tokens).
bool moe_preset(std::string_view name, RandomModelSpec& s) {
    if (name == "qwen3-30b-a3b") {
        s.arch = "qwen3moe";
        s.name = "qwen3-30b-a3b-random";
        s.n_layer = 48;
        s.n_embd = 2048;
        s.n_head = 32;
        s.n_head_kv = 4;
        s.head_dim = 128;
        s.n_ff = 6144;
        s.n_expert = 128;
        s.n_expert_used = 8;
        s.n_ff_exp = 768;
        s.n_vocab = 0;
        s.n_ctx = 40960;
        s.rope_base = 1000000.0f;
        s.rms_eps = 1e-6f;
        return true;
    }
    if (name != "qwen3moe-test" && name != "qwen2moe-test" && name != "mixtral-test") return false;
    s.name = std::string(name) + "-random";
    s.n_layer = 2;
    s.n_embd = 256;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_vocab = 4096;
    s.n_ctx = 4096;
    if (name == "qwen3moe-test") {  // 16 experts, 4 used, Q/K norms, head size 128 (q_dim != embd)
        s.arch = "qwen3moe";
        s.head_dim = 128;
        s.n_ff = 512;
        s.n_expert = 16;
        s.n_expert_used = 4;
        s.n_ff_exp = 256;
        s.rope_base = 1000000.0f;
        s.rms_eps = 1e-6f;
    } else if (name == "qwen2moe-test") {  // 8 experts, 2 used, not renormalised, shared expert
        s.arch = "qwen2moe";
        s.n_ff = 512;
        s.n_expert = 8;
        s.n_expert_used = 2;
        s.n_ff_exp = 256;
        s.n_ff_shexp = 512;
        s.rope_base = 1000000.0f;
        s.rms_eps = 1e-6f;
    } else {  // Mixtral's routing: 8 experts, 2 used, each of feed_forward_length
        s.arch = "llama";
        s.n_ff = 256;
        s.n_expert = 8;
        s.n_expert_used = 2;
        s.rope_base = 1000000.0f;
    }
    return true;
}

// gemma2-test: 2 layers (0 sliding-window, 1 global, as llama.cpp's default pattern), window 32
// (shorter than the test sequences), head size 128 (q_dim != n_embd), tied output. The caps are
// lower than Gemma 2's 50 / 30 so that they act on a random model's logits (attention logits of
// std ~1, output logits of std ~3): tanh visibly bends them.
RandomModelSpec gemma2_preset() {
    RandomModelSpec s;
    s.arch = "gemma2";
    s.name = "gemma2-test-random";
    s.n_layer = 2;
    s.n_embd = 256;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.head_dim = 128;
    s.n_ff = 512;
    s.n_vocab = 4096;
    s.n_ctx = 4096;
    s.rms_eps = 1e-6f;
    s.tied = true;
    s.sliding_window = 32;
    s.attn_softcap = 2.0f;
    s.final_softcap = 5.0f;
    return s;
}

// Phi-3 as its converter writes it: attn_qkv and ffn_up fused, LongRoPE factors with the
// attention factor, a sliding_window key. phi3-test: partial rotary (48 of 64, Phi-4-mini's
// share), an original context of 128, so that a context of 256 uses the long factors, GQA,
// separate output, window key 64 (off, as in llama.cpp). phi4-mini: Phi-4-mini-instruct's shape
// (32 layers, 3072 embd, 24/8 heads of 128 rotating 96, ff 8192, original context 4096 of
// 131072, tied output, window key 0) with the vocabulary file's 32000 tokens.
RandomModelSpec phi3_preset(bool full) {
    RandomModelSpec s;
    s.arch = "phi3";
    s.name = full ? "phi4-mini-random" : "phi-test-random";  // not "phi3": see write_random_model
    s.n_layer = full ? 32 : 2;
    s.n_embd = full ? 3072 : 256;
    s.n_head = full ? 24 : 4;
    s.n_head_kv = full ? 8 : 2;
    s.head_dim = full ? 128 : 64;
    s.n_rot = full ? 96 : 48;
    s.n_ff = full ? 8192 : 512;
    s.n_vocab = full ? 0 : 4096;
    s.n_ctx = full ? 131072 : 4096;
    s.n_ctx_orig = full ? 4096 : 128;
    s.rope_base = 10000.0f;
    s.rms_eps = 1e-5f;
    s.tied = full;
    s.sliding_window = full ? 0 : 64;
    return s;
}

// gpt-oss as its converter writes it (YaRN factor 32, base 150000, layers il % 2 == 0 sliding).
// gpt-oss-test: 2 layers (0 sliding-window with window 32, 1 global), embd 256, 8/2 heads of 64
// (q_dim 512 != embd), 8 experts of ff 256 with 4 used, an original context of 128 of 4096 (the
// YaRN ramp spans the lower pairs), vocabulary 4096. gpt-oss-20b: gpt-oss-20b's shape (24 layers,
// embd 2880, 64/8 heads of 64, 32 experts of ff 2880 with 4 used, window 128, original context
// 4096 of 131072) with MXFP4 experts as the released file has them and the vocabulary file's
// tokens, not o200k's 201088.
RandomModelSpec gptoss_preset(bool full) {
    RandomModelSpec s;
    s.arch = "gpt-oss";
    s.name = full ? "gpt-oss-20b-random" : "gpt-oss-test-random";
    s.n_layer = full ? 24 : 2;
    s.n_embd = full ? 2880 : 256;
    s.n_head = full ? 64 : 8;
    s.n_head_kv = full ? 8 : 2;
    s.head_dim = 64;
    s.n_ff = full ? 2880 : 256;
    s.n_expert = full ? 32 : 8;
    s.n_expert_used = 4;
    s.n_ff_exp = full ? 2880 : 256;
    s.n_vocab = full ? 0 : 4096;
    s.n_ctx = full ? 131072 : 4096;
    s.n_ctx_orig = full ? 4096 : 128;
    s.rope_base = 150000.0f;
    s.rope_scaling = "yarn";
    s.rope_factor = 32.0f;
    s.rms_eps = 1e-5f;
    s.sliding_window = full ? 128 : 32;
    s.fused_qkv = false;
    if (full) s.expert_type = GgmlType::MXFP4;
    return s;
}

}  // namespace

RandomModelSpec random_model_preset(std::string_view name) {
    RandomModelSpec s;
    if (name == "tinyllama-1.1b") {
        s.arch = "llama";
        s.name = "tinyllama-1.1b-random";
        s.n_layer = 22;
        s.n_embd = 2048;
        s.n_head = 32;
        s.n_head_kv = 4;
        s.n_ff = 5632;
        s.n_vocab = 32000;
        s.n_ctx = 4096;
        s.rope_base = 10000.0f;
        s.rms_eps = 1e-5f;
        return s;
    }
    if (name == "gemma3-test" || name == "gemma3-4b") {
        // Gemma 3 as its converter writes it: head size 256 (not n_embd / n_head), global layers
        // every 6th with base 1e6 and linear scaling 8, sliding-window layers with base 1e4, tied
        // output. The test shape keeps a window of 32 (smaller than the test sequences) and
        // 6 layers (one global).
        const bool full = name == "gemma3-4b";
        s.arch = "gemma3";
        s.name = full ? "gemma3-4b-random" : "gemma3-test-random";
        s.n_layer = full ? 34 : 6;
        s.n_embd = full ? 2560 : 256;
        s.n_head = full ? 8 : 4;
        s.n_head_kv = full ? 4 : 2;
        s.head_dim = full ? 256 : 128;
        s.n_ff = full ? 10240 : 512;
        s.n_vocab = full ? 0 : 4096;
        s.n_ctx = full ? 131072 : 4096;
        s.rope_base = 1000000.0f;
        s.rope_scaling = "linear";
        s.rope_factor = 8.0f;
        s.rms_eps = 1e-6f;
        s.tied = true;
        s.sliding_window = full ? 1024 : 32;
        s.swa_pattern = 6;
        s.rope_base_swa = 10000.0f;
        return s;
    }
    if (name == "gemma2-test") return gemma2_preset();
    if (name == "phi3-test" || name == "phi4-mini") return phi3_preset(name == "phi4-mini");
    if (name == "gpt-oss-test" || name == "gpt-oss-20b")
        return gptoss_preset(name == "gpt-oss-20b");
    if (moe_preset(name, s)) return s;
    fail("unknown preset '{}' (known: {})", name, fmt::join(random_model_presets(), ", "));
}

std::vector<float> llama3_rope_factors(int n_rot, float freq_base, float factor) {
    const double low_freq_factor = 1.0, high_freq_factor = 4.0, old_context = 8192.0;
    const double low_freq_wavelen = old_context / low_freq_factor;
    const double high_freq_wavelen = old_context / high_freq_factor;
    std::vector<float> out;
    for (int i = 0; i < n_rot; i += 2) {
        const double freq = 1.0 / std::pow(static_cast<double>(freq_base), static_cast<double>(i) / n_rot);
        const double wavelen = 2.0 * M_PI / freq;
        double f;
        if (wavelen < high_freq_wavelen) {
            f = 1.0;
        } else if (wavelen > low_freq_wavelen) {
            f = factor;
        } else {
            const double smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
            f = 1.0 / ((1.0 - smooth) / factor + smooth);
        }
        out.push_back(static_cast<float>(f));
    }
    return out;
}

std::vector<float> longrope_factors(int n_rot, float top) {
    std::vector<float> out;
    const int half = n_rot / 2;
    for (int i = 0; i < half; ++i) {
        out.push_back(static_cast<float>(std::pow(static_cast<double>(top), half > 1 ? double(i) / (half - 1) : 0.0)));
    }
    return out;
}

namespace {

// Checks and completes the expert settings; true for a mixture-of-experts model.
bool check_moe_spec(RandomModelSpec& s) {
    const ArchTraits::Experts experts = find_architecture(s.arch)->experts;
    if (experts == ArchTraits::Experts::None) {
        if (s.n_expert != 0 || s.n_expert_used != 0 || s.n_ff_exp != 0 || s.n_ff_shexp != 0 ||
            s.expert_type) {
            fail("--experts, --experts-used, --expert-ff, --shared-ff and --expert-type are for {} (architecture {})",
                 expert_architectures(), s.arch);
        }
        return false;
    }
    if (experts == ArchTraits::Experts::Optional && s.n_expert == 0) {
        if (s.n_expert_used != 0 || s.n_ff_exp != 0 || s.n_ff_shexp != 0 || s.expert_type) {
            fail(
                "--experts-used, --expert-ff, --shared-ff and --expert-type need --experts for a "
                "llama model");
        }
        return false;
    }
    if (s.n_ff_shexp != 0 && s.arch != "qwen2moe")
        fail("--shared-ff is for qwen2moe only (architecture {})", s.arch);
    if (s.arch == "llama" && s.n_ff_exp != 0 && s.n_ff_exp != s.n_ff) {
        fail("llama experts have the size of --ff ({}), as llama.cpp reads them; --expert-ff {} "
             "differs", s.n_ff, s.n_ff_exp);
    }
    if (s.arch == "qwen2moe" && s.tied)
        fail("qwen2moe needs output.weight (llama.cpp refuses it without): drop --tied");
    if (s.n_expert == 0) s.n_expert = 8;
    if (s.n_expert_used == 0) s.n_expert_used = std::min(2, s.n_expert);
    if (s.n_ff_exp == 0) s.n_ff_exp = s.n_ff;
    if (s.n_ff_shexp == 0 && s.arch == "qwen2moe") s.n_ff_shexp = s.n_ff;
    if (s.n_expert < 0 || s.n_expert > 1024)
        fail("--experts must be between 1 and 1024, got {}", s.n_expert);
    if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert) {
        fail("--experts-used must be between 1 and --experts ({}), got {}", s.n_expert,
             s.n_expert_used);
    }
    if (s.n_ff_exp < 0 || s.n_ff_shexp < 0) fail("--expert-ff and --shared-ff must be positive");
    return true;
}

}  // namespace

void write_random_model(const RandomModelSpec& spec, const std::string& path) {
    RandomModelSpec s = spec;
    const ArchTraits* traits = find_architecture(s.arch);
    if (traits == nullptr) fail("unknown architecture '{}' (supported: {})", s.arch, supported_architectures());
    const bool moe = check_moe_spec(s);
    const bool gemma3 = s.arch == "gemma3", gemma2 = s.arch == "gemma2", phi3 = s.arch == "phi3";
    const bool gptoss = s.arch == "gpt-oss";
    const bool gemma = gemma3 || gemma2;
    if (!gemma && !phi3 && !gptoss && s.sliding_window != 0) {
        fail("--sliding-window is for gemma3, gemma2, phi3 and gpt-oss only (architecture {})",
             s.arch);
    }
    if (gptoss && s.tied)
        fail("gpt-oss needs output.weight (llama.cpp refuses it without): drop --tied");
    if (s.expert_type) {
        const GgmlTypeTraits& et = ggml_type_traits(*s.expert_type);
        if (s.n_embd % et.block_size != 0 || s.n_ff_exp % et.block_size != 0) {
            fail(
                "expert type {} needs rows that are multiples of {} elements (--embd {}, "
                "--expert-ff {})",
                et.name, et.block_size, s.n_embd, s.n_ff_exp);
        }
    }
    if (gemma2) s.tied = true;  // llama.cpp's gemma2 reads no output.weight
    if (!(s.attn_softcap > 0.0f) || !(s.final_softcap > 0.0f) || !std::isfinite(s.attn_softcap) ||
        !std::isfinite(s.final_softcap)) {
        fail("--attn-softcap ({}) and --final-softcap ({}) must be finite numbers > 0", s.attn_softcap, s.final_softcap);
    }
    if (!phi3 && !gptoss && !s.fused_qkv) fail("separate/fused projections are for phi3 only");
    if (!phi3 && s.rope_scaling != "yarn" && s.n_ctx_orig != 0) {
        fail("--rope-orig-ctx is for phi3's LongRoPE and YaRN (--rope-scaling yarn) only");
    }
    if (s.n_ctx_orig < 0) fail("--rope-orig-ctx must not be negative, got {}", s.n_ctx_orig);
    if (s.sliding_window < 0 || s.swa_pattern < 0) {
        fail("--sliding-window ({}) and --swa-pattern ({}) must not be negative", s.sliding_window, s.swa_pattern);
    }
    if (!(s.rope_base_swa > 1.0f) || !std::isfinite(s.rope_base_swa)) {
        fail("--rope-base-swa must be a finite number > 1, got {}", s.rope_base_swa);
    }
    auto positive = [](const char* what, int v) {
        if (v <= 0) fail("{} must be positive, got {}", what, v);
    };
    positive("--layers", s.n_layer);
    positive("--embd", s.n_embd);
    positive("--heads", s.n_head);
    positive("--kv-heads", s.n_head_kv);
    positive("--ff", s.n_ff);
    positive("--ctx", s.n_ctx);
    if (s.n_head % s.n_head_kv != 0) fail("--heads {} is not a multiple of --kv-heads {}", s.n_head, s.n_head_kv);
    if (s.head_dim == 0) {
        if (s.n_embd % s.n_head != 0) fail("--embd {} is not a multiple of --heads {}", s.n_embd, s.n_head);
        s.head_dim = s.n_embd / s.n_head;
    }
    if (s.head_dim <= 0 || s.head_dim % 2 != 0) fail("head size {} must be positive and even", s.head_dim);
    if (s.n_rot == 0) s.n_rot = s.head_dim;
    if (s.n_rot < 0 || s.n_rot % 2 != 0 || s.n_rot > s.head_dim) {
        fail("--rope-dims {} must be even and at most the head size {}", s.n_rot, s.head_dim);
    }
    if (s.rope_scaling != "none" && s.rope_scaling != "linear" && s.rope_scaling != "llama3" &&
        s.rope_scaling != "yarn") {
        fail("unknown RoPE scaling '{}' (supported: none, linear, llama3, yarn)", s.rope_scaling);
    }
    if (s.rope_factor == 0.0f)
        s.rope_factor = s.rope_scaling == "llama3" ? 8.0f : s.rope_scaling == "yarn" ? 32.0f : 4.0f;
    if (!(s.rope_factor > 0.0f) || !std::isfinite(s.rope_factor)) {
        fail("RoPE scaling factor must be a positive finite number, got {}", s.rope_factor);
    }
    if (!(s.rope_base > 1.0f) || !std::isfinite(s.rope_base)) {
        fail("--rope-base must be a finite number > 1, got {}", s.rope_base);
    }

    const int64_t E = s.n_embd, F = s.n_ff, D = s.head_dim, Q = int64_t{s.n_head} * D, KV = int64_t{s.n_head_kv} * D;
    const GgmlTypeTraits& tt = ggml_type_traits(s.type);
    const int64_t X = moe ? s.n_expert : 0, FE = s.n_ff_exp, FS = s.n_ff_shexp;
    for (auto [what, n] : {std::pair<const char*, int64_t>{"--embd", E},
                           {moe ? "--expert-ff" : "--ff", moe ? FE : F},
                           {"heads x head size", Q},
                           {"--shared-ff", FS > 0 ? FS : E}}) {
        if (n % tt.block_size != 0) {
            fail("type {} needs rows that are multiples of {} elements, but {} is {}", tt.name,
                 tt.block_size, what, n);
        }
    }

    gguf::Writer w;
    const std::string a = s.arch + ".";
    w.set_string("general.architecture", s.arch);
    // llama.cpp's vocabulary loader gives a model whose general.name contains "phi3" or "phi-3"
    // Phi-3's token attributes and then needs the token <|endoftext|>, which the default
    // llama-spm vocabulary lacks: the default name of a phi3 model avoids those words.
    w.set_string("general.name", !s.name.empty() ? s.name : phi3 ? "kvec-random-phi" : "kvec-random-" + s.arch);
    w.set_u32("general.file_type", static_cast<uint32_t>(file_type_of(s.type)));
    if (tt.quantized) w.set_u32("general.quantization_version", 2);
    w.set_u32(a + "context_length", static_cast<uint32_t>(s.n_ctx));
    w.set_u32(a + "embedding_length", static_cast<uint32_t>(E));
    w.set_u32(a + "block_count", static_cast<uint32_t>(s.n_layer));
    w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(F));
    w.set_u32(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
    w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
    if (D * s.n_head != E || s.arch == "qwen3" || s.arch == "qwen3moe" || gemma || gptoss) {
        w.set_u32(a + "attention.key_length", static_cast<uint32_t>(D));
        w.set_u32(a + "attention.value_length", static_cast<uint32_t>(D));
    }
    w.set_f32(a + "rope.freq_base", s.rope_base);
    w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(s.n_rot));
    w.set_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
    if (s.rope_scaling == "linear") {
        w.set_string(a + "rope.scaling.type", "linear");
        w.set_f32(a + "rope.scaling.factor", s.rope_factor);
    }
    if (s.rope_scaling == "yarn") {  // as the converter writes it
        const int orig =
            s.n_ctx_orig > 0
                ? s.n_ctx_orig
                : std::max(1, static_cast<int>(static_cast<float>(s.n_ctx) / s.rope_factor));
        w.set_string(a + "rope.scaling.type", "yarn");
        w.set_f32(a + "rope.scaling.factor", s.rope_factor);
        w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(orig));
    }
    if (gptoss)
        w.set_u32(a + "attention.sliding_window",
                  static_cast<uint32_t>(s.sliding_window > 0 ? s.sliding_window : 128));
    if (moe) {  // as llama.cpp's converter writes them
        w.set_u32(a + "expert_count", static_cast<uint32_t>(X));
        w.set_u32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
        if (s.arch != "llama")
            w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(FE));
        if (FS > 0) w.set_u32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(FS));
    }
    if (gemma3 && s.sliding_window > 0) {
        w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
        if (s.swa_pattern != 6) w.set_u32(a + "attention.sliding_window_pattern", static_cast<uint32_t>(s.swa_pattern));
        if (s.rope_base_swa != 10000.0f) w.set_f32(a + "rope.freq_base_swa", s.rope_base_swa);
    }
    if (gemma2) {  // as the converter writes them (no pattern key: llama.cpp's default of 2)
        w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window > 0 ? s.sliding_window : 4096));
        w.set_f32(a + "attn_logit_softcapping", s.attn_softcap);
        w.set_f32(a + "final_logit_softcapping", s.final_softcap);
    }
    if (phi3) {
        w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
        if (s.n_ctx_orig > 0) {
            // The converter's LongRoPE attention factor: sqrt(1 + ln(scale) / ln(original context)).
            const double scale = static_cast<double>(s.n_ctx) / s.n_ctx_orig;
            const double attn = scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(double(s.n_ctx_orig))) : 1.0;
            w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(s.n_ctx_orig));
            w.set_f32(a + "rope.scaling.attn_factor", static_cast<float>(attn));
        }
    }

    if (s.n_vocab < 0) fail("--vocab must be positive, got {}", s.n_vocab);
    int n_vocab = s.n_vocab;
    if (s.vocab_from != "none") {
        n_vocab = copy_vocabulary(s.vocab_from.empty() ? default_vocab_path() : s.vocab_from, s.n_vocab, w);
    } else if (n_vocab <= 0) {
        fail("--vocab is required when no vocabulary file is used");
    }
    w.set_u32(a + "vocab_size", static_cast<uint32_t>(n_vocab));
    // The writer holds every tensor in memory: the sizes are added up with overflow checks and
    // checked against the available memory before anything is allocated.
    {
        const int64_t V = n_vocab;
        uint64_t total = 0;
        auto add = [&](int64_t n_in, int64_t n_out, bool matrix) {
            uint64_t bytes = 0;
            const uint64_t row = matrix ? ggml_row_size(s.type, n_in) : static_cast<uint64_t>(n_in) * sizeof(float);
            if (__builtin_mul_overflow(row, static_cast<uint64_t>(n_out), &bytes) ||
                __builtin_add_overflow(total, bytes, &total)) {
                total = UINT64_MAX;
            }
        };
        add(E, V, true);
        if (!s.tied) add(E, V, true);
        for (int l = 0; l < s.n_layer && total != UINT64_MAX; ++l) {
            add(E, Q + 2 * KV, true);
            add(Q, E, true);
            if (moe) {
                add(E, 2 * FE * X, true);
                add(FE, E * X, true);
                add(E * X + E, 1, false);  // router (F32), shared expert gate
                if (FS > 0) {
                    add(E, 2 * FS, true);
                    add(FS, E, true);
                }
            } else {
                add(E, 2 * F, true);
                add(F, E, true);
            }
            add(6 * E + Q + 2 * KV + 2 * D + s.n_head + X * (2 * FE + E + 1), 1, false);
        }
        const size_t available = available_memory_bytes();
        if (total == UINT64_MAX || (available > 0 && total > available)) {
            fail("the model's weights would take {}, more than the {:.1f} GiB of memory available (the writer "
                 "holds them in memory): choose smaller --layers/--embd/--ff/--vocab",
                 total == UINT64_MAX ? std::string("more bytes than 64 bits can count")
                                     : fmt::format("{:.1f} GiB", static_cast<double>(total) / (1ull << 30)),
                 static_cast<double>(available) / (1ull << 30));
        }
    }

    Builder b(s, w);
    const float embd_std = s.tied ? 3.0f / std::sqrt(static_cast<float>(E)) : 1.0f;
    b.matrix("token_embd.weight", E, n_vocab, embd_std);
    b.vector("output_norm.weight", E, 1.0f, 0.1f);
    if (!s.tied) b.matrix("output.weight", E, n_vocab, 3.0f / std::sqrt(static_cast<float>(E)));
    if (s.rope_scaling == "llama3") {
        const std::vector<float> f = llama3_rope_factors(s.n_rot, s.rope_base, s.rope_factor);
        w.add_tensor("rope_freqs.weight", GgmlType::F32, {static_cast<int64_t>(f.size())}, f.data(), f.size() * sizeof(float));
    }
    if (phi3 && s.n_ctx_orig > 0) {
        const std::vector<float> lf = longrope_factors(s.n_rot, 24.0f), sf = longrope_factors(s.n_rot, 1.5f);
        w.add_tensor("rope_factors_long.weight", GgmlType::F32, {static_cast<int64_t>(lf.size())}, lf.data(),
                     lf.size() * sizeof(float));
        w.add_tensor("rope_factors_short.weight", GgmlType::F32, {static_cast<int64_t>(sf.size())}, sf.data(),
                     sf.size() * sizeof(float));
    }
    const float g_e = 1.0f / std::sqrt(static_cast<float>(E));
    for (int l = 0; l < s.n_layer; ++l) {
        const std::string p = fmt::format("blk.{}.", l);
        b.vector(p + "attn_norm.weight", E, 1.0f, 0.1f);
        if (phi3 && s.fused_qkv) {
            b.matrix(p + "attn_qkv.weight", E, Q + 2 * KV, g_e);
        } else {
            b.matrix(p + "attn_q.weight", E, Q, g_e);
            b.matrix(p + "attn_k.weight", E, KV, g_e);
            b.matrix(p + "attn_v.weight", E, KV, g_e);
        }
        if (traits->qkv_bias != ArchTraits::QkvBias::Optional) {
            b.vector(p + "attn_q.bias", Q, 0.0f, 0.5f);
            b.vector(p + "attn_k.bias", KV, 0.0f, 0.5f);
            b.vector(p + "attn_v.bias", KV, 0.0f, 0.5f);
        }
        if (traits->qk_norm) {
            b.vector(p + "attn_q_norm.weight", D, 1.0f, 0.1f);
            b.vector(p + "attn_k_norm.weight", D, 1.0f, 0.1f);
        }
        if (gemma) {
            // Gemma's 1 + w as the converter stores it, near 8: the layers' outputs must
            // outweigh the embedding, which the forward pass scales by sqrt(n_embd), or the tied
            // output predicts the input token with certainty (near 1: max probability 1.000 on
            // the oracle's 2-layer model; near 8: 0.28, mean entropy 4.0 nats, about llama's).
            const float post = 8.0f;
            b.vector(p + "post_attention_norm.weight", E, post, 0.1f * post);
            b.vector(p + "post_ffw_norm.weight", E, post, 0.1f * post);
        }
        b.matrix(p + "attn_output.weight", Q, E, 1.0f / std::sqrt(static_cast<float>(Q)));
        if (gptoss) {
            b.vector(p + "attn_output.bias", E, 0.0f, 0.2f);
            // Sink logits about the size of the attention logits (std ~1): they take a visible,
            // varying share of each head's softmax.
            b.vector(p + "attn_sinks.weight", s.n_head, 0.5f, 1.5f);
        }
        // gpt-oss normalises the FFN's input with post_attention_norm (no ffn_norm).
        b.vector(p + (gptoss ? "post_attention_norm.weight" : "ffn_norm.weight"), E, 1.0f, 0.1f);
        if (moe) {
            // The router's logits have a standard deviation of about 1: distinct, varied choices.
            // gpt-oss: the experts' gate and up outputs have one of about 3, so that the clamp at
            // 7 of swiglu_oai acts on a few percent of them (the down projection scaled back).
            const float gain = gptoss ? 3.0f : 1.0f;
            b.matrix_f32(p + "ffn_gate_inp.weight", E, X, g_e);
            b.experts(p + "ffn_gate_exps.weight", E, FE, X, gain * g_e);
            b.experts(p + "ffn_down_exps.weight", FE, E, X,
                      1.0f / (gain * std::sqrt(static_cast<float>(FE))));
            b.experts(p + "ffn_up_exps.weight", E, FE, X, gain * g_e);
            if (gptoss) {  // biases: the router's [X], the experts' 2-D [FE | E, X] (F32)
                b.vector(p + "ffn_gate_inp.bias", X, 0.0f, 0.5f);
                b.matrix_f32(p + "ffn_gate_exps.bias", FE, X, 0.5f);
                b.matrix_f32(p + "ffn_up_exps.bias", FE, X, 0.5f);
                b.matrix_f32(p + "ffn_down_exps.bias", E, X, 0.1f);
            }
            if (FS > 0) {
                b.vector(p + "ffn_gate_inp_shexp.weight", E, 0.0f, g_e);
                b.matrix(p + "ffn_gate_shexp.weight", E, FS, g_e);
                b.matrix(p + "ffn_down_shexp.weight", FS, E,
                         1.0f / std::sqrt(static_cast<float>(FS)));
                b.matrix(p + "ffn_up_shexp.weight", E, FS, g_e);
            }
            continue;
        }
        if (phi3) {
            b.matrix(p + "ffn_up.weight", E, 2 * F, g_e);  // gate rows, then up rows
        } else {
            b.matrix(p + "ffn_gate.weight", E, F, g_e);
            b.matrix(p + "ffn_up.weight", E, F, g_e);
        }
        b.matrix(p + "ffn_down.weight", F, E, 1.0f / std::sqrt(static_cast<float>(F)));
    }
    w.write(path);
}

}  // namespace kvec
