// The decode kernels of int8_decode.h, written once for a vector type V and compiled twice:
// int8_decode_avx2.cpp (V = 2 x 256-bit, maddubs + madd) and int8_decode_avx512.cpp (V = 512-bit,
// vpdpbusd). Each includes this file inside its `#pragma GCC target` region, after defining V;
// everything here is in an anonymous namespace, so that no function compiled for one instruction
// set can stand in for the other's at link time.
//
// V's interface (I: 64 bytes = 16 int32 lanes, F: 16 floats, M: a byte mask):
//   I load64(p), load16x4(p0, p1, p2, p3), load32x2(p0, p1), broadcast32(p) (32 bytes, twice),
//     broadcast16(p or __m128i) (16 bytes, four times), lookup16(table, idx) (byte e = the byte of table's
//     16-byte lane numbered by idx's byte e, idx bytes < 16),
//     set1_8(v), set_halves8(lo, hi) (bytes 0..31 = lo, 32..63 = hi), and_, or_, xor_, add_where(u, M, v),
//     srli16<n>, slli16<n>, srl_halves16<n0, n1> (16-bit shifts; per half of 32 bytes), zero_i,
//     min_u8 (bytewise unsigned minimum; AVX2 only, for Repacked),
//     dp(acc, u, x): acc + per lane sum of 4 u8 x s8 products (u <= 63, or any byte where
//     kFullBytes);
//   M bits(uint64_t) (byte e set where bit e is; cheap where kMaskRegisters), bit_set(v, pattern)
//     (pattern: one bit per byte);
//   F zero, cvt(I), mul, add, fma, neg, set1(float), pair(__m128 v) (lanes 0..7 = v[0], 8..15 =
//     v[1]), load<N>(p) (N floats, the other lanes 0),
//     from_fp16x4(__m128i) (words 0..3 as lanes 0..3, the others 0), from_f32x4(__m128) (likewise),
//     from_u8x16(__m128i), from_i8x16(__m128i),
//     high8(F) (lanes 8..15 as 0..7, the others 0), expand(table, lanes) (lane l = table[lanes[l]],
//     lanes a compile-time constant once the loops are unrolled), reduce(F) (sum of the lanes).
#pragma once

#include <algorithm>
#include <array>
#include <cstring>

#include "quant/blocks.h"
#include "tensor/int8_decode.h"

