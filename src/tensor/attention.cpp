#include "tensor/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include "quant/blocks.h"
#include "quant/quant.h"
#include "tensor/int8_decode.h"
#include "tensor/int8_gemm.h"
#include "tensor/kernels.h"
#include "tensor/dispatch.h"
#include "tensor/ops.h"
#include "util/error.h"
#include "util/fp16.h"

namespace kvec {

namespace {

// The kernels of one block of n <= kEntryBlock entries (rows of `type`, d elements each), kernels.h:
//   keys_t: kt [d, ldkt] = the keys transposed to float (columns n .. round_up(n, 8) zero)
//   values: out[i * ldo + e] += sum_j p[i * ldp + j] v[j, e]   (one position's rows)
// The scores of the transposed keys are kernels::attention_scores_generic without AVX2, else
// kernels::rows_times_panel_avx2 / _avx512 for a group of positions.
struct BlockKernels {
    void (*keys_t)(GgmlType type, const void* k, int64_t n, int64_t d, float* kt, int64_t ldkt);
    void (*values)(const float* p, int64_t nq, int64_t ldp, const void* v, int64_t n, int64_t d, float* out,
                   int64_t ldo);
    bool convert_values;  // values reads F32: each block of values is converted first (block_to_f32)
};

const float* as_f32(const void* p) { return static_cast<const float*>(p); }
const uint16_t* as_f16(const void* p) { return static_cast<const uint16_t*>(p); }

// A block of n rows of `type` (F16, BF16 or quantised) converted to float in a grow-only
// thread-local buffer [n, d]; valid until the next call.
const float* block_to_f32(GgmlType type, const void* rows, int64_t n, int64_t d) {
    thread_local std::vector<float> buf;  // [kEntryBlock, d]
    if (buf.size() < static_cast<size_t>(n * d)) buf.resize(static_cast<size_t>(n * d));
    if (type == GgmlType::F16) {
        kernels::fp16_to_fp32_generic(as_f16(rows), buf.data(), n * d);
    } else {
        quant::dequantize_row(type, rows, buf.data(), n * d);
    }
    return buf.data();
}

// The 4- and 5-bit key types as Q8_0 blocks (AVX2, decoded in registers): nb blocks of `type`
// at src to nb Q8_0 blocks at dst (34 bytes each: the same fp16 scale, 32 int8), exactly:
//   Q4_0: q - 8,  Q5_0: (q | fifth bit << 4) - 16,  IQ4_NL: kIq4nlValues[q]   (x = d * int8)
//   Q4_1: q,      Q5_1: q | fifth bit << 4          (x = d * int8 + m; m is left in mins[nb])
// so that the Q8_0 int8 kernels score them; the min term of Q4_1 / Q5_1 is added by the caller.
// Returns false for other types. The scalar reference is quant::dequantize_row (tests compare).
#if defined(__x86_64__) || defined(_M_X64)
#define KVEC_AVX2_FN __attribute__((target("avx2,fma,f16c")))
#else
#define KVEC_AVX2_FN
#endif
KVEC_AVX2_FN bool blocks_as_q8_0_avx2(GgmlType type, const uint8_t* src, int64_t nb, uint8_t* dst, float* mins) {
#if defined(__x86_64__) || defined(_M_X64)
    size_t bytes = 0, qs = 0, qh = 0;  // block size, offsets of the nibbles and of the fifth bits
    bool has_min = false;
    switch (type) {
        case GgmlType::Q4_0: bytes = 18, qs = 2; break;
        case GgmlType::IQ4_NL: bytes = 18, qs = 2; break;
        case GgmlType::Q4_1: bytes = 20, qs = 4, has_min = true; break;
        case GgmlType::Q5_0: bytes = 22, qh = 2, qs = 6; break;
        case GgmlType::Q5_1: bytes = 24, qh = 4, qs = 8, has_min = true; break;
        default: return false;
    }
    const __m128i lo4 = _mm_set1_epi8(0x0F);
    const __m128i grid = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4nlValues));
    const __m128i bitmask = _mm_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
    const __m128i spread = _mm_set_epi8(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m128i shift = _mm_set1_epi8(static_cast<char>(type == GgmlType::Q4_0 ? 8 : type == GgmlType::Q5_0 ? 16 : 0));
    for (int64_t b = 0; b < nb; ++b, src += bytes, dst += 34) {
        std::memcpy(dst, src, 2);  // the fp16 scale
        if (has_min) {
            uint16_t m;
            std::memcpy(&m, src + 2, 2);
            mins[b] = fp16_to_float(m);
        }
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + qs));
        __m128i lo = _mm_and_si128(raw, lo4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), lo4);
        if (qh != 0) {
            uint32_t h;
            std::memcpy(&h, src + qh, 4);
            const __m128i h_lo = _mm_shuffle_epi8(_mm_set1_epi16(static_cast<int16_t>(h)), spread);
            const __m128i h_hi = _mm_shuffle_epi8(_mm_set1_epi16(static_cast<int16_t>(h >> 16)), spread);
            lo = _mm_or_si128(lo, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h_lo, bitmask), bitmask), _mm_set1_epi8(0x10)));
            hi = _mm_or_si128(hi, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h_hi, bitmask), bitmask), _mm_set1_epi8(0x10)));
        }
        if (type == GgmlType::IQ4_NL) {
            lo = _mm_shuffle_epi8(grid, lo);
            hi = _mm_shuffle_epi8(grid, hi);
        } else {
            lo = _mm_sub_epi8(lo, shift);
            hi = _mm_sub_epi8(hi, shift);
        }
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2), lo);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 18), hi);
    }
    return true;
