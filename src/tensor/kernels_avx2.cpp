// AVX2 + FMA float tile kernels and F16C conversion (this file is compiled with -mavx2 -mfma
// -mf16c; the dispatcher calls it only on CPUs that report all three).
// Few activation rows (decode, attention): register tiles of up to 4 activation rows x 3 weight
// rows, dot products along k: 12 accumulators + 3 weight vectors + 1 activation vector.
#include "tensor/kernels.h"

#include <cstring>

#include "util/error.h"
#include "util/fp16.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

namespace kvec::kernels {

namespace {

inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    __m128 sh = _mm_movehdup_ps(lo);
    lo = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, lo);
    lo = _mm_add_ss(lo, sh);
    return _mm_cvtss_f32(lo);
}

// y[i, j] for i < MI, j < MJ over k elements.
template <int MI, int MJ>
inline void micro(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k, float* y,
                  int64_t ldy) {
    __m256 acc[MI][MJ];
#pragma GCC unroll 4
    for (int i = 0; i < MI; ++i)
#pragma GCC unroll 3
        for (int j = 0; j < MJ; ++j) acc[i][j] = _mm256_setzero_ps();
    const int64_t k8 = k & ~int64_t{7};
    for (int64_t p = 0; p < k8; p += 8) {
        __m256 wv[MJ];
#pragma GCC unroll 3
        for (int j = 0; j < MJ; ++j) wv[j] = _mm256_loadu_ps(w + j * ldw + p);
#pragma GCC unroll 4
        for (int i = 0; i < MI; ++i) {
            const __m256 xv = _mm256_loadu_ps(x + i * ldx + p);
#pragma GCC unroll 3
            for (int j = 0; j < MJ; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < MI; ++i) {
        for (int j = 0; j < MJ; ++j) {
            float s = hsum(acc[i][j]);
            for (int64_t p = k8; p < k; ++p) s += x[i * ldx + p] * w[j * ldw + p];
            y[i * ldy + j] = s;
        }
    }
}

template <int MI>
inline void row_block(const float* x, int64_t ldx, const float* w, int64_t nw, int64_t ldw,
                      int64_t k, float* y, int64_t ldy) {
    int64_t j = 0;
    for (; j + 3 <= nw; j += 3) micro<MI, 3>(x, ldx, w + j * ldw, ldw, k, y + j, ldy);
    if (nw - j == 2) micro<MI, 2>(x, ldx, w + j * ldw, ldw, k, y + j, ldy);
    if (nw - j == 1) micro<MI, 1>(x, ldx, w + j * ldw, ldw, k, y + j, ldy);
}

// Packed path for many activation rows (prefill): weight rows are packed 16 at a time into a
// k-major panel [kc, 16] (one cache-resident 16 KiB panel per 256 k), and a 6 x 16 register tile
// broadcasts one activation element per row against two 8-wide panel vectors:
// 12 accumulators + 2 panel vectors + 1 broadcast. y is accumulated over k chunks.
constexpr int kMR = 6;
constexpr int kNR = 16;
constexpr int64_t kKC = 256;

// Rows past mi reuse row 0's data and are not stored (named accumulators: GCC keeps them in
// registers, where an accumulator array would be written back to the stack every iteration).
inline void micro_packed(const float* x, int64_t ldx, int mi, const float* panel, int64_t kc, float* y,
                         int64_t ldy, int nj, bool accumulate) {
    const float* r0 = x;
    const float* r1 = mi > 1 ? x + ldx : x;
    const float* r2 = mi > 2 ? x + 2 * ldx : x;
    const float* r3 = mi > 3 ? x + 3 * ldx : x;
    const float* r4 = mi > 4 ? x + 4 * ldx : x;
    const float* r5 = mi > 5 ? x + 5 * ldx : x;
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t p = 0; p < kc; ++p) {
        const __m256 b0 = _mm256_load_ps(panel + p * kNR);
        const __m256 b1 = _mm256_load_ps(panel + p * kNR + 8);
        __m256 a = _mm256_broadcast_ss(r0 + p);
        c00 = _mm256_fmadd_ps(a, b0, c00);
        c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(r1 + p);
        c10 = _mm256_fmadd_ps(a, b0, c10);
        c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(r2 + p);
        c20 = _mm256_fmadd_ps(a, b0, c20);
        c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(r3 + p);
        c30 = _mm256_fmadd_ps(a, b0, c30);
        c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(r4 + p);
        c40 = _mm256_fmadd_ps(a, b0, c40);
        c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(r5 + p);
        c50 = _mm256_fmadd_ps(a, b0, c50);
        c51 = _mm256_fmadd_ps(a, b1, c51);
    }
    const __m256 acc[kMR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    for (int i = 0; i < mi; ++i) {
        float* yi = y + i * ldy;
        alignas(32) float tmp[kNR];
        _mm256_store_ps(tmp, acc[i][0]);
        _mm256_store_ps(tmp + 8, acc[i][1]);
        if (accumulate) {
            for (int j = 0; j < nj; ++j) yi[j] += tmp[j];
        } else {
            for (int j = 0; j < nj; ++j) yi[j] = tmp[j];
        }
    }
}

void tile_packed(const float* x, int64_t nx, int64_t ldx, const float* w, int64_t nw, int64_t ldw, int64_t k,
                 float* y, int64_t ldy) {
    alignas(32) float panel[kKC * kNR];  // [kc, 16] packed weights
    for (int64_t j0 = 0; j0 < nw; j0 += kNR) {
        const int nj = static_cast<int>(nw - j0 < kNR ? nw - j0 : kNR);
        for (int64_t k0 = 0; k0 < k; k0 += kKC) {
            const int64_t kc = k - k0 < kKC ? k - k0 : kKC;
            for (int j = 0; j < kNR; ++j) {
                const float* wj = w + (j0 + j) * ldw + k0;  // row j0 + j, read sequentially
                if (j < nj) {
                    for (int64_t p = 0; p < kc; ++p) panel[p * kNR + j] = wj[p];
                } else {
                    for (int64_t p = 0; p < kc; ++p) panel[p * kNR + j] = 0.0f;
                }
            }
            const bool acc = k0 > 0;
            for (int64_t i = 0; i < nx; i += kMR) {
                const int mi = static_cast<int>(nx - i < kMR ? nx - i : kMR);
                micro_packed(x + i * ldx + k0, ldx, mi, panel, kc, y + i * ldy + j0, ldy, nj, acc);
            }
        }
    }
}

}  // namespace

void tile_avx2(const float* x, int64_t nx, int64_t ldx, const float* w, int64_t nw, int64_t ldw,
               int64_t k, float* y, int64_t ldy) {
    // Enough activation rows to pay for packing the weights: the packed 6 x 16 kernel.
    if (nx >= 24 && nw >= 8) {
        tile_packed(x, nx, ldx, w, nw, ldw, k, y, ldy);
        return;
    }
    int64_t i = 0;
    for (; i + 4 <= nx; i += 4) row_block<4>(x + i * ldx, ldx, w, nw, ldw, k, y + i * ldy, ldy);
    switch (nx - i) {
        case 3: row_block<3>(x + i * ldx, ldx, w, nw, ldw, k, y + i * ldy, ldy); break;
        case 2: row_block<2>(x + i * ldx, ldx, w, nw, ldw, k, y + i * ldy, ldy); break;
        case 1: row_block<1>(x + i * ldx, ldx, w, nw, ldw, k, y + i * ldy, ldy); break;
        default: break;
    }
}

void matmul_q8_0_avx2(const float* x, int64_t nx, int64_t ldx, const uint8_t* w, size_t row_bytes,
                      int64_t nw, int64_t k, float* y, int64_t ldy) {
    constexpr int64_t kBlock = 32;
    constexpr size_t kBlockBytes = 34;  // fp16 scale + 32 int8 (quant/blocks.h BlockQ8_0)
    constexpr int kMaxRows = 4;
    for (int64_t i0 = 0; i0 < nx; i0 += kMaxRows) {
        const int mi = static_cast<int>(nx - i0 < kMaxRows ? nx - i0 : kMaxRows);
        for (int64_t j = 0; j < nw; ++j) {
            const uint8_t* row = w + static_cast<size_t>(j) * row_bytes;
            __m256 acc[kMaxRows] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int64_t b = 0; b < k / kBlock; ++b) {
                const uint8_t* blk = row + static_cast<size_t>(b) * kBlockBytes;
                uint16_t dh;
                std::memcpy(&dh, blk, sizeof dh);
                const __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
                const auto* qs = reinterpret_cast<const int8_t*>(blk + 2);
                __m256 q[4];
                for (int t = 0; t < 4; ++t) {
                    const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * t));
                    q[t] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)));
                }
                for (int i = 0; i < mi; ++i) {
                    const float* xi = x + (i0 + i) * ldx + b * kBlock;
                    acc[i] = _mm256_fmadd_ps(q[0], _mm256_loadu_ps(xi), acc[i]);
                    acc[i] = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xi + 8), acc[i]);
                    acc[i] = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(xi + 16), acc[i]);
                    acc[i] = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xi + 24), acc[i]);
                }
            }
            for (int i = 0; i < mi; ++i) y[(i0 + i) * ldy + j] = hsum(acc[i]);
        }
    }
}

void fp16_to_fp32_f16c(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; ++i) dst[i] = fp16_to_float(src[i]);
}

}  // namespace kvec::kernels

#else  // not built for AVX2: never selected by the dispatcher, kept so the symbol exists.

namespace kvec::kernels {
void tile_avx2(const float* x, int64_t nx, int64_t ldx, const float* w, int64_t nw, int64_t ldw,
               int64_t k, float* y, int64_t ldy) {
    tile_generic(x, nx, ldx, w, nw, ldw, k, y, ldy);
}
void fp16_to_fp32_f16c(const uint16_t* src, float* dst, int64_t n) { fp16_to_fp32_generic(src, dst, n); }
void matmul_q8_0_avx2(const float*, int64_t, int64_t, const uint8_t*, size_t, int64_t, int64_t, float*, int64_t) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
}  // namespace kvec::kernels

#endif
