// The decode kernels (int8_decode.h) for CPUs with AVX2: a segment is two 256-bit vectors, its
// dot product maddubs (u8 x s8 pairs into int16: u <= 63 keeps them below 2^15) and madd with 1s
// (into int32 lanes). Compiled for the baseline ISA except for the region under `#pragma GCC
// target` (everything after the includes), which runs only on CPUs with AVX2, FMA and F16C.
#include "tensor/int8_decode.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <array>
#include <cstring>

#include "quant/blocks.h"
#include "tensor/dispatch.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#if defined(__clang__)  // clang ignores `#pragma GCC target`
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#endif

#include "tensor/int8_decode_impl.h"

namespace kvec::int8::decode {
namespace {

struct V256 {
    struct I {
        __m256i a, b;  // bytes 0..31, 32..63 (int32 lanes 0..7, 8..15)
    };
    struct F {
        __m256 a, b;  // lanes 0..7, 8..15
    };
    using M = I;
    static constexpr bool kFullBytes = false;      // maddubs saturates above u = 128
    static constexpr bool kMaskRegisters = false;  // a byte mask is a vector (bits: 5 operations per 32)

    static __m256i pair(const uint8_t* lo, const uint8_t* hi) {
        return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
                                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1);
    }
    static __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
    static I zero_i() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
    static I load64(const void* p) { return {load32(p), load32(static_cast<const uint8_t*>(p) + 32)}; }
    static I load16x4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3) {
        return {pair(p0, p1), pair(p2, p3)};
    }
    static I load32x2(const uint8_t* p0, const uint8_t* p1) { return {load32(p0), load32(p1)}; }
    static I broadcast32(const uint8_t* p) {
        const __m256i v = load32(p);
        return {v, v};
    }
    static I broadcast16(__m128i v) {
        const __m256i t = _mm256_broadcastsi128_si256(v);
        return {t, t};
    }
    static I broadcast16(const uint8_t* p) { return broadcast16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static I lookup16(I table, I idx) { return {_mm256_shuffle_epi8(table.a, idx.a), _mm256_shuffle_epi8(table.b, idx.b)}; }
    static I set1_8(int v) { return set_halves8(v, v); }
    static I set_halves8(int lo, int hi) {
        return {_mm256_set1_epi8(static_cast<char>(lo)), _mm256_set1_epi8(static_cast<char>(hi))};
    }
    static I and_(I x, I y) { return {_mm256_and_si256(x.a, y.a), _mm256_and_si256(x.b, y.b)}; }
    static I or_(I x, I y) { return {_mm256_or_si256(x.a, y.a), _mm256_or_si256(x.b, y.b)}; }
    static I xor_(I x, I y) { return {_mm256_xor_si256(x.a, y.a), _mm256_xor_si256(x.b, y.b)}; }
    static I min_u8(I x, I y) { return {_mm256_min_epu8(x.a, y.a), _mm256_min_epu8(x.b, y.b)}; }
    template <int N>
    static I srli16(I v) { return {_mm256_srli_epi16(v.a, N), _mm256_srli_epi16(v.b, N)}; }
    template <int N>
    static I slli16(I v) { return {_mm256_slli_epi16(v.a, N), _mm256_slli_epi16(v.b, N)}; }
    template <int N0, int N1>
    static I srl_halves16(I v) { return {_mm256_srli_epi16(v.a, N0), _mm256_srli_epi16(v.b, N1)}; }
    // Byte e = 0xFF where bit e of m is set: each byte of m copied to 8 bytes, then one bit tested each.
    static __m256i bits32(uint32_t m) {
        const __m256i spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(static_cast<int>(m)),
            _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
        const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
        return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    }
    static M bits(uint64_t m) { return {bits32(static_cast<uint32_t>(m)), bits32(static_cast<uint32_t>(m >> 32))}; }
    static M bit_set(I v, I pattern) {
        return {_mm256_cmpeq_epi8(_mm256_and_si256(v.a, pattern.a), pattern.a),
                _mm256_cmpeq_epi8(_mm256_and_si256(v.b, pattern.b), pattern.b)};
    }
    static I add_where(I u, M m, I v) {
        return {_mm256_add_epi8(u.a, _mm256_and_si256(m.a, v.a)), _mm256_add_epi8(u.b, _mm256_and_si256(m.b, v.b))};
    }
    static I dp(I acc, I u, I x) {
        const __m256i ones = _mm256_set1_epi16(1);
        return {_mm256_add_epi32(acc.a, _mm256_madd_epi16(_mm256_maddubs_epi16(u.a, x.a), ones)),
                _mm256_add_epi32(acc.b, _mm256_madd_epi16(_mm256_maddubs_epi16(u.b, x.b), ones))};
    }
    // The same products for signed weights w (Q8_0): |w| (at most 128, as unsigned) times x with
    // w's sign, so each pair of products stays within int16 (2 * 128 * 127 < 2^15).
    static I dp_signed(I acc, I w, I x) {
        const __m256i ones = _mm256_set1_epi16(1);
        const auto one = [&](__m256i a, __m256i wv, __m256i xv) {
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
            return _mm256_add_epi32(a, _mm256_madd_epi16(p16, ones));
        };
        return {one(acc.a, w.a, x.a), one(acc.b, w.b, x.b)};
    }

    static F zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
    static F cvt(I v) { return {_mm256_cvtepi32_ps(v.a), _mm256_cvtepi32_ps(v.b)}; }
    static F mul(F x, F y) { return {_mm256_mul_ps(x.a, y.a), _mm256_mul_ps(x.b, y.b)}; }
    static F add(F x, F y) { return {_mm256_add_ps(x.a, y.a), _mm256_add_ps(x.b, y.b)}; }
    static F fma(F x, F y, F z) { return {_mm256_fmadd_ps(x.a, y.a, z.a), _mm256_fmadd_ps(x.b, y.b, z.b)}; }
    static F set1(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
    static F neg(F v) {
        const __m256 sign = _mm256_set1_ps(-0.0f);
        return {_mm256_xor_ps(v.a, sign), _mm256_xor_ps(v.b, sign)};
    }
    static F pair(__m128 v) {
        return {_mm256_broadcastss_ps(v), _mm256_broadcastss_ps(_mm_movehdup_ps(v))};
    }
    template <int N>
    static F load(const float* p) {
        if constexpr (N == 16) return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
        if constexpr (N == 8) return {_mm256_loadu_ps(p), _mm256_setzero_ps()};
        static_assert(N == 4 || N == 8 || N == 16);
        return {_mm256_zextps128_ps256(_mm_loadu_ps(p)), _mm256_setzero_ps()};
    }
    static F from_fp16x4(__m128i h) { return {_mm256_zextps128_ps256(_mm_cvtph_ps(h)), _mm256_setzero_ps()}; }
    static F from_f32x4(__m128 v) { return {_mm256_zextps128_ps256(v), _mm256_setzero_ps()}; }
    static F from_u8x16(__m128i v) {
        return {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)),
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)))};
    }
    static F from_i8x16(__m128i v) {
        return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)),
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)))};
    }
    // Each half of a segment draws on one half of the table (the layouts keep a half's 8 lanes within
    // sub-blocks 0..7 or 8..15).
    static F expand(F table, const Lanes& l) { return {expand_half(table, l, 0), expand_half(table, l, 8)}; }
    static __m256 expand_half(F table, const Lanes& l, int h) {
        const int base = l[h] & ~7;
        const __m256i idx = _mm256_setr_epi32(l[h] - base, l[h + 1] - base, l[h + 2] - base, l[h + 3] - base,
                                              l[h + 4] - base, l[h + 5] - base, l[h + 6] - base, l[h + 7] - base);
        return _mm256_permutevar8x32_ps(base == 0 ? table.a : table.b, idx);
    }
    static F high8(F v) { return {v.b, _mm256_setzero_ps()}; }
    static float reduce(F v) {
        const __m256 s = _mm256_add_ps(v.a, v.b);
        __m128 r = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
        r = _mm_add_ps(r, _mm_movehl_ps(r, r));
        return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
    }
};

Kernel table_avx2(GgmlType type) { return kernel_table<V256>(type); }
Kernel table_avx2_repacked(GgmlType type) { return repacked_table<V256>(type); }

}  // namespace
}  // namespace kvec::int8::decode

#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

namespace kvec::int8::decode {

Kernel kernel_avx2(GgmlType type) { return cpu_kernel_supported(CpuKernel::Avx2) ? table_avx2(type) : nullptr; }
Kernel kernel_avx2_repacked(GgmlType type) {
    return cpu_kernel_supported(CpuKernel::Avx2) ? table_avx2_repacked(type) : nullptr;
}

}  // namespace kvec::int8::decode

#else  // not x86-64

namespace kvec::int8::decode {
Kernel kernel_avx2(GgmlType) { return nullptr; }
Kernel kernel_avx2_repacked(GgmlType) { return nullptr; }
}  // namespace kvec::int8::decode

#endif
