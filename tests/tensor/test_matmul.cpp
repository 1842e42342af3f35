#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu_modes.h"
#include "gguf/ggml_type.h"
#include "quant/quant.h"
#include "tensor/kernels.h"
#include "tensor/matmul.h"
#include "tensor/reference.h"
#include "util/error.h"
#include "util/fp16.h"

namespace kvec {
namespace {

struct Weights {
    std::vector<uint8_t> bytes;  // [n_out rows of the type]
    WeightView view;
};

Weights make_weights(GgmlType type, int64_t n_in, int64_t n_out, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 0.5f);
    std::vector<float> f(static_cast<size_t>(n_in * n_out));  // [n_out, n_in]
    for (float& x : f) x = dist(rng);
    Weights w;
    const size_t row = ggml_row_size(type, n_in);
    w.bytes.resize(row * static_cast<size_t>(n_out));
    for (int64_t r = 0; r < n_out; ++r) {
        quant::quantize_row(type, f.data() + r * n_in, w.bytes.data() + r * row, n_in);
    }
    w.view = make_weight_view("w", type, w.bytes.data(), n_in, n_out);
    return w;
}

std::vector<float> random_x(int64_t n, int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n * k));
    for (float& v : x) v = dist(rng);
    return x;
}

using test::avx512_modes;
using test::Avx512Guard;

// Compares matmul() with the scalar reference; the tolerance is relative to the magnitude of
// the products summed (float32 accumulation in a different order).
void check(const Weights& w, int64_t n) {
    const auto x = random_x(n, w.view.n_in, 99 + static_cast<uint32_t>(n));
    std::vector<float> y(static_cast<size_t>(n * w.view.n_out), -1.0f), yr(y.size());
    matmul(x.data(), n, w.view, y.data());
    ref::matmul(x.data(), n, w.view, yr.data());
    float scale = 0.0f;
    for (float v : yr) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], yr[i], 2e-5f * (1.0f + scale)) << "element " << i << " n=" << n;
    }
}

class MatmulTypes : public ::testing::TestWithParam<GgmlType> {};

// Exact precision (float activations): within float rounding of the reference. The Fast (int8)
// precision of the quantised types is tested in test_int8.cpp against its own error bound.
class ExactPrecision {
public:
    ExactPrecision() : saved_(matmul_precision()) { set_matmul_precision(MatmulPrecision::Exact); }
    ~ExactPrecision() { set_matmul_precision(saved_); }

private:
    MatmulPrecision saved_;
};