namespace kvec::int8::decode {
namespace {

// Segment s of a layout's group, lane l (4 consecutive bytes): the sub-block of its elements.
using Lanes = std::array<int, 16>;
constexpr Lanes lane_subs(const Layout& L, int s) {
    Lanes r{};
    for (int l = 0; l < 16; ++l) {
        const int p = 64 * s + 4 * l;  // position in the kernel's order
        r[l] = (L.order[p / L.run] * L.run + p % L.run) / L.sub;
    }
    return r;
}

// The same for every segment of a type's group (T::kLayout).
template <class T>
inline constexpr std::array<Lanes, 4> kSegmentLanes = [] {
    std::array<Lanes, 4> r{};
    for (int s = 0; s < T::kLayout.group / 64; ++s) r[s] = lane_subs(T::kLayout, s);
    return r;
}();

// Whether segment s + 1's lanes hold the same sub-blocks as segment s's (Q4_0..Q5_1: the low and
// the high nibbles of the same four blocks), so that their dot products add up in the same int32
// lanes before one conversion and one multiplication by the scales.
template <class T>
constexpr bool same_lanes_as_next(int s) {
    return s + 1 < T::kLayout.group / 64 && kSegmentLanes<T>[s] == kSegmentLanes<T>[s + 1];
}

// One unpacked group: its segments of unsigned weights, and per sub-block (natural order) the
// weight scale s and the bias m - o * s (min m, offset o).
template <class V, int S>
struct Group {
    typename V::I u[S];
    typename V::F scale, bias;
};

inline uint16_t load_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
inline uint32_t load_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// The 32 bits at offset Off of block b (blocks B bytes apart from p), in dword 0 of a register.
// The gathers below join four of these by a tree of unpacks: independent loads and a short
// dependency chain (inserting the fields one after another into one register made the fifth bits
// of Q5_0 most of its time).
template <size_t B, size_t Off>
inline __m128i block_dword(const uint8_t* p, size_t b) {
    return _mm_cvtsi32_si128(static_cast<int>(load_u32(p + b * B + Off)));
}

// The 32 bits at offset Off of four blocks B bytes apart, as dwords 0..3 (bytes 4b..4b+3: block b).
template <size_t B, size_t Off>
inline __m128i dwords4(const uint8_t* p) {
    const auto at = [p](size_t b) { return block_dword<B, Off>(p, b); };
    return _mm_unpacklo_epi64(_mm_unpacklo_epi32(at(0), at(1)), _mm_unpacklo_epi32(at(2), at(3)));
}

// The 16-bit field at offset Off of four blocks B bytes apart, as words 0..3 (read as 32 bits: the
// two bytes after a block's scale or min are still in the block).
template <size_t B, size_t Off>
inline __m128i fields4(const uint8_t* p) {
    const auto at = [p](size_t b) { return block_dword<B, Off>(p, b); };
    return _mm_unpacklo_epi32(_mm_unpacklo_epi16(at(0), at(1)), _mm_unpacklo_epi16(at(2), at(3)));
}

// Four blocks of a 32-element type (B bytes each, quants at offset Q): low nibbles (elements 0..15
// of each block) and high nibbles (16..31). (Gathering the quants and scales of the four blocks
// from two 512-bit loads by vpermt2w instead halved the speed of Q4_0 from memory on Zen 5.)
template <class V, size_t B, size_t Q>
inline void nibbles4(const uint8_t* p, typename V::I u[2]) {
    const auto raw = V::load16x4(p + Q, p + B + Q, p + 2 * B + Q, p + 3 * B + Q);
    const auto m = V::set1_8(0x0F);
    u[0] = V::and_(raw, m);
    u[1] = V::and_(V::template srli16<4>(raw), m);
}

// The fp16 field at offset Off of four blocks B bytes apart, as table lanes 0..3.
template <class V, size_t B, size_t Off>
inline typename V::F halves4(const uint8_t* p) {
    return V::from_fp16x4(fields4<B, Off>(p));
}

// Segment s of a legacy group (low nibbles: elements 0..15 of each block, high: 16..31), byte i of
// 64: the qh byte of its element in the 16-byte table (block i / 16 at bytes 4 (i / 16)..), and the
// element's bit in that byte.
inline constexpr auto kFifthBitByte = [] {
    std::array<std::array<uint8_t, 64>, 2> r{};
    for (int s = 0; s < 2; ++s)
        for (int i = 0; i < 64; ++i) r[s][i] = static_cast<uint8_t>(4 * (i / 16) + (16 * s + i % 16) / 8);
    return r;
}();
inline constexpr auto kFifthBitMask = [] {
    std::array<uint8_t, 64> r{};
    for (int i = 0; i < 64; ++i) r[i] = static_cast<uint8_t>(1 << (i % 8));
    return r;
}();

// Q5_0 / Q5_1: bit e of each block's 32-bit qh (at offset Off) adds 16 to element e. With mask
// registers (AVX-512) the bits are the masks; without, the four qh (16 bytes) are a table in every
// 16-byte lane, and each weight byte looks up the qh byte of its element and tests its bit, all in
// vector registers (through a general register, the bits cost Q5_0 half its speed on Zen 3).
template <class V, size_t B, size_t Off>
inline void fifth_bits4(const uint8_t* p, typename V::I u[2]) {
    const auto sixteen = V::set1_8(16);
    if constexpr (V::kMaskRegisters) {
        const auto lo = static_cast<uint64_t>(_mm_cvtsi128_si64(fields4<B, Off>(p)));      // bits 0..15 of each
        const auto hi = static_cast<uint64_t>(_mm_cvtsi128_si64(fields4<B, Off + 2>(p)));  // bits 16..31
        u[0] = V::add_where(u[0], V::bits(lo), sixteen);
        u[1] = V::add_where(u[1], V::bits(hi), sixteen);
    } else {
        const auto table = V::broadcast16(dwords4<B, Off>(p));
        const auto bit = V::load64(kFifthBitMask.data());
#pragma GCC unroll 2
        for (int s = 0; s < 2; ++s)
            u[s] = V::add_where(u[s], V::bit_set(V::lookup16(table, V::load64(kFifthBitByte[s].data())), bit), sixteen);
    }
}

struct Q4_0 {
    static constexpr GgmlType kType = GgmlType::Q4_0;
    static constexpr int kOffset = 8;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kLegacyLayout;
    static constexpr size_t B = sizeof(quant::BlockQ4_0), kGroupBytes = 4 * B;
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 2>& g) {
        nibbles4<V, B, offsetof(quant::BlockQ4_0, qs)>(p, g.u);
        g.scale = halves4<V, B, offsetof(quant::BlockQ4_0, d)>(p);
        g.bias = V::mul(g.scale, V::set1(-kOffset));
    }
};

struct Q4_1 {
    static constexpr GgmlType kType = GgmlType::Q4_1;
    static constexpr int kOffset = 0;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kLegacyLayout;
    static constexpr size_t B = sizeof(quant::BlockQ4_1), kGroupBytes = 4 * B;
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 2>& g) {
        nibbles4<V, B, offsetof(quant::BlockQ4_1, qs)>(p, g.u);
        g.scale = halves4<V, B, offsetof(quant::BlockQ4_1, d)>(p);
        g.bias = halves4<V, B, offsetof(quant::BlockQ4_1, m)>(p);
    }
};