#else
    (void)type, (void)src, (void)nb, (void)dst, (void)mins;
    return false;
#endif
}

// Keys: F32 and F16 transposed in place; any other type dequantised block by block first.
void keys_t_f32_avx2(GgmlType, const void* k, int64_t n, int64_t d, float* kt, int64_t ldkt) {
    kernels::keys_t_f32_avx2(as_f32(k), n, d, kt, ldkt);
}
void keys_t_f16_avx2(GgmlType, const void* k, int64_t n, int64_t d, float* kt, int64_t ldkt) {
    kernels::keys_t_f16_avx2(as_f16(k), n, d, kt, ldkt);
}
void keys_t_dequant_avx2(GgmlType type, const void* k, int64_t n, int64_t d, float* kt, int64_t ldkt) {
    kernels::keys_t_f32_avx2(block_to_f32(type, k, n, d), n, d, kt, ldkt);
}
void keys_t_f32_generic(GgmlType, const void* k, int64_t n, int64_t d, float* kt, int64_t ldkt) {
    kernels::keys_t_f32_generic(as_f32(k), n, d, kt, ldkt);
}
void keys_t_f16_generic(GgmlType, const void* k, int64_t n, int64_t d, float* kt, int64_t ldkt) {
    kernels::keys_t_f16_generic(as_f16(k), n, d, kt, ldkt);
}
void keys_t_dequant_generic(GgmlType type, const void* k, int64_t n, int64_t d, float* kt, int64_t ldkt) {
    kernels::keys_t_f32_generic(block_to_f32(type, k, n, d), n, d, kt, ldkt);
}

// Values: F32 (and, on AVX2, F16) read in place; any other type converted to F32 once per block
// of entries (BlockKernels::convert_values) for every position that reads the block.
void values_f32_avx2(const float* p, int64_t nq, int64_t ldp, const void* v, int64_t n, int64_t d, float* out,
                     int64_t ldo) {
    kernels::attention_values_f32_avx2(p, nq, ldp, as_f32(v), n, d, out, ldo);
}
void values_f16_avx2(const float* p, int64_t nq, int64_t ldp, const void* v, int64_t n, int64_t d, float* out,
                     int64_t ldo) {
    kernels::attention_values_f16_avx2(p, nq, ldp, as_f16(v), n, d, out, ldo);
}
void values_f32_generic(const float* p, int64_t nq, int64_t ldp, const void* v, int64_t n, int64_t d, float* out,
                        int64_t ldo) {
    kernels::attention_values_generic(p, nq, ldp, as_f32(v), n, d, out, ldo);
}

