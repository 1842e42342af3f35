#include "model/model.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

#include "tensor/dispatch.h"
#include "tensor/int8_decode.h"
#include "tensor/int8_gemm.h"
#include "tensor/ops.h"
#include "util/error.h"

namespace kvec {

namespace {

std::string shape_string(const std::vector<int64_t>& dims) {
    return fmt::format("[{}]", fmt::join(dims, ", "));
}

// Collects tensor look-ups: missing names are gathered into one error; shapes are checked.
class TensorBinder {
public:
    explicit TensorBinder(const gguf::File& f) : f_(f) {}

    const gguf::TensorInfo* find(const std::string& name, const std::vector<int64_t>& dims, bool required) {
        const gguf::TensorInfo* t = f_.find_tensor(name);
        if (t == nullptr) {
            if (required) missing_.push_back(name);
            return nullptr;
        }
        bool ok = true;
        for (int i = 0; i < 4; ++i) {
            const int64_t want = i < static_cast<int>(dims.size()) ? dims[static_cast<size_t>(i)] : 1;
            if (t->ne[static_cast<size_t>(i)] != want) ok = false;
        }
        if (!ok) {
            std::vector<int64_t> got(t->ne.begin(), t->ne.begin() + std::max(1, t->n_dims));
            bad_shapes_.push_back(fmt::format("'{}' has shape {}, expected {}", name,
                                              shape_string(got), shape_string(dims)));
        }
        return t;
    }

    WeightView matrix(const std::string& name, int64_t n_in, int64_t n_out, bool required = true) {
        const gguf::TensorInfo* t = find(name, {n_in, n_out}, required);
        if (t == nullptr || t->ne[0] != n_in || t->ne[1] != n_out) return {};
        return make_weight_view(name.c_str(), t->type, t->data, n_in, n_out);
    }

    // A 3-D expert tensor [n_in, n_out, n_expert] as one view of n_expert * n_out rows.
    WeightView experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) {
        const gguf::TensorInfo* t = find(name, {n_in, n_out, n_expert}, true);
        if (t == nullptr || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_expert ||
            t->ne[3] != 1)
            return {};
        return make_weight_view(name.c_str(), t->type, t->data, n_in, n_out * n_expert);
    }

    std::vector<float> vector(const std::string& name, int64_t n, bool required = true) {
        return rows(name, n, 1, required);
    }

    // A 1-D [n] (n_rows 1) or 2-D [n, n_rows] tensor as floats [n_rows, n] (biases).
    std::vector<float> rows(const std::string& name, int64_t n, int64_t n_rows,
                            bool required = true) {
        const gguf::TensorInfo* t =
            n_rows == 1 ? find(name, {n}, required) : find(name, {n, n_rows}, required);
        if (t == nullptr || t->n_elements() != n * n_rows || t->ne[0] != n) return {};
        std::vector<float> out(static_cast<size_t>(n * n_rows));
        const WeightView v = make_weight_view(name.c_str(), t->type, t->data, n, n_rows);
        for (int64_t r = 0; r < n_rows; ++r) ops::dequantize_weight_row(v, r, out.data() + r * n);
        for (size_t i = 0; i < out.size(); ++i) {
            if (!std::isfinite(out[i])) fail("'{}': tensor '{}' holds a non-finite value {} at element {}", f_.path(), name, out[i], i);
        }
        return out;
    }

