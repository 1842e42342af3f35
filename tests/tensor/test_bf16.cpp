// The bfloat16 prefill path (tensor/bf16_gemm.h): activation conversion against the scalar rounding,
// the AVX-512 BF16 kernel against its scalar reference, and the Fast matmul of F16 / BF16 weights
// against the exact float reference within the bound of the two bf16 roundings.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gguf/ggml_type.h"
#include "random.h"
#include "tensor/bf16_gemm.h"
#include "tensor/matmul.h"
#include "tensor/reference.h"
#include "util/fp16.h"

namespace kvec {
namespace {

using test::gaussian;

// Weights of n_out rows of k elements, rounded to the 16-bit type, rows ldw elements apart.
std::vector<uint16_t> half_rows(const std::vector<float>& f, int64_t k, int64_t n_out, int64_t ldw, bool f16) {
    // The gaps hold 0x7E00 (NaN in F16, 4e37 in BF16): a kernel reading them fails the tests.
    std::vector<uint16_t> w(static_cast<size_t>(n_out * ldw), 0x7E00);
    for (int64_t r = 0; r < n_out; ++r) {
        for (int64_t e = 0; e < k; ++e) {
            const float v = f[static_cast<size_t>(r * k + e)];
            w[static_cast<size_t>(r * ldw + e)] = f16 ? float_to_fp16(v) : float_to_bf16(v);
        }
    }
    return w;
}

std::vector<uint16_t> convert_ref(const std::vector<float>& x, int64_t n, int64_t k) {
    const int64_t ld = bf16::padded(k);
    std::vector<uint16_t> out(static_cast<size_t>(n * ld), 0);
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t e = 0; e < k; ++e) out[static_cast<size_t>(r * ld + e)] = float_to_bf16(x[static_cast<size_t>(r * k + e)]);
    }
    return out;
}

