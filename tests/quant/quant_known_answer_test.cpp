// Known-answer tests: blocks built by hand, field by field, whose decoded values are derived
// from the layout definitions of llama.cpp's ggml-common.h / dequantize_row_* (written here as
// one formula per element, independent of the decoder's loop structure), plus a few values
// worked out by hand. Together they pin the byte layouts independently of quant.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gguf/ggml_type.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "util/error.h"

namespace kvec::quant {
namespace {

// fp16 bit patterns of exactly representable values.
constexpr uint16_t kHalf_1 = 0x3C00;      // 1.0
constexpr uint16_t kHalf_0_5 = 0x3800;    // 0.5
constexpr uint16_t kHalf_0_25 = 0x3400;   // 0.25
constexpr uint16_t kHalf_0_125 = 0x3000;  // 0.125
constexpr uint16_t kHalf_2 = 0x4000;      // 2.0
constexpr uint16_t kHalf_m1 = 0xBC00;     // -1.0

template <typename Block>
std::vector<float> decode(GgmlType type, const Block& b, int n) {
    std::vector<float> y(static_cast<size_t>(n));  // [n]
    dequantize_row(type, &b, y.data(), n);
    return y;
}

TEST(KnownAnswer, TraitsMatchBlockStructs) {
    struct Expect {
        GgmlType type;
        int64_t block;
        size_t size;
        const char* name;
    };
    const Expect expects[] = {
        {GgmlType::F32, 1, 4, "f32"},
        {GgmlType::F16, 1, 2, "f16"},
        {GgmlType::BF16, 1, 2, "bf16"},
        {GgmlType::Q4_0, 32, sizeof(BlockQ4_0), "q4_0"},
        {GgmlType::Q4_1, 32, sizeof(BlockQ4_1), "q4_1"},
        {GgmlType::Q5_0, 32, sizeof(BlockQ5_0), "q5_0"},
        {GgmlType::Q5_1, 32, sizeof(BlockQ5_1), "q5_1"},
        {GgmlType::Q8_0, 32, sizeof(BlockQ8_0), "q8_0"},
        {GgmlType::Q8_1, 32, sizeof(BlockQ8_1), "q8_1"},
        {GgmlType::Q2_K, 256, sizeof(BlockQ2_K), "q2_K"},
        {GgmlType::Q3_K, 256, sizeof(BlockQ3_K), "q3_K"},
        {GgmlType::Q4_K, 256, sizeof(BlockQ4_K), "q4_K"},
        {GgmlType::Q5_K, 256, sizeof(BlockQ5_K), "q5_K"},
        {GgmlType::Q6_K, 256, sizeof(BlockQ6_K), "q6_K"},
        {GgmlType::Q8_K, 256, sizeof(BlockQ8_K), "q8_K"},
        {GgmlType::IQ4_NL, 32, sizeof(BlockIQ4_NL), "iq4_nl"},
        {GgmlType::IQ4_XS, 256, sizeof(BlockIQ4_XS), "iq4_xs"},
        {GgmlType::MXFP4, 32, sizeof(BlockMXFP4), "mxfp4"},
    };
    for (const Expect& e : expects) {
        SCOPED_TRACE(e.name);
        const GgmlTypeTraits& t = ggml_type_traits(e.type);
        EXPECT_EQ(t.block_size, e.block);
        EXPECT_EQ(t.type_size, e.size);
        EXPECT_STREQ(t.name, e.name);
        EXPECT_EQ(t.quantized, e.block > 1);
        EXPECT_EQ(ggml_type_from_name(e.name), e.type);
        EXPECT_EQ(ggml_row_size(e.type, e.block * 3), e.size * 3);
    }
    // The llama.cpp sizes, spelled out.
    EXPECT_EQ(ggml_type_traits(GgmlType::Q4_K).type_size, 144u);
    EXPECT_EQ(ggml_type_traits(GgmlType::Q6_K).type_size, 210u);
    EXPECT_EQ(ggml_type_traits(GgmlType::Q2_K).type_size, 84u);
    EXPECT_EQ(ggml_type_traits(GgmlType::Q3_K).type_size, 110u);
    EXPECT_EQ(ggml_type_traits(GgmlType::Q5_K).type_size, 176u);
    EXPECT_EQ(ggml_type_traits(GgmlType::Q8_K).type_size, 292u);
    EXPECT_EQ(ggml_type_traits(GgmlType::IQ4_NL).type_size, 18u);
    EXPECT_EQ(ggml_type_traits(GgmlType::IQ4_XS).type_size, 136u);
    EXPECT_EQ(ggml_type_traits(GgmlType::MXFP4).type_size, 17u);
    EXPECT_EQ(static_cast<uint32_t>(GgmlType::IQ4_NL), 20u);  // ggml.h numbering
    EXPECT_EQ(static_cast<uint32_t>(GgmlType::IQ4_XS), 23u);
    EXPECT_EQ(static_cast<uint32_t>(GgmlType::MXFP4), 39u);
    EXPECT_EQ(ggml_type_from_name("Q4_K"), GgmlType::Q4_K);
    EXPECT_EQ(ggml_type_from_name("BF16"), GgmlType::BF16);
    EXPECT_FALSE(ggml_type_from_name("q4_k_m").has_value());
    EXPECT_FALSE(ggml_type_traits(16u).has_value());  // iq2_xxs: not supported
    EXPECT_FALSE(ggml_type_traits(4u).has_value());
    EXPECT_THROW(ggml_row_size(GgmlType::Q4_0, 33), Error);
}

TEST(KnownAnswer, Q4_0) {
    BlockQ4_0 b{};
    b.d = kHalf_0_5;
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto y = decode(GgmlType::Q4_0, b, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;             // low nibbles: elements 0..15
        EXPECT_EQ(y[16 + j], (7 - j) * 0.5f) << 16 + j;   // high nibbles: elements 16..31
    }
    EXPECT_EQ(y[0], -4.0f);
    EXPECT_EQ(y[15], 3.5f);
    EXPECT_EQ(y[31], -4.0f);
}

TEST(KnownAnswer, Q4_1) {
    BlockQ4_1 b{};
    b.d = kHalf_0_5;
    b.m = kHalf_m1;
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto y = decode(GgmlType::Q4_1, b, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], j * 0.5f - 1.0f);
        EXPECT_EQ(y[16 + j], (15 - j) * 0.5f - 1.0f);
    }
    EXPECT_EQ(y[16], 6.5f);
}