    void finish(const std::string& arch) const {
        if (!missing_.empty()) {
            fail("'{}' ({}) is missing {} tensor{}: {}", f_.path(), arch, missing_.size(),
                 missing_.size() == 1 ? "" : "s", fmt::join(missing_, ", "));
        }
        if (!bad_shapes_.empty()) {
            fail("'{}': tensor shape mismatch: {}", f_.path(), fmt::join(bad_shapes_, "; "));
        }
    }

private:
    const gguf::File& f_;
    std::vector<std::string> missing_;
    std::vector<std::string> bad_shapes_;
};

// An expert count that disagrees with a tensor gets its own message (before the shape checks):
// dimension `dim` of tensor `name` counts the experts.
void check_expert_count(const gguf::File& f, const ModelConfig& c, const std::string& name,
                        int dim) {
    const gguf::TensorInfo* t = f.find_tensor(name);
    if (t == nullptr || t->n_dims <= dim || t->ne[static_cast<size_t>(dim)] == c.n_expert) return;
    fail("'{}': {}.expert_count = {} disagrees with tensor '{}', which holds {} experts", f.path(),
         c.arch_name, c.n_expert, name, t->ne[static_cast<size_t>(dim)]);
}

// The FFN of a mixture-of-experts layer (llama.cpp's tensor names and shapes): the router, the
// experts' 3-D gate / up / down tensors, and qwen2moe's shared expert with its gate vector.
void bind_moe_ffn(const gguf::File& f, TensorBinder& b, const ModelConfig& c, const std::string& p,
                  LayerWeights& L) {
    const int64_t E = c.n_embd, X = c.n_expert, FE = c.n_ff_exp, FS = c.n_ff_shexp;
    check_expert_count(f, c, p + "ffn_gate_inp.weight", 1);
    for (const char* t : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
        check_expert_count(f, c, p + t, 2);
    }
    L.ffn_gate_inp = b.matrix(p + "ffn_gate_inp.weight", E, X);
    L.gate_exps = b.experts(p + "ffn_gate_exps.weight", E, FE, X);
    L.up_exps = b.experts(p + "ffn_up_exps.weight", E, FE, X);
    L.down_exps = b.experts(p + "ffn_down_exps.weight", FE, E, X);
    if (c.arch == Arch::GptOss) {  // biases on the router and every expert, all required
        for (const char* t : {"ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"}) {
            check_expert_count(f, c, p + t, 1);
        }
        check_expert_count(f, c, p + "ffn_gate_inp.bias", 0);
        L.gate_inp_b = b.vector(p + "ffn_gate_inp.bias", X);
        L.gate_exps_b = b.rows(p + "ffn_gate_exps.bias", FE, X);
        L.up_exps_b = b.rows(p + "ffn_up_exps.bias", FE, X);
        L.down_exps_b = b.rows(p + "ffn_down_exps.bias", E, X);
    }
    if (FS > 0) {
        L.gate_inp_shexp = b.vector(p + "ffn_gate_inp_shexp.weight", E);
        L.gate_shexp = b.matrix(p + "ffn_gate_shexp.weight", E, FS);
        L.up_shexp = b.matrix(p + "ffn_up_shexp.weight", E, FS);
        L.down_shexp = b.matrix(p + "ffn_down_shexp.weight", FS, E);
    }
}

// Rows [first, first + n) of w, as a view of their own (a fused projection's part).
WeightView row_range(const WeightView& w, int64_t first, int64_t n) { return w.empty() ? w : w.rows(first, n); }

// A per-frequency divisor table: every value a finite number > 0.
void check_rope_factors(const gguf::File& f, const char* name, const std::vector<float>& factors) {
    for (float x : factors) {
        if (!(x > 0.0f) || !std::isfinite(x)) {
            fail("'{}': {} holds the factor {} (each must be a finite number > 0)", f.path(), name, x);
        }
    }
}

}  // namespace

