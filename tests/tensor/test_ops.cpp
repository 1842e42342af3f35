#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "random.h"
#include "tensor/matmul.h"
#include "tensor/ops.h"
#include "tensor/reference.h"
#include "util/error.h"

namespace kvec {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
    return test::gaussian(static_cast<int64_t>(n), seed, scale);
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "at " << i;
}

TEST(Ops, RmsNormMatchesReference) {
    const int64_t n = 5, d = 96;
    auto x = random_vec(n * d, 1, 3.0f);
    auto w = random_vec(d, 2);
    std::vector<float> y(n * d), yr(n * d);
    ops::rms_norm(x.data(), w.data(), y.data(), n, d, 1e-5f);
    ref::rms_norm(x.data(), w.data(), yr.data(), n, d, 1e-5f);
    expect_close(y, yr, 1e-5f);
    // In place gives the same result.
    ops::rms_norm(x.data(), w.data(), x.data(), n, d, 1e-5f);
    expect_close(x, yr, 1e-5f);
}

TEST(Ops, RmsNormOfConstantRowIsWeight) {
    // Every element equal to c: rms = |c|, so y = sign(c) * w (up to eps).
    const int64_t d = 8;
    std::vector<float> x(d, -2.0f), w = random_vec(d, 3), y(d);
    ops::rms_norm(x.data(), w.data(), y.data(), 1, d, 0.0f);
    for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(y[i], -w[i], 1e-6f);
}

TEST(Ops, RopeHandComputedValues) {
    // head_dim 4, base 100: pair 0 turns by p * 1, pair 1 by p * 100^(-1/2) = p * 0.1.
    const int32_t pos[1] = {1};
    ops::RopeParams p;
    p.n_rot = 4;
    p.freq_base = 100.0f;
    std::vector<float> x = {1, 0, 1, 0};
    p.mode = ops::RopeMode::Norm;  // pairs (0,1), (2,3)
    ops::rope(x.data(), 1, 1, 4, pos, p);
    expect_close(x, {std::cos(1.0f), std::sin(1.0f), std::cos(0.1f), std::sin(0.1f)}, 1e-6f);

    x = {1, 1, 0, 0};
    p.mode = ops::RopeMode::Neox;  // pairs (0,2), (1,3)
    ops::rope(x.data(), 1, 1, 4, pos, p);
    expect_close(x, {std::cos(1.0f), std::cos(0.1f), std::sin(1.0f), std::sin(0.1f)}, 1e-6f);

    // Linear scaling by 4 at position 4 equals no scaling at position 1.
    x = {1, 0, 1, 0};
    const int32_t pos4[1] = {4};
    p.mode = ops::RopeMode::Norm;
    p.freq_scale = 0.25f;
    ops::rope(x.data(), 1, 1, 4, pos4, p);
    expect_close(x, {std::cos(1.0f), std::sin(1.0f), std::cos(0.1f), std::sin(0.1f)}, 1e-6f);

    // A frequency factor of 2 on pair 1 halves its angle.
    x = {1, 0, 1, 0};
    const float factors[2] = {1.0f, 2.0f};
    p.freq_scale = 1.0f;
    p.freq_factors = factors;
    ops::rope(x.data(), 1, 1, 4, pos, p);
    expect_close(x, {std::cos(1.0f), std::sin(1.0f), std::cos(0.05f), std::sin(0.05f)}, 1e-6f);
}