BlockKernels block_kernels(const KvHeadData& kv) {
    const GgmlType kt = kv.key_type, vt = kv.value_type;
    if (active_cpu_kernel() == CpuKernel::Avx2) {
        return {kt == GgmlType::F32 ? keys_t_f32_avx2 : kt == GgmlType::F16 ? keys_t_f16_avx2 : keys_t_dequant_avx2,
                vt == GgmlType::F16 ? values_f16_avx2 : values_f32_avx2, vt != GgmlType::F32 && vt != GgmlType::F16};
    }
    return {kt == GgmlType::F32 ? keys_t_f32_generic : kt == GgmlType::F16 ? keys_t_f16_generic : keys_t_dequant_generic,
            values_f32_generic, vt != GgmlType::F32};
}

// Quantised keys: the scores of a block are int8 dot products (int8_gemm.h) of the query rows,
// quantised once per call (query_q8), with the keys read from their blocks (no float copy):
//   Q8_0, AVX-512 VNNI:  int8::gemm_q8_0_vnni (the blocks in place, as Q8_0 weights are read)
//   Q8_0, AVX2:          int8::gemm_q8_0_avx2
//   Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: the block of keys turned into Q8_0 blocks in registers
//                        (blocks_as_q8_0_avx2, exact; once per call), then the Q8_0 kernel of the
//                        CPU, plus m * (the query block's sum) for the types with a min
//   other types, VNNI:   int8::gemm_vnni_packed, each 16 keys packed into a panel from their blocks
//                        in registers (int8::decode::panel_packer, as for quantised weights)
//   other types, AVX2:   each key's blocks unpacked to int8 (int8::unpack_blocks), int8::gemm_avx2
//   generic:             the same panel, the scalar int8::gemm_ref (the reference of all of them)
// as llama.cpp's vec_dot_qX_q8_0 for a quantised K cache. Every path computes gemm_ref's integer
// sums, so they agree up to float rounding of the scale products.
//   y[i * ldy + j] = dot(query row i, key j)   for i < nq, j < n
struct KeyScorer {
    enum class Path { Float, Q8_0Vnni, Q8_0Avx2, AsQ8_0, PackedVnni, PanelAvx2, PanelRef };
    Path path = Path::Float;
    GgmlType type = GgmlType::F16;
    int8::PanelPacker packer = nullptr;
    bool has_min = false;

    explicit KeyScorer(GgmlType t) : type(t) {
        if (!int8::has_panel_form(t)) return;  // F32, F16, BF16: float scores
        has_min = int8::panel_has_min(t);
        if (active_cpu_kernel() != CpuKernel::Avx2) {
            path = Path::PanelRef;
        } else if (int8::vnni_enabled() && t == GgmlType::Q8_0) {
            path = Path::Q8_0Vnni;
        } else if (t == GgmlType::Q8_0) {
            path = Path::Q8_0Avx2;
        } else if (t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 ||
                   t == GgmlType::IQ4_NL) {
            path = Path::AsQ8_0;
        } else if (int8::vnni_enabled() && (packer = int8::decode::panel_packer(t)) != nullptr) {
            path = Path::PackedVnni;
        } else {
            path = Path::PanelAvx2;
        }
    }
    bool int8() const { return path != Path::Float; }

    // One position over Q8_0 keys: each key read once for all the query rows, in place
    // (int8::scores_q8_0_vnni / _avx2), the values prefetched as it goes; same contract as
    // operator() below, for the Q8_0 paths only (q8_0_in_place()).
    bool q8_0_in_place() const { return path == Path::Q8_0Vnni || path == Path::Q8_0Avx2; }
    void one_position(const int8::QuantRows& x, int64_t nq, const uint8_t* k, size_t row_bytes, int64_t n, float* y,
                      int64_t ldy, const kernels::ValuePrefetch& values) const {
        (path == Path::Q8_0Vnni ? int8::scores_q8_0_vnni : int8::scores_q8_0_avx2)(x, nq, k, row_bytes, n, y, ldy,
                                                                                values);
    }