Model::Model(std::unique_ptr<gguf::File> file) : file_(std::move(file)) {
    config_ = read_model_config(*file_);
    ModelConfig& c = config_;
    const gguf::File& f = *file_;

    const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
    if (embd != nullptr) {
        if (embd->ne[1] <= 0 || embd->ne[1] > (1 << 24)) fail("'{}': token_embd.weight has a bad vocabulary size", f.path());
        c.n_vocab = static_cast<int>(embd->ne[1]);
        const std::string vocab_key = c.arch_name + ".vocab_size";
        if (f.has(vocab_key) && f.get_uint(vocab_key) != static_cast<uint64_t>(c.n_vocab)) {
            fail("'{}': {} = {} disagrees with the {} rows of token_embd.weight", f.path(), vocab_key,
                 f.get_uint(vocab_key), c.n_vocab);
        }
    }
    TensorBinder b(f);
    ModelWeights& w = weights_;
    const int64_t E = c.n_embd, V = c.n_vocab, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim(), D = c.head_dim;
    w.token_embd = b.matrix("token_embd.weight", E, V);
    w.output_norm = b.vector("output_norm.weight", E);
    const ArchTraits& t = c.traits();
    if (t.output == ArchTraits::Output::Tied && f.find_tensor("output.weight") != nullptr) {
        // llama.cpp's gemma2 reads token_embd.weight as the output and refuses a file with more
        // tensors than it reads.
        fail("'{}': {} ties the output to token_embd.weight, but the file holds an output.weight (llama.cpp "
             "refuses such a file too)", f.path(), c.arch_name);
    }
    if (f.find_tensor("output.weight") != nullptr || t.output == ArchTraits::Output::Own) {
        w.output = b.matrix("output.weight", E, V);
    } else {
        w.output = w.token_embd;
        w.tied_output = true;
    }
    if (f.find_tensor("rope_freqs.weight") != nullptr) w.rope_freqs = b.vector("rope_freqs.weight", c.n_rot / 2);
    check_rope_factors(f, "rope_freqs.weight", w.rope_freqs);
    if (c.rope_yarn) {
        const ops::YarnParams yarn{c.rope_freq_scale, c.n_ctx_orig};
        const float* file = w.rope_freqs.empty() ? nullptr : w.rope_freqs.data();
        w.rope_yarn = ops::yarn_freq_factors(c.n_rot, c.rope_freq_base, yarn, file);
        if (c.has_swa()) {
            const ops::YarnParams yarn_swa{c.rope_freq_scale_swa, c.n_ctx_orig};
            w.rope_yarn_swa = ops::yarn_freq_factors(c.n_rot, c.rope_freq_base_swa, yarn_swa, file);
        }
    }
    if (c.arch == Arch::Phi3) {
        w.rope_long = b.vector("rope_factors_long.weight", c.n_rot / 2, false);
        w.rope_short = b.vector("rope_factors_short.weight", c.n_rot / 2, false);
        check_rope_factors(f, "rope_factors_long.weight", w.rope_long);
        check_rope_factors(f, "rope_factors_short.weight", w.rope_short);
    }

    const bool biases_required = t.qkv_bias == ArchTraits::QkvBias::Required;
    // ArchTraits::fused_qkv (llama.cpp's create_tensor_qkv): attn_qkv.weight when present (with an
    // optional attn_qkv.bias, else optional separate biases), else attn_q/k/v.weight.
    const bool fused_qkv_allowed = t.fused_qkv;
    const bool gptoss = c.arch == Arch::GptOss;
    w.layers.resize(static_cast<size_t>(c.n_layer));
    for (int l = 0; l < c.n_layer; ++l) {
        LayerWeights& L = w.layers[static_cast<size_t>(l)];
        const std::string p = fmt::format("blk.{}.", l);
        L.attn_norm = b.vector(p + "attn_norm.weight", E);
        if (fused_qkv_allowed && f.find_tensor(p + "attn_qkv.weight") != nullptr) {
            const WeightView qkv = b.matrix(p + "attn_qkv.weight", E, Q + 2 * KV);  // [E] -> [Q + 2 KV]
            L.wq = row_range(qkv, 0, Q);
            L.wk = row_range(qkv, Q, KV);
            L.wv = row_range(qkv, Q + KV, KV);
            const std::vector<float> bqkv = b.vector(p + "attn_qkv.bias", Q + 2 * KV, false);  // [Q + 2 KV]
            if (!bqkv.empty()) {
                L.bq.assign(bqkv.begin(), bqkv.begin() + Q);
                L.bk.assign(bqkv.begin() + Q, bqkv.begin() + Q + KV);
                L.bv.assign(bqkv.begin() + Q + KV, bqkv.end());
            }
        } else {
            L.wq = b.matrix(p + "attn_q.weight", E, Q);
            L.wk = b.matrix(p + "attn_k.weight", E, KV);
            L.wv = b.matrix(p + "attn_v.weight", E, KV);
        }
        L.wo = b.matrix(p + "attn_output.weight", Q, E);
        if (gptoss) {  // the output bias and the sinks: required
            L.bo = b.vector(p + "attn_output.bias", E);
            L.attn_sinks = b.vector(p + "attn_sinks.weight", c.n_head);
        }
        if (L.bq.empty()) L.bq = b.vector(p + "attn_q.bias", Q, biases_required);
        if (L.bk.empty()) L.bk = b.vector(p + "attn_k.bias", KV, biases_required);
        if (L.bv.empty()) L.bv = b.vector(p + "attn_v.bias", KV, biases_required);
        if (t.qk_norm) {
            L.q_norm = b.vector(p + "attn_q_norm.weight", D);
            L.k_norm = b.vector(p + "attn_k_norm.weight", D);
        }
        // gpt-oss normalises the FFN's input with post_attention_norm.weight (no ffn_norm).
        L.ffn_norm = b.vector(p + (gptoss ? "post_attention_norm.weight" : "ffn_norm.weight"), E);
        if (c.has_moe()) {
            bind_moe_ffn(f, b, c, p, L);
        } else if (c.arch == Arch::Phi3) {  // ffn_up.weight holds the gate rows, then the up rows
            const WeightView gate_up = b.matrix(p + "ffn_up.weight", E, 2 * F);  // [E] -> [2 F]
            L.w_gate = row_range(gate_up, 0, F);
            L.w_up = row_range(gate_up, F, F);
            L.w_down = b.matrix(p + "ffn_down.weight", F, E);
        } else {
            L.w_gate = b.matrix(p + "ffn_gate.weight", E, F);
            L.w_up = b.matrix(p + "ffn_up.weight", E, F);
            L.w_down = b.matrix(p + "ffn_down.weight", F, E);
        }
        if (t.post_norms) {
            L.attn_post_norm = b.vector(p + "post_attention_norm.weight", E);
            L.ffn_post_norm = b.vector(p + "post_ffw_norm.weight", E);
        }
    }
    b.finish(c.arch_name);
}