struct Q5_0 {
    static constexpr GgmlType kType = GgmlType::Q5_0;
    static constexpr int kOffset = 16;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kLegacyLayout;
    static constexpr size_t B = sizeof(quant::BlockQ5_0), kGroupBytes = 4 * B;
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 2>& g) {
        nibbles4<V, B, offsetof(quant::BlockQ5_0, qs)>(p, g.u);
        fifth_bits4<V, B, offsetof(quant::BlockQ5_0, qh)>(p, g.u);
        g.scale = halves4<V, B, offsetof(quant::BlockQ5_0, d)>(p);
        g.bias = V::mul(g.scale, V::set1(-kOffset));
    }
};

struct Q5_1 {
    static constexpr GgmlType kType = GgmlType::Q5_1;
    static constexpr int kOffset = 0;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kLegacyLayout;
    static constexpr size_t B = sizeof(quant::BlockQ5_1), kGroupBytes = 4 * B;
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 2>& g) {
        nibbles4<V, B, offsetof(quant::BlockQ5_1, qs)>(p, g.u);
        fifth_bits4<V, B, offsetof(quant::BlockQ5_1, qh)>(p, g.u);
        g.scale = halves4<V, B, offsetof(quant::BlockQ5_1, d)>(p);
        g.bias = halves4<V, B, offsetof(quant::BlockQ5_1, m)>(p);
    }
};

// Q4_0..Q5_1 rows repacked at load (int8_decode.h, repack_rows; T the type as stored): a group's
// quant bytes in one 64-byte load, its fifth bits (Q5_0, Q5_1) from one 16-byte broadcast, its
// scales (and mins) from one 8-byte (16-byte) load. Needs V::min_u8 (AVX2 only: with VNNI the rows
// are not repacked). A row's tail blocks are T's as they were (dot_rows: Natural).
template <class T>
struct Repacked {
    using Natural = T;
    static constexpr GgmlType kType = T::kType;
    static constexpr int kOffset = T::kOffset;
    static constexpr Layout kLayout = kLegacyLayout;
    static constexpr size_t kGroupBytes = T::kGroupBytes;
    static constexpr bool kFifth = kType == GgmlType::Q5_0 || kType == GgmlType::Q5_1;
    static constexpr bool kMin = kType == GgmlType::Q4_1 || kType == GgmlType::Q5_1;
    static constexpr size_t kScales = kFifth ? 80 : 64;  // offset of the four fp16 d (then m)
    static_assert(kScales + (kMin ? 16 : 8) == kGroupBytes);

    // Bytes 16b.. (block b: 0, 1 in the first 256-bit half, 2, 3 in the second) test bit 4 + b.
    static constexpr auto kPlaneBit = [] {
        std::array<uint8_t, 64> r{};
        for (int i = 0; i < 64; ++i) r[i] = static_cast<uint8_t>(16 << (i / 16));
        return r;
    }();

    template <class V>
    static void unpack(const uint8_t* p, Group<V, 2>& g) {
        const auto raw = V::load64(p);
        const auto m = V::set1_8(0x0F);
        g.u[0] = V::and_(raw, m);
        g.u[1] = V::and_(V::template srli16<4>(raw), m);
        if constexpr (kFifth) {
            // Bits 4..7 of the plane: elements 0..15 of blocks 0..3; bits 0..3, shifted up: 16..31.
            // A tested bit is 16 to 128, which min(., 16) makes 16.
            const auto plane = V::broadcast16(p + 64), bit = V::load64(kPlaneBit.data()), sixteen = V::set1_8(16);
            g.u[0] = V::or_(g.u[0], V::min_u8(V::and_(plane, bit), sixteen));
            g.u[1] = V::or_(g.u[1], V::min_u8(V::and_(V::template slli16<4>(plane), bit), sixteen));
        }
        if constexpr (kMin) {
            const __m128i dm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kScales));
            g.scale = V::from_fp16x4(dm);
            g.bias = V::from_fp16x4(_mm_srli_si128(dm, 8));
        } else {
            g.scale = V::from_fp16x4(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + kScales)));
            g.bias = V::mul(g.scale, V::set1(-kOffset));
        }
    }
};

// Q8_0: signed bytes made unsigned (w ^ 0x80 = w + 128), so only where dp takes any byte.
struct Q8_0 {
    static constexpr GgmlType kType = GgmlType::Q8_0;
    static constexpr int kOffset = 128;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kQ8_0Layout;
    static constexpr size_t B = sizeof(quant::BlockQ8_0), kGroupBytes = 4 * B;
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 2>& g) {
        constexpr size_t Q = offsetof(quant::BlockQ8_0, qs);
        const auto flip = V::set1_8(0x80);
        g.u[0] = V::xor_(V::load32x2(p + Q, p + B + Q), flip);
        g.u[1] = V::xor_(V::load32x2(p + 2 * B + Q, p + 3 * B + Q), flip);
        g.scale = halves4<V, B, offsetof(quant::BlockQ8_0, d)>(p);
        g.bias = V::mul(g.scale, V::set1(-kOffset));
    }
};