// qh is a little-endian u32: bits 0..15 for elements 0..15, bits 16..31 for 16..31.
TEST(KnownAnswer, Q5_0) {
    BlockQ5_0 b{};
    b.d = kHalf_1;
    const uint8_t qh[4] = {0x55, 0x55, 0xAA, 0xAA};  // u32 0xAAAA5555
    std::memcpy(b.qh, qh, 4);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto y = decode(GgmlType::Q5_0, b, 32);
    const uint32_t bits = 0xAAAA5555u;
    for (int e = 0; e < 32; ++e) {
        const int low = e < 16 ? (b.qs[e] & 15) : (b.qs[e - 16] >> 4);
        const int q = low | static_cast<int>(((bits >> e) & 1) << 4);
        EXPECT_EQ(y[e], static_cast<float>(q - 16)) << e;
    }
    EXPECT_EQ(y[0], 0.0f);    // 0 | 16 - 16
    EXPECT_EQ(y[1], -15.0f);  // 1 - 16
    EXPECT_EQ(y[16], -1.0f);  // 15 - 16
    EXPECT_EQ(y[17], 14.0f);  // 14 | 16 - 16
}

TEST(KnownAnswer, Q5_1) {
    BlockQ5_1 b{};
    b.d = kHalf_0_25;
    b.m = kHalf_2;
    const uint8_t qh[4] = {0x55, 0x55, 0xAA, 0xAA};
    std::memcpy(b.qh, qh, 4);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto y = decode(GgmlType::Q5_1, b, 32);
    EXPECT_EQ(y[0], 16 * 0.25f + 2.0f);
    EXPECT_EQ(y[1], 1 * 0.25f + 2.0f);
    EXPECT_EQ(y[17], 30 * 0.25f + 2.0f);
    EXPECT_EQ(y[31], 0 * 0.25f + 2.0f + 16 * 0.25f);  // low 0, bit 31 set
}

TEST(KnownAnswer, Q8_0AndQ8_1) {
    BlockQ8_0 b{};
    b.d = kHalf_0_125;
    for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 7 - 100);
    const auto y = decode(GgmlType::Q8_0, b, 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 7 - 100) * 0.125f);

    BlockQ8_1 c{};
    c.d = kHalf_2;
    c.s = 0;
    for (int j = 0; j < 32; ++j) c.qs[j] = static_cast<int8_t>(-j);
    const auto z = decode(GgmlType::Q8_1, c, 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(z[j], -2.0f * j);
}

TEST(KnownAnswer, Q8_K) {
    BlockQ8_K b{};
    b.d = 0.5f;
    for (int j = 0; j < 256; ++j) b.qs[j] = static_cast<int8_t>(j - 128);
    const auto y = decode(GgmlType::Q8_K, b, 256);
    for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], 0.5f * (j - 128));
}

