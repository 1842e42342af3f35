#include "quant/quantize_model.h"

#include <omp.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <exception>
#include <mutex>

#include <fmt/ranges.h>

#include "quant/quant.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace kvec::quant {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

bool is_float_type(GgmlType t) {
    return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

// Layer index of "blk.<N>.<...>", or -1.
int layer_of(std::string_view name) {
    if (name.substr(0, 4) != "blk.") return -1;
    int layer = -1;
    const char* begin = name.data() + 4;
    const char* end = name.data() + name.size();
    auto [ptr, ec] = std::from_chars(begin, end, layer);
    if (ec != std::errc() || ptr == end || *ptr != '.') return -1;
    return layer;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third between.
bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// Tensors llama-quantize would convert (the rest keep their type, 1-D ones become f32).
bool is_quantizable(const gguf::TensorInfo& t) {
    if (t.n_dims < 2) return false;
    const std::string_view name = t.name;
    if (!ends_with(name, "weight")) return false;
    if (contains(name, "_norm.weight")) return false;
    if (contains(name, "ffn_gate_inp.weight")) return false;
    if (name == "position_embd.weight" || name == "token_types.weight") return false;
    return true;
}

GgmlType fallback_for_shape(GgmlType type, int64_t ncols) {
    const int64_t block = ggml_type_traits(type).block_size;
    if (ncols % block == 0) return type;
    GgmlType fb = GgmlType::F16;
    switch (type) {
        case GgmlType::Q2_K:
        case GgmlType::Q3_K: fb = GgmlType::Q4_0; break;
        case GgmlType::Q4_K: fb = GgmlType::Q5_0; break;
        case GgmlType::Q5_K: fb = GgmlType::Q5_1; break;
        case GgmlType::Q6_K: fb = GgmlType::Q8_0; break;
        case GgmlType::IQ4_XS: fb = GgmlType::IQ4_NL; break;  // as llama-quantize
        default: fb = GgmlType::F16; break;
    }
    if (ncols % ggml_type_traits(fb).block_size != 0) fb = GgmlType::F16;
    return fb;
}

void check_target(GgmlType type, const QuantizeOptions& opts) {
    switch (type) {
        case GgmlType::Q8_1:
        case GgmlType::Q8_K:
            fail("quantize: {} is an activation type used inside dot products, not a weight "
                 "type; choose e.g. q8_0, q6_K, q4_K",
                 ggml_type_name(type));
        default: break;
    }
    if (opts.mixed && type != GgmlType::Q3_K && type != GgmlType::Q4_K && type != GgmlType::Q5_K) {
        fail("quantize: the mixed (_M) preset exists for q3_K, q4_K and q5_K, not for {}",
             ggml_type_name(type));
    }
}

}  // namespace

std::optional<QuantizeTarget> parse_quantize_target(std::string_view name) {
    std::string s(name);
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    struct Entry {
        const char* name;
        GgmlType type;
        bool mixed;
    };
    static const Entry kEntries[] = {
        {"f32", GgmlType::F32, false},     {"f16", GgmlType::F16, false},
        {"bf16", GgmlType::BF16, false},   {"q4_0", GgmlType::Q4_0, false},
        {"q4_1", GgmlType::Q4_1, false},   {"q5_0", GgmlType::Q5_0, false},
        {"q5_1", GgmlType::Q5_1, false},   {"q8_0", GgmlType::Q8_0, false},
        {"q2_k", GgmlType::Q2_K, false},   {"q3_k", GgmlType::Q3_K, true},
        {"q3_k_s", GgmlType::Q3_K, false}, {"q3_k_m", GgmlType::Q3_K, true},
        {"q4_k", GgmlType::Q4_K, true},    {"q4_k_s", GgmlType::Q4_K, false},
        {"q4_k_m", GgmlType::Q4_K, true},  {"q5_k", GgmlType::Q5_K, true},
        {"q5_k_s", GgmlType::Q5_K, false}, {"q5_k_m", GgmlType::Q5_K, true},
        {"q6_k", GgmlType::Q6_K, false},   {"iq4_nl", GgmlType::IQ4_NL, false},
        {"iq4_xs", GgmlType::IQ4_XS, false}, {"mxfp4", GgmlType::MXFP4, false},
    };
    for (const Entry& e : kEntries) {
        if (s == e.name) return QuantizeTarget{e.type, e.mixed};
    }
    return std::nullopt;
}

uint32_t llama_file_type(GgmlType type, bool mixed) {
    switch (type) {
        case GgmlType::F32: return 0;
        case GgmlType::F16: return 1;
        case GgmlType::Q4_0: return 2;
        case GgmlType::Q4_1: return 3;
        case GgmlType::Q8_0: return 7;
        case GgmlType::Q5_0: return 8;
        case GgmlType::Q5_1: return 9;
        case GgmlType::Q2_K: return 10;
        case GgmlType::Q3_K: return mixed ? 12 : 11;
        case GgmlType::Q4_K: return mixed ? 15 : 14;
        case GgmlType::Q5_K: return mixed ? 17 : 16;
        case GgmlType::Q6_K: return 18;
        case GgmlType::IQ4_NL: return 25;
        case GgmlType::IQ4_XS: return 30;
        case GgmlType::BF16: return 32;
        case GgmlType::MXFP4: return 38;  // llama.cpp's MXFP4_MOE, the only file type naming it
        default: fail("quantize: no llama file type for {}", ggml_type_name(type));
    }
}

std::vector<TensorPlan> plan_quantization(const gguf::File& src, GgmlType type,
                                          const QuantizeOptions& opts) {
    check_target(type, opts);
    const bool quantized_target = ggml_type_traits(type).quantized;
    const bool has_output = src.find_tensor("output.weight") != nullptr;
    int n_layers = 0;
    for (const auto& t : src.tensors()) n_layers = std::max(n_layers, layer_of(t.name) + 1);

    std::vector<TensorPlan> plan;
    plan.reserve(src.tensors().size());
    for (const gguf::TensorInfo& t : src.tensors()) {
        TensorPlan p{t.name, t.type, t.type};
        if (t.n_dims == 1) {
            p.to = GgmlType::F32;  // norms and biases: full precision
        } else if (is_quantizable(t)) {
            GgmlType to = type;
            const bool is_output =
                t.name == "output.weight" || (!has_output && t.name == "token_embd.weight");
            if (!opts.pure && quantized_target && is_output) {
                to = type == GgmlType::Q8_0 || t.ne[0] % 256 != 0 ? GgmlType::Q8_0 : GgmlType::Q6_K;
            } else if (!opts.pure && opts.mixed) {
                const int layer = layer_of(t.name);
                const bool attn_v = contains(t.name, "attn_v.weight");
                const bool ffn_down = contains(t.name, "ffn_down");
                const bool attn_out = contains(t.name, "attn_output.weight");
                if (layer >= 0 && (type == GgmlType::Q4_K || type == GgmlType::Q5_K)) {
                    if ((attn_v || ffn_down) && use_more_bits(layer, n_layers)) to = GgmlType::Q6_K;
                } else if (layer >= 0 && type == GgmlType::Q3_K) {
                    if (attn_v) to = layer < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
                    if (ffn_down) to = layer < n_layers / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
                    if (attn_out) to = GgmlType::Q4_K;
                }
            }
            p.to = fallback_for_shape(to, t.ne[0]);
        }
        if (p.to != p.from && !is_float_type(p.from) && !opts.allow_requantize) {
            fail("quantize: '{}': tensor '{}' is already quantised ({}); converting it to {} "
                 "loses precision twice (allow re-quantisation to do it anyway)",
                 src.path(), t.name, ggml_type_name(p.from), ggml_type_name(p.to));
        }
        plan.push_back(std::move(p));
    }
    return plan;
}

void quantize_gguf(const std::string& in, const std::string& out, GgmlType type,
                   const QuantizeOptions& opts) {
    check_target(type, opts);
    {
        struct stat a {};
        struct stat b {};
        if (in == out || (::stat(in.c_str(), &a) == 0 && ::stat(out.c_str(), &b) == 0 &&
                          a.st_dev == b.st_dev && a.st_ino == b.st_ino)) {
            fail("quantize: the output '{}' is the input file; choose another output path", out);
        }
    }
    check_replaceable(out);  // before the work: a link, directory, device or FIFO there is refused
    const std::unique_ptr<gguf::File> src = gguf::File::open(in);
    const std::vector<TensorPlan> plan = plan_quantization(*src, type, opts);

    gguf::Writer w;
    for (const auto& [key, value] : src->metadata()) {
        if (key == "general.file_type" || key == "general.quantization_version") continue;
        w.set(key, value);
    }
    w.set_u32("general.file_type", llama_file_type(type, opts.mixed && !opts.pure));
    if (ggml_type_traits(type).quantized) w.set_u32("general.quantization_version", 2);

    const int n_threads = opts.n_threads > 0 ? opts.n_threads : omp_get_max_threads();
    for (size_t i = 0; i < plan.size(); ++i) {
        const gguf::TensorInfo& t = src->tensors()[i];
        const TensorPlan& p = plan[i];
        std::vector<int64_t> dims(t.ne.begin(), t.ne.begin() + t.n_dims);
        w.add_tensor_fill(t.name, p.to, dims, [&t, &p, &opts, n_threads](uint8_t* dst, size_t nbytes) {
            if (opts.log) {
                opts.log(fmt::format("{:<40} {:>6} -> {:<6} [{}]", t.name, ggml_type_name(p.from),
                                     ggml_type_name(p.to), fmt::join(t.ne.begin(), t.ne.begin() + t.n_dims, " x ")));
            }
            if (p.from == p.to) {
                std::copy(t.data, t.data + t.nbytes, dst);
                return;
            }
            const int64_t ncols = t.ne[0];
            const int64_t nrows = t.n_rows();
            const size_t src_row = ggml_row_size(p.from, ncols);
            const size_t dst_row = ggml_row_size(p.to, ncols);
            KVEC_CHECK(dst_row * static_cast<size_t>(nrows) == nbytes);
            std::exception_ptr error;
            std::mutex error_mutex;
            // Small tensors are converted serially: thread start-up and barriers cost more
            // than the work.
            const bool parallel = n_threads > 1 && ncols * nrows >= (int64_t{1} << 18);
#pragma omp parallel if (parallel) num_threads(n_threads)
            {
                std::vector<float> row(static_cast<size_t>(ncols));  // [ncols] one row in f32
#pragma omp for schedule(dynamic, 16)
                for (int64_t r = 0; r < nrows; ++r) {
                    try {
                        dequantize_row(p.from, t.data + static_cast<size_t>(r) * src_row, row.data(), ncols);
                        // A NaN or Inf would be scaled into finite codes: a model that runs and says nothing.
                        const auto bad = std::find_if(row.begin(), row.end(), [](float x) { return !std::isfinite(x); });
                        if (bad != row.end()) {
                            fail("quantize: tensor '{}' holds a non-finite value {} at row {}, column {}: refused "
                                 "(kvec run refuses such weights too)", t.name, *bad, r, bad - row.begin());
                        }
                        quantize_row(p.to, row.data(), dst + static_cast<size_t>(r) * dst_row, ncols);
                    } catch (...) {
                        std::lock_guard<std::mutex> lock(error_mutex);
                        if (!error) error = std::current_exception();
                    }
                }
            }
            if (error) std::rethrow_exception(error);
        });
    }
    w.write(out);
}

}  // namespace kvec::quant
