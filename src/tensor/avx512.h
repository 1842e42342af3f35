// Helpers shared by the AVX-512 kernels (kernels_avx2.cpp, int8_vnni.cpp, bf16_gemm.cpp,
// int8_decode_avx512.cpp). Code that uses AVX-512 instructions carries the target attribute
// itself, so it is inlined only into callers compiled for AVX-512 too, which run only after the
// CPU was checked.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

namespace kvec::avx512 {

// Mask of the first n lanes of 16 / 32 (n below 0 counts as 0, above the width as all).
inline __mmask16 first16(int64_t n) {
    return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}
inline __mmask32 first32(int64_t n) {
    return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : (__mmask32(1) << n) - 1;
}

// yi[0, nj) = (or += when accumulate) the lanes of acc[0..NP), 16 floats each; nj <= 16 NP.
template <int NP>
__attribute__((target("avx512f"))) inline void store_row(float* yi, const __m512* acc, int nj, bool accumulate) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
        const __mmask16 m = first16(nj - 16 * p);
        if (m == 0) return;
        __m512 v = acc[p];
        if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, yi + 16 * p));
        _mm512_mask_storeu_ps(yi + 16 * p, m, v);
    }
}

// 16 x 16 dword transpose: on return v[p] lane r = (input) v[r] lane p (unpack 32-bit and 64-bit
// pairs, then two rounds of 128-bit lane shuffles).
__attribute__((target("avx512f"))) inline void transpose16(__m512i v[16]) {
    __m512i a[16], b[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
        a[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    // b[4i + q], 128-bit lane L: rows 4i..4i+3 of dword 4L + q.
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    // Transpose the 128-bit lanes of b[q], b[4 + q], b[8 + q], b[12 + q].
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
        const __m512i c0 = _mm512_shuffle_i32x4(b[q], b[4 + q], 0x44), c1 = _mm512_shuffle_i32x4(b[q], b[4 + q], 0xEE);
        const __m512i c2 = _mm512_shuffle_i32x4(b[8 + q], b[12 + q], 0x44);
        const __m512i c3 = _mm512_shuffle_i32x4(b[8 + q], b[12 + q], 0xEE);
        v[q] = _mm512_shuffle_i32x4(c0, c2, 0x88);
        v[4 + q] = _mm512_shuffle_i32x4(c0, c2, 0xDD);
        v[8 + q] = _mm512_shuffle_i32x4(c1, c3, 0x88);
        v[12 + q] = _mm512_shuffle_i32x4(c1, c3, 0xDD);
    }
}

// Lane j of the result = the sum of a[j]'s 16 lanes: four rounds of pairwise shuffles and adds,
// each halving the vectors and the lanes per entry (46 instructions for 16 horizontal sums).
//   round 1: 128-bit quarters of a[2k], a[2k+1]      -> quarters [2k, 2k, 2k+1, 2k+1] (8 lanes each)
//   round 2: quarters of b[2m], b[2m+1]              -> quarters [4m, 4m+1, 4m+2, 4m+3] (4 lanes each)
//   round 3: lanes inside each quarter q             -> [8n+q, 8n+q, 8n+4+q, 8n+4+q] (2 lanes each)
//   round 4: the same                                -> lane 4q + r holds entry q + 4r
// then one permutation into entry order.
__attribute__((target("avx512f"))) inline __m512 sum16(const __m512 a[16]) {
    __m512 b[8], c[4], e[2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
        b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
    }
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
        c[m] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * m], b[2 * m + 1], 0xDD));
    }
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
        e[n] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * n], c[2 * n + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(c[2 * n], c[2 * n + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    }
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(e[0], e[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), s);
}

}  // namespace kvec::avx512

#endif