TEST(Ops, RopeMatchesReferenceAllModes) {
    const int64_t n_tokens = 7, n_heads = 3, head_dim = 16;
    std::vector<int32_t> pos = {0, 1, 2, 5, 17, 100, 1000};
    std::vector<float> factors = {1.0f, 1.5f, 2.0f, 4.0f, 8.0f, 1.0f};  // [n_rot / 2] for n_rot 12
    for (auto mode : {ops::RopeMode::Norm, ops::RopeMode::Neox}) {
        for (int n_rot : {16, 12}) {
            for (bool with_factors : {false, true}) {
                if (with_factors && n_rot != 12) continue;
                ops::RopeParams p;
                p.mode = mode;
                p.n_rot = n_rot;
                p.freq_base = 10000.0f;
                p.freq_scale = 0.5f;
                p.freq_factors = with_factors ? factors.data() : nullptr;
                auto x = random_vec(n_tokens * n_heads * head_dim, 7);
                auto xr = x;
                const auto x0 = x;
                ops::rope(x.data(), n_tokens, n_heads, head_dim, pos.data(), p);
                ref::rope(xr.data(), n_tokens, n_heads, head_dim, pos.data(), p);
                expect_close(x, xr, 2e-5f);
                // Dimensions past n_rot are untouched; position 0 is the identity.
                for (int64_t t = 0; t < n_tokens; ++t)
                    for (int64_t h = 0; h < n_heads; ++h)
                        for (int64_t i = n_rot; i < head_dim; ++i) {
                            const int64_t k = (t * n_heads + h) * head_dim + i;
                            EXPECT_EQ(x[k], x0[k]);
                        }
                for (int64_t i = 0; i < n_heads * head_dim; ++i) EXPECT_EQ(x[i], x0[i]);
                // LongRoPE's attention factor scales the rotated elements only (ggml's mscale).
                p.attn_factor = 1.19f;
                auto y = x0, yr = x0;
                ops::rope(y.data(), n_tokens, n_heads, head_dim, pos.data(), p);
                ref::rope(yr.data(), n_tokens, n_heads, head_dim, pos.data(), p);
                expect_close(y, yr, 3e-5f);
                for (int64_t t = 0; t < n_tokens; ++t)
                    for (int64_t h = 0; h < n_heads; ++h)
                        for (int64_t i = 0; i < head_dim; ++i) {
                            const int64_t k = (t * n_heads + h) * head_dim + i;
                            if (i >= n_rot) EXPECT_EQ(y[k], x0[k]);
                            else EXPECT_NEAR(y[k], 1.19f * x[k], 1e-5f);
                        }
            }
        }
    }
}

// gpt-oss's clamped SwiGLU against the reference, with gates and ups across the limit of 7 (the
// clamps act: a gate of 100 gives 7 * sigmoid(1.702 * 7) * (u + 1), an up of -50 gives u = -7).
TEST(Ops, SwigluOaiMatchesReference) {
    for (int64_t n : {1, 9, 40000}) {
        auto g = random_vec(n, 41, 6.0f), u = random_vec(n, 42, 6.0f);
        std::vector<float> y(static_cast<size_t>(n)), yr(static_cast<size_t>(n));
        ops::swiglu_oai(g.data(), u.data(), y.data(), n);
        ref::swiglu_oai(g.data(), u.data(), yr.data(), n, 1.702f, 7.0f);
        for (int64_t i = 0; i < n; ++i)
            ASSERT_NEAR(y[i], yr[i], 1e-5f * (1 + std::fabs(yr[i]))) << n << " " << i;
    }
    const float g[] = {100.0f, 1.0f, -3.0f}, u[] = {0.5f, -50.0f, 50.0f};
    float y[3];
    ops::swiglu_oai(g, u, y, 3);
    EXPECT_NEAR(y[0], 7.0f / (1.0f + std::exp(-1.702f * 7.0f)) * 1.5f, 1e-5f);
    EXPECT_NEAR(y[1], 1.0f / (1.0f + std::exp(-1.702f)) * -6.0f, 1e-5f);
    EXPECT_NEAR(y[2], -3.0f / (1.0f + std::exp(1.702f * 3.0f)) * 8.0f, 1e-5f);
}