// Q8_0 without AVX-512 VNNI: the signed bytes as they are (kSigned), multiplied by V::dp_signed,
// which takes |w| as the unsigned operand and moves w's sign onto the activation (maddubs
// saturates above u = 128, which w ^ 0x80 reaches); no offset, so no bias (add_group skips it).
struct Q8_0Signed {
    static constexpr GgmlType kType = GgmlType::Q8_0;
    static constexpr bool kSigned = true;
    static constexpr int kOffset = 0;  // w = s * (u - kOffset) + m, u the signed byte
    static constexpr Layout kLayout = kQ8_0Layout;
    static constexpr size_t B = sizeof(quant::BlockQ8_0), kGroupBytes = 4 * B;
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 2>& g) {
        constexpr size_t Q = offsetof(quant::BlockQ8_0, qs);
        g.u[0] = V::load32x2(p + Q, p + B + Q);
        g.u[1] = V::load32x2(p + 2 * B + Q, p + 3 * B + Q);
        g.scale = halves4<V, B, offsetof(quant::BlockQ8_0, d)>(p);
        g.bias = V::zero();  // unused (add_group skips the bias of signed weights)
    }
};

// Whether a type's unpacked weights are signed bytes (Q8_0Signed) rather than unsigned.
template <class T>
constexpr bool signed_weights() {
    if constexpr (requires { T::kSigned; }) return T::kSigned;
    return false;
}

// Q2_K / Q3_K: bits 2j..2j+1 of the 64 quant bytes.
template <class V>
inline void crumbs(const uint8_t* qs, typename V::I u[4]) {
    const auto raw = V::load64(qs);
    const auto m = V::set1_8(3);
    u[0] = V::and_(raw, m);
    u[1] = V::and_(V::template srli16<2>(raw), m);
    u[2] = V::and_(V::template srli16<4>(raw), m);
    u[3] = V::and_(V::template srli16<6>(raw), m);
}

struct Q2_K {
    static constexpr GgmlType kType = GgmlType::Q2_K;
    static constexpr int kOffset = 0;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kQ2KLayout;
    static constexpr size_t kGroupBytes = sizeof(quant::BlockQ2_K);
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 4>& g) {
        crumbs<V>(p + offsetof(quant::BlockQ2_K, qs), g.u);
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + offsetof(quant::BlockQ2_K, scales)));
        const __m128i low = _mm_set1_epi8(0x0F);
        const float d = _cvtsh_ss(load_u16(p + offsetof(quant::BlockQ2_K, d)));
        const float dmin = _cvtsh_ss(load_u16(p + offsetof(quant::BlockQ2_K, dmin)));
        g.scale = V::mul(V::from_u8x16(_mm_and_si128(sc, low)), V::set1(d));
        g.bias = V::mul(V::from_u8x16(_mm_and_si128(_mm_srli_epi16(sc, 4), low)), V::set1(-dmin));
    }
};

// The 16 6-bit scales of a Q3_K block (quant::q3k_scale), unsigned: low 4 bits from the nibbles of
// bytes 0..7, high 2 bits from bytes 8..11, 2 bits per scale.
inline __m128i q3k_scales(const uint8_t* s) {
    const uint32_t a = load_u32(s), b = load_u32(s + 4), h = load_u32(s + 8);
    const uint32_t n = 0x0F0F0F0F, t = 0x03030303;
    return _mm_setr_epi32(static_cast<int>((a & n) | (h & t) << 4), static_cast<int>((b & n) | (h >> 2 & t) << 4),
                          static_cast<int>((a >> 4 & n) | (h >> 4 & t) << 4),
                          static_cast<int>((b >> 4 & n) | (h >> 6 & t) << 4));
}

struct Q3_K {
    static constexpr GgmlType kType = GgmlType::Q3_K;
    static constexpr int kOffset = 4;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kQ2KLayout;
    static constexpr size_t kGroupBytes = sizeof(quant::BlockQ3_K);
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 4>& g) {
        crumbs<V>(p + offsetof(quant::BlockQ3_K, qs), g.u);
        // Element 32j + e takes bit j of hmask[e], element 128 + 32j + e bit 4 + j: + 4 where set.
        const auto hm = V::broadcast32(p + offsetof(quant::BlockQ3_K, hmask));
        const auto four = V::set1_8(4);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
            g.u[j] = V::add_where(g.u[j], V::bit_set(hm, V::set_halves8(1 << j, 16 << j)), four);
        }
        const float d = _cvtsh_ss(load_u16(p + offsetof(quant::BlockQ3_K, d)));
        const __m128i sc = _mm_sub_epi8(q3k_scales(p + offsetof(quant::BlockQ3_K, scales)), _mm_set1_epi8(32));
        g.scale = V::mul(V::from_i8x16(sc), V::set1(d));
        g.bias = V::mul(g.scale, V::set1(-kOffset));
    }
};