    // Path::AsQ8_0: the n keys (rows of whole blocks, contiguous) as Q8_0 blocks, scored in place.
    void as_q8_0(const int8::QuantRows& x, int64_t nq, const uint8_t* k, int64_t n, float* y, int64_t ldy) const {
        const int64_t nb = x.k / int8::kBlock;
        thread_local std::vector<uint8_t> q8;  // [kEntryBlock, nb] Q8_0 blocks
        thread_local std::vector<float> mins;  // [kEntryBlock, nb] (Q4_1, Q5_1)
        q8.resize(static_cast<size_t>(n * nb * 34));
        mins.resize(static_cast<size_t>(n * nb));
        KVEC_CHECK(blocks_as_q8_0_avx2(type, k, n * nb, q8.data(), mins.data()));
        (int8::vnni_enabled() ? int8::gemm_q8_0_vnni : int8::gemm_q8_0_avx2)(x, nq, q8.data(),
                                                                             static_cast<size_t>(nb * 34), n, y, ldy);
        if (!has_min) return;
        for (int64_t i = 0; i < nq; ++i) {
            const float* hs = x.hsum + i * nb * 2;  // [nb, 2] d_x * the query's half-block sums
            for (int64_t j = 0; j < n; ++j) {
                float add = 0.0f;
                for (int64_t b = 0; b < nb; ++b) add += mins[static_cast<size_t>(j * nb + b)] * (hs[2 * b] + hs[2 * b + 1]);
                y[i * ldy + j] += add;
            }
        }
    }

    void operator()(const int8::QuantRows& x, int64_t nq, const uint8_t* k, size_t row_bytes, int64_t n, float* y,
                    int64_t ldy) const {
        switch (path) {
            case Path::Q8_0Vnni: int8::gemm_q8_0_vnni(x, nq, k, row_bytes, n, y, ldy); return;
            case Path::Q8_0Avx2: int8::gemm_q8_0_avx2(x, nq, k, row_bytes, n, y, ldy); return;
            case Path::PackedVnni: int8::gemm_vnni_packed(x, nq, packer, has_min, k, row_bytes, n, y, ldy); return;
            case Path::AsQ8_0: as_q8_0(x, nq, k, n, y, ldy); return;
            default: break;
        }
        const int64_t nb = x.k / int8::kBlock;
        thread_local std::vector<int8_t> q;     // [kEntryBlock, d]
        thread_local std::vector<float> scale;  // [kEntryBlock, nb, 2]
        thread_local std::vector<float> min;    // [kEntryBlock, nb, 2]
        q.resize(static_cast<size_t>(n * x.k));
        scale.resize(static_cast<size_t>(n * nb * 2));
        min.resize(has_min ? static_cast<size_t>(n * nb * 2) : 0);
        for (int64_t j = 0; j < n; ++j) {
            int8::unpack_blocks(type, k + static_cast<size_t>(j) * row_bytes, nb, q.data() + j * x.k,
                                scale.data() + j * nb * 2, has_min ? min.data() + j * nb * 2 : nullptr);
        }
        const int8::Panel panel{q.data(), scale.data(), has_min ? min.data() : nullptr, x.k};
        (path == Path::PanelAvx2 ? int8::gemm_avx2 : int8::gemm_ref)(x, nq, panel, n, y, ldy);
    }
};

// The n_pos * nq query rows (position t, row i at q + t * ld_pos + i * ld_row) quantised for the
// int8 scores (int8::quantize_row_ref, or quantize_rows_avx2 with the same bytes): row t * nq + i
// of q [rows, d], d [rows, d / 32], hsum [rows, d / 32, 2] and qsum [rows, d / 32, 2] (the VNNI
// kernels); thread-local buffers, valid until the next call.
struct QueryQ8 {
    std::vector<int8_t> q;
    std::vector<float> d, hsum;
    std::vector<int32_t> qsum;
    int64_t k = 0;
    int8::QuantRows rows(int64_t first) const {
        const int64_t nb = k / int8::kBlock;
        int8::QuantRows r;
        r.q = q.data() + first * k;
        r.d = d.data() + first * nb;
        r.hsum = hsum.data() + first * nb * 2;
        r.qsum = qsum.data() + first * nb * 2;
        r.k = k;
        return r;
    }
};

