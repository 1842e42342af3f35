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
#include "tensor/avx512.h"
#include "tensor/dispatch.h"
#include "tensor/kernels.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#if defined(__clang__)  // clang ignores `#pragma GCC target`
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), apply_to = function)
#endif

#include "tensor/int8_decode_impl.h"

namespace kvec::int8::decode {
namespace {

struct V512 {
    using I = __m512i;
    using F = __m512;
    using M = __mmask64;
    static constexpr bool kFullBytes = true;      // vpdpbusd takes any unsigned byte
    static constexpr bool kMaskRegisters = true;  // bits(m) is one kmov

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
    static I broadcast16(__m128i v) { return _mm512_broadcast_i32x4(v); }
    static I broadcast16(const uint8_t* p) { return broadcast16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static I lookup16(I table, I idx) { return _mm512_shuffle_epi8(table, idx); }
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
    static F from_f32x4(__m128 v) { return _mm512_zextps128_ps512(v); }
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

// Rows [0, nr) (nr <= 16; row_bytes apart) of nb blocks of 32 packed into one VNNI panel (the
// layout of int8_vnni.cpp: qp [nb, 8, 16, 4] bytes w + 128, sp and mp [nb, 2, 16] per half block):
// per group, each row is unpacked in registers as for decode, its segments (u + 128 - offset) are
// transposed 16 rows at a time, 4 bytes of each row per lane, and its sub-block scales (and mins)
// likewise. Rows past nr are zero with scale and min 0. A tail of blocks goes through the panel
// form (int8::unpack_blocks). Returns whether the halves of a block have their own scales.
template <class T>
bool pack_panel(const uint8_t* w, size_t row_bytes, int nr, int64_t nb, uint8_t* qp, float* sp, float* mp) {
    constexpr Layout L = T::kLayout;
    constexpr int S = L.group / 64, NB = L.group / kBlock;
    constexpr bool kMin = T::kOffset == 0;  // the types without an offset have a min
    // lane l of segment s holds the 4 elements at panel position (block, group of 4) = kPos[s][l]
    static constexpr auto kPos = [] {
        std::array<std::array<int, 16>, 4> pos{};
        for (int s = 0; s < T::kLayout.group / 64; ++s) {
            for (int l = 0; l < 16; ++l) {
                const int p = 64 * s + 4 * l;
                const int e = T::kLayout.order[p / T::kLayout.run] * T::kLayout.run + p % T::kLayout.run;
                pos[s][l] = e / kBlock * 8 + e % kBlock / 4;
            }
        }
        return pos;
    }();
    const int64_t ng = nb / NB;
    const __m512i shift = _mm512_set1_epi8(static_cast<char>(128 - T::kOffset));
    for (int64_t g = 0; g < ng; ++g) {
        alignas(64) uint8_t seg[S][16][64];  // [segment, row, 64 bytes]
        alignas(64) float sc[16][16], mn[16][16];  // [row, sub-block]
        for (int r = 0; r < 16; ++r) {
            if (r >= nr) {
                for (int s = 0; s < S; ++s) _mm512_store_si512(seg[s][r], _mm512_setzero_si512());
                _mm512_store_ps(sc[r], _mm512_setzero_ps());
                _mm512_store_ps(mn[r], _mm512_setzero_ps());
                continue;
            }
            const uint8_t* src = w + static_cast<size_t>(r) * row_bytes + g * T::kGroupBytes;
            // The 16 rows are read side by side, a group of each at a time: more streams than the
            // hardware prefetcher follows, so each row's next group is asked for (further ahead
            // was slower: 2, 4, 8, 16 groups, and into L2 only).
            if (g + 1 < ng) {
                for (size_t b = 0; b < T::kGroupBytes; b += 64) {
                    _mm_prefetch(reinterpret_cast<const char*>(src + T::kGroupBytes + b), _MM_HINT_T0);
                }
            }
            Group<V512, S> grp;
            T::template unpack<V512>(src, grp);
            for (int s = 0; s < S; ++s) _mm512_store_si512(seg[s][r], _mm512_add_epi8(grp.u[s], shift));
            _mm512_store_ps(sc[r], grp.scale);
            if constexpr (kMin) _mm512_store_ps(mn[r], grp.bias);
        }
        uint8_t* qg = qp + g * NB * 512;  // this group's [NB, 8, 16, 4] bytes
        for (int s = 0; s < S; ++s) {
            __m512i v[16];
            for (int r = 0; r < 16; ++r) v[r] = _mm512_load_si512(seg[s][r]);
            avx512::transpose16(v);
            for (int l = 0; l < 16; ++l) _mm512_storeu_si512(qg + kPos[s][l] * 64, v[l]);
        }
        for (int which = 0; which < (kMin ? 2 : 1); ++which) {
            float(*tab)[16] = which == 0 ? sc : mn;
            __m512i v[16];
            for (int r = 0; r < 16; ++r) v[r] = _mm512_castps_si512(_mm512_load_ps(tab[r]));
            avx512::transpose16(v);  // v[j]: sub-block j of the 16 rows
            float* out = (which == 0 ? sp : mp) + g * NB * 32;  // [NB, 2, 16]
            for (int h = 0; h < 2 * NB; ++h) _mm512_storeu_si512(out + h * 16, v[h * 16 / L.sub]);
        }
    }
    const int64_t tail = nb - ng * NB;  // blocks of 32 after the last group (Q4_0..Q8_0 only)
    if (tail > 0) {
        constexpr int kMaxTail = NB - 1;
        for (int r = 0; r < 16; ++r) {
            int8_t q[kMaxTail * kBlock] = {};            // [tail, 32] panel form
            float hs[kMaxTail * 2] = {}, hm[kMaxTail * 2] = {};  // [tail, 2] scale, min per half
            if (r < nr) {
                unpack_blocks(T::kType, w + static_cast<size_t>(r) * row_bytes + ng * T::kGroupBytes, tail, q, hs, hm);
            }
            for (int64_t t = 0; t < tail; ++t) {
                const int64_t b = ng * NB + t;
                for (int e = 0; e < kBlock; ++e) {
                    const uint8_t byte = r < nr ? static_cast<uint8_t>(q[t * kBlock + e] ^ 0x80) : 0;
                    qp[(b * 8 + e / 4) * 64 + 4 * r + e % 4] = byte;
                }
                for (int h = 0; h < 2; ++h) {
                    sp[(b * 2 + h) * 16 + r] = hs[2 * t + h];
                    if constexpr (kMin) mp[(b * 2 + h) * 16 + r] = hm[2 * t + h];
                }
            }
        }
    }
    return L.sub == 16;
}

PanelPacker packer_avx512(GgmlType type) {
    switch (type) {
        case GgmlType::Q4_0: return &pack_panel<Q4_0>;
        case GgmlType::Q4_1: return &pack_panel<Q4_1>;
        case GgmlType::Q5_0: return &pack_panel<Q5_0>;
        case GgmlType::Q5_1: return &pack_panel<Q5_1>;
        case GgmlType::Q2_K: return &pack_panel<Q2_K>;
        case GgmlType::Q3_K: return &pack_panel<Q3_K>;
        case GgmlType::Q4_K: return &pack_panel<Q4_K>;
        case GgmlType::Q5_K: return &pack_panel<Q5_K>;
        case GgmlType::Q6_K: return &pack_panel<Q6_K>;
        case GgmlType::IQ4_NL: return &pack_panel<IQ4_NL>;
        case GgmlType::IQ4_XS: return &pack_panel<IQ4_XS>;
        case GgmlType::MXFP4: return &pack_panel<MXFP4>;
        case GgmlType::Q8_0: return &pack_panel<Q8_0>;
        default: return nullptr;
    }
}

}  // namespace
}  // namespace kvec::int8::decode

#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC pop_options

namespace kvec::int8::decode {

namespace {
bool cpu_has_avx512_kernels() {
    return vnni_supported() && cpu_features().avx512vl;
}
}  // namespace

Kernel kernel_avx512(GgmlType type) { return cpu_has_avx512_kernels() ? table_avx512(type) : nullptr; }

PanelPacker panel_packer(GgmlType type) { return cpu_has_avx512_kernels() ? packer_avx512(type) : nullptr; }

}  // namespace kvec::int8::decode

#else  // not x86-64

namespace kvec::int8::decode {
Kernel kernel_avx512(GgmlType) { return nullptr; }
PanelPacker panel_packer(GgmlType) { return nullptr; }
}  // namespace kvec::int8::decode

#endif