namespace {

bool repack_enabled() {
    const char* v = std::getenv("KVEC_REPACK");
    return v == nullptr || std::strcmp(v, "0") != 0;
}

// How a type's matrices are repacked at load: with AVX-512 VNNI Q8_0, Q4_K and Q6_K into panels
// (WeightView::panels); with AVX2 alone Q4_0..Q5_1 rows for its decode kernels (decode_rows).
enum class Repack { None, Panels, Rows };
Repack repack_of(GgmlType type) {
    if (int8::vnni_enabled()) return int8::has_load_panels(type) ? Repack::Panels : Repack::None;
    const bool avx2 = active_cpu_kernel() == CpuKernel::Avx2 && int8::decode::kernel_avx2_repacked(type) != nullptr;
    return avx2 ? Repack::Rows : Repack::None;
}

// Whether any of the file's matrices has a type repacked at load.
bool has_repackable_matrix(const gguf::File& f) {
    for (const auto& t : f.tensors()) {
        if (t.n_dims >= 2 && repack_of(t.type) != Repack::None) return true;
    }
    return false;
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, LoadMode mode) {
    // Repacked: mapped files only (a copy's rows would stay beside their panels). In Auto the
    // other matrices are then copied into 2 MiB pages where Auto would have copied the file.
    const bool may_repack = repack_enabled() && mode != LoadMode::Copy;
    std::unique_ptr<gguf::File> file = gguf::File::open(path, may_repack ? LoadMode::Map : mode);
    const bool repack = may_repack && has_repackable_matrix(*file);
    if (may_repack && !repack && mode == LoadMode::Auto) file = gguf::File::open(path, mode);
    const bool copy_rest = repack && mode == LoadMode::Auto && auto_copies(file->bytes().size());
    std::unique_ptr<Model> model(new Model(std::move(file)));
    if (repack) model->repack(copy_rest);
    return model;
}

void Model::repack(bool copy_rest) {
    struct Item {
        WeightView* view;
        Repack how;  // None: copied as they are
        size_t bytes;
    };
    std::vector<Item> items;  // the matrices (the parts of a fused one each)
    const auto add = [&](WeightView& v) {
        if (v.empty()) return;
        const Repack how = repack_of(v.type);
        if (how == Repack::None && !copy_rest) return;
        const size_t bytes = how == Repack::Panels ? int8::load_panels_bytes(v.type, v.n_out, v.n_in) : v.row_bytes * v.n_out;
        items.push_back({&v, how, (bytes + 63) & ~size_t{63}});  // each on a cache line
    };
    add(weights_.output);
    for (LayerWeights& L : weights_.layers) {
        for (WeightView* v : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.ffn_gate_inp, &L.gate_exps,
                              &L.up_exps, &L.down_exps, &L.gate_shexp, &L.up_shexp, &L.down_shexp}) {
            add(*v);
        }
    }
    size_t total = 0;
    for (const Item& it : items) total += it.bytes;
    if (total == 0) return;
    panels_ = HugeBuffer(total);
    copied_rest_ = copy_rest;
    uint8_t* at = panels_.data();
    for (const Item& it : items) {
        WeightView& v = *it.view;
        const uint8_t* rows = v.data;
        if (it.how == Repack::Panels) {
            int8::pack_load_panels(v.type, rows, v.row_bytes, v.n_out, v.n_in, at);
            v.panels = at;
        } else if (it.how == Repack::Rows) {
            int8::decode::repack_rows(v.type, rows, v.row_bytes, v.n_out, v.n_in, at);
            v.decode_rows = at;
        } else {
            std::memcpy(at, rows, v.row_bytes * v.n_out);
            v.data = at;
        }
        at += it.bytes;
        // The rows stay mapped for the paths that read them (exact precision, no VNNI or VNNI
        // switched on after loading; the embedding rows of a tied output, a few per token); until
        // then their pages leave this process's memory (a tied output's would otherwise be held
        // twice, as rows and as panels).
        file_->bytes().release_pages(rows, v.row_bytes * v.n_out);
    }
}