// YaRN (gpt-oss: factor 32, original context 4096, base 150000) as the plain rotation with
// yarn_freq_factors' divisors and yarn_mscale, against ggml's formula written out (ref::rope_yarn),
// for both layouts, partial rotation and file factors; the highest frequencies are extrapolated
// (divisor 1), the lowest interpolated (divisor = the factor), and the ramp between is monotonic.
TEST(Ops, YarnRopeMatchesReference) {
    const int64_t n_tokens = 6, n_heads = 2, head_dim = 64;
    const std::vector<int32_t> pos = {0, 1, 37, 4095, 20000, 131071};
    ops::YarnParams y;
    y.freq_scale = 1.0f / 32.0f;
    y.n_ctx_orig = 4096;
    for (auto mode : {ops::RopeMode::Norm, ops::RopeMode::Neox}) {
        for (int n_rot : {64, 48}) {
            for (float base : {150000.0f, 10000.0f}) {
                const std::vector<float> file_factors = {1.0f, 1.0f, 2.0f,
                                                         1.5f};  // tiled over the pairs
                for (bool with_file : {false, true}) {
                    std::vector<float> ff(static_cast<size_t>(n_rot / 2));
                    for (size_t i = 0; i < ff.size(); ++i)
                        ff[i] = file_factors[i % file_factors.size()];
                    const std::vector<float> div =
                        ops::yarn_freq_factors(n_rot, base, y, with_file ? ff.data() : nullptr);
                    ASSERT_EQ(div.size(), static_cast<size_t>(n_rot / 2));
                    if (!with_file) {
                        EXPECT_FLOAT_EQ(div.front(), 1.0f)
                            << "the highest frequency is extrapolated";
                        EXPECT_FLOAT_EQ(div.back(), 32.0f)
                            << "the lowest frequency is interpolated";
                        for (size_t i = 1; i < div.size(); ++i) EXPECT_GE(div[i], div[i - 1]);
                    }
                    ops::RopeParams p;
                    p.mode = mode;
                    p.n_rot = n_rot;
                    p.freq_base = base;
                    p.freq_scale = 1.0f;
                    p.freq_factors = div.data();
                    p.attn_factor = ops::yarn_mscale(y);
                    EXPECT_NEAR(p.attn_factor, 1.0f + 0.1f * std::log(32.0f), 1e-6f);
                    ops::RopeParams pr = p;
                    pr.freq_factors = with_file ? ff.data() : nullptr;
                    pr.attn_factor = 1.0f;
                    auto x = random_vec(n_tokens * n_heads * head_dim, 17);
                    auto xr = x;
                    ops::rope(x.data(), n_tokens, n_heads, head_dim, pos.data(), p);
                    ref::rope_yarn(xr.data(), n_tokens, n_heads, head_dim, pos.data(), pr, y);
                    // float divisors: angles of up to 131071 rad agree to ~1e-7 relative
                    expect_close(x, xr, 2e-3f);
                    auto a = random_vec(n_tokens * n_heads * head_dim, 17);
                    auto ar = a;
                    const int32_t small[] = {0, 1, 2, 3, 100, 1000};
                    ops::rope(a.data(), n_tokens, n_heads, head_dim, small, p);
                    ref::rope_yarn(ar.data(), n_tokens, n_heads, head_dim, small, pr, y);
                    expect_close(a, ar, 3e-5f);
                }
            }
        }
    }
    // ext_factor 0: no ramp, no magnitude: linear scaling.
    ops::YarnParams lin = y;
    lin.ext_factor = 0.0f;
    for (float d : ops::yarn_freq_factors(64, 150000.0f, lin, nullptr)) EXPECT_FLOAT_EQ(d, 32.0f);
    EXPECT_EQ(ops::yarn_mscale(lin), 1.0f);
}

// Every CPU kernel (the AVX2 one has its own vectorised exp), lengths with and without a tail of
// fewer than 8, and arguments across exp's range.
TEST(Ops, SwigluAndSoftmaxMatchReferenceOnEveryKernel) {
    for (CpuKernel k : {CpuKernel::Generic, CpuKernel::Avx2}) {
        if (!cpu_kernel_supported(k)) continue;
        set_cpu_kernel(k);
        for (int64_t n : {1, 7, 8, 13, 1000}) {
            auto g = random_vec(n, 21, 30.0f), u = random_vec(n, 22);
            g[0] = -100.0f;  // exp(100) saturates: silu -> -0
            if (n > 1) g[1] = 100.0f;
            std::vector<float> y(n), yr(n);
            ops::swiglu(g.data(), u.data(), y.data(), n);
            ref::swiglu(g.data(), u.data(), yr.data(), n);
            for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], yr[i], 1e-6f * (1 + std::fabs(yr[i]))) << n << " " << i;

            auto s = random_vec(n, 23, 40.0f);  // spans exp(-160)..exp(0): underflow to 0 included
            auto sr = s;
            ops::softmax(s.data(), n);
            ref::softmax(sr.data(), n);
            double sum = 0;
            for (int64_t i = 0; i < n; ++i) {
                ASSERT_NEAR(s[i], sr[i], 1e-6f * (1e-3f + sr[i])) << n << " " << i;
                sum += s[i];
            }
            EXPECT_NEAR(sum, 1.0, 1e-5);
        }
    }
    set_cpu_kernel(cpu_kernel_supported(CpuKernel::Avx2) ? CpuKernel::Avx2 : CpuKernel::Generic);
}