TEST(Bf16, ConversionRoundsToNearestEvenWithZeroPad) {
    if (!bf16::supported()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
    for (int64_t k : {7, 32, 45, 64, 301}) {
        const int64_t n = 3;
        auto x = gaussian(n * k, 5 + static_cast<uint32_t>(k), 3.0f);
        // Ties: 1 + 2^-8 lies halfway between two bf16 values (rounds to the even 1.0), 1 + 3 * 2^-8
        // rounds up to 1 + 2^-6; largest values and signed zero.
        x[0] = 1.0f + 1.0f / 256;
        x[1] = 1.0f + 3.0f / 256;
        x[2] = -0.0f;
        x[3] = std::numeric_limits<float>::max();
        x[4] = -65504.0f;
        std::vector<uint16_t> got(static_cast<size_t>(n * bf16::padded(k)), 0xFFFF);
        bf16::convert_rows(x.data(), n, k, got.data());
        EXPECT_EQ(got, convert_ref(x, n, k)) << "k " << k;
        EXPECT_EQ(got[0], 0x3F80);
        EXPECT_EQ(got[1], 0x3F82);
    }
}

// The kernel against the scalar reference on the same bf16 operands: weight counts that fill the
// 64-row groups and leave part panels (75 = 64 + 11, 37 = 16 + 16 + 5), k odd, even but not a
// multiple of 32, and above one 1024-pair chunk (2100: partial sums added into y); rows of
// ldy = nw + 2, whose last two floats must keep their sentinel.
TEST(Bf16, KernelMatchesScalarReference) {
    if (!bf16::supported()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
    for (bool f16 : {true, false}) {
        for (int64_t k : {301, 300, 2100}) {
            for (int64_t nw : {75, 37}) {
                const int64_t ldw = k + 5;
                const auto wf = gaussian(nw * k, 9 + static_cast<uint32_t>(k + nw), 0.5f);
                const auto w = half_rows(wf, k, nw, ldw, f16);
                for (int64_t nx : {1, 7, 13}) {
                    const auto x = gaussian(nx * k, 40 + static_cast<uint32_t>(nx));
                    const auto xb = convert_ref(x, nx, k);
                    const int64_t ldy = nw + 2;
                    std::vector<float> want(static_cast<size_t>(nx * ldy)), got(want.size(), -7.0f);
                    bf16::gemm_ref(xb.data(), nx, w.data(), ldw, f16, nw, k, want.data(), ldy);
                    bf16::gemm(xb.data(), nx, w.data(), ldw, f16, nw, k, got.data(), ldy);
                    for (int64_t i = 0; i < nx; ++i) {
                        for (int64_t j = 0; j < nw; ++j) {
                            double mag = 0.0;  // sum of |terms|
                            for (int64_t e = 0; e < k; ++e) {
                                mag += std::fabs(x[static_cast<size_t>(i * k + e)] * wf[static_cast<size_t>(j * k + e)]);
                            }
                            const size_t o = static_cast<size_t>(i * ldy + j);
                            ASSERT_NEAR(got[o], want[o], 1e-5 * mag + 1e-6)
                                << (f16 ? "f16" : "bf16") << " k " << k << " nw " << nw << " nx " << nx << " (" << i
                                << ", " << j << ")";
                        }
                        for (int64_t j = nw; j < ldy; ++j) ASSERT_EQ(got[static_cast<size_t>(i * ldy + j)], -7.0f);
                    }
                }
            }
        }
    }
}

// matmul() in Fast precision on a prefill's worth of rows: within the bf16 bound of bf16_gemm.h,
// |y - y_exact| <= sum_e |x_e w_e| * 2^-8 (plus float rounding), whichever kernel the CPU gets.
// Exact precision stays within float rounding of the reference.
TEST(Bf16, FastMatmulWithinRoundingBound) {
    const int64_t k = 576, n_out = 70, n = 30;
    for (GgmlType type : {GgmlType::F16, GgmlType::BF16}) {
        const bool f16 = type == GgmlType::F16;
        const auto wf = gaussian(n_out * k, 3, 0.5f);
        const auto w = half_rows(wf, k, n_out, k, f16);
        const WeightView view = make_weight_view("w", type, w.data(), k, n_out);
        const auto x = gaussian(n * k, 4);
        std::vector<float> y(static_cast<size_t>(n * n_out)), yr(y.size()), ye(y.size());
        ref::matmul(x.data(), n, view, yr.data());
        set_matmul_precision(MatmulPrecision::Exact);
        matmul(x.data(), n, view, ye.data());
        set_matmul_precision(MatmulPrecision::Fast);
        matmul(x.data(), n, view, y.data());
        double worst = 0.0;  // largest error as a share of its bound
        for (int64_t i = 0; i < n; ++i) {
            for (int64_t j = 0; j < n_out; ++j) {
                double mag = 0.0;
                for (int64_t e = 0; e < k; ++e) {
                    const uint16_t h = w[static_cast<size_t>(j * k + e)];
                    mag += std::fabs(x[static_cast<size_t>(i * k + e)] * (f16 ? fp16_to_float(h) : bf16_to_float(h)));
                }
                const size_t o = static_cast<size_t>(i * n_out + j);
                ASSERT_NEAR(ye[o], yr[o], 1e-5 * mag) << ggml_type_name(type) << " exact (" << i << ", " << j << ")";
                const double bound = mag * std::ldexp(1.0, -8) + 1e-5 * mag;
                ASSERT_NEAR(y[o], yr[o], bound) << ggml_type_name(type) << " fast (" << i << ", " << j << ")";
                worst = std::max(worst, std::fabs(y[o] - yr[o]) / bound);
            }
        }
        // With bf16 products the error is real but far inside the bound; without, float rounding.
        if (bf16::enabled()) {
            EXPECT_GT(worst, 1e-4) << "the bf16 kernel did not run";
        }
    }
}

}  // namespace
}  // namespace kvec
