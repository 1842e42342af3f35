// Helpers shared by the AVX-512 kernels (kernels_avx2.cpp, int8_vnni.cpp, bf16_gemm.cpp). Code
// that uses AVX-512 instructions carries the target attribute itself, so it is inlined only into
// callers compiled for AVX-512 too, which run only after the CPU was checked.
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

}  // namespace kvec::avx512

#endif