// The 8 6-bit scales and mins of a Q4_K / Q5_K block (quant::get_scale_min_k4) as bytes
// [scale 0..7, min 0..7], from its 12 bytes s (16 are read): scales and mins 0..3 are the low 6
// bits of bytes 0..3 and 4..7; 4..7 take their low 4 bits from the nibbles of bytes 8..11 and
// their high 2 bits from the top of bytes 0..3 (scales) and 4..7 (mins).
inline __m128i k4_scales_mins(const uint8_t* s) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i low8 = _mm_unpacklo_epi64(raw, raw);  // bytes 0..7, twice
    const __m128i b8 = _mm_shuffle_epi32(raw, 0xAA);    // bytes 8..11 in every dword
    const __m128i first = _mm_and_si128(low8, _mm_set1_epi8(0x3F));  // dwords: scales 0..3, mins 0..3
    const __m128i nib = _mm_and_si128(_mm_srlv_epi32(b8, _mm_setr_epi32(0, 4, 0, 4)), _mm_set1_epi8(0x0F));
    const __m128i top = _mm_and_si128(_mm_srli_epi16(low8, 2), _mm_set1_epi8(0x30));
    return _mm_unpacklo_epi32(first, _mm_or_si128(nib, top));  // dwords: scales 0..3, 4..7, mins 0..3, 4..7
}

template <class V, class Block>
inline void k4_unpack(const uint8_t* p, Group<V, 4>& g) {
    const auto r0 = V::load64(p + offsetof(Block, qs)), r1 = V::load64(p + offsetof(Block, qs) + 64);
    const auto m = V::set1_8(0x0F);
    g.u[0] = V::and_(r0, m);
    g.u[1] = V::and_(V::template srli16<4>(r0), m);
    g.u[2] = V::and_(r1, m);
    g.u[3] = V::and_(V::template srli16<4>(r1), m);
    static_assert(offsetof(Block, dmin) == offsetof(Block, d) + 2);
    const __m128 d_dmin = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(p + offsetof(Block, d)))));
    // Lanes 0..7: d * scale, 8..15: dmin * min (unused by the table, which has 8 sub-blocks).
    g.scale = V::mul(V::from_u8x16(k4_scales_mins(p + offsetof(Block, scales))), V::pair(d_dmin));
    g.bias = V::neg(V::high8(g.scale));
}

struct Q4_K {
    static constexpr GgmlType kType = GgmlType::Q4_K;
    static constexpr int kOffset = 0;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kQ4KLayout;
    static constexpr size_t kGroupBytes = sizeof(quant::BlockQ4_K);
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 4>& g) {
        k4_unpack<V, quant::BlockQ4_K>(p, g);
    }
};

struct Q5_K {
    static constexpr GgmlType kType = GgmlType::Q5_K;
    static constexpr int kOffset = 0;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kQ4KLayout;
    static constexpr size_t kGroupBytes = sizeof(quant::BlockQ5_K);
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 4>& g) {
        k4_unpack<V, quant::BlockQ5_K>(p, g);
        // Sub-block j takes bit j of qh[e]: segment s holds sub-blocks (0, 2), (1, 3), (4, 6), (5, 7).
        const auto qh = V::broadcast32(p + offsetof(quant::BlockQ5_K, qh));
        const auto sixteen = V::set1_8(16);
#pragma GCC unroll 4
        for (int s = 0; s < 4; ++s) {
            const int j = s / 2 * 4 + s % 2;
            g.u[s] = V::add_where(g.u[s], V::bit_set(qh, V::set_halves8(1 << j, 4 << j)), sixteen);
        }
    }
};

struct Q6_K {
    static constexpr GgmlType kType = GgmlType::Q6_K;
    static constexpr int kOffset = 32;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kQ6KLayout;
    static constexpr size_t kGroupBytes = sizeof(quant::BlockQ6_K);
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 4>& g) {
        // Elements 64s.. : the low (s even) or high nibbles of ql[64 (s / 2) ..], and 2 bits of
        // qh[32 (s / 2) + e % 32]: bits 0-1 / 2-3 for the two halves of s even, 4-5 / 6-7 for s odd.
        const auto m = V::set1_8(0x0F), three = V::set1_8(3);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const auto ql = V::load64(p + offsetof(quant::BlockQ6_K, ql) + 64 * h);
            const auto qh = V::broadcast32(p + offsetof(quant::BlockQ6_K, qh) + 32 * h);
            const auto lo = V::and_(V::template srl_halves16<0, 2>(qh), three);
            const auto hi = V::and_(V::template srl_halves16<4, 6>(qh), three);
            g.u[2 * h] = V::or_(V::and_(ql, m), V::template slli16<4>(lo));
            g.u[2 * h + 1] = V::or_(V::and_(V::template srli16<4>(ql), m), V::template slli16<4>(hi));
        }
        const float d = _cvtsh_ss(load_u16(p + offsetof(quant::BlockQ6_K, d)));
        const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + offsetof(quant::BlockQ6_K, scales)));
        g.scale = V::mul(V::from_i8x16(sc), V::set1(d));
        g.bias = V::mul(g.scale, V::set1(-kOffset));
    }
};

