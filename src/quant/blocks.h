// Block layouts of the quantised tensor types, byte for byte as llama.cpp writes them
// (ggml-common.h). A row of n elements is n / QK consecutive blocks. Half-precision fields
// (d, dmin, m, s) are IEEE fp16 bit patterns (kvec::fp16_to_float); everything is
// little-endian. The structs hold only 1- and 2-byte fields (Q8_K: a float), so a block may
// sit at any 2-byte (Q8_K: 4-byte) aligned address; GGUF data is aligned to general.alignment.
//
// Decoding, element e of a block (this is what dequantize_row implements):
//   Q4_0: x = d * (q - 8),  q = e < 16 ? qs[e] & 15 : qs[e-16] >> 4
//   Q4_1: x = d * q + m,    q as Q4_0
//   Q5_0: x = d * (q - 16), q = low nibble as Q4_0 | bit e of u32 qh << 4
//   Q5_1: x = d * q + m,    q as Q5_0
//   Q8_0: x = d * qs[e]
//   Q8_1: x = d * qs[e]     (s = d * sum(qs), used by dot products)
//   Q2_K: 16 sub-blocks of 16; sc = scales[e/16]; x = d*(sc&15)*q - dmin*(sc>>4),
//         q = (qs[32*(e/128) + e%32] >> (2*((e%128)/32))) & 3
//   Q3_K: 16 sub-blocks of 16, 6-bit signed scales (see q3k_scale); x = d*(sc-32)*(q-4*!h),
//         q = (qs[32*(e/128) + e%32] >> (2*((e%128)/32))) & 3,
//         h = bit (4*(e/128) + (e%128)/32) of hmask[e%32]
//   Q4_K: 8 sub-blocks of 32, 6-bit scale/min pairs (see get_scale_min_k4);
//         x = d*sc*q - dmin*m, q = nibble (e%64)/32 of qs[32*(e/64) + e%32]
//   Q5_K: as Q4_K plus q += 16 * bit (2*(e/64) + (e%64)/32) of qh[e%32]
//   Q6_K: 16 sub-blocks of 16, int8 scales; x = d*scales[e/16]*(q-32),
//         q = nibble (quarter/2) of ql[64*(e/128) + 32*(quarter%2) + e%32]
//             | ((qh[32*(e/128) + e%32] >> (2*quarter)) & 3) << 4,  quarter = (e%128)/32
//   Q8_K: x = d * qs[e] (float d; bsums[j] = sum of qs[16j..16j+16))
//   IQ4_NL: x = d * kIq4nlValues[q], q = nibble as Q4_0 (a non-uniform 4-bit grid)
//   IQ4_XS: 8 sub-blocks of 32, 6-bit scales ls = low nibble (e/32)%2 of scales_l[e/64]
//           | ((scales_h >> 2*(e/32)) & 3) << 4; x = d*(ls-32)*kIq4nlValues[q],
//           q = nibble (e%32)/16 of qs[16*(e/32) + e%16]
//   MXFP4: x = 2^(e8-128) * kMxfp4Values[q], q = nibble as Q4_0 (the E2M1 values doubled, so
//          that the scale 2^(e8-128) is half the E8M0 scale 2^(e8-127), as llama.cpp stores it)
#pragma once

#include <cstdint>
#include <cstring>

