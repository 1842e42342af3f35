// Attention over one KV head's cache as stored (tensor/attention.h): every kernel (generic, AVX2
// reading F16 in place or a block of positions' rows at a time, AVX-512) against the scalar
// reference, on random shapes whose entry counts and head sizes are not multiples of the vector
// width or of the entry block, for F32 and F16 caches; BF16 and block-quantised keys and values
// (each type alone and mixed key / value types) on head sizes of whole 32-element blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "tensor/attention.h"
#include "tensor/kernels.h"
#include "tensor/matmul.h"
#include "tensor/reference.h"
#include "util/error.h"
#include "util/fp16.h"

namespace kvec {
namespace {

// One KV head's entries: random float rows, stored as the key and value types.
struct Cache {
    std::vector<float> keys_f32, values_f32;  // [n, d]: the rows (the view's storage for F32)
    std::vector<uint8_t> keys, values;        // [n] rows of the key / value type (other types)
    KvHeadData view;
};

// Rows of `type` (quant::quantize_row, row by row), or the float rows themselves for F32.
const void* store(GgmlType type, const std::vector<float>& rows, int32_t n, int d, std::vector<uint8_t>& out) {
    if (type == GgmlType::F32) return rows.data();
    const size_t row = ggml_row_size(type, d);
    out.resize(static_cast<size_t>(n) * row);
    for (int32_t j = 0; j < n; ++j) {
        quant::quantize_row(type, rows.data() + static_cast<size_t>(j) * d, out.data() + j * row, d);
    }
    return out.data();
}

Cache make_cache(GgmlType key_type, GgmlType value_type, int32_t n, int d, std::mt19937& rng) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    Cache c;
    c.keys_f32.resize(static_cast<size_t>(n) * d);
    c.values_f32.resize(c.keys_f32.size());
    for (float& x : c.keys_f32) x = dist(rng);
    for (float& x : c.values_f32) x = dist(rng);
    c.view.key_type = key_type;
    c.view.value_type = value_type;
    c.view.head_dim = d;
    c.view.keys = store(key_type, c.keys_f32, n, d, c.keys);
    c.view.values = store(value_type, c.values_f32, n, d, c.values);
    return c;
}

Cache make_cache(GgmlType type, int32_t n, int d, std::mt19937& rng) { return make_cache(type, type, n, d, rng); }

// Keys and values of one type, or of two: "q8_0" or "q8_0/q4_0".
struct TypePair {
    GgmlType k, v;
};
std::string pair_name(TypePair t) {
    const std::string k = ggml_type_traits(t.k).name, v = ggml_type_traits(t.v).name;
    return t.k == t.v ? k : k + "/" + v;
}

// Restores the CPU kernel and the AVX-512 choice made at start-up.
class KernelGuard {
public:
    KernelGuard() : saved_(active_cpu_kernel()), avx512_(kernels::avx512_enabled()) {}
    ~KernelGuard() {
        set_cpu_kernel(saved_);
        kernels::set_avx512(avx512_);
    }

private:
    CpuKernel saved_;
    bool avx512_;
};

// The kernels a test runs: generic; AVX2 with AVX-512 off (the AVX2 int8 scores of quantised
// keys); AVX2 with AVX-512 on (VNNI int8 scores), each where the CPU has it.
struct Variant {
    CpuKernel kernel;
    bool avx512;
    std::string name() const { return std::string(cpu_kernel_name(kernel)) + (avx512 ? "+avx512" : ""); }
};
std::vector<Variant> variants() {
    std::vector<Variant> v = {{CpuKernel::Generic, false}};
    if (cpu_kernel_supported(CpuKernel::Avx2)) {
        v.push_back({CpuKernel::Avx2, false});
        if (kernels::avx512_supported()) v.push_back({CpuKernel::Avx2, true});
    }
    return v;
}
void use(const Variant& v) {
    set_cpu_kernel(v.kernel);
    kernels::set_avx512(v.avx512);
}

struct Shape {
    int nq;        // query rows (the query heads of one KV head)
    int d;         // head_dim
    int32_t n;     // entries in the cache
    int32_t n_vis; // entries visible (<= n; the rest must not matter)
};

// attention() and attention_probs() of every supported kernel against ref::attention, with row
// strides larger than the rows and sentinel values around every output.
void check_shape(TypePair type, const Shape& s, uint32_t seed) {
    std::mt19937 rng(seed);
    const Cache c = make_cache(type.k, type.v, s.n, s.d, rng);
    const int64_t ldq = s.d + 3, ldp = s.n_vis + 5, ldo = s.d + 2;
    std::normal_distribution<float> dist(0.0f, 1.5f);
    std::vector<float> q(static_cast<size_t>(s.nq * ldq));  // [nq, ldq]
    for (float& x : q) x = dist(rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    constexpr float kSentinel = -7.0f;
    std::vector<float> p_ref(static_cast<size_t>(s.nq * ldp)), o_ref(static_cast<size_t>(s.nq * ldo));
    ref::attention(q.data(), s.nq, ldq, c.view, s.n_vis, scale, p_ref.data(), ldp, o_ref.data(), ldo);
    const KernelGuard guard;
    for (const Variant& k : variants()) {
        use(k);
        std::vector<float> p(static_cast<size_t>(s.nq * ldp), kSentinel);  // [nq, ldp]
        std::vector<float> o(static_cast<size_t>(s.nq * ldo), kSentinel);  // [nq, ldo]
        attention(q.data(), s.nq, ldq, c.view, s.n_vis, scale, p.data(), ldp, o.data(), ldo);
        std::vector<float> p_only(p.size(), kSentinel);
        attention_probs(q.data(), s.nq, ldq, c.view, s.n_vis, scale, p_only.data(), ldp);
        const std::string where = k.name() + " " + pair_name(type) +
                                  " nq=" + std::to_string(s.nq) + " d=" + std::to_string(s.d) +
                                  " n=" + std::to_string(s.n) + " vis=" + std::to_string(s.n_vis);
        for (int i = 0; i < s.nq; ++i) {
            for (int64_t j = 0; j < ldp; ++j) {
                const size_t at = static_cast<size_t>(i * ldp + j);
                if (j >= s.n_vis) {
                    ASSERT_EQ(p[at], kSentinel) << where << " wrote past the visible entries";
                    continue;
                }
                ASSERT_NEAR(p[at], p_ref[at], 1e-7f + 1e-5f * p_ref[at]) << where << " p[" << i << ", " << j << "]";
                ASSERT_EQ(p_only[at], p[at]) << where << " attention_probs differs from attention";
            }
            // |out - ref| <= (float rounding) x sum_j p_j |v_j|, and the values are ~N(0, 1).
            for (int64_t e = 0; e < ldo; ++e) {
                const size_t at = static_cast<size_t>(i * ldo + e);
                if (e >= s.d) {
                    ASSERT_EQ(o[at], kSentinel) << where << " wrote past the head";
                    continue;
                }
                ASSERT_NEAR(o[at], o_ref[at], 1e-5f) << where << " out[" << i << ", " << e << "]";
            }
        }
    }
}

class AttentionTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(AttentionTypes, EveryKernelMatchesReferenceOnRandomShapes) {
    const GgmlType type = GetParam();
    // Fixed edge shapes: one entry, a block boundary (kEntryBlock = 128) +- 1, head sizes with
    // tails of 1..7 elements past a multiple of 8, 1..9 query rows (4-row tiles and remainders).
    const std::vector<Shape> edges = {
        {1, 64, 1, 1},    {8, 64, 128, 128}, {8, 64, 129, 129}, {3, 64, 300, 127},
        {5, 7, 17, 17},   {2, 24, 40, 33},   {9, 130, 70, 70},  {4, 16, 257, 256},
        {1, 128, 513, 513}, {6, 1, 9, 9},
    };
    uint32_t seed = 1;
    for (const Shape& s : edges) check_shape({type, type}, s, seed++);
    std::mt19937 rng(42);
    std::uniform_int_distribution<int> nq(1, 9), d(1, 140), n(1, 600);
    for (int r = 0; r < 30; ++r) {
        Shape s{nq(rng), d(rng), n(rng), 0};
        s.n_vis = std::uniform_int_distribution<int32_t>(1, s.n)(rng);
        check_shape({type, type}, s, seed++);
    }
}

INSTANTIATE_TEST_SUITE_P(CacheTypes, AttentionTypes, ::testing::Values(GgmlType::F32, GgmlType::F16),
                         [](const auto& info) { return std::string(ggml_type_traits(info.param).name); });

// attention_causal over a block of positions: position t, with n_vis + t entries, against
// ref::attention of that position alone; the query and output rows at strides like the engine's
// (positions ld_pos apart, heads ld_row apart), sentinels past every row's visible entries.
void check_causal(TypePair type, int nq, int d, int n_pos, int32_t n_vis, uint32_t seed,
                  float softcap = 0.0f, float q_std = 1.5f, const float* sinks = nullptr, int32_t window = 0) {
    std::mt19937 rng(seed);
    const int32_t n = n_vis + n_pos - 1;
    const Cache c = make_cache(type.k, type.v, n, d, rng);
    const RowLayout q_at{int64_t{nq} * (d + 1) + 5, d + 1}, o_at{int64_t{nq} * (d + 2) + 3, d + 2};
    const int64_t ldp = n + 3;
    std::normal_distribution<float> dist(0.0f, q_std);
    std::vector<float> q(static_cast<size_t>(n_pos * q_at.ld_pos));  // [n_pos, ld_pos]
    for (float& x : q) x = dist(rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    constexpr float kSentinel = -7.0f;
    const KernelGuard guard;
    for (const Variant& k : variants()) {
        use(k);
        std::vector<float> p(static_cast<size_t>(n_pos * nq * ldp), kSentinel);   // [n_pos * nq, ldp]
        std::vector<float> o(static_cast<size_t>(n_pos * o_at.ld_pos), kSentinel);  // [n_pos, ld_pos]
        attention_causal(q.data(), q_at, n_pos, nq, c.view, n_vis, scale, p.data(), ldp, o.data(),
                         o_at, softcap, sinks, window);
        std::vector<float> p_only(p.size(), kSentinel);
        attention_causal(q.data(), q_at, n_pos, nq, c.view, n_vis, scale, p_only.data(), ldp,
                         nullptr, {}, softcap, sinks, window);
        ASSERT_EQ(p_only, p) << "probabilities only differ from attention_causal's";
        for (int t = 0; t < n_pos; ++t) {
            const int32_t vis = n_vis + t;
            // With a window, the reference attends to the window's entries alone.
            const int32_t lo = window > 0 ? std::max(0, vis - window) : 0;
            KvHeadData seen = c.view;
            seen.keys = static_cast<const uint8_t*>(c.view.keys) + ggml_row_size(c.view.key_type, d) * lo;
            seen.values = static_cast<const uint8_t*>(c.view.values) + ggml_row_size(c.view.value_type, d) * lo;
            std::vector<float> p_seen(static_cast<size_t>(nq * (vis - lo))), o_ref(static_cast<size_t>(nq * d));
            ref::attention(q.data() + t * q_at.ld_pos, nq, q_at.ld_row, seen, vis - lo, scale,
                           p_seen.data(), vis - lo, o_ref.data(), d, softcap, sinks);
            std::vector<float> p_ref(static_cast<size_t>(nq * vis), 0.0f);  // [nq, vis]: 0 before the window
            for (int i = 0; i < nq; ++i) {
                std::copy_n(p_seen.data() + i * (vis - lo), vis - lo, p_ref.data() + i * vis + lo);
            }
            const std::string where =
                k.name() + " " + pair_name(type) + " softcap=" + std::to_string(softcap) +
                (sinks != nullptr ? " sinks" : "") + " nq=" + std::to_string(nq) +
                " d=" + std::to_string(d) + " n_pos=" + std::to_string(n_pos) +
                " n_vis=" + std::to_string(n_vis) + " t=" + std::to_string(t);
            for (int i = 0; i < nq; ++i) {
                const float* row = p.data() + (int64_t{t} * nq + i) * ldp;
                for (int64_t j = 0; j < ldp; ++j) {
                    if (j >= vis) {
                        ASSERT_EQ(row[j], kSentinel) << where << " wrote past the visible entries";
                        continue;
                    }
                    const float want = p_ref[static_cast<size_t>(i * vis + j)];
                    ASSERT_NEAR(row[j], want, 1e-7f + 1e-5f * want) << where << " p[" << i << ", " << j << "]";
                }
                const float* out = o.data() + t * o_at.ld_pos + i * o_at.ld_row;
                for (int64_t e = 0; e < o_at.ld_row; ++e) {
                    if (e >= d) {
                        ASSERT_EQ(out[e], kSentinel) << where << " wrote past the head";
                        continue;
                    }
                    ASSERT_NEAR(out[e], o_ref[static_cast<size_t>(i * d + e)], 1e-5f)
                        << where << " out[" << i << ", " << e << "]";
                }
            }
        }
    }
}

TEST_P(AttentionTypes, CausalBlocksOfPositionsMatchTheReferencePerPosition) {
    const GgmlType type = GetParam();
    // Block boundaries (kEntryBlock = 128) crossed inside the block of positions, a first
    // position that sees one entry, head sizes with tails, one position (the decode case).
    const struct { int nq, d, n_pos; int32_t n_vis; } edges[] = {
        {8, 64, 16, 1}, {8, 64, 16, 120}, {8, 64, 1, 300}, {4, 64, 9, 128}, {3, 7, 5, 17}, {1, 130, 20, 250},
        {2, 24, 33, 96},
    };
    uint32_t seed = 100;
    for (const auto& e : edges) check_causal({type, type}, e.nq, e.d, e.n_pos, e.n_vis, seed++);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> nq(1, 9), d(1, 100), n_pos(1, 20), n_vis(1, 400);
    for (int r = 0; r < 12; ++r) check_causal({type, type}, nq(rng), d(rng), n_pos(rng), n_vis(rng), seed++);
}

// A block of positions each masked to its own last `window` entries (a sliding-window layer's
// prefill in one call): every kernel and cache type against the reference over the window alone,
// probabilities 0 before it; windows smaller than the block, crossing the 128-entry blocks, wider
// than every row (no mask), with soft-capping and sinks.
TEST(WindowedAttention, EveryKernelMatchesReferenceOverTheWindow) {
    uint32_t seed = 500;
    const std::vector<float> sinks = {0.5f, -2.0f, 3.0f, 1.0f};  // [4 query rows]
    for (const TypePair t : {TypePair{GgmlType::F32, GgmlType::F32}, TypePair{GgmlType::F16, GgmlType::F16},
                             TypePair{GgmlType::Q8_0, GgmlType::Q4_0}}) {
        check_causal(t, 4, 64, 16, 100, seed++, 0.0f, 1.5f, nullptr, 8);     // window < block of positions
        check_causal(t, 4, 64, 33, 200, seed++, 0.0f, 1.5f, nullptr, 130);   // crosses entry blocks
        check_causal(t, 2, 96, 9, 1, seed++, 0.0f, 1.5f, nullptr, 4);        // from the first entry
        check_causal(t, 4, 64, 9, 40, seed++, 0.0f, 1.5f, nullptr, 512);     // wider than every row
        check_causal(t, 4, 64, 12, 150, seed++, 5.0f, 6.0f, sinks.data(), 64);  // softcap and sinks
    }
}

// Soft-capped scores (gemma2: cap * tanh(scale q.k / cap) before the softmax): every kernel, the
// float and the int8 score paths, against the reference, with queries large enough that the cap
// saturates (scaled scores up to ~10 against caps of 1, 5 and 50); the cap changes the
// probabilities (checked against the uncapped reference).
TEST(SoftCappedAttention, EveryKernelMatchesReference) {
    uint32_t seed = 300;
    for (const float cap : {1.0f, 5.0f, 50.0f}) {
        for (const GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0}) {
            check_causal({t, t}, 4, 64, 9, 120, seed++, cap, 6.0f);
            check_causal({t, t}, 2, 96, 1, 300, seed++, cap, 6.0f);
        }
    }
    std::mt19937 rng(9);
    const Cache c = make_cache(GgmlType::F32, GgmlType::F32, 50, 64, rng);
    std::normal_distribution<float> dist(0.0f, 6.0f);
    std::vector<float> q(64);
    for (float& x : q) x = dist(rng);
    std::vector<float> capped(50), plain(50), o(64);
    attention(q.data(), 1, 64, c.view, 50, 0.125f, capped.data(), 50, o.data(), 64, 1.0f);
    attention(q.data(), 1, 64, c.view, 50, 0.125f, plain.data(), 50, o.data(), 64);
    float diff = 0.0f;
    for (int j = 0; j < 50; ++j) diff = std::max(diff, std::fabs(capped[j] - plain[j]));
    EXPECT_GT(diff, 0.05f) << "a cap of 1 did not change the probabilities";
}

// Attention sinks (gpt-oss: one logit per query head in the softmax's denominator, no value):
// every kernel, the float and the int8 score paths and block-quantised values, against the
// reference, with sinks below, near and above the rows' scores, combined with soft-capping too;
// the sinks take mass from the entries (rows sum to less than 1, and less than without sinks).
TEST(SinkAttention, EveryKernelMatchesReference) {
    uint32_t seed = 400;
    const std::vector<float> sinks = {-20.0f, 0.0f, 1.5f, 4.0f,
                                      -1.0f,  8.0f, 0.3f, 2.5f};  // [8 query rows]
    for (const TypePair t :
         {TypePair{GgmlType::F32, GgmlType::F32}, TypePair{GgmlType::F16, GgmlType::F16},
          TypePair{GgmlType::Q8_0, GgmlType::Q8_0}, TypePair{GgmlType::Q4_0, GgmlType::Q4_0},
          TypePair{GgmlType::Q8_0, GgmlType::F16}, TypePair{GgmlType::BF16, GgmlType::Q5_1}}) {
        check_causal(t, 8, 64, 9, 120, seed++, 0.0f, 1.5f, sinks.data());
        check_causal(t, 4, 64, 16, 1, seed++, 0.0f, 1.5f, sinks.data());
        check_causal(t, 2, 96, 1, 300, seed++, 0.0f, 4.0f, sinks.data());
        check_causal(t, 4, 64, 5, 130, seed++, 5.0f, 6.0f, sinks.data());
    }
    std::mt19937 rng(19);
    const Cache c = make_cache(GgmlType::F16, GgmlType::F16, 40, 64, rng);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> q(2 * 64);  // [2, 64]
    for (float& x : q) x = dist(rng);
    std::vector<float> with(2 * 40), plain(2 * 40), o(2 * 64);
    const float two[] = {2.0f, -50.0f};
    attention(q.data(), 2, 64, c.view, 40, 0.125f, with.data(), 40, o.data(), 64, 0.0f, two);
    attention(q.data(), 2, 64, c.view, 40, 0.125f, plain.data(), 40, o.data(), 64);
    double sum_with = 0, sum_plain = 0, sum_far = 0;
    for (int j = 0; j < 40; ++j) {
        sum_with += with[static_cast<size_t>(j)];
        sum_plain += plain[static_cast<size_t>(j)];
        sum_far += with[static_cast<size_t>(40 + j)];
        EXPECT_LT(with[static_cast<size_t>(j)], plain[static_cast<size_t>(j)]);
        EXPECT_NEAR(with[static_cast<size_t>(40 + j)], plain[static_cast<size_t>(40 + j)], 1e-6f)
            << "a sink far below the scores changes nothing";
    }
    EXPECT_NEAR(sum_plain, 1.0, 1e-5);
    EXPECT_LT(sum_with, 0.95) << "a sink logit of 2 against scores ~N(0, 1) takes a visible share";
    EXPECT_NEAR(sum_far, 1.0, 1e-5);
}

// One position's entries cut into slices, each attended on its own with its rows' log-sum-exps,
// then merged (attention_merge, the decode split over threads): the attention over all of them,
// for every kernel, float and quantised caches, with soft-capping and sinks; one slice's lse is
// log sum_j exp(s_j) itself. A merge that dropped a slice's weight or the sink fails.
TEST(SplitAttention, SlicesMergedMatchTheWholeRow) {
    const std::vector<float> sinks = {-1.0f, 2.0f, 0.5f, 6.0f};  // [4 query rows]
    uint32_t seed = 700;
    const KernelGuard guard;
    for (const TypePair t : {TypePair{GgmlType::F32, GgmlType::F32}, TypePair{GgmlType::F16, GgmlType::F16},
                             TypePair{GgmlType::Q8_0, GgmlType::Q8_0}, TypePair{GgmlType::BF16, GgmlType::Q5_1}}) {
        for (const int d : {64, 256}) {
            for (const int32_t n : {300, 517}) {
                for (const int parts : {1, 2, 3, 5}) {
                    for (const bool with_sinks : {false, true}) {
                        const float softcap = parts == 3 ? 5.0f : 0.0f;
                        const float* sk = with_sinks ? sinks.data() : nullptr;
                        const int nq = 4;
                        std::mt19937 rng(seed++);
                        const Cache c = make_cache(t.k, t.v, n, d, rng);
                        std::normal_distribution<float> dist(0.0f, 1.5f);
                        std::vector<float> q(static_cast<size_t>(nq * d));  // [nq, d]
                        for (float& x : q) x = dist(rng);
                        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
                        std::vector<float> p_ref(static_cast<size_t>(nq * n)), o_ref(static_cast<size_t>(nq * d));
                        ref::attention(q.data(), nq, d, c.view, n, scale, p_ref.data(), n, o_ref.data(), d, softcap, sk);
                        for (const Variant& k : variants()) {
                            use(k);
                            std::vector<float> p(static_cast<size_t>(nq * n));
                            std::vector<float> lse(static_cast<size_t>(parts * nq));        // [parts, nq]
                            std::vector<float> outs(static_cast<size_t>(parts * nq * d));   // [parts, nq, d]
                            for (int part = 0; part < parts; ++part) {
                                const int32_t j0 = n * part / parts, j1 = n * (part + 1) / parts;
                                attention_causal(q.data(), {0, d}, 1, nq, c.view.from(j0), j1 - j0, scale, p.data(), n,
                                                 outs.data() + int64_t{part} * nq * d, {0, d}, softcap, nullptr, 0,
                                                 lse.data() + int64_t{part} * nq);
                            }
                            std::vector<float> o(static_cast<size_t>(nq * (d + 3)), -7.0f);  // [nq, d + 3]
                            attention_merge(parts, nq, d, lse.data(), outs.data(), sk, o.data(), d + 3);
                            const std::string where = k.name() + " " + pair_name(t) + " d=" + std::to_string(d) +
                                                      " n=" + std::to_string(n) + " parts=" + std::to_string(parts) +
                                                      (with_sinks ? " sinks" : "");
                            for (int i = 0; i < nq; ++i) {
                                for (int e = 0; e < d + 3; ++e) {
                                    const float got = o[static_cast<size_t>(i * (d + 3) + e)];
                                    if (e >= d) {
                                        ASSERT_EQ(got, -7.0f) << where << " wrote past the head";
                                    } else {
                                        ASSERT_NEAR(got, o_ref[static_cast<size_t>(i * d + e)], 1e-5f)
                                            << where << " out[" << i << ", " << e << "]";
                                    }
                                }
                            }
                            if (parts == 1 && t.k == GgmlType::F32 && softcap == 0.0f) {
                                for (int i = 0; i < nq; ++i) {  // lse = log sum_j exp(scale q . k_j)
                                    double sum = 0;
                                    for (int32_t j = 0; j < n; ++j) {
                                        double dot = 0;
                                        for (int e = 0; e < d; ++e) {
                                            dot += double{q[static_cast<size_t>(i * d + e)]} *
                                                   c.keys_f32[static_cast<size_t>(j) * d + e];
                                        }
                                        sum += std::exp(dot * scale);
                                    }
                                    ASSERT_NEAR(lse[static_cast<size_t>(i)], std::log(sum), 1e-4) << where;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

// BF16 and block-quantised caches (keys and values alike, and mixed): head sizes of whole 32-element
// blocks, entry counts across the entry block, one position (decode) and blocks of positions
// (prefill). The reference decodes the same blocks (quant::dequantize_row) and, for quantised keys,
// quantises the query rows as the int8 scores do, so the tolerances are the F32 ones.
class QuantisedAttention : public ::testing::TestWithParam<TypePair> {};

TEST_P(QuantisedAttention, EveryKernelMatchesReference) {
    const TypePair type = GetParam();
    const std::vector<Shape> shapes = {
        {1, 32, 1, 1}, {8, 64, 129, 129}, {3, 64, 300, 127}, {4, 128, 257, 256}, {5, 96, 40, 33}, {2, 160, 70, 70},
    };
    uint32_t seed = 11;
    for (const Shape& s : shapes) check_shape(type, s, seed++);
    const struct { int nq, d, n_pos; int32_t n_vis; } causal[] = {
        {8, 64, 16, 1}, {8, 64, 16, 120}, {4, 128, 9, 128}, {1, 32, 20, 250}, {2, 96, 1, 300},
    };
    for (const auto& e : causal) check_causal(type, e.nq, e.d, e.n_pos, e.n_vis, seed++);
}

INSTANTIATE_TEST_SUITE_P(
    KvTypes, QuantisedAttention,
    ::testing::Values(TypePair{GgmlType::BF16, GgmlType::BF16}, TypePair{GgmlType::Q8_0, GgmlType::Q8_0},
                      TypePair{GgmlType::Q4_0, GgmlType::Q4_0}, TypePair{GgmlType::Q4_1, GgmlType::Q4_1},
                      TypePair{GgmlType::Q5_0, GgmlType::Q5_0}, TypePair{GgmlType::Q5_1, GgmlType::Q5_1},
                      TypePair{GgmlType::IQ4_NL, GgmlType::IQ4_NL},
                      TypePair{GgmlType::Q8_0, GgmlType::Q4_0}, TypePair{GgmlType::F16, GgmlType::Q8_0},
                      TypePair{GgmlType::Q4_0, GgmlType::F16}, TypePair{GgmlType::F32, GgmlType::Q5_1}),
    [](const auto& info) {
        std::string name = pair_name(info.param);
        std::replace(name.begin(), name.end(), '/', '_');
        return name;
    });

// Quantised keys and values are what they decode to: attention over a q8_0 cache (its int8
// scores with the query quantised too) is close to attention over the float rows it was made from.
TEST(QuantisedAttention, Q8_0IsCloseToTheFloatRows) {
    std::mt19937 rng(5);
    const int nq = 4, d = 64;
    const int32_t n = 200;
    const Cache q8 = make_cache(GgmlType::Q8_0, n, d, rng);
    Cache f = make_cache(GgmlType::F32, 1, d, rng);
    f.keys_f32 = q8.keys_f32;
    f.values_f32 = q8.values_f32;
    f.view.keys = f.keys_f32.data();
    f.view.values = f.values_f32.data();
    std::vector<float> q(static_cast<size_t>(nq * d), 0.0f);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& x : q) x = dist(rng);
    std::vector<float> p8(static_cast<size_t>(nq * n)), pf(p8.size()), o8(static_cast<size_t>(nq * d)), of(o8.size());
    attention(q.data(), nq, d, q8.view, n, 0.125f, p8.data(), n, o8.data(), d);
    attention(q.data(), nq, d, f.view, n, 0.125f, pf.data(), n, of.data(), d);
    for (size_t i = 0; i < p8.size(); ++i) ASSERT_NEAR(p8[i], pf[i], 0.05f * pf[i] + 1e-4f) << i;
    for (size_t i = 0; i < o8.size(); ++i) ASSERT_NEAR(o8[i], of[i], 0.02f) << i;
}

// The key transposition: exact (a transposition and an exact F16 -> float conversion), the columns
// past n zero up to the multiple of 8, nothing written past them or past row d - 1; the AVX2
// and generic versions agree with that for tails of 1..7 entries and elements.
TEST(AttentionKernels, KeysTransposedExactlyWithZeroPadding) {
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    constexpr float kSentinel = -7.0f;
    for (int n : {1, 7, 8, 9, 64, 127, 128}) {
        for (int d : {1, 8, 13, 64, 70}) {
            std::vector<float> k32(static_cast<size_t>(n * d));
            for (float& x : k32) x = dist(rng);
            std::vector<uint16_t> k16;
            for (float x : k32) k16.push_back(float_to_fp16(x));
            const int64_t ldkt = 136, n_pad = (n + 7) / 8 * 8;
            for (int variant = 0; variant < 4; ++variant) {
                const bool avx2 = variant >= 2, f16 = variant % 2 == 1;
                if (avx2 && !cpu_kernel_supported(CpuKernel::Avx2)) continue;
                std::vector<float> kt(static_cast<size_t>((d + 1) * ldkt), kSentinel);  // [d + 1, ldkt]
                if (f16) {
                    (avx2 ? kernels::keys_t_f16_avx2 : kernels::keys_t_f16_generic)(k16.data(), n, d, kt.data(), ldkt);
                } else {
                    (avx2 ? kernels::keys_t_f32_avx2 : kernels::keys_t_f32_generic)(k32.data(), n, d, kt.data(), ldkt);
                }
                for (int64_t e = 0; e <= d; ++e) {
                    for (int64_t j = 0; j < ldkt; ++j) {
                        const float got = kt[static_cast<size_t>(e * ldkt + j)];
                        const size_t at = static_cast<size_t>(j * d + e);
                        if (e == d || j >= n_pad) {
                            ASSERT_EQ(got, kSentinel) << "variant " << variant << " n=" << n << " d=" << d;
                        } else if (j >= n) {
                            ASSERT_EQ(got, 0.0f) << "variant " << variant << " n=" << n << " d=" << d;
                        } else {
                            ASSERT_EQ(got, f16 ? fp16_to_float(k16[at]) : k32[at])
                                << "variant " << variant << " n=" << n << " d=" << d << " e=" << e << " j=" << j;
                        }
                    }
                }
            }
        }
    }
}

// One product of a rows_times_panel kernel against the product in double: the rows scattered in
// memory (given by pointers, in an order unlike their addresses'), written or accumulated, nothing
// written past column n - 1 of a row.
using PanelKernel = decltype(&kernels::rows_times_panel_avx2);
void check_panel(PanelKernel kernel, int rows, int n, int k, bool accumulate, std::mt19937& rng) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    constexpr float kSentinel = -7.0f;
    const int64_t lda = k + 3, ldb = n + 5, ldy = n + 4;
    std::vector<float> a(static_cast<size_t>(rows * lda)), b(static_cast<size_t>(k * ldb));
    std::vector<float> y(static_cast<size_t>(rows * ldy), kSentinel);  // [rows, ldy]
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < n; ++c) y[static_cast<size_t>(r * ldy + c)] = dist(rng);
    const std::vector<float> y0 = y;
    std::vector<const float*> ar;
    std::vector<float*> yr;
    for (int r = 0; r < rows; ++r) {  // row r reads a's row rows - 1 - r
        ar.push_back(a.data() + (rows - 1 - r) * lda);
        yr.push_back(y.data() + r * ldy);
    }
    kernel(rows, ar.data(), b.data(), ldb, k, n, yr.data(), accumulate);
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < ldy; ++c) {
            const size_t at = static_cast<size_t>(r * ldy + c);
            if (c >= n) {
                ASSERT_EQ(y[at], kSentinel) << "rows=" << rows << " n=" << n << " k=" << k;
                continue;
            }
            double want = accumulate ? y0[at] : 0.0;
            for (int e = 0; e < k; ++e) want += double{ar[r][e]} * b[static_cast<size_t>(e * ldb + c)];
            ASSERT_NEAR(y[at], want, 1e-4 * (1 + k)) << "rows=" << rows << " n=" << n << " k=" << k << " r=" << r;
        }
    }
}

// kernels::rows_times_panel_avx2 and _avx512 (where the CPU has AVX-512F): row counts around their
// tiles of 6 and 8 rows, column counts around their strips of 8, 16 and 32 columns and their
// masked tails, written and accumulated.
TEST(AttentionKernels, RowsTimesPanelMatchesTheProductInDouble) {
    if (!cpu_kernel_supported(CpuKernel::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
    std::vector<PanelKernel> kernels_here = {kernels::rows_times_panel_avx2};
    if (kernels::avx512_enabled()) kernels_here.push_back(kernels::rows_times_panel_avx512);
    std::mt19937 rng(5);
    for (const PanelKernel kernel : kernels_here)
        for (int rows : {1, 5, 6, 7, 8, 9, 13, 64})
            for (int n : {1, 7, 8, 15, 16, 24, 32, 37, 48, 64})
                for (int k : {1, 9, 64})
                    for (const bool accumulate : {false, true}) check_panel(kernel, rows, n, k, accumulate, rng);
}

// The entries past n_vis (later tokens of a chunk, causal masking) do not change anything, even
// when they hold infinities.
TEST(Attention, EntriesPastTheVisibleOnesAreNotRead) {
    std::mt19937 rng(3);
    Cache c = make_cache(GgmlType::F32, 50, 32, rng);
    std::vector<float> q(static_cast<size_t>(4 * 32), 0.25f);
    std::vector<float> p(4 * 50), o(4 * 32), p2(p.size()), o2(o.size());
    const KernelGuard guard;
    for (const Variant& k : variants()) {
        use(k);
        attention(q.data(), 4, 32, c.view, 37, 0.5f, p.data(), 50, o.data(), 32);
        std::fill(c.keys_f32.begin() + 37 * 32, c.keys_f32.end(), std::numeric_limits<float>::infinity());
        std::fill(c.values_f32.begin() + 37 * 32, c.values_f32.end(), std::numeric_limits<float>::quiet_NaN());
        attention(q.data(), 4, 32, c.view, 37, 0.5f, p2.data(), 50, o2.data(), 32);
        for (size_t i = 0; i < 4; ++i) {
            for (size_t j = 0; j < 37; ++j) ASSERT_EQ(p[i * 50 + j], p2[i * 50 + j]);
        }
        EXPECT_EQ(o, o2);
        c = make_cache(GgmlType::F32, 50, 32, rng);
    }
}

TEST(Attention, RejectsHeadSizesOfPartialBlocks) {
    std::vector<float> rows(64, 0.0f), q(8, 0.0f), p(8), o(8);
    KvHeadData kv;
    kv.key_type = kv.value_type = GgmlType::Q8_0;
    kv.keys = rows.data();
    kv.values = rows.data();
    kv.head_dim = 8;
    EXPECT_THROW(attention(q.data(), 1, 8, kv, 2, 1.0f, p.data(), 8, o.data(), 8), Error);
    EXPECT_THROW(attention_probs(q.data(), 1, 8, kv, 2, 1.0f, p.data(), 8), Error);
}

}  // namespace
}  // namespace kvec
