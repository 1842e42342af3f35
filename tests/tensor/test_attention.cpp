// Attention over one KV head's cache as stored (tensor/attention.h): every kernel (generic, AVX2
// reading F16 in place) against the scalar reference, on random shapes whose entry counts and
// head sizes are not multiples of the vector width or of the entry block, for F32 and F16 caches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tensor/attention.h"
#include "tensor/matmul.h"
#include "tensor/reference.h"
#include "util/error.h"
#include "util/fp16.h"

namespace kvec {
namespace {

// One KV head's entries of the given type, [n, d] each.
struct Cache {
    std::vector<float> keys_f32, values_f32;        // [n, d] (F32)
    std::vector<uint16_t> keys_f16, values_f16;     // [n, d] (F16)
    KvHeadData view;
};

Cache make_cache(GgmlType type, int32_t n, int d, std::mt19937& rng) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    Cache c;
    c.keys_f32.resize(static_cast<size_t>(n) * d);
    c.values_f32.resize(c.keys_f32.size());
    for (float& x : c.keys_f32) x = dist(rng);
    for (float& x : c.values_f32) x = dist(rng);
    c.view.type = type;
    c.view.head_dim = d;
    if (type == GgmlType::F32) {
        c.view.keys = c.keys_f32.data();
        c.view.values = c.values_f32.data();
    } else {
        for (float x : c.keys_f32) c.keys_f16.push_back(float_to_fp16(x));
        for (float x : c.values_f32) c.values_f16.push_back(float_to_fp16(x));
        c.view.keys = c.keys_f16.data();
        c.view.values = c.values_f16.data();
    }
    return c;
}

// Restores the CPU kernel chosen at start-up.
class KernelGuard {
public:
    KernelGuard() : saved_(active_cpu_kernel()) {}
    ~KernelGuard() { set_cpu_kernel(saved_); }

private:
    CpuKernel saved_;
};

struct Shape {
    int nq;        // query rows (the query heads of one KV head)
    int d;         // head_dim
    int32_t n;     // entries in the cache
    int32_t n_vis; // entries visible (<= n; the rest must not matter)
};

// attention() and attention_probs() of every supported kernel against ref::attention, with row
// strides larger than the rows and sentinel values around every output.
void check_shape(GgmlType type, const Shape& s, uint32_t seed) {
    std::mt19937 rng(seed);
    const Cache c = make_cache(type, s.n, s.d, rng);
    const int64_t ldq = s.d + 3, ldp = s.n_vis + 5, ldo = s.d + 2;
    std::normal_distribution<float> dist(0.0f, 1.5f);
    std::vector<float> q(static_cast<size_t>(s.nq * ldq));  // [nq, ldq]
    for (float& x : q) x = dist(rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    constexpr float kSentinel = -7.0f;
    std::vector<float> p_ref(static_cast<size_t>(s.nq * ldp)), o_ref(static_cast<size_t>(s.nq * ldo));
    ref::attention(q.data(), s.nq, ldq, c.view, s.n_vis, scale, p_ref.data(), ldp, o_ref.data(), ldo);
    const KernelGuard guard;
    for (CpuKernel k : {CpuKernel::Generic, CpuKernel::Avx2}) {
        if (!cpu_kernel_supported(k)) continue;
        set_cpu_kernel(k);
        std::vector<float> p(static_cast<size_t>(s.nq * ldp), kSentinel);  // [nq, ldp]
        std::vector<float> o(static_cast<size_t>(s.nq * ldo), kSentinel);  // [nq, ldo]
        attention(q.data(), s.nq, ldq, c.view, s.n_vis, scale, p.data(), ldp, o.data(), ldo);
        std::vector<float> p_only(p.size(), kSentinel);
        attention_probs(q.data(), s.nq, ldq, c.view, s.n_vis, scale, p_only.data(), ldp);
        const std::string where = std::string(cpu_kernel_name(k)) + " " + ggml_type_traits(type).name +
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
    for (const Shape& s : edges) check_shape(type, s, seed++);
    std::mt19937 rng(42);
    std::uniform_int_distribution<int> nq(1, 9), d(1, 140), n(1, 600);
    for (int r = 0; r < 30; ++r) {
        Shape s{nq(rng), d(rng), n(rng), 0};
        s.n_vis = std::uniform_int_distribution<int32_t>(1, s.n)(rng);
        check_shape(type, s, seed++);
    }
}

INSTANTIATE_TEST_SUITE_P(CacheTypes, AttentionTypes, ::testing::Values(GgmlType::F32, GgmlType::F16),
                         [](const auto& info) { return std::string(ggml_type_traits(info.param).name); });

// The entries past n_vis (later tokens of a chunk, causal masking) do not change anything, even
// when they hold infinities.
TEST(Attention, EntriesPastTheVisibleOnesAreNotRead) {
    std::mt19937 rng(3);
    Cache c = make_cache(GgmlType::F32, 50, 32, rng);
    std::vector<float> q(static_cast<size_t>(4 * 32), 0.25f);
    std::vector<float> p(4 * 50), o(4 * 32), p2(p.size()), o2(o.size());
    const KernelGuard guard;
    for (CpuKernel k : {CpuKernel::Generic, CpuKernel::Avx2}) {
        if (!cpu_kernel_supported(k)) continue;
        set_cpu_kernel(k);
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

TEST(Attention, RejectsOtherElementTypes) {
    std::vector<float> rows(64, 0.0f), q(8, 0.0f), p(8), o(8);
    KvHeadData kv;
    kv.type = GgmlType::Q8_0;
    kv.keys = rows.data();
    kv.values = rows.data();
    kv.head_dim = 8;
    EXPECT_THROW(attention(q.data(), 1, 8, kv, 2, 1.0f, p.data(), 8, o.data(), 8), Error);
    EXPECT_THROW(attention_probs(q.data(), 1, 8, kv, 2, 1.0f, p.data(), 8), Error);
}

}  // namespace
}  // namespace kvec