// GELU-tanh gated product (gemma3's FFN): every CPU kernel against the double reference, over
// the range where tanh saturates both ways (exp overflowing included), tails shorter than 8, the
// output aliasing the gate.
TEST(Ops, GegluMatchesReference) {
    for (CpuKernel k : {CpuKernel::Generic, CpuKernel::Avx2}) {
    if (!cpu_kernel_supported(k)) continue;
    set_cpu_kernel(k);
    for (int64_t n : {1, 7, 13, 1000, 100000}) {
        auto g = random_vec(n, 31, 12.0f), u = random_vec(n, 32);
        std::vector<float> y(n), yr(n);
        ops::geglu(g.data(), u.data(), y.data(), n);
        ref::geglu(g.data(), u.data(), yr.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], yr[i], 2e-6f * (1 + std::fabs(yr[i]))) << n << " " << i;
        ops::geglu(g.data(), u.data(), g.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(g[i], y[i]);
    }
    std::vector<float> big = {-100.0f, 100.0f, -30.0f, 30.0f, -5.5f, 5.5f, 0.0f, 1e-20f, -1e30f};
    std::vector<float> ones(big.size(), 1.0f), yb(big.size()), ybr(big.size());
    ops::geglu(big.data(), ones.data(), yb.data(), static_cast<int64_t>(big.size()));
    ref::geglu(big.data(), ones.data(), ybr.data(), static_cast<int64_t>(big.size()));
    for (size_t i = 0; i < big.size(); ++i) {
        ASSERT_TRUE(std::isfinite(yb[i])) << big[i];
        ASSERT_NEAR(yb[i], ybr[i], 2e-6f * (1 + std::fabs(ybr[i]))) << big[i];
    }
    }
    set_cpu_kernel(cpu_kernel_supported(CpuKernel::Avx2) ? CpuKernel::Avx2 : CpuKernel::Generic);
    // Known values: gelu(0) = 0, gelu(1) = 0.841192, gelu(-1) = -0.158808 (tanh form), gelu(-20) = 0.
    const float g[4] = {0.0f, 1.0f, -1.0f, -20.0f}, u[4] = {1.0f, 1.0f, 2.0f, 1.0f};
    float y[4];
    ops::geglu(g, u, y, 4);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_NEAR(y[1], 0.841192f, 1e-5f);
    EXPECT_NEAR(y[2], 2 * -0.158808f, 1e-5f);
    EXPECT_NEAR(y[3], 0.0f, 1e-12f);
}

// Soft-capping (gemma2): every CPU kernel against the double reference, arguments from 0 to far
// past saturation (exp overflowing included), tails shorter than 8, caps 1 and 50.
TEST(Ops, SoftcapMatchesReference) {
    for (CpuKernel k : {CpuKernel::Generic, CpuKernel::Avx2}) {
        if (!cpu_kernel_supported(k)) continue;
        set_cpu_kernel(k);
        for (const float cap : {1.0f, 50.0f}) {
            for (int64_t n : {1, 7, 13, 1000}) {
                auto x = random_vec(n, 41, 3.0f * cap);
                x[0] = 0.0f;
                if (n > 3) x[1] = 1e30f, x[2] = -1e30f, x[3] = 1e-20f;
                auto xr = x;
                ops::softcap(x.data(), n, 0.7f, cap);
                ref::softcap(xr.data(), n, 0.7f, cap);
                for (int64_t i = 0; i < n; ++i) {
                    ASSERT_TRUE(std::isfinite(x[i]));
                    ASSERT_NEAR(x[i], xr[i], 4e-7f * cap) << n << " " << i << " cap " << cap;
                }
            }
        }
    }
    set_cpu_kernel(cpu_kernel_supported(CpuKernel::Avx2) ? CpuKernel::Avx2 : CpuKernel::Generic);
    float y[3] = {0.0f, 100.0f, -2.0f};
    ops::softcap(y, 3, 1.0f, 30.0f);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_NEAR(y[1], 30.0f * std::tanh(100.0f / 30.0f), 1e-5f);
    EXPECT_NEAR(y[2], 30.0f * std::tanh(-2.0f / 30.0f), 1e-5f);
}