// Q2_K: scales[e/16] holds scale (low nibble) and min (high nibble); the 2-bit quant of
// element e is in qs[32*(e/128) + e%32] at bit 2*((e%128)/32).
TEST(KnownAnswer, Q2_K) {
    BlockQ2_K b{};
    b.d = kHalf_1;
    b.dmin = kHalf_0_5;
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>((j & 0xF) | (((j * 3) & 0xF) << 4));
    for (int k = 0; k < 64; ++k) b.qs[k] = static_cast<uint8_t>(k * 37);
    const auto y = decode(GgmlType::Q2_K, b, 256);
    for (int e = 0; e < 256; ++e) {
        const int q = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        const int sc = b.scales[e / 16] & 0xF;
        const int m = b.scales[e / 16] >> 4;
        EXPECT_EQ(y[e], 1.0f * sc * q - 0.5f * m) << e;
    }
    EXPECT_EQ(y[33], -1.0f);   // qs[1] = 37 -> bits 2..3 = 1; scales[2]: 2, min 6 -> 2 - 3
    EXPECT_EQ(y[200], -2.0f);  // qs[40] = 200 -> bits 4..5 = 0; scales[12]: min 4 -> -2
}

// Q3_K: 16 6-bit scales (low 4 bits in the nibbles of scales[0..8), high 2 bits in
// scales[8..12)), minus 32; quant = 2 low bits (as Q2_K) minus 4 unless the hmask bit is set.
TEST(KnownAnswer, Q3_K) {
    BlockQ3_K b{};
    b.d = kHalf_0_5;
    int s[16];
    for (int j = 0; j < 16; ++j) s[j] = 4 * j + 1;  // 1..61
    for (int j = 0; j < 16; ++j) {
        if (j < 8) {
            b.scales[j] = static_cast<uint8_t>(b.scales[j] | (s[j] & 0xF));
        } else {
            b.scales[j - 8] = static_cast<uint8_t>(b.scales[j - 8] | ((s[j] & 0xF) << 4));
        }
        b.scales[8 + j % 4] = static_cast<uint8_t>(b.scales[8 + j % 4] | ((s[j] >> 4) << (2 * (j / 4))));
    }
    for (int l = 0; l < 32; ++l) b.hmask[l] = static_cast<uint8_t>(l * 29);
    for (int k = 0; k < 64; ++k) b.qs[k] = static_cast<uint8_t>(k * 53 + 7);
    const auto y = decode(GgmlType::Q3_K, b, 256);
    for (int e = 0; e < 256; ++e) {
        const int low = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        const int h = (b.hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
        const int q = low - (h ? 0 : 4);
        EXPECT_EQ(y[e], 0.5f * static_cast<float>(s[e / 16] - 32) * static_cast<float>(q)) << e;
    }
    EXPECT_EQ(y[0], 15.5f);   // qs[0] = 7 -> 3, no high bit -> -1; scale 1 - 32 = -31
    EXPECT_EQ(y[100], 3.5f);  // qs[4] = 219 -> bits 6..7 = 3, hmask[4] bit 3 clear -> -1; scale 25 - 32
}

// Q4_K / Q5_K scales bytes chosen by hand; (scale, min) of the 8 sub-blocks worked out from
// get_scale_min_k4: j < 4: (q[j] & 63, q[j+4] & 63); j >= 4: (q[j+4] & 15 | (q[j-4] >> 6) << 4,
// q[j+4] >> 4 | (q[j] >> 6) << 4).
const uint8_t kKScales[12] = {0x41, 0x02, 0x83, 0x04, 0x05, 0xC6, 0x07, 0x48, 0x21, 0x43, 0x65, 0x87};
const int kKSc[8] = {1, 2, 3, 4, 17, 3, 37, 7};
const int kKMin[8] = {5, 6, 7, 8, 2, 52, 6, 24};

TEST(KnownAnswer, ScaleMinPacking) {
    for (int j = 0; j < 8; ++j) {
        uint8_t sc = 0;
        uint8_t m = 0;
        get_scale_min_k4(j, kKScales, &sc, &m);
        EXPECT_EQ(sc, kKSc[j]) << j;
        EXPECT_EQ(m, kKMin[j]) << j;
    }
}

TEST(KnownAnswer, Q4_K) {
    BlockQ4_K b{};
    b.d = kHalf_0_5;
    b.dmin = kHalf_0_25;
    std::memcpy(b.scales, kKScales, 12);
    for (int k = 0; k < 128; ++k) b.qs[k] = static_cast<uint8_t>(k * 41 + 3);
    const auto y = decode(GgmlType::Q4_K, b, 256);
    for (int e = 0; e < 256; ++e) {
        const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
        const int q = (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
        EXPECT_EQ(y[e], 0.5f * kKSc[e / 32] * q - 0.25f * kKMin[e / 32]) << e;
    }
    EXPECT_EQ(y[0], 0.25f);    // q 3, sub-block 0 (1, 5): 1.5 - 1.25
    EXPECT_EQ(y[160], -7.0f);  // qs[64] = 0x43 high nibble 4, sub-block 5 (3, 52): 6 - 13
    EXPECT_EQ(y[255], 11.5f);  // qs[127] = 0x5A high nibble 5, sub-block 7 (7, 24): 17.5 - 6
}

TEST(KnownAnswer, Q5_K) {
    BlockQ5_K b{};
    b.d = kHalf_0_5;
    b.dmin = kHalf_0_25;
    std::memcpy(b.scales, kKScales, 12);
    for (int k = 0; k < 128; ++k) b.qs[k] = static_cast<uint8_t>(k * 41 + 3);
    for (int l = 0; l < 32; ++l) b.qh[l] = static_cast<uint8_t>(l * 13 + 5);
    const auto y = decode(GgmlType::Q5_K, b, 256);
    for (int e = 0; e < 256; ++e) {
        const uint8_t byte = b.qs[32 * (e / 64) + e % 32];
        const int low = (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
        const int high = (b.qh[e % 32] >> (2 * (e / 64) + (e % 64) / 32)) & 1;
        const int q = low + 16 * high;
        EXPECT_EQ(y[e], 0.5f * kKSc[e / 32] * q - 0.25f * kKMin[e / 32]) << e;
    }
    EXPECT_EQ(y[0], 8.25f);    // qh[0] = 5: bit 0 set -> q 19: 9.5 - 1.25
    EXPECT_EQ(y[160], -7.0f);  // bit 5 of qh[0] clear -> as Q4_K
    EXPECT_EQ(y[255], 67.5f);  // qh[31] = 152: bit 7 set -> q 21: 73.5 - 6
}

// Q6_K: low 4 bits in ql[64*(e/128) + 32*(quarter%2) + e%32] (low nibble for quarters 0, 1,
// high for 2, 3), high 2 bits in qh[32*(e/128) + e%32] at bit 2*quarter; int8 scale per 16.
TEST(KnownAnswer, Q6_K) {
    BlockQ6_K b{};
    b.d = kHalf_0_25;
    for (int k = 0; k < 128; ++k) b.ql[k] = static_cast<uint8_t>(k * 19 + 1);
    for (int k = 0; k < 64; ++k) b.qh[k] = static_cast<uint8_t>(k * 23 + 2);
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j * 9 - 70);
    const auto y = decode(GgmlType::Q6_K, b, 256);
    for (int e = 0; e < 256; ++e) {
        const int half = e / 128;
        const int quarter = (e % 128) / 32;
        const int l = e % 32;
        const uint8_t lowbyte = b.ql[64 * half + 32 * (quarter % 2) + l];
        const int low = quarter < 2 ? (lowbyte & 0xF) : (lowbyte >> 4);
        const int high = (b.qh[32 * half + l] >> (2 * quarter)) & 3;
        const int q = (low | (high << 4)) - 32;
        EXPECT_EQ(y[e], 0.25f * b.scales[e / 16] * q) << e;
    }
    EXPECT_EQ(y[0], -17.5f);    // ql[0] = 1, qh[0] = 2 -> q 33 - 32 = 1; scale -70
    EXPECT_EQ(y[130], -12.5f);  // ql[66] = 0xE7 -> 7, qh[34] = 16 -> 0: -25; scale 2
    EXPECT_EQ(y[100], 24.0f);   // ql[36] = 0xAD high 10, qh[4] = 94 bits 6..7 = 1: 26 - 32; scale -16
}

// The non-uniform grids as ggml-common.h lists them (kvalues_iq4nl, kvalues_mxfp4).
constexpr int kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr int kMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// IQ4_NL: x = d * grid[nibble], nibbles ordered as Q4_0.
TEST(KnownAnswer, IQ4_NL) {
    BlockIQ4_NL b{};
    b.d = kHalf_0_5;
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto y = decode(GgmlType::IQ4_NL, b, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], 0.5f * kIq4nl[j]) << j;
        EXPECT_EQ(y[16 + j], 0.5f * kIq4nl[15 - j]) << j;
    }
    EXPECT_EQ(y[0], -63.5f);
    EXPECT_EQ(y[16], 56.5f);
}

