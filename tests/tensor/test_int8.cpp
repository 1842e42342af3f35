// The int8 matmul path (tensor/int8_gemm.h): activation quantisation, the panel form of every
// quantised type, the AVX2 kernels against the scalar references, and the Fast matmul against the
// exact float reference within the rounding bound of the activation quantisation.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu_modes.h"
#include "gguf/ggml_type.h"
#include "quant/quant.h"
#include "random.h"
#include "tensor/int8_decode.h"
#include "tensor/int8_gemm.h"
#include "tensor/matmul.h"
#include "tensor/reference.h"
#include "util/error.h"
#include "util/fp16.h"
#include "quant/blocks.h"

namespace kvec {
namespace {

const std::vector<GgmlType> kQuantTypes = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                                           GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                           GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                                           GgmlType::MXFP4};

bool have_avx2() { return cpu_kernel_supported(CpuKernel::Avx2); }
bool is_k_quant(GgmlType type) { return ggml_type_traits(type).block_size == 256; }

using test::avx512_modes;
using test::Avx512Guard;
using test::gaussian;

struct Quantised {
    std::vector<uint8_t> bytes;  // [n_out rows of the type]
    WeightView view;
};

Quantised quantise(GgmlType type, const std::vector<float>& f, int64_t n_in, int64_t n_out) {
    Quantised w;
    const size_t row = ggml_row_size(type, n_in);
    w.bytes.resize(row * static_cast<size_t>(n_out));
    for (int64_t r = 0; r < n_out; ++r) quant::quantize_row(type, f.data() + r * n_in, w.bytes.data() + r * row, n_in);
    w.view = make_weight_view("w", type, w.bytes.data(), n_in, n_out);
    return w;
}

struct Acts {
    std::vector<int8_t> q;   // [n, k]
    std::vector<float> d;    // [n, k/32]
    std::vector<float> h;    // [n, k/32, 2]
    std::vector<int32_t> s;  // [n, k/32, 2]
    int8::QuantRows view(int64_t k) const { return {q.data(), d.data(), h.data(), k, s.data()}; }
};

Acts quantise_acts_ref(const std::vector<float>& x, int64_t n, int64_t k) {
    Acts a;
    a.q.resize(static_cast<size_t>(n * k));
    a.d.resize(static_cast<size_t>(n * k / 32));
    a.h.resize(static_cast<size_t>(n * k / 16));
    a.s.resize(static_cast<size_t>(n * k / 16));
    for (int64_t r = 0; r < n; ++r) {
        int8::quantize_row_ref(x.data() + r * k, k, a.q.data() + r * k, a.d.data() + r * k / 32, a.h.data() + r * k / 16,
                               a.s.data() + r * k / 16);
    }
    return a;
}

// A quantised weight matrix in panel form (unpack_rows).
struct PanelForm {
    std::vector<int8_t> q;  // [nw, k]
    std::vector<float> s;   // [nw, k/32, 2]
    std::vector<float> m;   // [nw, k/32, 2], empty without a min
    int8::Panel view(int64_t k) const { return {q.data(), s.data(), m.empty() ? nullptr : m.data(), k}; }
};

PanelForm panel_form(const WeightView& w) {
    PanelForm p;
    p.q.resize(static_cast<size_t>(w.n_out * w.n_in));
    p.s.resize(static_cast<size_t>(w.n_out * w.n_in / 16));
    if (int8::panel_has_min(w.type)) p.m.resize(p.s.size());
    int8::unpack_rows(w, 0, w.n_out, p.q.data(), p.s.data(), p.m.empty() ? nullptr : p.m.data());
    return p;
}

// Sum of |terms| of output (i, j): the scale of the float rounding in a kernel's result.
double magnitude(const Acts& a, const PanelForm& p, int64_t k, int64_t i, int64_t j) {
    double mag = 0.0;
    for (int64_t e = 0; e < k; ++e) {
        const size_t half = static_cast<size_t>((j * k + e) / 16);
        mag += std::fabs(a.d[static_cast<size_t>((i * k + e) / 32)] * a.q[static_cast<size_t>(i * k + e)] *
                         (p.s[half] * p.q[static_cast<size_t>(j * k + e)] + (p.m.empty() ? 0.0f : p.m[half])));
    }
    return mag;
}

// A kernel's nx x nw outputs (rows ldy floats apart) against the scalar reference's, within the
// float rounding of each output's terms, and the floats past each row still the sentinel -7.
void expect_near_reference(const std::vector<float>& got, const std::vector<float>& want, const Acts& a,
                           const PanelForm& p, int64_t k, int64_t nx, int64_t nw, int64_t ldy) {
    for (int64_t i = 0; i < nx; ++i) {
        for (int64_t j = 0; j < nw; ++j) {
            const size_t o = static_cast<size_t>(i * ldy + j);
            ASSERT_NEAR(got[o], want[o], 1e-5 * magnitude(a, p, k, i, j) + 1e-6)
                << "nw " << nw << " nx " << nx << " (" << i << ", " << j << ")";
        }
        for (int64_t j = nw; j < ldy; ++j) ASSERT_EQ(got[static_cast<size_t>(i * ldy + j)], -7.0f);
    }
}

TEST(Int8, ActivationQuantisationReference) {
    // A block with a known answer: amax 2.54 -> d = 0.02; 0.01 rounds to even (0.5 -> 0),
    // 0.03 -> 1.5 -> 2, -2.54 -> -127.
    std::vector<float> x(32, 0.0f);
    x[0] = 2.54f;
    x[1] = -2.54f;
    x[2] = 1.0f;
    x[20] = 0.03f;
    std::vector<int8_t> q(32);
    float d, h[2];
    int8::quantize_row_ref(x.data(), 32, q.data(), &d, h);
    EXPECT_FLOAT_EQ(d, 0.02f);
    EXPECT_EQ(q[0], 127);
    EXPECT_EQ(q[1], -127);
    EXPECT_EQ(q[2], 50);
    EXPECT_EQ(q[20], 2);
    EXPECT_EQ(q[5], 0);
    EXPECT_FLOAT_EQ(h[0], d * 50.0f);  // 127 - 127 + 50
    EXPECT_FLOAT_EQ(h[1], d * 2.0f);
    // All zero: scale 0, quants 0.
    std::vector<float> z(32, 0.0f);
    int8::quantize_row_ref(z.data(), 32, q.data(), &d, h);
    EXPECT_EQ(d, 0.0f);
    for (int8_t v : q) EXPECT_EQ(v, 0);
}

TEST(Int8, Avx2QuantisationMatchesReferenceExactly) {
    if (!have_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
    const int64_t n = 3, k = 32 * 9;
    auto x = gaussian(n * k, 3, 2.0f);
    x[5] = 0.0f;
    for (int e = 0; e < 32; ++e) x[static_cast<size_t>(k + e)] = 0.0f;  // an all-zero block
    const Acts want = quantise_acts_ref(x, n, k);
    Acts got;
    got.q.resize(want.q.size());
    got.d.resize(want.d.size());
    got.h.resize(want.h.size());
    got.s.resize(want.s.size());
    int8::quantize_rows_avx2(x.data(), n, k, got.q.data(), got.d.data(), got.h.data(), got.s.data());
    EXPECT_EQ(got.q, want.q);
    EXPECT_EQ(got.d, want.d);
    EXPECT_EQ(got.h, want.h);
    EXPECT_EQ(got.s, want.s);
    for (size_t b = 0; b < want.d.size(); ++b) {  // the integer sums are the float sums' integers
        EXPECT_EQ(want.h[2 * b], want.d[b] * static_cast<float>(want.s[2 * b]));
        EXPECT_EQ(want.h[2 * b + 1], want.d[b] * static_cast<float>(want.s[2 * b + 1]));
    }
}

class Int8Types : public ::testing::TestWithParam<GgmlType> {};

// The panel form (scale * q + min per half block) reproduces the reference dequantisation.
TEST_P(Int8Types, PanelFormEqualsDequantisedRows) {
    const GgmlType type = GetParam();
    const int64_t k = 512, rows = 5;
    const Quantised w = quantise(type, gaussian(k * rows, 11, 0.7f), k, rows);
    std::vector<int8_t> q(static_cast<size_t>(rows * k));
    std::vector<float> s(static_cast<size_t>(rows * k / 16)), m(s.size(), 0.0f);
    int8::unpack_rows(w.view, 0, rows, q.data(), s.data(), int8::panel_has_min(type) ? m.data() : nullptr);
    std::vector<float> ref(static_cast<size_t>(k));
    for (int64_t r = 0; r < rows; ++r) {
        quant::dequantize_row(type, w.view.row(r), ref.data(), k);
        float scale = 0.0f;
        for (float v : ref) scale = std::max(scale, std::fabs(v));
        for (int64_t e = 0; e < k; ++e) {
            const size_t half = static_cast<size_t>((r * k + e) / 16);
            const float v = s[half] * q[static_cast<size_t>(r * k + e)] + m[half];
            ASSERT_NEAR(v, ref[static_cast<size_t>(e)], 1e-6f * scale) << "row " << r << " element " << e;
        }
    }
}

// The AVX2 kernel equals the scalar reference on the same quantised operands (integer sums are
// exact in both; only the float accumulation order differs: tolerance 1e-5 of sum |terms|).
TEST_P(Int8Types, Avx2KernelMatchesScalarReference) {
    if (!have_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
    const GgmlType type = GetParam();
    const int64_t k = 768, nw = 11;
    const Quantised w = quantise(type, gaussian(k * nw, 21, 0.5f), k, nw);
    const PanelForm p = panel_form(w.view);
    for (int64_t nx : {1, 3, 4, 9}) {
        const auto x = gaussian(nx * k, 30 + static_cast<uint32_t>(nx));
        const Acts a = quantise_acts_ref(x, nx, k);
        std::vector<float> want(static_cast<size_t>(nx * nw)), got(want.size(), -7.0f);
        int8::gemm_ref(a.view(k), nx, p.view(k), nw, want.data(), nw);
        int8::gemm_avx2(a.view(k), nx, p.view(k), nw, got.data(), nw);
        for (int64_t i = 0; i < nx; ++i) {
            for (int64_t j = 0; j < nw; ++j) {
                const size_t o = static_cast<size_t>(i * nw + j);
                ASSERT_NEAR(got[o], want[o], 1e-5 * magnitude(a, p, k, i, j) + 1e-6) << "nx " << nx << " (" << i << ", " << j << ")";
            }
        }
        if (type == GgmlType::Q8_0) {
            // Q8_0 read in place computes the same float operations as its panel: equal bits.
            std::vector<float> in_place(want.size());
            int8::gemm_q8_0_avx2(a.view(k), nx, w.view.data, w.view.row_bytes, nw, in_place.data(), nw);
            EXPECT_EQ(in_place, got);
        }
    }
}

// The AVX2 six-bit prefill kernel (the types whose panel values lie in [-32, 31]) against the
// scalar reference: 8-row panels whole and in part (nw 8, 11, 19), every tile height's remainder,
// outputs in rows of ldy = nw + 3 floats whose last three keep their sentinel.
TEST_P(Int8Types, SixBitKernelMatchesScalarReference) {
    const GgmlType type = GetParam();
    if (!int8::panel_fits_six_bits(type)) {
        EXPECT_TRUE(type == GgmlType::Q8_0 || type == GgmlType::IQ4_NL || type == GgmlType::IQ4_XS ||
                    type == GgmlType::MXFP4);
        GTEST_SKIP() << "panel values beyond [-32, 31]";
    }
    if (!have_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
    const int64_t k = 512;
    for (int64_t nw : {8, 11, 19}) {
        const Quantised w = quantise(type, gaussian(k * nw, 41 + static_cast<uint32_t>(nw), 0.5f), k, nw);
        const PanelForm p = panel_form(w.view);
        for (int8_t q : p.q) ASSERT_TRUE(q >= -32 && q <= 31) << int{q};
        const int64_t ldy = nw + 3;
        for (int64_t nx : {1, 2, 3, 4, 5, 7, 8, 9, 26}) {
            const Acts a = quantise_acts_ref(gaussian(nx * k, 50 + static_cast<uint32_t>(nx)), nx, k);
            std::vector<float> want(static_cast<size_t>(nx * ldy)), got(want.size(), -7.0f);
            int8::gemm_ref(a.view(k), nx, p.view(k), nw, want.data(), ldy);
            int8::gemm_six_bit_avx2(a.view(k), nx, p.view(k), nw, got.data(), ldy);
            expect_near_reference(got, want, a, p, k, nx, nw, ldy);
        }
    }
}

// The six-bit kernel's int16 sums do not saturate at the extremes: Q6_K quants 63 and 0 (panel
// values 31 and -32, bytes 63 and 0) against activations 127 and -127, scales powers of two.
TEST(Int8, SixBitExactAtExtremeBytes) {
    if (!have_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
    const int64_t k = 256, nw = 9, nx = 3;
    std::vector<quant::BlockQ6_K> blocks(static_cast<size_t>(nw));  // one super-block per row
    for (size_t r = 0; r < blocks.size(); ++r) {
        quant::BlockQ6_K& b = blocks[r];
        std::memset(&b, 0, sizeof b);
        const uint8_t bits = r % 3 == 2 ? 0x00 : 0xFF;  // all quants 63, or all 0
        std::memset(b.ql, bits, sizeof b.ql);
        std::memset(b.qh, bits, sizeof b.qh);
        for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s % 2 == 0 ? 1 : -2);
        b.d = float_to_fp16(r % 2 == 0 ? 1.0f : 0.5f);
    }
    std::vector<float> x(static_cast<size_t>(nx * k));
    for (size_t e = 0; e < x.size(); ++e) x[e] = (e / 4 + e / 256) % 3 == 0 ? -127.0f : 127.0f;
    const Acts a = quantise_acts_ref(x, nx, k);
    for (int8_t q : a.q) ASSERT_EQ(std::abs(q), 127);
    const WeightView view = make_weight_view("w", GgmlType::Q6_K, reinterpret_cast<const uint8_t*>(blocks.data()), k, nw);
    const PanelForm p = panel_form(view);
    std::vector<float> want(static_cast<size_t>(nx * nw)), got(want.size());
    int8::gemm_ref(a.view(k), nx, p.view(k), nw, want.data(), nw);
    int8::gemm_six_bit_avx2(a.view(k), nx, p.view(k), nw, got.data(), nw);
    EXPECT_EQ(got, want);  // every term an integer times a power of two: no rounding anywhere
}

// The AVX-512 VNNI kernel against the scalar reference: weight counts that fill two 16-row panels,
// part of a second one, and one part panel (nw = 37 = 32 + 5, 20); activation rows that leave
// every tile height's remainder; rows ending in part of a group where the type allows (32 * 9).
// Outputs are written into rows of ldy = nw + 3 floats: the three past nw must keep their
// sentinel. The panels packed from the blocks in registers (int8::decode::panel_packer) hold the
// same bytes and scales as those packed from the panel form: equal results.
TEST_P(Int8Types, VnniKernelMatchesScalarReference) {
    if (!int8::vnni_supported()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
    const GgmlType type = GetParam();
    const int64_t k = is_k_quant(type) ? 512 : 288;
    const int8::PanelPacker packer = int8::decode::panel_packer(type);
    for (int64_t nw : {37, 20}) {
        const Quantised w = quantise(type, gaussian(k * nw, 23, 0.5f), k, nw);
        const PanelForm p = panel_form(w.view);
        const int64_t ldy = nw + 3;
        for (int64_t nx : {1, 5, 6, 7, 8, 11, 16, 25}) {  // tiles of equal height: 4 + 3, 4 + 4, 6 + 5...
            const auto x = gaussian(nx * k, 70 + static_cast<uint32_t>(nx));
            const Acts a = quantise_acts_ref(x, nx, k);
            std::vector<float> want(static_cast<size_t>(nx * ldy)), got(want.size(), -7.0f);
            int8::gemm_ref(a.view(k), nx, p.view(k), nw, want.data(), ldy);
            int8::gemm_vnni(a.view(k), nx, p.view(k), nw, got.data(), ldy);
            expect_near_reference(got, want, a, p, k, nx, nw, ldy);
            if (type == GgmlType::Q8_0) {
                // Read in place: the same scales and bytes as the panel, so equal bits.
                std::vector<float> in_place(got.size(), -7.0f);
                int8::gemm_q8_0_vnni(a.view(k), nx, w.view.data, w.view.row_bytes, nw, in_place.data(), ldy);
                EXPECT_EQ(in_place, got);
            }
            if (packer != nullptr) {
                std::vector<float> packed(got.size(), -7.0f);
                int8::gemm_vnni_packed(a.view(k), nx, packer, int8::panel_has_min(type), w.view.data,
                                       w.view.row_bytes, nw, packed.data(), ldy);
                EXPECT_EQ(packed, got) << "nw " << nw << " nx " << nx;
            }
        }
    }
}

// The decode kernels (int8_decode.h) of both instruction sets against the scalar reference on the
// same quantised operands: rows of whole groups and rows with a tail (Q4_0..Q8_0: 32 * 9 = 2
// groups and a block, 32 * 7 = a group and 3 blocks, 32 = a tail alone; K-quants: 256 * 3, 256),
// every activation row count up to kMaxRows, 13 weight rows written into rows of ldy = nw + 2
// floats whose last two must keep their sentinel. The integer sums are exact in both; the kernels
// accumulate in float in another order (tolerance 1e-5 of sum |terms|).
TEST_P(Int8Types, DecodeKernelsMatchScalarReference) {
    const GgmlType type = GetParam();
    const std::pair<const char*, int8::decode::Kernel> kernels[] = {{"avx2", int8::decode::kernel_avx2(type)},
                                                                    {"avx512", int8::decode::kernel_avx512(type)}};
    if (kernels[0].second == nullptr && kernels[1].second == nullptr) GTEST_SKIP() << "no decode kernel for this type on this CPU";
    const int64_t nw = 13, ldy = nw + 2, sub = int8::decode::layout(type).sub;
    for (int64_t k : is_k_quant(type) ? std::vector<int64_t>{768, 256} : std::vector<int64_t>{288, 224, 32}) {
        const Quantised w = quantise(type, gaussian(k * nw, 24, 0.5f), k, nw);
        const PanelForm p = panel_form(w.view);
        for (int64_t nx = 1; nx <= int8::decode::kMaxRows; ++nx) {
            const Acts a = quantise_acts_ref(gaussian(nx * k, 80 + static_cast<uint32_t>(nx)), nx, k);
            std::vector<float> want(static_cast<size_t>(nx * ldy));
            int8::gemm_ref(a.view(k), nx, p.view(k), nw, want.data(), ldy);
            std::vector<int8_t> q(static_cast<size_t>(nx * k));           // [nx, k] the kernels' order
            std::vector<float> dx(static_cast<size_t>(nx * k / sub)), xs(dx.size());  // [nx, k / sub]
            int8::decode::prepare_rows(type, a.view(k), nx, q.data(), dx.data(), xs.data());
            const int8::decode::Rows rows{q.data(), dx.data(), xs.data(), k};
            for (const auto& [name, kernel] : kernels) {
                if (kernel == nullptr) continue;
                std::vector<float> got(want.size(), -7.0f);
                kernel(rows, nx, w.view.data, w.view.row_bytes, nw, got.data(), ldy);
                for (int64_t i = 0; i < nx; ++i) {
                    for (int64_t j = 0; j < nw; ++j) {
                        const size_t o = static_cast<size_t>(i * ldy + j);
                        ASSERT_NEAR(got[o], want[o], 1e-5 * magnitude(a, p, k, i, j) + 1e-6)
                            << name << " k " << k << " nx " << nx << " (" << i << ", " << j << ")";
                    }
                    for (int64_t j = nw; j < ldy; ++j) ASSERT_EQ(got[static_cast<size_t>(i * ldy + j)], -7.0f) << name;
                }
            }
        }
    }
}

// matmul() in Fast precision against the exact float reference, with the 256-bit and the 512-bit
// kernels, from decode (1 row) through the small batches (up to kMaxRows) to prefill, on rows
// that end in a part group (32 * 9) where the type allows: every activation element is off by at
// most half its block's scale, so |y - y_exact| <= sum_e |w_e| * d(e) / 2, plus float rounding
// (1e-5 of sum |x_e w_e|).
TEST_P(Int8Types, FastMatmulWithinQuantisationBound) {
    const GgmlType type = GetParam();
    const int64_t k = is_k_quant(type) ? 768 : 288, n_out = 37;
    const Quantised w = quantise(type, gaussian(k * n_out, 41, 0.5f), k, n_out);
    std::vector<float> wf(static_cast<size_t>(n_out * k));  // [n_out, k] dequantised weights
    for (int64_t r = 0; r < n_out; ++r) quant::dequantize_row(type, w.view.row(r), wf.data() + r * k, k);
    set_matmul_precision(MatmulPrecision::Fast);
    Avx512Guard guard;
    for (bool wide : avx512_modes()) {
        kernels::set_avx512(wide);
        for (int64_t n : {1, 2, 5, 13, 16, 17, 70}) {
            const auto x = gaussian(n * k, 50 + static_cast<uint32_t>(n));
            std::vector<float> y(static_cast<size_t>(n * n_out)), yr(y.size());
            matmul(x.data(), n, w.view, y.data());
            ref::matmul(x.data(), n, w.view, yr.data());
            const Acts a = quantise_acts_ref(x, n, k);
            for (int64_t i = 0; i < n; ++i) {
                for (int64_t j = 0; j < n_out; ++j) {
                    double bound = 0.0, mag = 0.0;
                    for (int64_t e = 0; e < k; ++e) {
                        const double we = std::fabs(wf[static_cast<size_t>(j * k + e)]);
                        bound += we * a.d[static_cast<size_t>((i * k + e) / 32)] / 2;
                        mag += we * std::fabs(x[static_cast<size_t>(i * k + e)]);
                    }
                    const size_t o = static_cast<size_t>(i * n_out + j);
                    ASSERT_NEAR(y[o], yr[o], bound * 1.001 + 1e-5 * mag)
                        << (wide ? "avx512" : "avx2") << " n " << n << " (" << i << ", " << j << ")";
                }
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(QuantTypes, Int8Types, ::testing::ValuesIn(kQuantTypes),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

TEST(Int8, NonQuantisedTypesHaveNoPanelForm) {
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) EXPECT_FALSE(int8::has_panel_form(t));
    for (GgmlType t : kQuantTypes) EXPECT_TRUE(int8::has_panel_form(t));
    std::vector<float> w(64, 1.0f);
    const WeightView v = make_weight_view("w", GgmlType::F32, w.data(), 32, 2);
    std::vector<int8_t> q(64);
    std::vector<float> s(4);
    EXPECT_THROW(int8::unpack_rows(v, 0, 2, q.data(), s.data(), nullptr), Error);
}

// A panel whose halves share their scale but not their min (no block type has one today) must
// still get a min per half: the VNNI kernel's choice of per-half sums looks at both.
TEST(Int8, VnniMinPerHalfWithOneScale) {
    if (!int8::vnni_supported()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
    const int64_t k = 128, nw = 19, nx = 7, nb = k / 32;
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> byte(-128, 127);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    PanelForm p;
    p.q.resize(static_cast<size_t>(nw * k));
    for (int8_t& v : p.q) v = static_cast<int8_t>(byte(rng));
    p.s.resize(static_cast<size_t>(nw * nb * 2));
    p.m.resize(p.s.size());
    for (size_t h = 0; h < p.s.size(); h += 2) {
        p.s[h] = p.s[h + 1] = 0.01f * (1.0f + unit(rng));
        p.m[h] = unit(rng);
        p.m[h + 1] = unit(rng);
    }
    const Acts a = quantise_acts_ref(gaussian(nx * k, 6), nx, k);
    std::vector<float> want(static_cast<size_t>(nx * nw)), got(want.size());
    int8::gemm_ref(a.view(k), nx, p.view(k), nw, want.data(), nw);
    int8::gemm_vnni(a.view(k), nx, p.view(k), nw, got.data(), nw);
    for (int64_t i = 0; i < nx; ++i) {
        for (int64_t j = 0; j < nw; ++j) {
            const size_t o = static_cast<size_t>(i * nw + j);
            ASSERT_NEAR(got[o], want[o], 1e-5 * magnitude(a, p, k, i, j) + 1e-6) << "(" << i << ", " << j << ")";
        }
    }
}

// The VNNI kernel's unsigned offset (w ^ 0x80) and its correction are exact at the extremes of
// both operands: weights -128 and 127 (a Q8_0 file may hold -128), activations -127 and 127.
// The AVX2 kernels' sign trick (|w| times x with w's sign) at the same extremes: |-128| is 128
// as an unsigned byte, and a pair of products 2 * 128 * 127 stays within int16.
TEST(Int8, Q8_0ExactAtExtremeBytes) {
    const int64_t k = 64, nw = 3, nx = 2;
    std::vector<quant::BlockQ8_0> blocks(static_cast<size_t>(nw * k / 32));  // [nw, 2]
    for (size_t b = 0; b < blocks.size(); ++b) {
        blocks[b].d = float_to_fp16(b % 2 == 0 ? 1.0f : 0.5f);
        for (int e = 0; e < 32; ++e) blocks[b].qs[e] = static_cast<int8_t>((e + b) % 3 == 0 ? -128 : (e % 2 ? 127 : -1));
    }
    std::vector<float> x(static_cast<size_t>(nx * k));
    for (size_t e = 0; e < x.size(); ++e) x[e] = e % 5 == 0 ? -127.0f : 127.0f;  // scale 1, quants -127 / 127
    const Acts a = quantise_acts_ref(x, nx, k);
    for (int8_t q : a.q) ASSERT_EQ(std::abs(q), 127);
    const auto* bytes = reinterpret_cast<const uint8_t*>(blocks.data());
    const WeightView view = make_weight_view("w", GgmlType::Q8_0, bytes, k, nw);
    const PanelForm p = panel_form(view);
    std::vector<float> want(static_cast<size_t>(nx * nw));
    int8::gemm_ref(a.view(k), nx, p.view(k), nw, want.data(), nw);
    // Every sum is an integer times a power of two: no rounding anywhere, so equal bits.
    std::vector<int8_t> q(a.q.size());
    std::vector<float> dx(a.d.size()), xs(a.d.size());  // [nx, nb]: Q8_0 has a scale per block
    int8::decode::prepare_rows(GgmlType::Q8_0, a.view(k), nx, q.data(), dx.data(), xs.data());
    const auto decode = [&](int8::decode::Kernel kernel) {
        std::vector<float> y(want.size());
        kernel({q.data(), dx.data(), xs.data(), k}, nx, bytes, view.row_bytes, nw, y.data(), nw);
        return y;
    };
    if (const int8::decode::Kernel avx2 = int8::decode::kernel_avx2(GgmlType::Q8_0); avx2 != nullptr) {
        EXPECT_EQ(decode(avx2), want);
        // The AVX2 tiles (more rows than the decode kernels take), in place and on the panel.
        std::vector<float> tiles(want.size());
        int8::gemm_q8_0_avx2(a.view(k), nx, bytes, view.row_bytes, nw, tiles.data(), nw);
        EXPECT_EQ(tiles, want);
        int8::gemm_avx2(a.view(k), nx, p.view(k), nw, tiles.data(), nw);
        EXPECT_EQ(tiles, want);
        // The attention scores over Q8_0 keys in place, with the values' prefetch pointed at the keys.
        std::fill(tiles.begin(), tiles.end(), 0.0f);
        int8::scores_q8_0_avx2(a.view(k), nx, bytes, view.row_bytes, nw, tiles.data(), nw,
                               {reinterpret_cast<const char*>(bytes), view.row_bytes});
        EXPECT_EQ(tiles, want);
    }
    if (!int8::vnni_supported()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
    std::vector<float> got(want.size());
    int8::gemm_q8_0_vnni(a.view(k), nx, bytes, view.row_bytes, nw, got.data(), nw);
    EXPECT_EQ(got, want);
    // The VNNI decode kernel's offset (w + 128, taken back as -128 * scale * sum(q_x) per block) too.
    EXPECT_EQ(decode(int8::decode::kernel_avx512(GgmlType::Q8_0)), want);
    // The VNNI attention scores over Q8_0 keys in place (the keys + 128, the same offset per pair
    // of blocks).
    std::fill(got.begin(), got.end(), 0.0f);
    int8::scores_q8_0_vnni(a.view(k), nx, bytes, view.row_bytes, nw, got.data(), nw,
                           {reinterpret_cast<const char*>(bytes), view.row_bytes});
    EXPECT_EQ(got, want);
}

// A row's result does not depend on the other rows of its call, as long as the call takes the
// same kernel: every output is computed by the same operations whatever tile it falls in. Decode
// kernels (up to int8::decode::kMaxVnniRows rows with VNNI, kMaxRows without): 2, 3 or 4 rows
// against one at a time. Batches of more rows (with AVX-512 VNNI from 5 rows on, otherwise from
// kernels::kPackedMinRows): 8 and 19 of 30 against all 30 (tiles of other heights).
TEST(Int8, RowsIndependentOfBatching) {
    const int64_t k = 2048, n_out = 40, n = 30;
    set_matmul_precision(MatmulPrecision::Fast);
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_K}) {
        const Quantised w = quantise(type, gaussian(k * n_out, 61, 0.5f), k, n_out);
        const auto x = gaussian(n * k, 62);
        std::vector<float> all(static_cast<size_t>(n * n_out)), part(all.size()), one(static_cast<size_t>(n_out));
        for (int64_t batch : {2, 3, 4}) {
            matmul(x.data(), batch, w.view, part.data());
            for (int64_t i = 0; i < batch; ++i) {
                matmul(x.data() + i * k, 1, w.view, one.data());
                for (int64_t j = 0; j < n_out; ++j) {
                    ASSERT_EQ(one[static_cast<size_t>(j)], part[static_cast<size_t>(i * n_out + j)]) << batch;
                }
            }
        }
        if (!int8::vnni_enabled()) continue;  // 19 rows take the AVX2 int8 tiles, 30 the float prefill
        matmul(x.data(), n, w.view, all.data());
        for (int64_t rows : {8, 19}) {
            matmul(x.data() + 7 * k, rows, w.view, part.data());
            for (int64_t i = 0; i < rows * n_out; ++i) {
                ASSERT_EQ(part[static_cast<size_t>(i)], all[static_cast<size_t>(7 * n_out + i)])
                    << ggml_type_name(type) << " " << rows;
            }
        }
    }
}

// The types repacked at load (int8::pack_load_panels): Q8_0 (VNNI panels), Q4_K and Q6_K (the
// bits of 16 rows side by side, int8_k_panels.cpp).
class LoadPanels : public ::testing::TestWithParam<GgmlType> {};

// Rows k of 32 x odd elements (Q8_0's tail blocks), or 2 super-blocks.
int64_t panel_test_k(GgmlType type) { return type == GgmlType::Q8_0 ? 288 : 512; }

// The panel kernels against the scalar reference for every tile height, and against the kernels
// on the rows they replace where those add the same sums in the same order (equal bits): Q8_0's
// in-place VNNI kernel, and for Q4_K prefill (more than 4 rows) the VNNI tiles on the rows packed
// from the blocks. Whole matrices and views that start at a panel.
TEST_P(LoadPanels, MatchTheRowsAndTheReference) {
    if (!int8::vnni_supported()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
    const GgmlType type = GetParam();
    const int64_t k = panel_test_k(type);
    for (int64_t nw : {37, 20, 64}) {
        const Quantised w = quantise(type, gaussian(k * nw, 25, 0.5f), k, nw);
        std::vector<uint8_t> panels(int8::load_panels_bytes(type, nw, k));
        // Q8_0, Q6_K: the rows' bytes; Q4_K: 148 bytes per 144 (the scales one byte each).
        const size_t padded_rows = static_cast<size_t>((nw + 15) / 16 * 16) * w.view.row_bytes;
        ASSERT_EQ(panels.size(), type == GgmlType::Q4_K ? padded_rows / 144 * 148 : padded_rows);
        int8::pack_load_panels(type, w.view.data, w.view.row_bytes, nw, k, panels.data());
        const PanelForm p = panel_form(w.view);
        const int64_t ldy = nw + 3;
        for (int64_t nx : {1, 2, 3, 4, 5, 7, 8, 9, 11, 16, 25}) {
            const Acts a = quantise_acts_ref(gaussian(nx * k, 90 + static_cast<uint32_t>(nx)), nx, k);
            std::vector<float> want(static_cast<size_t>(nx * ldy)), rows(want.size(), -7.0f), got(want.size(), -7.0f);
            int8::gemm_ref(a.view(k), nx, p.view(k), nw, want.data(), ldy);
            int8::gemm_load_panels(type, a.view(k), nx, panels.data(), nw, got.data(), ldy);
            if (type == GgmlType::Q8_0) {
                int8::gemm_q8_0_vnni(a.view(k), nx, w.view.data, w.view.row_bytes, nw, rows.data(), ldy);
                EXPECT_EQ(got, rows) << "nw " << nw << " nx " << nx;
            } else if (nx > int8::k_panels_decode_rows) {
                int8::gemm_vnni_packed(a.view(k), nx, int8::decode::panel_packer(type), int8::panel_has_min(type), w.view.data,
                                       w.view.row_bytes, nw, rows.data(), ldy);
                EXPECT_EQ(got, rows) << "nw " << nw << " nx " << nx;
            }
            for (int64_t i = 0; i < nx; ++i) {
                for (int64_t j = 0; j < nw; ++j) {
                    const size_t o = static_cast<size_t>(i * ldy + j);
                    ASSERT_NEAR(got[o], want[o], 1e-5 * magnitude(a, p, k, i, j) + 1e-6) << nw << " " << nx;
                }
                ASSERT_EQ(got[static_cast<size_t>(i * ldy + nw)], -7.0f);  // nothing past the last row
            }
            // Rows 16.. as a view of their own (one part of a fused projection).
            if (nw > 16) {
                WeightView whole = w.view;
                whole.panels = panels.data();
                const WeightView tail = whole.rows(16, nw - 16);
                ASSERT_EQ(tail.panels, panels.data() + int8::load_panels_bytes(type, 16, k));
                EXPECT_EQ(whole.rows(3, 5).panels, nullptr);  // not at a panel's start: the rows in place
                std::vector<float> part(static_cast<size_t>(nx * ldy), -7.0f);
                int8::gemm_load_panels(type, a.view(k), nx, tail.panels, nw - 16, part.data(), ldy);
                for (int64_t i = 0; i < nx; ++i) {
                    for (int64_t j = 0; j < nw - 16; ++j) {
                        ASSERT_EQ(part[static_cast<size_t>(i * ldy + j)], got[static_cast<size_t>(i * ldy + 16 + j)]);
                    }
                }
            }
        }
    }
}

// With the panels, matmul gives every row the same bits however many rows it batches, within
// decode (K-quants: 1 to 8 rows) and within prefill (Q8_0: across both; the K-quants' decode and
// prefill add the same sums in different orders, as the kernels on their rows do), and stays within the rounding of the
// same sums from the rows in place.
TEST_P(LoadPanels, RowsIndependentOfBatching) {
    if (!int8::vnni_enabled()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU (or switched off)";
    const GgmlType type = GetParam();
    const int64_t k = 512, n_out = 72, n = 300;
    set_matmul_precision(MatmulPrecision::Fast);
    Quantised w = quantise(type, gaussian(k * n_out, 63, 0.5f), k, n_out);
    std::vector<uint8_t> panels(int8::load_panels_bytes(type, n_out, k));
    int8::pack_load_panels(type, w.view.data, w.view.row_bytes, n_out, k, panels.data());
    w.view.panels = panels.data();
    const auto x = gaussian(n * k, 64);
    std::vector<float> all(static_cast<size_t>(n * n_out)), one(static_cast<size_t>(n_out)), part(all.size()),
        ref(all.size());
    matmul(x.data(), n, w.view, all.data());
    matmul(x.data() + 5 * k, 1, w.view, one.data());
    for (int64_t rows : {1, 2, 4, 8, 13}) {
        matmul(x.data() + 5 * k, rows, w.view, part.data());
        const bool same_kernel = type == GgmlType::Q8_0 || rows > int8::k_panels_decode_rows;
        for (int64_t i = 0; i < (same_kernel ? rows * n_out : n_out); ++i) {
            ASSERT_EQ(part[static_cast<size_t>(i)], same_kernel ? all[static_cast<size_t>(5 * n_out + i)] : one[i]) << rows;
        }
    }
    WeightView rows_only = w.view;  // the rows in place: within rounding of the same sums
    rows_only.panels = nullptr;
    matmul(x.data(), n, rows_only, ref.data());
    for (size_t i = 0; i < all.size(); ++i) ASSERT_NEAR(all[i], ref[i], 1e-4 * (1.0 + std::fabs(ref[i]))) << i;
    matmul(x.data() + 5 * k, 1, rows_only, ref.data());
    for (int64_t i = 0; i < n_out; ++i) ASSERT_NEAR(one[i], ref[i], 1e-4 * (1.0 + std::fabs(ref[i]))) << i;
}

// matmul_group gives each weight the bits matmul gives it alone: weights of the three panel types
// together (one pass in decode), one without panels among them (each on its own), and prefill.
TEST(LoadPanels, GroupMatchesEachMatmul) {
    set_matmul_precision(MatmulPrecision::Fast);
    const int64_t k = 512;
    const std::vector<std::pair<GgmlType, int64_t>> shapes = {
        {GgmlType::Q4_K, 96}, {GgmlType::Q6_K, 40}, {GgmlType::Q8_0, 33}, {GgmlType::Q4_K, 20}};
    std::vector<Quantised> ws;
    std::vector<std::vector<uint8_t>> panels;
    for (size_t i = 0; i < shapes.size(); ++i) {
        const auto [type, n_out] = shapes[i];
        ws.push_back(quantise(type, gaussian(k * n_out, 70 + static_cast<uint32_t>(i), 0.5f), k, n_out));
        panels.emplace_back(int8::load_panels_bytes(type, n_out, k));
        int8::pack_load_panels(type, ws[i].view.data, ws[i].view.row_bytes, n_out, k, panels[i].data());
        ws[i].view.panels = panels[i].data();
    }
    const auto x = gaussian(20 * k, 75);
    for (bool without_panels : {false, true}) {
        if (without_panels) ws[2].view.panels = nullptr;
        for (int64_t n : {1, 3, 8, 20}) {
            std::vector<std::vector<float>> got, want;
            std::vector<MatmulOut> outs;
            for (const Quantised& w : ws) {
                got.emplace_back(static_cast<size_t>(n * w.view.n_out), -7.0f);
                want.emplace_back(got.back().size());
                matmul(x.data(), n, w.view, want.back().data());
            }
            for (size_t i = 0; i < ws.size(); ++i) outs.push_back({&ws[i].view, got[i].data()});
            matmul_group(x.data(), n, outs);
            for (size_t i = 0; i < ws.size(); ++i) ASSERT_EQ(got[i], want[i]) << i << " n=" << n << " " << without_panels;
        }
    }
}

// matmul_group on weights read in place by the decode kernels (no panels): weights of one type are
// one pass (one team, items across all their rows), and each gets the bits matmul gives it alone,
// with one thread or two, at row counts that end in a part item; a group of mixed types is each
// weight on its own.
TEST_P(Int8Types, DecodeGroupMatchesEachMatmul) {
    const GgmlType type = GetParam();
    set_matmul_precision(MatmulPrecision::Fast);
    if (int8::decode::kernel_for(type, 1) == nullptr) GTEST_SKIP() << "no decode kernel for this type on this CPU";
    const int64_t k = 256;
    std::vector<Quantised> ws;
    for (int64_t n_out : {576, 40, 70}) {  // 40 and 70: part items of 32 rows
        ws.push_back(quantise(type, gaussian(k * n_out, 90 + static_cast<uint32_t>(ws.size()), 0.5f), k, n_out));
    }
    const GgmlType other = type == GgmlType::Q8_0 ? GgmlType::Q4_0 : GgmlType::Q8_0;
    const Quantised mixed = quantise(other, gaussian(k * 48, 99, 0.5f), k, 48);
    const auto x = gaussian(4 * k, 98);
    const int threads_before = omp_get_max_threads();
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        for (bool with_other : {false, true}) {
            for (int64_t n : {int64_t{1}, int64_t{3}}) {
                std::vector<const WeightView*> views;
                for (const Quantised& w : ws) views.push_back(&w.view);
                if (with_other) views.push_back(&mixed.view);
                std::vector<std::vector<float>> got, want;
                std::vector<MatmulOut> outs;
                for (const WeightView* w : views) {
                    got.emplace_back(static_cast<size_t>(n * w->n_out), -7.0f);
                    want.emplace_back(got.back().size());
                    matmul(x.data(), n, *w, want.back().data());
                }
                for (size_t i = 0; i < views.size(); ++i) outs.push_back({views[i], got[i].data()});
                matmul_group(x.data(), n, outs);
                for (size_t i = 0; i < views.size(); ++i) {
                    ASSERT_EQ(got[i], want[i]) << i << " n=" << n << " threads=" << threads << " mixed=" << with_other;
                }
            }
        }
    }
    omp_set_num_threads(threads_before);
}

// The types whose rows are repacked at load for the AVX2 decode kernels (int8::decode::repack_rows).
class LoadRows : public ::testing::TestWithParam<GgmlType> {};

// Rows of arbitrary bytes (every fifth-bit pattern; 32 x 9 and 32 x 7 elements: whole groups and a
// tail of 1 or 3 blocks, 32: a tail alone) repacked: each group holds its blocks' quant bytes in
// order, then (Q5_0, Q5_1) the fifth bit of element e of block b at bit 4 + b (e < 16) or b
// (e >= 16) of byte e % 16, then the d (and m) of the four blocks; the tail blocks are as they
// were; restore_row gives the rows back byte for byte.
TEST_P(LoadRows, RepackedLayoutAndItsInverse) {
    const GgmlType type = GetParam();
    const bool fifth = type == GgmlType::Q5_0 || type == GgmlType::Q5_1;
    const bool has_m = type == GgmlType::Q4_1 || type == GgmlType::Q5_1;
    const size_t block = ggml_row_size(type, 32), qs = block - 16, qh = has_m ? 4 : 2;
    std::mt19937 rng(7);
    for (int64_t k : {288, 224, 32}) {
        const int64_t n = 5;
        const size_t row = ggml_row_size(type, k);
        std::vector<uint8_t> w(row * n), packed(w.size()), back(row);
        for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
        int8::decode::repack_rows(type, w.data(), row, n, k, packed.data());
        for (int64_t r = 0; r < n; ++r) {
            const uint8_t* nat = w.data() + r * row;
            const uint8_t* rep = packed.data() + r * row;
            const int64_t groups = k / 128;
            for (int64_t g = 0; g < groups; ++g) {
                const uint8_t* grp = rep + g * 4 * block;
                const size_t scales = fifth ? 80 : 64;
                for (int b = 0; b < 4; ++b) {
                    const uint8_t* blk = nat + (4 * g + b) * block;
                    ASSERT_EQ(std::memcmp(grp + 16 * b, blk + qs, 16), 0) << k << " " << g << " " << b;
                    ASSERT_EQ(std::memcmp(grp + scales + 2 * b, blk, 2), 0);
                    if (has_m) ASSERT_EQ(std::memcmp(grp + scales + 8 + 2 * b, blk + 2, 2), 0);
                    if (!fifth) continue;
                    for (int e = 0; e < 32; ++e) {
                        const int want = blk[qh + e / 8] >> (e % 8) & 1;
                        ASSERT_EQ(grp[64 + e % 16] >> (e < 16 ? 4 + b : b) & 1, want) << "block " << b << " e " << e;
                    }
                }
            }
            const size_t done = static_cast<size_t>(groups) * 4 * block;
            ASSERT_EQ(std::memcmp(rep + done, nat + done, row - done), 0) << "tail, k " << k;
            int8::decode::restore_row(type, rep, k, back.data());
            ASSERT_EQ(std::memcmp(back.data(), nat, row), 0) << "k " << k << " row " << r;
        }
    }
}

// The AVX2 kernel on repacked rows gives the bits of the AVX2 kernel on the rows as they were, for
// every activation row count, rows of whole groups and rows with a tail.
TEST_P(LoadRows, RepackedKernelMatchesInPlace) {
    const GgmlType type = GetParam();
    const int8::decode::Kernel in_place = int8::decode::kernel_avx2(type);
    const int8::decode::Kernel repacked = int8::decode::kernel_avx2_repacked(type);
    if (in_place == nullptr || repacked == nullptr) GTEST_SKIP() << "no AVX2 on this CPU";
    const int64_t nw = 13, ldy = nw + 2, sub = int8::decode::layout(type).sub;
    for (int64_t k : {288, 224, 32, 896}) {
        const Quantised w = quantise(type, gaussian(k * nw, 25, 0.5f), k, nw);
        std::vector<uint8_t> packed(w.bytes.size());
        int8::decode::repack_rows(type, w.view.data, w.view.row_bytes, nw, k, packed.data());
        for (int64_t nx = 1; nx <= int8::decode::kMaxRows; ++nx) {
            const Acts a = quantise_acts_ref(gaussian(nx * k, 60 + static_cast<uint32_t>(nx)), nx, k);
            std::vector<int8_t> q(static_cast<size_t>(nx * k));
            std::vector<float> dx(static_cast<size_t>(nx * k / sub)), xs(dx.size());
            int8::decode::prepare_rows(type, a.view(k), nx, q.data(), dx.data(), xs.data());
            const int8::decode::Rows rows{q.data(), dx.data(), xs.data(), k};
            std::vector<float> want(static_cast<size_t>(nx * ldy), -7.0f), got(want.size(), -7.0f);
            in_place(rows, nx, w.view.data, w.view.row_bytes, nw, want.data(), ldy);
            repacked(rows, nx, packed.data(), w.view.row_bytes, nw, got.data(), ldy);
            ASSERT_EQ(got, want) << "k " << k << " nx " << nx;
        }
    }
}

// matmul and matmul_group on a view with repacked rows, in Fast precision without VNNI, read those
// rows on every path (decode kernels, the six-bit prefill tiles through unpack_rows): with `data`
// zeroed they give the bits of the intact view without repacked rows, from 1 row to prefill.
TEST_P(LoadRows, MatmulReadsRepackedRows) {
    const GgmlType type = GetParam();
    if (int8::decode::kernel_avx2_repacked(type) == nullptr) GTEST_SKIP() << "no AVX2 on this CPU";
    set_matmul_precision(MatmulPrecision::Fast);
    Avx512Guard guard;
    kernels::set_avx512(false);
    const int64_t k = 288, n_out = 70;
    const Quantised w = quantise(type, gaussian(k * n_out, 43, 0.5f), k, n_out);
    std::vector<uint8_t> packed(w.bytes.size()), zeros(w.bytes.size(), 0);
    int8::decode::repack_rows(type, w.view.data, w.view.row_bytes, n_out, k, packed.data());
    WeightView r = w.view;
    r.data = zeros.data();
    r.decode_rows = packed.data();
    const WeightView parts[2] = {r.rows(0, 32), r.rows(32, n_out - 32)};
    for (int64_t n : {1, 2, 5, 16, 17, 40}) {
        const auto x = gaussian(n * k, 30 + static_cast<uint32_t>(n));
        std::vector<float> want(static_cast<size_t>(n * n_out)), got(want.size(), -7.0f);
        matmul(x.data(), n, w.view, want.data());
        matmul(x.data(), n, r, got.data());
        ASSERT_EQ(got, want) << "n " << n;
        std::vector<float> y0(static_cast<size_t>(n * 32), -7.0f), y1(static_cast<size_t>(n * (n_out - 32)), -7.0f);
        const MatmulOut outs[2] = {{&parts[0], y0.data()}, {&parts[1], y1.data()}};
        matmul_group(x.data(), n, outs);
        for (int64_t i = 0; i < n; ++i) {
            for (int64_t j = 0; j < n_out; ++j) {
                const float g = j < 32 ? y0[static_cast<size_t>(i * 32 + j)] : y1[static_cast<size_t>(i * (n_out - 32) + j - 32)];
                ASSERT_EQ(g, want[static_cast<size_t>(i * n_out + j)]) << "group, n " << n << " (" << i << ", " << j << ")";
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, LoadRows,
                         ::testing::Values(GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(Types, LoadPanels, ::testing::Values(GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

}  // namespace
}  // namespace kvec