TEST(Ops, SwigluAndSoftmaxMatchReference) {
    const int64_t n = 1000;
    auto g = random_vec(n, 11, 4.0f), u = random_vec(n, 12);
    std::vector<float> y(n), yr(n);
    ops::swiglu(g.data(), u.data(), y.data(), n);
    ref::swiglu(g.data(), u.data(), yr.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], yr[i], 1e-5f * (1 + std::fabs(yr[i])));

    auto s = random_vec(n, 13, 5.0f);
    s[3] = 80.0f;  // large values must not overflow
    auto sr = s;
    ops::softmax(s.data(), n);
    ref::softmax(sr.data(), n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(s[i], sr[i], 1e-6f);
        sum += s[i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
}

// A sink logit (gpt-oss's attn_sinks) joins the denominator only: every kernel against the
// reference, with sinks far below (no visible share), inside and far above the row's range (the
// row then sums to 1 - p_sink < 1); -inf is the plain softmax.
TEST(Ops, SoftmaxWithSinkMatchesReferenceOnEveryKernel) {
    for (CpuKernel k : {CpuKernel::Generic, CpuKernel::Avx2}) {
        if (!cpu_kernel_supported(k)) continue;
        set_cpu_kernel(k);
        for (int64_t n : {1, 7, 8, 13, 1000}) {
            for (float sink : {-30.0f, 0.5f, 3.0f, 8.0f, 60.0f}) {
                auto s = random_vec(n, 31, 4.0f);
                auto sr = s;
                // The sink's share of the denominator, in double: the row sums to 1 - share.
                double mx = sink, denom = 0;
                for (float v : s) mx = std::max(mx, static_cast<double>(v));
                for (float v : s) denom += std::exp(v - mx);
                const double share = std::exp(sink - mx) / (denom + std::exp(sink - mx));
                ops::softmax(s.data(), n, sink);
                ref::softmax(sr.data(), n, sink);
                double sum = 0, sum_ref = 0;
                for (int64_t i = 0; i < n; ++i) {
                    ASSERT_NEAR(s[i], sr[i], 1e-6f * (1e-3f + sr[i]))
                        << n << " sink " << sink << " " << i;
                    sum += s[i];
                    sum_ref += sr[i];
                }
                EXPECT_NEAR(sum, 1.0 - share, 1e-5) << n << " sink " << sink;
                EXPECT_NEAR(sum, sum_ref, 1e-5);
            }
            auto a = random_vec(n, 32, 4.0f);
            auto b = a;
            ops::softmax(a.data(), n);
            ops::softmax(b.data(), n, -INFINITY);
            ASSERT_EQ(a, b) << "a sink of -inf must be the plain softmax";
        }
    }
    set_cpu_kernel(cpu_kernel_supported(CpuKernel::Avx2) ? CpuKernel::Avx2 : CpuKernel::Generic);
}

TEST(Ops, GetRowsDequantisesAndChecksIds) {
    const int64_t n_in = 8, n_out = 5;
    auto table = random_vec(n_in * n_out, 21);
    WeightView w = make_weight_view("t", GgmlType::F32, table.data(), n_in, n_out);
    const int32_t ids[3] = {4, 0, 4};
    std::vector<float> out(3 * n_in);
    ops::get_rows(w, ids, 3, out.data());
    for (int t = 0; t < 3; ++t)
        for (int64_t i = 0; i < n_in; ++i) EXPECT_EQ(out[t * n_in + i], table[ids[t] * n_in + i]);
    const int32_t bad[1] = {5};
    EXPECT_THROW(ops::get_rows(w, bad, 1, out.data()), Error);
    const int32_t neg[1] = {-1};
    EXPECT_THROW(ops::get_rows(w, neg, 1, out.data()), Error);
}

TEST(Ops, WeightViewRejectsPartialBlocks) {
    std::vector<uint8_t> bytes(1024);
    EXPECT_THROW(make_weight_view("w", GgmlType::Q8_0, bytes.data(), 48, 2), Error);
    EXPECT_THROW(make_weight_view("w", GgmlType::Q4_K, bytes.data(), 128, 1), Error);
    EXPECT_NO_THROW(make_weight_view("w", GgmlType::Q8_0, bytes.data(), 64, 2));
}

}  // namespace
}  // namespace kvec