TEST_P(MatmulTypes, MatchesReferenceOnEveryKernel) {
    const ExactPrecision exact;
    const GgmlType type = GetParam();
    const int64_t block = ggml_type_traits(type).block_size;
    const int64_t n_in = block >= 256 ? 512 : 96;
    const Weights w = make_weights(type, n_in, 53, 5);
    for (CpuKernel k : {CpuKernel::Generic, CpuKernel::Avx2}) {
        if (!cpu_kernel_supported(k)) continue;
        set_cpu_kernel(k);
        for (int64_t n : {1, 2, 5, 13}) check(w, n);
    }
    set_cpu_kernel(cpu_kernel_supported(CpuKernel::Avx2) ? CpuKernel::Avx2 : CpuKernel::Generic);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTypes,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                                           GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

TEST(Matmul, OddShapesAndManyRows) {
    const ExactPrecision exact;
    // n_in not a multiple of 8 (kernel tails), n_out not a multiple of the 3-wide tile, and more
    // activation rows than one activation block (256).
    for (CpuKernel k : {CpuKernel::Generic, CpuKernel::Avx2}) {
        if (!cpu_kernel_supported(k)) continue;
        set_cpu_kernel(k);
        for (int64_t n_out : {1, 2, 4, 25}) check(make_weights(GgmlType::F32, 35, n_out, 7), 6);
        check(make_weights(GgmlType::F32, 64, 31, 8), 300);
        check(make_weights(GgmlType::Q8_0, 64, 50, 9), 300);
        // Packed prefill path: k over several 256-chunks (the last partial), panels of 16 with a
        // remainder, row blocks of 6 with a remainder.
        check(make_weights(GgmlType::F32, 600, 37, 10), 50);
        check(make_weights(GgmlType::Q4_K, 768, 40, 11), 29);
        // F16 prefill: two activation blocks (252 + 5 rows), the second ending in a partial group.
        check(make_weights(GgmlType::F16, 300, 37, 14), 257);
        // 16-bit weights read in place for decode (<= 4 rows): k tail past the last 8, rows past
        // the last 4-row tile; one row with AVX-512 reads 64 per step (k 200: three steps and a
        // tail of 8; k 35: the tail only).
        const Avx512Guard guard;
        for (bool wide : avx512_modes()) {
            if (k == CpuKernel::Avx2) kernels::set_avx512(wide);
            for (int64_t n : {1, 3}) {
                for (int64_t n_in : {35, 200}) {
                    check(make_weights(GgmlType::F16, n_in, 9, 12), n);
                    check(make_weights(GgmlType::BF16, n_in, 9, 13), n);
                }
            }
        }
    }
    set_cpu_kernel(cpu_kernel_supported(CpuKernel::Avx2) ? CpuKernel::Avx2 : CpuKernel::Generic);
}

TEST(Matmul, KnownProduct) {
    // [[1, 2, 3]] . [[1, 0, 0], [0, 1, 0], [1, 1, 1], [-1, 2, 0.5]]^T = [1, 2, 6, 4.5]
    const std::vector<float> x = {1, 2, 3};
    const std::vector<float> w = {1, 0, 0, 0, 1, 0, 1, 1, 1, -1, 2, 0.5f};
    std::vector<float> y(4);
    matmul(x.data(), 1, make_weight_view("w", GgmlType::F32, w.data(), 3, 4), y.data());
    EXPECT_EQ(y, (std::vector<float>{1, 2, 6, 4.5f}));
}

TEST(Matmul, TileKernelsAgree) {
    if (!cpu_kernel_supported(CpuKernel::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
    const auto x = random_x(7, 45, 1), w = random_x(11, 45, 2);
    std::vector<float> a(7 * 11), b(7 * 11);
    set_cpu_kernel(CpuKernel::Generic);
    tile_kernel()(x.data(), 7, 45, w.data(), 11, 45, 45, a.data(), 11);
    set_cpu_kernel(CpuKernel::Avx2);
    tile_kernel()(x.data(), 7, 45, w.data(), 11, 45, 45, b.data(), 11);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4f);
}

TEST(Kernels, PackRowsLayout) {
    // 8 rows of 3 (ldx 4): group 0 holds rows 0-5, group 1 rows 6-7 then zeros, each k-major.
    std::vector<float> x(8 * 4);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
    ASSERT_EQ(kernels::packed_rows(8), 12);
    std::vector<float> xp(static_cast<size_t>(kernels::packed_rows(8) * 3), -1.0f);
    kernels::pack_rows6(x.data(), 8, 4, 3, xp.data());
    for (int64_t g = 0; g < 2; ++g)
        for (int64_t p = 0; p < 3; ++p)
            for (int64_t r = 0; r < 6; ++r) {
                const int64_t i = g * 6 + r;
                EXPECT_EQ(xp[static_cast<size_t>((g * 3 + p) * 6 + r)], i < 8 ? x[static_cast<size_t>(i * 4 + p)] : 0.0f);
            }
}

TEST(Kernels, PrepackedTileMatchesGeneric) {
    if (!cpu_kernel_supported(CpuKernel::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
    // k over two 256-chunks (the second partial), 16- and 32-wide panels with remainders (below
    // and above 16), row groups of 6 with a remainder; x rows padded (ldx > k) and y wider than nw
    // (ldy > nw).
    const Avx512Guard guard;
    for (bool wide : avx512_modes())
    for (int64_t nx : {1, 6, 31}) {
        kernels::set_avx512(wide);
        for (int64_t nw : {3, 16, 19, 32, 45}) {
            const int64_t k = 300, ldx = 303, ldy = nw + 2;
            const auto x = random_x(nx, ldx, 3), w = random_x(nw, k, 4);
            std::vector<float> xp(static_cast<size_t>(kernels::packed_rows(nx) * k));
            kernels::pack_rows6(x.data(), nx, ldx, k, xp.data());
            std::vector<float> a(static_cast<size_t>(nx * ldy), 7.0f), b = a;
            kernels::tile_generic(x.data(), nx, ldx, w.data(), nw, k, k, a.data(), ldy);
            kernels::tile_prepacked_avx2(xp.data(), nx, w.data(), nw, k, k, b.data(), ldy);
            for (size_t i = 0; i < a.size(); ++i)
                ASSERT_NEAR(a[i], b[i], 2e-4f) << (wide ? "avx512 " : "avx2 ") << nx << "x" << nw << " at " << i;
        }
    }
}

TEST(Kernels, PrepackedHalfTilesConvertWhilePacking) {
    if (!cpu_kernel_supported(CpuKernel::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
    // 16-bit rows padded (ldw > k), k with a tail past the last 8 (301), panels of 16 with a
    // remainder; the reference is the float tile on the same values converted by the scalar helpers.
    const int64_t nx = 13, k = 301, ldw = 305;
    const Avx512Guard guard;
    for (bool wide : avx512_modes())
    for (int64_t nw : {5, 16, 21, 40}) {
        kernels::set_avx512(wide);
        const int64_t ldy = nw + 1;
        const auto x = random_x(nx, k, 5), wf = random_x(nw, ldw, 6);
        std::vector<float> xp(static_cast<size_t>(kernels::packed_rows(nx) * k));
        kernels::pack_rows6(x.data(), nx, k, k, xp.data());
        for (bool bf16 : {false, true}) {
            std::vector<uint16_t> h(wf.size());
            std::vector<float> back(wf.size());
            for (size_t i = 0; i < wf.size(); ++i) {
                h[i] = bf16 ? float_to_bf16(wf[i]) : float_to_fp16(wf[i]);
                back[i] = bf16 ? bf16_to_float(h[i]) : fp16_to_float(h[i]);
            }
            std::vector<float> a(static_cast<size_t>(nx * ldy), 3.0f), b = a;
            kernels::tile_generic(x.data(), nx, k, back.data(), nw, ldw, k, a.data(), ldy);
            (bf16 ? kernels::tile_prepacked_bf16_avx2 : kernels::tile_prepacked_f16_avx2)(xp.data(), nx, h.data(), nw,
                                                                                        ldw, k, b.data(), ldy);
            for (size_t i = 0; i < a.size(); ++i)
                ASSERT_NEAR(a[i], b[i], 2e-4f) << (wide ? "avx512 " : "avx2 ") << (bf16 ? "bf16 " : "f16 ") << nw << " at " << i;
        }
    }
}

TEST(Kernels, PrepackedQ8_0TileDequantisesWhilePacking) {
    if (!cpu_kernel_supported(CpuKernel::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
    // k over two 256-chunks (the second partial: 320 = 256 + 64), panels of 16 with a remainder;
    // the reference is the float tile on the rows dequantised by quant::dequantize_row.
    const int64_t nx = 13, k = 320;
    const size_t row_bytes = static_cast<size_t>(k / 32 * 34);
    const Avx512Guard guard;
    for (bool wide : avx512_modes())
    for (int64_t nw : {5, 16, 21, 37}) {
        kernels::set_avx512(wide);
        const auto x = random_x(nx, k, 7), wf = random_x(nw, k, 8);
        std::vector<uint8_t> q(row_bytes * static_cast<size_t>(nw));
        std::vector<float> back(wf.size());
        for (int64_t j = 0; j < nw; ++j) {
            quant::quantize_row(GgmlType::Q8_0, wf.data() + j * k, q.data() + j * row_bytes, k);
            quant::dequantize_row(GgmlType::Q8_0, q.data() + j * row_bytes, back.data() + j * k, k);
        }
        std::vector<float> xp(static_cast<size_t>(kernels::packed_rows(nx) * k));
        kernels::pack_rows6(x.data(), nx, k, k, xp.data());
        const int64_t ldy = nw + 3;
        std::vector<float> a(static_cast<size_t>(nx * ldy), 5.0f), b = a;
        kernels::tile_generic(x.data(), nx, k, back.data(), nw, k, k, a.data(), ldy);
        kernels::tile_prepacked_q8_0_avx2(xp.data(), nx, q.data(), row_bytes, nw, k, b.data(), ldy);
        for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 2e-4f) << (wide ? "avx512 " : "avx2 ") << nw << " at " << i;
    }
}

TEST(Kernels, Avx512RefusedWithoutTheCpu) {
    if (kernels::avx512_supported()) GTEST_SKIP() << "this CPU has AVX-512F";
    EXPECT_FALSE(kernels::avx512_enabled());
    EXPECT_THROW(kernels::set_avx512(true), Error);
}

TEST(Kernels, Fp16ConversionMatchesScalar) {
    std::vector<uint16_t> h;
    for (uint32_t v = 0; v < 65536; v += 7) h.push_back(static_cast<uint16_t>(v));  // incl. subnormals, inf, NaN
    for (CpuKernel k : {CpuKernel::Generic, CpuKernel::Avx2}) {
        if (!cpu_kernel_supported(k)) continue;
        set_cpu_kernel(k);
        std::vector<float> out(h.size());
        convert_fp16_to_fp32(h.data(), out.data(), static_cast<int64_t>(h.size()));
        for (size_t i = 0; i < h.size(); ++i) {
            const float want = fp16_to_float(h[i]);
            if (std::isnan(want)) {
                ASSERT_TRUE(std::isnan(out[i])) << h[i];
            } else {
                ASSERT_EQ(out[i], want) << h[i];
            }
        }
    }
    set_cpu_kernel(cpu_kernel_supported(CpuKernel::Avx2) ? CpuKernel::Avx2 : CpuKernel::Generic);
}

}  // namespace
}  // namespace kvec