// IQ4_XS: sub-block j (32 elements) has the 6-bit scale low nibble j%2 of scales_l[j/2] | bits
// 2j..2j+1 of scales_h << 4, offset by 32; its 16 quant bytes at qs[16j], nibbles as Q4_0.
TEST(KnownAnswer, IQ4_XS) {
    BlockIQ4_XS b{};
    b.d = kHalf_0_25;
    b.scales_h = 0xE4B1;  // high bits per sub-block: 1, 0, 3, 2, 0, 1, 2, 3
    const uint8_t lows[4] = {0x2F, 0x90, 0x51, 0xC7};
    std::memcpy(b.scales_l, lows, 4);
    for (int k = 0; k < 128; ++k) b.qs[k] = static_cast<uint8_t>(k * 37 + 5);
    const auto y = decode(GgmlType::IQ4_XS, b, 256);
    const int high[8] = {1, 0, 3, 2, 0, 1, 2, 3};
    for (int e = 0; e < 256; ++e) {
        const int j = e / 32;
        const int ls = ((lows[j / 2] >> (4 * (j % 2))) & 15) | (high[j] << 4);
        const uint8_t byte = b.qs[16 * j + e % 16];
        const int q = (e % 32) < 16 ? (byte & 15) : (byte >> 4);
        EXPECT_EQ(y[e], 0.25f * static_cast<float>(ls - 32) * kIq4nl[q]) << e;
    }
    // Sub-block 0: ls = 15 | 16 = 31 -> -1 * 0.25; qs[0] = 5 -> grid -35: 8.75.
    EXPECT_EQ(y[0], 8.75f);
    // Sub-block 2: ls = 0 | 48 = 48 -> 16 * 0.25 = 4; element 80 is the high nibble of
    // qs[32] = 165 = 0xA5: 10 -> grid 25: 100.
    EXPECT_EQ(y[80], 100.0f);
}

