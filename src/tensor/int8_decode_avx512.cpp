// The decode kernels (int8_decode.h) for CPUs with AVX-512 F/BW/VL and VNNI: one segment is one
// 512-bit vector, its dot product one vpdpbusd into 16 int32 lanes. Compiled for the baseline ISA
// except for the region under `#pragma GCC target` (everything after the includes), which runs
// only after the CPU was checked (kernel_avx512).
#include "tensor/int8_decode.h"

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 warns inside its own _mm512 conversions (an intentionally undefined pass-through operand).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <array>
#include <cstring>

#include "quant/blocks.h"
#include "tensor/kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")

#include "tensor/int8_decode_impl.h"

namespace kvec::int8::decode {
namespace {

struct V512 {
    using I = __m512i;
    using F = __m512;
    using M = __mmask64;
    static constexpr bool kFullBytes = true;  // vpdpbusd takes any unsigned byte

    static I zero_i() { return _mm512_setzero_si512(); }
    static I load64(const void* p) { return _mm512_loadu_si512(p); }
    static I load16x4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3) {
        I v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p2)), 2);
        return _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p3)), 3);
    }
    static I load32x2(const uint8_t* p0, const uint8_t* p1) {
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0))),
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1)), 1);
    }
    static I broadcast32(const uint8_t* p) {
        return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static I set1_8(int v) { return _mm512_set1_epi8(static_cast<char>(v)); }
    static I set_halves8(int lo, int hi) {
        return _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(lo)), _mm256_set1_epi8(static_cast<char>(hi)), 1);
    }
    static I and_(I a, I b) { return _mm512_and_si512(a, b); }
    static I or_(I a, I b) { return _mm512_or_si512(a, b); }
    static I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
    template <int N>
    static I srli16(I v) { return _mm512_srli_epi16(v, N); }
    template <int N>
    static I slli16(I v) { return _mm512_slli_epi16(v, N); }
    template <int N0, int N1>
    static I srl_halves16(I v) {
        return _mm512_srlv_epi16(v, _mm512_inserti64x4(_mm512_set1_epi16(N0), _mm256_set1_epi16(N1), 1));
    }
    static M bits(uint64_t m) { return _cvtu64_mask64(m); }
    static M bit_set(I v, I pattern) { return _mm512_test_epi8_mask(v, pattern); }
    static I add_where(I u, M m, I v) { return _mm512_mask_add_epi8(u, m, u, v); }
    static I dp(I acc, I u, I x) { return _mm512_dpbusd_epi32(acc, u, x); }

    static F zero() { return _mm512_setzero_ps(); }
    static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F add(F a, F b) { return _mm512_add_ps(a, b); }
    static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static F set1(float v) { return _mm512_set1_ps(v); }
    static F neg(F v) {  // (_mm512_xor_ps would need AVX-512 DQ)
        return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)));
    }
    static F pair(__m128 v) {
        return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                     _mm512_castps128_ps512(v));
    }
    template <int N>
    static F load(const float* p) {
        if constexpr (N == 16) return _mm512_loadu_ps(p);
        return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << N) - 1), p);
    }
    static F from_fp16x4(__m128i h) { return _mm512_zextps128_ps512(_mm_cvtph_ps(h)); }
    static F from_u8x16(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); }
    static F from_i8x16(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }
    static F expand(F table, const Lanes& l) {
        const __m512i idx = _mm512_setr_epi32(l[0], l[1], l[2], l[3], l[4], l[5], l[6], l[7], l[8], l[9], l[10], l[11],
                                              l[12], l[13], l[14], l[15]);
        return _mm512_permutexvar_ps(idx, table);
    }
    static F high8(F v) { return _mm512_shuffle_f32x4(v, _mm512_setzero_ps(), 0x0E); }
    static float reduce(F v) { return _mm512_reduce_add_ps(v); }

    // Four blocks in two vectors (the second loaded under a mask: nothing past them is read); a
    // field of every block is gathered by one vpermt2w (B and the offsets are even).
};

Kernel table_avx512(GgmlType type) { return kernel_table<V512>(type); }

}  // namespace
}  // namespace kvec::int8::decode

#pragma GCC pop_options

namespace kvec::int8::decode {

Kernel kernel_avx512(GgmlType type) {
    static const bool cpu = [] {
        __builtin_cpu_init();
        return vnni_supported() && __builtin_cpu_supports("avx512vl");
    }();
    return cpu ? table_avx512(type) : nullptr;
}

}  // namespace kvec::int8::decode

#else  // not x86-64

namespace kvec::int8::decode {
Kernel kernel_avx512(GgmlType) { return nullptr; }
}  // namespace kvec::int8::decode

#endif