const QueryQ8& query_q8(const float* q, RowLayout q_at, int64_t n_pos, int64_t nq, int64_t D) {
    thread_local QueryQ8 qq;
    const int64_t rows = n_pos * nq, nb = D / int8::kBlock;
    qq.k = D;
    qq.q.resize(static_cast<size_t>(rows * D));
    qq.d.resize(static_cast<size_t>(rows * nb));
    qq.hsum.resize(static_cast<size_t>(rows * nb * 2));
    qq.qsum.resize(static_cast<size_t>(rows * nb * 2));
    // The AVX2 quantisation gives the reference's bytes and scales exactly (test_int8).
    const bool avx2 = active_cpu_kernel() == CpuKernel::Avx2;
    for (int64_t t = 0; t < n_pos; ++t) {
        for (int64_t i = 0; i < nq; ++i) {
            const int64_t r = t * nq + i;
            const float* row = q + t * q_at.ld_pos + i * q_at.ld_row;  // [D]
            int8_t* q8 = qq.q.data() + r * D;
            float* d = qq.d.data() + r * nb;
            float* hsum = qq.hsum.data() + r * nb * 2;
            int32_t* qsum = qq.qsum.data() + r * nb * 2;
            if (avx2) {
                int8::quantize_rows_avx2(row, 1, D, q8, d, hsum, qsum);
            } else {
                int8::quantize_row_ref(row, D, q8, d, hsum, qsum);
            }
        }
    }
    return qq;
}

// Entry j of an array of rows of row_bytes bytes.
const void* entry(const void* rows, int32_t j, size_t row_bytes) {
    return static_cast<const uint8_t*>(rows) + static_cast<size_t>(j) * row_bytes;
}

int32_t round_up8(int32_t n) { return (n + 7) / 8 * 8; }

// Row strides of the float copies of a block (the transposed keys, the values): 16 floats past
// the row, so that a row is an odd number of 64-byte lines for the usual head sizes (64, 128,
// 256 floats) and a column strip's rows spread over every L1 set (kernels::rows_times_panel_*).
int64_t padded(int64_t n) { return n + 16; }

// A grow-only thread-local float buffer of n floats in `buf`, starting on a 64-byte line.
float* aligned_floats(std::vector<float>& buf, int64_t n) {
    buf.resize(static_cast<size_t>(n + 16));
    const auto at = reinterpret_cast<uintptr_t>(buf.data());
    return buf.data() + (64 - at % 64) % 64 / sizeof(float);
}

// n rows of `type` (d elements each, one after the other) as float rows ld floats apart at dst:
// F16 through F16C, F32 copied, any other type by quant::dequantize_row. AVX2 builds' F16C.
void rows_to_f32_avx2(GgmlType type, const void* rows, int32_t n, int64_t d, float* dst, int64_t ld) {
    const size_t row_bytes = ggml_row_size(type, d);
    for (int32_t j = 0; j < n; ++j) {
        const void* row = entry(rows, j, row_bytes);
        if (type == GgmlType::F16) {
            kernels::fp16_to_fp32_f16c(as_f16(row), dst + j * ld, d);
        } else if (type == GgmlType::F32) {
            std::copy_n(as_f32(row), d, dst + j * ld);
        } else {
            quant::dequantize_row(type, row, dst + j * ld, d);
        }
    }
}

// The rows of a block of positions t0 .. t1 - 1 (nq each, row r = (t - t0) * nq + i) as pointers
// for kernels::rows_times_panel_*; valid until the next call on this thread.
template <class T>
T* const* row_pointers(std::vector<T*>& rows, T* base, int64_t n_pos, int64_t nq, RowLayout at) {
    rows.resize(static_cast<size_t>(n_pos * nq));
    for (int64_t t = 0; t < n_pos; ++t) {
        for (int64_t i = 0; i < nq; ++i) rows[static_cast<size_t>(t * nq + i)] = base + t * at.ld_pos + i * at.ld_row;
    }
    return rows.data();
}