// MXFP4: x = 2^(e - 128) * (doubled E2M1 value of the nibble), nibbles ordered as Q4_0.
TEST(KnownAnswer, MXFP4) {
    BlockMXFP4 b{};
    b.e = 127;  // 2^-1
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    auto y = decode(GgmlType::MXFP4, b, 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], 0.5f * kMxfp4[j]) << j;
        EXPECT_EQ(y[16 + j], 0.5f * kMxfp4[15 - j]) << j;
    }
    EXPECT_EQ(y[7], 6.0f);    // E2M1 6.0 at the E8M0 scale 2^0
    EXPECT_EQ(y[16], -6.0f);
    b.e = 0;  // the smallest scale, 2^-128 (subnormal)
    y = decode(GgmlType::MXFP4, b, 32);
    EXPECT_EQ(y[1], std::ldexp(1.0f, -128));
    b.e = 254;
    y = decode(GgmlType::MXFP4, b, 32);
    EXPECT_EQ(y[2], std::ldexp(1.0f, 127));
}

TEST(KnownAnswer, FloatTypes) {
    const uint16_t f16[4] = {0x3C00, 0xC000, 0x7BFF, 0x0001};  // 1, -2, 65504, 2^-24
    float y[4];
    dequantize_row(GgmlType::F16, f16, y, 4);
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], -2.0f);
    EXPECT_EQ(y[2], 65504.0f);
    EXPECT_EQ(y[3], 5.9604644775390625e-8f);
    const uint16_t bf16[3] = {0x3F80, 0xC040, 0x4049};  // 1, -3, 3.140625
    dequantize_row(GgmlType::BF16, bf16, y, 3);
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], -3.0f);
    EXPECT_EQ(y[2], 3.140625f);
    const float f32[2] = {1.25f, -7.0f};
    dequantize_row(GgmlType::F32, f32, y, 2);
    EXPECT_EQ(y[1], -7.0f);
}

TEST(KnownAnswer, RowLengthMustBeABlockMultiple) {
    std::vector<uint8_t> buf(1024);
    std::vector<float> x(300);
    EXPECT_THROW(dequantize_row(GgmlType::Q4_K, buf.data(), x.data(), 300), Error);
    EXPECT_THROW(quantize_row(GgmlType::Q8_0, x.data(), buf.data(), 33), Error);
    EXPECT_THROW(quantize_row(GgmlType::Q8_0, x.data(), buf.data(), -32), Error);
}

}  // namespace
}  // namespace kvec::quant