std::string Model::residency() const {
    const MappedFile& bytes = file_->bytes();
    constexpr double kMiB = 1 << 20;
    std::string s = fmt::format("{}, {:.0f} of {:.0f} MiB in 2 MiB pages",
                                bytes.copied() ? "copied into anonymous memory" : "mapped from the file",
                                static_cast<double>(bytes.huge_page_bytes()) / kMiB,
                                static_cast<double>(bytes.size()) / kMiB);
    if (panels_.size() > 0) {
        s += fmt::format("; {} repacked{} in anonymous memory, {:.0f} of {:.0f} MiB in 2 MiB pages",
                         int8::vnni_enabled() ? "Q8_0, Q4_K and Q6_K matrices into panels"
                                              : "Q4_0, Q4_1, Q5_0 and Q5_1 rows for the decode kernels",
                         copied_rest_ ? ", the other matrices copied beside them" : "",
                         static_cast<double>(std::min(panels_.huge_page_bytes(), panels_.size())) / kMiB,
                         static_cast<double>(panels_.size()) / kMiB);
    }
    return s;
}

int64_t Model::n_params() const {
    int64_t n = 0;
    for (const auto& t : file_->tensors()) n += t.n_elements();
    return n;
}

size_t Model::n_bytes() const {
    size_t n = 0;
    for (const auto& t : file_->tensors()) n += t.nbytes;
    return n;
}

std::string Model::weight_type_name() const {
    std::map<GgmlType, int64_t> count;
    for (const auto& t : file_->tensors()) {
        if (t.n_dims >= 2) count[t.type] += t.n_elements();
    }
    GgmlType best = GgmlType::F32;
    int64_t most = -1;
    for (auto [type, n] : count) {
        if (n > most) {
            most = n;
            best = type;
        }
    }
    return ggml_type_name(best);
}

std::string Model::summary() const {
    const ModelConfig& c = config_;
    const std::string ff =
        !c.has_moe() ? fmt::format("ff {}", c.n_ff)
        : c.n_ff_shexp > 0
            ? fmt::format("{} experts ({} used) of ff {} + shared ff {}", c.n_expert,
                          c.n_expert_used, c.n_ff_exp, c.n_ff_shexp)
            : fmt::format("{} experts ({} used) of ff {}", c.n_expert, c.n_expert_used, c.n_ff_exp);
    return fmt::format("{} {} layers, {} embd, {}/{} heads of {}, {}, vocab {}, {}, {:.2f} GiB",
                       c.arch_name, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim, ff,
                       c.n_vocab, weight_type_name(), static_cast<double>(n_bytes()) / (1 << 30));
}

}  // namespace kvec