void check_args(int64_t n_pos, int64_t nq, const KvHeadData& kv, int32_t n_vis, int64_t ldp, bool values) {
    KVEC_CHECK(n_pos >= 1 && nq >= 0 && kv.head_dim > 0 && kv.keys != nullptr && n_vis >= 1 &&
               ldp >= n_vis + n_pos - 1 && (!values || kv.values != nullptr));
}

}  // namespace

KvHeadData KvHeadData::from(int32_t first) const {
    KvHeadData d = *this;
    d.keys = entry(keys, first, ggml_row_size(key_type, head_dim));
    if (values != nullptr) d.values = entry(values, first, ggml_row_size(value_type, head_dim));
    return d;
}

void attention_causal(const float* q, RowLayout q_at, int64_t n_pos, int64_t nq,
                      const KvHeadData& kv, int32_t n_vis, float scale, float* p, int64_t ldp,
                      float* out, RowLayout out_at, float softcap, const float* sinks, int32_t window,
                      float* lse) {
    check_args(n_pos, nq, kv, n_vis, ldp, out != nullptr);
    KVEC_CHECK(softcap >= 0.0f && window >= 0);
    const BlockKernels k = block_kernels(kv);
    const int64_t D = kv.head_dim;
    const size_t key_row = ggml_row_size(kv.key_type, D), value_row = ggml_row_size(kv.value_type, D);
    const auto n_last = static_cast<int32_t>(n_vis + n_pos - 1);  // entries the last position sees
    auto vis = [&](int64_t t) { return static_cast<int32_t>(n_vis + t); };
    auto p_row = [&](int64_t t, int64_t i) { return p + (t * nq + i) * ldp; };  // [vis(t)]
    // The first position that sees entry j0 (position t sees the entries j < vis(t)).
    auto first_pos = [&](int32_t j0) { return std::max<int64_t>(0, j0 - n_vis + 1); };

    // One position (a decode step): F32/F16 keys read in place, one dot product per entry (no
    // transposition); with AVX-512 16 lanes wide and the values too, else 8 (kernels.h).
    const bool direct = n_pos == 1 && active_cpu_kernel() == CpuKernel::Avx2;
    const bool direct_512 = direct && kernels::attention_direct_avx512(kv.key_type, D);
    const bool direct_keys = direct_512 || (direct && kernels::attention_direct_avx2(kv.key_type, D));
    const bool direct_values = direct && out != nullptr && kernels::values_direct_avx512(kv.value_type, D);
    // A block of positions: the rows of a group of positions per call against the transposed
    // keys, and against each block of values converted to float, 16 lanes wide with AVX-512, else 8.
    const bool avx2 = active_cpu_kernel() == CpuKernel::Avx2;
    const auto panel = avx2 && kernels::avx512_enabled() ? kernels::rows_times_panel_avx512
                                                         : kernels::rows_times_panel_avx2;

    // Scores, block by block: the block's keys transposed once, then every position that sees
    // some of them. Quantised keys: int8 dot products with the query rows quantised once.
    const KeyScorer int8_scores(kv.key_type);
    const QueryQ8* qq = int8_scores.int8() ? &query_q8(q, q_at, n_pos, nq, D) : nullptr;
    // The int8 scores take kPosGroup positions per call (their nq rows each), so that the key
    // blocks are unpacked or packed once per group rather than once per position; the group's
    // entries up to its last position's are scored and each position keeps its visible ones.
    constexpr int64_t kPosGroup = 16;
    thread_local std::vector<float> kt_buf, y;  // [D, ldkt], [kPosGroup * nq, kEntryBlock]
    thread_local std::vector<const float*> a_rows;  // [rows of one call]
    thread_local std::vector<float*> y_rows;        // [rows of one call]
    const int64_t ldkt = padded(kEntryBlock);
    float* kt = aligned_floats(kt_buf, D * ldkt);
    y.resize(static_cast<size_t>(kPosGroup * nq * kEntryBlock));
    // The values stream in while the keys are scored (nothing to prefetch without values).
    const kernels::ValuePrefetch values_ahead{out != nullptr ? static_cast<const char*>(kv.values) : nullptr,
                                              value_row};
    if (direct_keys) {
        (direct_512 ? kernels::attention_scores_direct_avx512 : kernels::attention_scores_direct_avx2)(
            kv.key_type, q, nq, q_at.ld_row, kv.keys, n_vis, D, p, ldp, values_ahead);
    } else if (n_pos == 1 && int8_scores.q8_0_in_place()) {
        int8_scores.one_position(qq->rows(0), nq, static_cast<const uint8_t*>(kv.keys), key_row, n_vis, p, ldp,
                                 values_ahead);
    } else {
        for (int32_t j0 = 0; j0 < n_last; j0 += kEntryBlock) {
            const int32_t n = std::min(kEntryBlock, n_last - j0);
            const auto* keys = static_cast<const uint8_t*>(entry(kv.keys, j0, key_row));
            if (!int8_scores.int8()) k.keys_t(kv.key_type, keys, n, D, kt, ldkt);
            const int64_t group = int8_scores.int8() || avx2 ? kPosGroup : 1;
            for (int64_t t0 = first_pos(j0); t0 < n_pos; t0 += group) {
                const int64_t t1 = std::min(n_pos, t0 + group);
                const int32_t n_g = std::min(n, vis(t1 - 1) - j0);  // entries the group's last position sees
                if (int8_scores.int8()) {
                    int8_scores(qq->rows(t0 * nq), (t1 - t0) * nq, keys, key_row, n_g, y.data(), kEntryBlock);
                } else if (avx2) {
                    panel((t1 - t0) * nq, row_pointers(a_rows, q + t0 * q_at.ld_pos, t1 - t0, nq, q_at), kt, ldkt, D,
                          round_up8(n_g), row_pointers(y_rows, y.data(), t1 - t0, nq, {nq * kEntryBlock, kEntryBlock}),
                          false);
                } else {
                    kernels::attention_scores_generic(q + t0 * q_at.ld_pos, nq, q_at.ld_row, kt, ldkt, D, round_up8(n_g),
                                                      y.data(), kEntryBlock);
                }
                for (int64_t t = t0; t < t1; ++t) {
                    const int32_t n_t = std::min(n, vis(t) - j0);
                    for (int64_t i = 0; i < nq; ++i) {
                        std::copy_n(y.data() + ((t - t0) * nq + i) * kEntryBlock, n_t, p_row(t, i) + j0);
                    }
                }
            }
        }
    }
    for (int64_t t = 0; t < n_pos; ++t) {
        const int32_t lo = window > 0 ? std::max(0, vis(t) - window) : 0;  // entries before the window
        for (int64_t i = 0; i < nq; ++i) {
            float* row = p_row(t, i);  // [vis(t)]
            if (softcap > 0.0f) {
                ops::softcap(row, vis(t), scale, softcap);
            } else {
                for (int32_t j = 0; j < vis(t); ++j) row[j] *= scale;
            }
            std::fill(row, row + lo, -INFINITY);  // probability 0 after the softmax
            const float l = ops::softmax(row, vis(t), sinks != nullptr ? sinks[i] : -INFINITY);
            if (lse != nullptr) lse[t * nq + i] = l;
        }
    }
    if (out == nullptr) return;

    for (int64_t t = 0; t < n_pos; ++t) {
        for (int64_t i = 0; i < nq; ++i) {
            float* o = out + t * out_at.ld_pos + i * out_at.ld_row;  // [D]
            std::fill(o, o + D, 0.0f);
        }
    }
    if (direct_values) {
        kernels::attention_values_avx512(kv.value_type, p, nq, ldp, kv.values, n_vis, D, out, out_at.ld_row);
        return;
    }
    // A block of positions: each block of values converted to float rows once (block-quantised
    // ones dequantised), then the rows of every position that sees it against them (`panel`).
    const bool panel_values = avx2 && n_pos > 1;
    // One position, block-quantised values on AVX2: read from their blocks
    // (kernels::attention_values_quant_avx2).
    const bool quant_values = avx2 && !panel_values && kernels::values_in_place_avx2(kv.value_type);
    thread_local std::vector<float> v_buf;  // [kEntryBlock, ldv]
    const int64_t ldv = padded(D);
    float* vf = panel_values ? aligned_floats(v_buf, kEntryBlock * ldv) : nullptr;
    for (int32_t j0 = 0; j0 < n_last; j0 += kEntryBlock) {
        const void* v = entry(kv.values, j0, value_row);  // [min(kEntryBlock, n_last - j0)] rows
        if (panel_values) {
            // The positions that see all of the block in one call, each position that sees part
            // of it (its own entry is in the block) alone.
            const int32_t nb = std::min(kEntryBlock, n_last - j0);
            rows_to_f32_avx2(kv.value_type, v, nb, D, vf, ldv);
            for (int64_t t = first_pos(j0); t < n_pos;) {
                const int32_t n_t = std::min(nb, vis(t) - j0);
                const int64_t t1 = n_t == nb ? n_pos : t + 1;
                panel((t1 - t) * nq,
                      row_pointers(a_rows, static_cast<const float*>(p_row(t, 0) + j0), t1 - t, nq, {nq * ldp, ldp}), vf,
                      ldv, n_t, D, row_pointers(y_rows, out + t * out_at.ld_pos, t1 - t, nq, out_at), true);
                t = t1;
            }
            continue;
        }
        if (k.convert_values && !quant_values) {
            v = block_to_f32(kv.value_type, v, std::min(kEntryBlock, n_last - j0), D);
        }
        for (int64_t t = first_pos(j0); t < n_pos; ++t) {
            const int32_t n_t = std::min(kEntryBlock, vis(t) - j0);
            if (quant_values) {
                kernels::attention_values_quant_avx2(kv.value_type, p_row(t, 0) + j0, nq, ldp,
                                                     static_cast<const uint8_t*>(v), n_t, D,
                                                     out + t * out_at.ld_pos, out_at.ld_row);
            } else {
                k.values(p_row(t, 0) + j0, nq, ldp, v, n_t, D, out + t * out_at.ld_pos, out_at.ld_row);
            }
        }
    }
}