// The 16 weights u of the 4-bit indices of the non-uniform types (u = value + kOffset).
inline constexpr auto kIq4nlBytes = [] {
    std::array<uint8_t, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(quant::kIq4nlValues[i] + 128);
    return t;
}();
inline constexpr auto kMxfp4Bytes = [] {
    std::array<uint8_t, 16> t{};
    for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(quant::kMxfp4Values[i] + 12);
    return t;
}();

// Nibble indices in u[0..n) through a 16-entry table of weights.
template <class V, int N>
inline void lookup(const std::array<uint8_t, 16>& table, typename V::I (&u)[N]) {
    const auto t = V::broadcast16(table.data());
#pragma GCC unroll 4
    for (int s = 0; s < N; ++s) u[s] = V::lookup16(t, u[s]);
}

struct IQ4_NL {
    static constexpr GgmlType kType = GgmlType::IQ4_NL;
    static constexpr int kOffset = 128;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kLegacyLayout;
    static constexpr size_t B = sizeof(quant::BlockIQ4_NL), kGroupBytes = 4 * B;
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 2>& g) {
        nibbles4<V, B, offsetof(quant::BlockIQ4_NL, qs)>(p, g.u);
        lookup<V>(kIq4nlBytes, g.u);
        g.scale = halves4<V, B, offsetof(quant::BlockIQ4_NL, d)>(p);
        g.bias = V::mul(g.scale, V::set1(-kOffset));
    }
};

struct IQ4_XS {
    static constexpr GgmlType kType = GgmlType::IQ4_XS;
    static constexpr int kOffset = 128;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kIq4XsLayout;
    static constexpr size_t kGroupBytes = sizeof(quant::BlockIQ4_XS);
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 4>& g) {
        constexpr size_t Q = offsetof(quant::BlockIQ4_XS, qs);
        const auto m = V::set1_8(0x0F);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            const auto raw = V::load64(p + Q + 64 * h);
            g.u[2 * h] = V::and_(raw, m);
            g.u[2 * h + 1] = V::and_(V::template srli16<4>(raw), m);
        }
        lookup<V>(kIq4nlBytes, g.u);
        // Sub-block j: 6-bit scale = bits 4j..4j+3 of the 32-bit scales_l | bits 2j..2j+1 of
        // scales_h << 4, minus 32: both spread to one field per byte j by shift-and-mask steps.
        uint64_t lo = load_u32(p + offsetof(quant::BlockIQ4_XS, scales_l));
        lo = (lo | lo << 16) & 0x0000FFFF0000FFFFull;
        lo = (lo | lo << 8) & 0x00FF00FF00FF00FFull;
        lo = (lo | lo << 4) & 0x0F0F0F0F0F0F0F0Full;
        uint64_t hi = load_u16(p + offsetof(quant::BlockIQ4_XS, scales_h));
        hi = (hi | hi << 24) & 0x000000FF000000FFull;
        hi = (hi | hi << 12) & 0x000F000F000F000Full;
        hi = (hi | hi << 6) & 0x0303030303030303ull;
        const __m128i ls = _mm_move_epi64(
            _mm_sub_epi8(_mm_cvtsi64_si128(static_cast<long long>(lo | hi << 4)), _mm_set1_epi8(32)));
        const float d = _cvtsh_ss(load_u16(p + offsetof(quant::BlockIQ4_XS, d)));
        g.scale = V::mul(V::from_i8x16(ls), V::set1(d));
        g.bias = V::mul(g.scale, V::set1(-kOffset));
    }
};

struct MXFP4 {
    static constexpr GgmlType kType = GgmlType::MXFP4;
    static constexpr int kOffset = 12;  // w = s * (u - kOffset) + m
    static constexpr Layout kLayout = kLegacyLayout;
    static constexpr size_t B = sizeof(quant::BlockMXFP4), kGroupBytes = 4 * B;
    template <class V>
    static void unpack(const uint8_t* p, Group<V, 2>& g) {
        nibbles4<V, B, offsetof(quant::BlockMXFP4, qs)>(p, g.u);
        lookup<V>(kMxfp4Bytes, g.u);
        // The four E8M0 bytes e as the floats 2^(e - 128) (quant::mxfp4_scale): bits (e - 1) << 23,
        // or the subnormal 2^21 << e for e < 2.
        constexpr size_t E = offsetof(quant::BlockMXFP4, e);
        const uint32_t e4 = p[E] | p[B + E] << 8 | p[2 * B + E] << 16 | static_cast<uint32_t>(p[3 * B + E]) << 24;
        const __m128i e = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(e4)));
        const __m128i normal = _mm_slli_epi32(_mm_sub_epi32(e, _mm_set1_epi32(1)), 23);
        const __m128i small = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), e);
        const __m128i bits = _mm_blendv_epi8(normal, small, _mm_cmplt_epi32(e, _mm_set1_epi32(2)));
        g.scale = V::from_f32x4(_mm_castsi128_ps(bits));
        g.bias = V::mul(g.scale, V::set1(-kOffset));
    }
};