namespace kvec::quant {

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK8_1 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;
constexpr int QK4_NL = 32;
constexpr int QK_MXFP4 = 32;

// The 16 levels of the IQ4_NL / IQ4_XS grid, and the doubled E2M1 values of MXFP4 (ggml-common.h).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

struct BlockQ4_0 {
    uint16_t d;              // fp16 scale
    uint8_t qs[QK4_0 / 2];   // nibbles: low = elements 0..15, high = 16..31
};
static_assert(sizeof(BlockQ4_0) == 18, "wrong q4_0 block size");

struct BlockQ4_1 {
    uint16_t d;              // fp16 scale
    uint16_t m;              // fp16 min
    uint8_t qs[QK4_1 / 2];   // nibbles as Q4_0
};
static_assert(sizeof(BlockQ4_1) == 20, "wrong q4_1 block size");

struct BlockQ5_0 {
    uint16_t d;              // fp16 scale
    uint8_t qh[4];           // u32 little-endian: bit j = 5th bit of element j
    uint8_t qs[QK5_0 / 2];   // low 4 bits, nibbles as Q4_0
};
static_assert(sizeof(BlockQ5_0) == 22, "wrong q5_0 block size");

struct BlockQ5_1 {
    uint16_t d;              // fp16 scale
    uint16_t m;              // fp16 min
    uint8_t qh[4];           // as Q5_0
    uint8_t qs[QK5_1 / 2];   // as Q5_0
};
static_assert(sizeof(BlockQ5_1) == 24, "wrong q5_1 block size");

struct BlockQ8_0 {
    uint16_t d;              // fp16 scale
    int8_t qs[QK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34, "wrong q8_0 block size");

struct BlockQ8_1 {
    uint16_t d;              // fp16 scale
    uint16_t s;              // fp16 d * sum(qs)
    int8_t qs[QK8_1];
};
static_assert(sizeof(BlockQ8_1) == 36, "wrong q8_1 block size");

struct BlockQ2_K {
    uint8_t scales[QK_K / 16];  // low nibble: scale, high nibble: min, per 16 elements
    uint8_t qs[QK_K / 4];       // 2-bit quants, 4 per byte (see header comment)
    uint16_t d;                 // fp16 super-block scale of the scales
    uint16_t dmin;              // fp16 super-block scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84, "wrong q2_K block size");

struct BlockQ3_K {
    uint8_t hmask[QK_K / 8];  // high (3rd) bit of each quant
    uint8_t qs[QK_K / 4];     // low 2 bits
    uint8_t scales[12];       // 16 6-bit scales: low nibbles in [0..8), high 2 bits in [8..12)
    uint16_t d;               // fp16 super-block scale
};
static_assert(sizeof(BlockQ3_K) == 110, "wrong q3_K block size");

struct BlockQ4_K {
    uint16_t d;                     // fp16 super-block scale of the scales
    uint16_t dmin;                  // fp16 super-block scale of the mins
    uint8_t scales[K_SCALE_SIZE];   // 8 6-bit scales and 8 6-bit mins (get_scale_min_k4)
    uint8_t qs[QK_K / 2];           // 4-bit quants
};
static_assert(sizeof(BlockQ4_K) == 144, "wrong q4_K block size");

struct BlockQ5_K {
    uint16_t d;                     // fp16 super-block scale of the scales
    uint16_t dmin;                  // fp16 super-block scale of the mins
    uint8_t scales[K_SCALE_SIZE];   // as Q4_K
    uint8_t qh[QK_K / 8];           // 5th bit of each quant
    uint8_t qs[QK_K / 2];           // low 4 bits
};
static_assert(sizeof(BlockQ5_K) == 176, "wrong q5_K block size");

struct BlockQ6_K {
    uint8_t ql[QK_K / 2];      // low 4 bits
    uint8_t qh[QK_K / 4];      // high 2 bits
    int8_t scales[QK_K / 16];  // 8-bit signed scales per 16 elements
    uint16_t d;                // fp16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210, "wrong q6_K block size");

struct BlockQ8_K {
    float d;                    // fp32 scale
    int8_t qs[QK_K];            // quants
    int16_t bsums[QK_K / 16];   // sum of quants in groups of 16
};
static_assert(sizeof(BlockQ8_K) == 292, "wrong q8_K block size");

struct BlockIQ4_NL {
    uint16_t d;               // fp16 scale
    uint8_t qs[QK4_NL / 2];   // grid indices, nibbles as Q4_0
};
static_assert(sizeof(BlockIQ4_NL) == 18, "wrong iq4_nl block size");

struct BlockIQ4_XS {
    uint16_t d;                 // fp16 super-block scale
    uint16_t scales_h;          // high 2 bits of the 8 sub-block scales
    uint8_t scales_l[QK_K / 64];  // low 4 bits of the sub-block scales, two per byte
    uint8_t qs[QK_K / 2];       // grid indices: 16 bytes per sub-block, nibbles as Q4_0
};
static_assert(sizeof(BlockIQ4_XS) == 136, "wrong iq4_xs block size");

struct BlockMXFP4 {
    uint8_t e;                  // E8M0 shared exponent
    uint8_t qs[QK_MXFP4 / 2];   // E2M1 codes, nibbles as Q4_0
};
static_assert(sizeof(BlockMXFP4) == 17, "wrong mxfp4 block size");

// Scale of sub-block j (0..7) of an IQ4_XS block, without the -32 offset: 0..63.
inline int iq4xs_scale(const BlockIQ4_XS& b, int j) {
    return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 15) | (((b.scales_h >> (2 * j)) & 3) << 4);
}

// 2^(e - 128) as a float, an MXFP4 block's scale: exact for every e (subnormal below e = 2),
// built from its bits.
inline float mxfp4_scale(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

// Scale j (0..7) and min j of a Q4_K / Q5_K block: 6 bits each, packed in 12 bytes as
// llama.cpp's get_scale_min_k4: j < 4 in the low 6 bits of bytes j (scale) and j+4 (min);
// j >= 4: low 4 bits in byte j+4 (scale: low nibble, min: high nibble), high 2 bits in the top
// bits of bytes j-4 (scale) and j (min).
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Scale j (0..15) of a Q3_K block as the unsigned 6-bit value (subtract 32 for the signed one):
// low 4 bits from the low (j < 8) or high (j >= 8) nibble of scales[j % 8], high 2 bits from
// bits 2*(j/4) of scales[8 + j%4].
inline int q3k_scale(int j, const uint8_t* scales) {
    const int low = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return low | (high << 4);
}

}  // namespace kvec::quant