void attention_merge(int parts, int64_t nq, int64_t head_dim, const float* lse, const float* outs,
                     const float* sinks, float* out, int64_t ldo) {
    KVEC_CHECK(parts >= 1 && nq >= 0 && head_dim > 0);
    for (int64_t i = 0; i < nq; ++i) {
        float m = sinks != nullptr ? sinks[i] : -INFINITY;
        for (int k = 0; k < parts; ++k) m = std::max(m, lse[k * nq + i]);
        double denom = sinks != nullptr ? std::exp(double{sinks[i]} - m) : 0.0;
        for (int k = 0; k < parts; ++k) denom += std::exp(double{lse[k * nq + i]} - m);
        float* o = out + i * ldo;  // [head_dim]
        std::fill(o, o + head_dim, 0.0f);
        for (int k = 0; k < parts; ++k) {
            const auto w = static_cast<float>(std::exp(double{lse[k * nq + i]} - m) / denom);
            const float* ok = outs + (k * nq + i) * head_dim;  // [head_dim]
            for (int64_t d = 0; d < head_dim; ++d) o[d] += w * ok[d];
        }
    }
}

void attention_probs(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis,
                     float scale, float* p, int64_t ldp, float softcap, const float* sinks) {
    attention_causal(q, {0, ldq}, 1, nq, kv, n_vis, scale, p, ldp, nullptr, {}, softcap, sinks);
}

void attention(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis,
               float scale, float* p, int64_t ldp, float* out, int64_t ldo, float softcap,
               const float* sinks) {
    attention_causal(q, {0, ldq}, 1, nq, kv, n_vis, scale, p, ldp, out, {0, ldo}, softcap, sinks);
}

}  // namespace kvec