// One unpacked group against one activation row's group (xq [group] in the layout's order, dx
// and xs [group / sub]): per segment one dot product, converted and multiplied by the table's
// lanes (once for two segments whose lanes hold the same sub-blocks), into acc[2] (even and odd
// segments) and, for the bias, bacc.
template <class V, class T>
[[gnu::always_inline]] inline void add_group(const Group<V, T::kLayout.group / 64>& grp, const int8_t* xq,
                                             const float* dx, const float* xs, typename V::F acc[2],
                                             typename V::F& bacc) {
    constexpr Layout L = T::kLayout;
    constexpr int S = L.group / 64, NS = L.group / L.sub;  // segments and sub-blocks per group
    const typename V::F table = V::mul(grp.scale, V::template load<NS>(dx));
    auto sum = V::zero_i();
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
        if constexpr (signed_weights<T>()) {
            sum = V::dp_signed(sum, grp.u[s], V::load64(xq + 64 * s));
        } else {
            sum = V::dp(sum, grp.u[s], V::load64(xq + 64 * s));
        }
        if (same_lanes_as_next<T>(s)) continue;
        acc[s % 2] = V::fma(V::cvt(sum), V::expand(table, kSegmentLanes<T>[s]), acc[s % 2]);
        sum = V::zero_i();
    }
    if constexpr (!signed_weights<T>()) bacc = V::fma(grp.bias, V::template load<NS>(xs), bacc);  // none for signed
}

// The activations of the last, partial group of up to 4 rows (the 1 to 3 blocks of 32 after a
// row's whole groups, k % group != 0: SmolLM2's 576 columns), zero-padded to a whole group in the
// layout's order, so that the tail runs through the vector code of the whole groups (a scalar
// tail took half of SmolLM2's decode time; docs/performance.md).
template <class T>
struct TailRows {
    static constexpr Layout L = T::kLayout;
    alignas(64) int8_t q[4][L.group];
    float dx[4][L.group / L.sub], xs[4][L.group / L.sub];
    int64_t blocks = 0;  // 0: no tail

    TailRows(const Rows& x, int64_t i0, int rows) {
        const int64_t k = x.k, ng = k / L.group, nsub = k / L.sub;
        blocks = (k - ng * L.group) / kBlock;
        if (blocks == 0) return;
        alignas(64) int8_t natural[L.group];
        for (int r = 0; r < rows; ++r) {
            std::memset(natural, 0, sizeof natural);
            std::memcpy(natural, x.q + (i0 + r) * k + ng * L.group, static_cast<size_t>(blocks * kBlock));
            to_kernel_order(L, natural, q[r]);
            const int64_t at = (i0 + r) * nsub + ng * (L.group / L.sub), n = blocks * kBlock / L.sub;
            for (int j = 0; j < L.group / L.sub; ++j) {
                dx[r][j] = j < n ? x.dx[at + j] : 0.0f;
                xs[r][j] = j < n ? x.xs[at + j] : 0.0f;
            }
        }
    }
};

// y[i * ldy] for the R activation rows i0.. against one weight row. Per group and row: the
// sub-block scales times the row's d_x (the table), then add_group; the partial last group (tail)
// from a zero-padded copy of its blocks against TailRows. Every row takes the same operations
// whatever R is, so a row's result does not depend on the other rows of the call.
// Each group asks for the cache lines kPrefetchBytes ahead of it (the next rows of the matrix,
// which follow in memory): decode is bound by the memory requests one core keeps in flight, which
// the hardware prefetcher alone leaves too few (Gemma-3-4B-shaped Q4_K_M, 2 threads: 11.8 ->
// 13.7 t/s, 2048 bytes 13.5; docs/performance.md).
inline constexpr size_t kPrefetchBytes = 4096;

// The type of a row's tail blocks: T::Natural for repacked rows, else T.
template <class T>
struct NaturalOf {
    using type = T;
};
template <class T>
    requires requires { typename T::Natural; }
struct NaturalOf<T> {
    using type = typename T::Natural;
};
template <class T>
using natural_t = typename NaturalOf<T>::type;

template <class V, class T, int R>
inline void dot_rows(const Rows& x, int64_t i0, const uint8_t* row, float* y, int64_t ldy, const TailRows<T>& tail) {
    using F = typename V::F;
    constexpr Layout L = T::kLayout;
    constexpr int S = L.group / 64, NS = L.group / L.sub;  // segments and sub-blocks per group
    const int64_t k = x.k, ng = k / L.group, nsub = k / L.sub;
    F acc[R][2], bacc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = bacc[r] = V::zero();
    for (int64_t g = 0; g < ng; ++g) {
        Group<V, S> grp;
        const uint8_t* ahead = row + g * T::kGroupBytes + kPrefetchBytes;
#pragma GCC unroll 8
        for (size_t b = 0; b < T::kGroupBytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T0);
        T::template unpack<V>(row + g * T::kGroupBytes, grp);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const int64_t at = (i0 + r) * nsub + g * NS;  // this group's sub-blocks
            add_group<V, T>(grp, x.q + (i0 + r) * k + g * L.group, x.dx + at, x.xs + at, acc[r], bacc[r]);
        }
    }
    if constexpr (L.sub == kBlock) {  // only the 32-element block types have partial groups
        if (tail.blocks > 0) {
            constexpr size_t kBlockBytes = T::kGroupBytes / (L.group / kBlock);
            alignas(64) uint8_t padded[T::kGroupBytes] = {};  // zero blocks: scale 0, weights 0
            std::memcpy(padded, row + ng * T::kGroupBytes, static_cast<size_t>(tail.blocks) * kBlockBytes);
            Group<V, S> grp;
            natural_t<T>::template unpack<V>(padded, grp);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) add_group<V, T>(grp, tail.q[r], tail.dx[r], tail.xs[r], acc[r], bacc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) y[r * ldy] = V::reduce(V::add(V::add(acc[r][0], acc[r][1]), bacc[r]));
}

// Every weight row against the activation rows, in tiles of 4 rows: a tile's activations stay in
// the L1 cache while the weight rows pass (read from memory by the first tile, from the L1 / L2
// cache by the others).
template <class V, class T>
void kernel(const Rows& x, int64_t nx, const uint8_t* w, size_t row_bytes, int64_t nw, float* y, int64_t ldy) {
    for (int64_t i = 0; i < nx; i += 4) {
        const TailRows<T> tail(x, i, static_cast<int>(std::min<int64_t>(4, nx - i)));
        for (int64_t j = 0; j < nw; ++j) {
            const uint8_t* row = w + static_cast<size_t>(j) * row_bytes;
            float* yij = y + i * ldy + j;
            switch (nx - i) {
                case 1: dot_rows<V, T, 1>(x, i, row, yij, ldy, tail); break;
                case 2: dot_rows<V, T, 2>(x, i, row, yij, ldy, tail); break;
                case 3: dot_rows<V, T, 3>(x, i, row, yij, ldy, tail); break;
                default: dot_rows<V, T, 4>(x, i, row, yij, ldy, tail); break;
            }
        }
    }
}

template <class V>
Kernel kernel_table(GgmlType type) {
    switch (type) {
        case GgmlType::Q4_0: return &kernel<V, Q4_0>;
        case GgmlType::Q4_1: return &kernel<V, Q4_1>;
        case GgmlType::Q5_0: return &kernel<V, Q5_0>;
        case GgmlType::Q5_1: return &kernel<V, Q5_1>;
        case GgmlType::Q8_0:
            if constexpr (V::kFullBytes) return &kernel<V, Q8_0>;
            else return &kernel<V, Q8_0Signed>;
        case GgmlType::Q2_K: return &kernel<V, Q2_K>;
        case GgmlType::Q3_K: return &kernel<V, Q3_K>;
        case GgmlType::Q4_K: return &kernel<V, Q4_K>;
        case GgmlType::Q5_K: return &kernel<V, Q5_K>;
        case GgmlType::Q6_K: return &kernel<V, Q6_K>;
        case GgmlType::MXFP4: return &kernel<V, MXFP4>;
        case GgmlType::IQ4_NL:  // weights u up to 241: dp must take any byte
            if constexpr (V::kFullBytes) return &kernel<V, IQ4_NL>;
            return nullptr;
        case GgmlType::IQ4_XS:
            if constexpr (V::kFullBytes) return &kernel<V, IQ4_XS>;
            return nullptr;
        default: return nullptr;
    }
}

// The kernels on repacked rows (Repacked; instantiated by the AVX2 file only).
template <class V>
Kernel repacked_table(GgmlType type) {
    switch (type) {
        case GgmlType::Q4_0: return &kernel<V, Repacked<Q4_0>>;
        case GgmlType::Q4_1: return &kernel<V, Repacked<Q4_1>>;
        case GgmlType::Q5_0: return &kernel<V, Repacked<Q5_0>>;
        case GgmlType::Q5_1: return &kernel<V, Repacked<Q5_1>>;
        default: return nullptr;
    }
}

}  // namespace
}  // namespace kvec::int8::decode
