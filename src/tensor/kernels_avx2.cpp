// AVX2 + FMA float tile kernels and F16C conversion (this file is compiled with -mavx2 -mfma
// -mf16c; the dispatcher calls it only on CPUs that report all three).
// Few activation rows (decode, attention): register tiles of up to 4 activation rows x 3 weight
// rows, dot products along k: 12 accumulators + 3 weight vectors + 1 activation vector.
#include "tensor/kernels.h"
#include "tensor/int8_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "quant/blocks.h"
#include "util/error.h"
#include "util/fp16.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "tensor/avx512.h"

namespace kvec::kernels {

namespace {

inline float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

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

// Q8_0 rows (quant/blocks.h BlockQ8_0): blocks of an fp16 scale followed by 32 int8, read in
// place by the prefill, decode and int8 kernels below.
constexpr size_t kQ80BlockBytes = sizeof(quant::BlockQ8_0);
inline const uint8_t* q8_0_block(const uint8_t* w, size_t row_bytes, int64_t j, int64_t b) {
    return w + static_cast<size_t>(j) * row_bytes + static_cast<size_t>(b) * kQ80BlockBytes;
}
inline float q8_0_scale(const uint8_t* block) {
    uint16_t h;
    std::memcpy(&h, block, sizeof h);
    return _cvtsh_ss(h);
}
inline const int8_t* q8_0_quants(const uint8_t* block) {
    return reinterpret_cast<const int8_t*>(block + offsetof(quant::BlockQ8_0, qs));
}

// Loaders of 8 weights as floats (and of one, for tails): F32 as is, F16 through F16C, BF16 by a
// 16-bit shift.
struct F32Load {
    static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
    static float one(float v) { return v; }
};
struct Fp16Load {
    static __m256 load8(const uint16_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static float one(uint16_t h) { return fp16_to_float(h); }
};
struct Bf16Load {
    static __m256 load8(const uint16_t* p) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    static float one(uint16_t h) { return bf16_to_float(h); }
};

// Packed path for many activation rows (prefill): activations come in groups of 6 rows stored
// k-major (pack_rows6, so the 6 broadcasts of a step read one contiguous 24-byte span instead of
// 6 rows 4*ldx bytes apart: 82 against 68-75 GFLOPS per core measured), weight rows are packed 16 at
// a time into a k-major panel [kc, 16] (one cache-resident 16 KiB panel per 256 k), and a 6 x 16
// register tile broadcasts one activation element per row against two 8-wide panel vectors:
// 12 accumulators + 2 panel vectors + 1 broadcast. y is accumulated over k chunks.
constexpr int kNR = 16;
constexpr int64_t kKC = 256;

// xg: one packed group at chunk start ([kc, 6]); rows past mi are zero and not stored (named
// accumulators: GCC keeps them in registers, where an array would be written back every step).
inline void micro_packed(const float* xg, int mi, const float* panel, int64_t kc, float* y, int64_t ldy, int nj,
                         bool accumulate) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t p = 0; p < kc; ++p) {
        const __m256 b0 = _mm256_load_ps(panel + p * kNR);
        const __m256 b1 = _mm256_load_ps(panel + p * kNR + 8);
        const float* a6 = xg + p * kPackRows;  // the 6 rows' element p
        __m256 a = _mm256_broadcast_ss(a6);
        c00 = _mm256_fmadd_ps(a, b0, c00);
        c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(a6 + 1);
        c10 = _mm256_fmadd_ps(a, b0, c10);
        c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(a6 + 2);
        c20 = _mm256_fmadd_ps(a, b0, c20);
        c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(a6 + 3);
        c30 = _mm256_fmadd_ps(a, b0, c30);
        c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(a6 + 4);
        c40 = _mm256_fmadd_ps(a, b0, c40);
        c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(a6 + 5);
        c50 = _mm256_fmadd_ps(a, b0, c50);
        c51 = _mm256_fmadd_ps(a, b1, c51);
    }
    const auto store = [&](int i, __m256 lo, __m256 hi) {
        if (i >= mi) return;
        float* yi = y + i * ldy;
        if (nj == kNR) {  // full width: vector read-modify-write
            if (accumulate) {
                lo = _mm256_add_ps(lo, _mm256_loadu_ps(yi));
                hi = _mm256_add_ps(hi, _mm256_loadu_ps(yi + 8));
            }
            _mm256_storeu_ps(yi, lo);
            _mm256_storeu_ps(yi + 8, hi);
            return;
        }
        alignas(32) float tmp[kNR];
        _mm256_store_ps(tmp, lo);
        _mm256_store_ps(tmp + 8, hi);
        for (int j = 0; j < nj; ++j) yi[j] = accumulate ? yi[j] + tmp[j] : tmp[j];
    };
    store(0, c00, c01);
    store(1, c10, c11);
    store(2, c20, c21);
    store(3, c30, c31);
    store(4, c40, c41);
    store(5, c50, c51);
}

// out[q] = (r[0][q], ..., r[7][q]): an 8 x 8 transpose in registers.
inline void transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);      // rows 2i, 2i+1: columns 0 1 | 4 5
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);  // columns 2 3 | 6 7
    }
    for (int h = 0; h < 2; ++h) {  // rows 0-3, then rows 4-7
        const __m256* u = t + 4 * h;
        s[4 * h + 0] = _mm256_shuffle_ps(u[0], u[2], _MM_SHUFFLE(1, 0, 1, 0));  // column 0 | 4
        s[4 * h + 1] = _mm256_shuffle_ps(u[0], u[2], _MM_SHUFFLE(3, 2, 3, 2));  // column 1 | 5
        s[4 * h + 2] = _mm256_shuffle_ps(u[1], u[3], _MM_SHUFFLE(1, 0, 1, 0));  // column 2 | 6
        s[4 * h + 3] = _mm256_shuffle_ps(u[1], u[3], _MM_SHUFFLE(3, 2, 3, 2));  // column 3 | 7
    }
    for (int q = 0; q < 4; ++q) {
        r[q] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x20);
        r[q + 4] = _mm256_permute2f128_ps(s[q], s[4 + q], 0x31);
    }
}

// Weight rows as the packed kernel reads them: load8(j, p) = elements p..p+7 of row j as floats
// (p a multiple of 8), one(j, p) = element p. Float and 16-bit rows are ldw elements apart (L:
// one of the loaders above); Q8_0 rows are row_bytes apart, blocks of an fp16 scale + 32 int8.
template <class L, class T>
struct StridedRows {
    const T* w;
    int64_t ldw;
    __m256 load8(int64_t j, int64_t p) const { return L::load8(w + j * ldw + p); }
    float one(int64_t j, int64_t p) const { return L::one(w[j * ldw + p]); }
};
struct Q80Rows {
    const uint8_t* w;
    size_t row_bytes;
    __m256 load8(int64_t j, int64_t p) const {
        const uint8_t* b = q8_0_block(w, row_bytes, j, p / 32);
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q8_0_quants(b) + p % 32));
        return _mm256_mul_ps(_mm256_set1_ps(q8_0_scale(b)), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
    float one(int64_t j, int64_t p) const {
        const uint8_t* b = q8_0_block(w, row_bytes, j, p / 32);
        return q8_0_scale(b) * static_cast<float>(q8_0_quants(b)[p % 32]);
    }
};

// panel[p * NR + j] = row j0 + j at k0 + p as float, for p < kc, j < nj; zero for j >= nj.
// The weight type is converted here, 8 x 8 blocks at a time.
template <int NR, class Rows>
inline void pack_panel(const Rows& rows, int64_t j0, int64_t k0, int nj, int64_t kc, float* panel) {
    const int64_t kc8 = kc & ~int64_t{7};
    for (int h = 0; h < NR / 8; ++h) {
        for (int64_t p = 0; p < kc8; p += 8) {
            __m256 r[8];
            for (int j = 0; j < 8; ++j) {
                const int row = 8 * h + j;
                r[j] = row < nj ? rows.load8(j0 + row, k0 + p) : _mm256_setzero_ps();
            }
            transpose8(r);
            for (int q = 0; q < 8; ++q) _mm256_store_ps(panel + (p + q) * NR + 8 * h, r[q]);
        }
    }
    for (int64_t p = kc8; p < kc; ++p)
        for (int j = 0; j < NR; ++j) panel[p * NR + j] = j < nj ? rows.one(j0 + j, k0 + p) : 0.0f;
}

// AVX-512 (Zen 4/5, Intel since Skylake-SP): the same 6-row tile with 512-bit vectors against a
// 32-row panel: 12 accumulators of 16 lanes, twice the multiply-adds per instruction. Compiled for
// AVX-512F by the target attribute and called only where the CPU reports it.
constexpr int kNR512 = 32;
#define KVEC_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

KVEC_AVX512 inline void store_row_512(float* yi, __m512 lo, __m512 hi, int nj, bool accumulate) {
    const __m512 acc[2] = {lo, hi};
    avx512::store_row<2>(yi, acc, nj, accumulate);
}

KVEC_AVX512 void micro_packed_512(const float* xg, int mi, const float* panel, int64_t kc, float* y, int64_t ldy,
                                  int nj, bool accumulate) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t p = 0; p < kc; ++p) {
        const __m512 b0 = _mm512_load_ps(panel + p * kNR512);
        const __m512 b1 = _mm512_load_ps(panel + p * kNR512 + 16);
        const float* a6 = xg + p * kPackRows;  // the 6 rows' element p
        // Row r: one broadcast of its element p against the panel's two vectors.
#define KVEC_ROW512(r)                                      \
    {                                                       \
        const __m512 a = _mm512_set1_ps(a6[r]);             \
        c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);          \
        c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);          \
    }
        KVEC_ROW512(0) KVEC_ROW512(1) KVEC_ROW512(2) KVEC_ROW512(3) KVEC_ROW512(4) KVEC_ROW512(5)
#undef KVEC_ROW512
    }
    if (mi > 0) store_row_512(y, c00, c01, nj, accumulate);
    if (mi > 1) store_row_512(y + ldy, c10, c11, nj, accumulate);
    if (mi > 2) store_row_512(y + 2 * ldy, c20, c21, nj, accumulate);
    if (mi > 3) store_row_512(y + 3 * ldy, c30, c31, nj, accumulate);
    if (mi > 4) store_row_512(y + 4 * ldy, c40, c41, nj, accumulate);
    if (mi > 5) store_row_512(y + 5 * ldy, c50, c51, nj, accumulate);
}
#undef KVEC_AVX512

// Panels of NR weight rows, micro: the 6 x NR register tile for that width.
template <int NR, class Rows, class Micro>
void tile_panels(const float* xp, int64_t nx, const Rows& rows, int64_t nw, int64_t k, float* y, int64_t ldy,
                 Micro micro) {
    alignas(64) float panel[kKC * NR];  // [kc, NR] packed weights
    // k chunks outermost: the activations' chunk (nx x kc, 256 KiB for 258 rows) stays in L2 while
    // every panel of the weight rows passes over it.
    for (int64_t k0 = 0; k0 < k; k0 += kKC) {
        const int64_t kc = k - k0 < kKC ? k - k0 : kKC;
        for (int64_t j0 = 0; j0 < nw; j0 += NR) {
            const int nj = static_cast<int>(nw - j0 < NR ? nw - j0 : NR);
            pack_panel<NR>(rows, j0, k0, nj, kc, panel);
            const bool acc = k0 > 0;
            for (int64_t i = 0; i < nx; i += kPackRows) {
                const int mi = static_cast<int>(nx - i < kPackRows ? nx - i : kPackRows);
                micro(xp + i * k + k0 * kPackRows, mi, panel, kc, y + i * ldy + j0, ldy, nj, acc);
            }
        }
    }
}

template <class Rows>
void tile_prepacked(const float* xp, int64_t nx, const Rows& rows, int64_t nw, int64_t k, float* y, int64_t ldy) {
    if (avx512_enabled()) {
        tile_panels<kNR512>(xp, nx, rows, nw, k, y, ldy, micro_packed_512);
    } else {
        tile_panels<kNR>(xp, nx, rows, nw, k, y, ldy, micro_packed);
    }
}

}  // namespace

void tile_prepacked_avx2(const float* xp, int64_t nx, const float* w, int64_t nw, int64_t ldw, int64_t k, float* y,
                         int64_t ldy) {
    tile_prepacked(xp, nx, StridedRows<F32Load, float>{w, ldw}, nw, k, y, ldy);
}

void tile_prepacked_f16_avx2(const float* xp, int64_t nx, const uint16_t* w, int64_t nw, int64_t ldw, int64_t k,
                             float* y, int64_t ldy) {
    tile_prepacked(xp, nx, StridedRows<Fp16Load, uint16_t>{w, ldw}, nw, k, y, ldy);
}

void tile_prepacked_bf16_avx2(const float* xp, int64_t nx, const uint16_t* w, int64_t nw, int64_t ldw, int64_t k,
                              float* y, int64_t ldy) {
    tile_prepacked(xp, nx, StridedRows<Bf16Load, uint16_t>{w, ldw}, nw, k, y, ldy);
}

void tile_prepacked_q8_0_avx2(const float* xp, int64_t nx, const uint8_t* w, size_t row_bytes, int64_t nw, int64_t k,
                              float* y, int64_t ldy) {
    tile_prepacked(xp, nx, Q80Rows{w, row_bytes}, nw, k, y, ldy);
}


void tile_avx2(const float* x, int64_t nx, int64_t ldx, const float* w, int64_t nw, int64_t ldw,
               int64_t k, float* y, int64_t ldy) {
    // Enough activation rows to pay for packing the weights: the packed 6 x 16 kernel.
    if (nx >= kPackedMinRows && nw >= 8) {
        thread_local std::vector<float> xp;  // [groups of 6 rows, k, 6] (grow-only)
        const auto need = static_cast<size_t>(packed_rows(nx) * k);
        if (xp.size() < need) xp.resize(need);
        pack_rows6(x, nx, ldx, k, xp.data());
        tile_prepacked_avx2(xp.data(), nx, w, nw, ldw, k, y, ldy);
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
    constexpr int kMaxRows = 4;
    for (int64_t i0 = 0; i0 < nx; i0 += kMaxRows) {
        const int mi = static_cast<int>(nx - i0 < kMaxRows ? nx - i0 : kMaxRows);
        for (int64_t j = 0; j < nw; ++j) {
            __m256 acc[kMaxRows] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int64_t b = 0; b < k / kBlock; ++b) {
                const uint8_t* blk = q8_0_block(w, row_bytes, j, b);
                const __m256 d = _mm256_set1_ps(q8_0_scale(blk));
                const int8_t* qs = q8_0_quants(blk);
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

// F16 / BF16 weights in place (decode): y[i * ldy + j] = dot(x row i, 16-bit row j), 4 rows x up
// to 2 activation rows per tile, the conversion to float (F16C, or a 16-bit shift for bf16) fused
// with the FMA.
namespace {
// The next R rows (the next tile's contiguous region when rows are packed, ldw == k) are
// prefetched at the pace this tile reads, R * 16 bytes per step, so each thread reads one long
// stream instead of R short ones (as for Q8_0 in kvec::int8).
template <class L, int R, int C, bool Prefetch = true>
inline void half_tile(const float* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t k, float* y, int64_t ldy) {
    __m256 acc[C][R];
#pragma GCC unroll 4
    for (int i = 0; i < C; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < R; ++j) acc[i][j] = _mm256_setzero_ps();
    const int64_t k8 = k & ~int64_t{7};
    const uint16_t* next = w + R * ldw;
    for (int64_t p = 0; p < k8; p += 8) {
        if constexpr (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(next + p * R), _MM_HINT_T0);
        __m256 wv[R];
#pragma GCC unroll 4
        for (int j = 0; j < R; ++j) wv[j] = L::load8(w + j * ldw + p);
#pragma GCC unroll 4
        for (int i = 0; i < C; ++i) {
            const __m256 xv = _mm256_loadu_ps(x + i * ldx + p);
#pragma GCC unroll 4
            for (int j = 0; j < R; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < C; ++i) {
        for (int j = 0; j < R; ++j) {
            float s = hsum(acc[i][j]);
            for (int64_t p = k8; p < k; ++p) s += x[i * ldx + p] * L::one(w[j * ldw + p]);
            y[i * ldy + j] = s;
        }
    }
}

template <class L, int C>
inline void half_rows(const float* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t nw, int64_t k, float* y,
                      int64_t ldy) {
    int64_t j = 0;
    // The last tiles prefetch nothing: the rows after this call's belong to another work item.
    for (; j + 8 <= nw; j += 4) half_tile<L, 4, C>(x, ldx, w + j * ldw, ldw, k, y + j, ldy);
    for (; j + 4 <= nw; j += 4) half_tile<L, 4, C, false>(x, ldx, w + j * ldw, ldw, k, y + j, ldy);
    for (; j < nw; ++j) half_tile<L, 1, C, false>(x, ldx, w + j * ldw, ldw, k, y + j, ldy);
}

// One activation row with AVX-512F: each weight row is read as one sequential stream, 64
// elements (128 bytes) per step into four 16-lane accumulators, without software prefetch. With
// the weights in 2 MiB pages this decodes F16 faster than the 4-row prefetching tiles (tg64 on a
// TinyLlama-shaped model, Zen 5: 17.2-20.9 against 16.3-17.8 t/s, docs/performance.md).
struct Fp16Load16 {
    __attribute__((target("avx512f"))) static __m512 load16(const uint16_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
};
struct Bf16Load16 {
    __attribute__((target("avx512f"))) static __m512 load16(const uint16_t* p) {
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    }
};

template <class L, class L16>
__attribute__((target("avx512f"))) void half_rows_512(const float* x, const uint16_t* w, int64_t ldw, int64_t nw,
                                                      int64_t k, float* y) {
    const int64_t k64 = k & ~int64_t{63};
    for (int64_t j = 0; j < nw; ++j) {
        const uint16_t* wj = w + j * ldw;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t p = 0; p < k64; p += 64) {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + p), L16::load16(wj + p), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + p + 16), L16::load16(wj + p + 16), a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + p + 32), L16::load16(wj + p + 32), a2);
            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + p + 48), L16::load16(wj + p + 48), a3);
        }
        float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
        for (int64_t p = k64; p < k; ++p) s += x[p] * L::one(wj[p]);
        y[j] = s;
    }
}

template <class L, class L16>
void half_matmul(const float* x, int64_t nx, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t nw, int64_t k,
                 float* y, int64_t ldy) {
    if (nx == 1 && avx512_enabled()) {
        half_rows_512<L, L16>(x, w, ldw, nw, k, y);
        return;
    }
    int64_t i = 0;
    for (; i + 2 <= nx; i += 2) half_rows<L, 2>(x + i * ldx, ldx, w, ldw, nw, k, y + i * ldy, ldy);
    if (i < nx) half_rows<L, 1>(x + i * ldx, ldx, w, ldw, nw, k, y + i * ldy, ldy);
}
}  // namespace

void matmul_f16_avx2(const float* x, int64_t nx, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t nw,
                     int64_t k, float* y, int64_t ldy) {
    half_matmul<Fp16Load, Fp16Load16>(x, nx, ldx, w, ldw, nw, k, y, ldy);
}

void matmul_bf16_avx2(const float* x, int64_t nx, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t nw,
                      int64_t k, float* y, int64_t ldy) {
    half_matmul<Bf16Load, Bf16Load16>(x, nx, ldx, w, ldw, nw, k, y, ldy);
}

// Attention values (tensor/attention.h): out[i, e] += sum_j p[i, j] * v[j, e] over one block of
// entries for one position's query rows, read in place (F16 converted in registers). Register
// tiles of C query rows x DV vectors of 8 dimensions: per entry DV value vectors are loaded (and
// converted) once and multiplied by C broadcast probabilities; 4 x 2 tiles use 8 accumulators + 2
// values + 1 broadcast.
namespace {
template <class L, int C, int DV, class E>
inline void values_tile(const float* p, int64_t ldp, const E* v, int64_t ldv, int64_t n, float* out, int64_t ldo) {
    __m256 acc[C][DV];
#pragma GCC unroll 4
    for (int i = 0; i < C; ++i)
#pragma GCC unroll 2
        for (int d = 0; d < DV; ++d) acc[i][d] = _mm256_loadu_ps(out + i * ldo + 8 * d);
    for (int64_t j = 0; j < n; ++j) {
        __m256 vv[DV];
#pragma GCC unroll 2
        for (int d = 0; d < DV; ++d) vv[d] = L::load8(v + j * ldv + 8 * d);
#pragma GCC unroll 4
        for (int i = 0; i < C; ++i) {
            const __m256 pi = _mm256_broadcast_ss(p + i * ldp + j);
#pragma GCC unroll 2
            for (int d = 0; d < DV; ++d) acc[i][d] = _mm256_fmadd_ps(pi, vv[d], acc[i][d]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < C; ++i)
#pragma GCC unroll 2
        for (int d = 0; d < DV; ++d) _mm256_storeu_ps(out + i * ldo + 8 * d, acc[i][d]);
}

// C query rows, every dimension: 16-wide tiles, an 8-wide one, then the d % 8 tail in scalar code.
template <class L, int C, class E>
inline void values_rows(const float* p, int64_t ldp, const E* v, int64_t ldv, int64_t n, int64_t d, float* out,
                        int64_t ldo) {
    int64_t e = 0;
    for (; e + 16 <= d; e += 16) values_tile<L, C, 2>(p, ldp, v + e, ldv, n, out + e, ldo);
    for (; e + 8 <= d; e += 8) values_tile<L, C, 1>(p, ldp, v + e, ldv, n, out + e, ldo);
    for (; e < d; ++e) {
        for (int i = 0; i < C; ++i) {
            float s = out[i * ldo + e];
            for (int64_t j = 0; j < n; ++j) s += p[i * ldp + j] * L::one(v[j * ldv + e]);
            out[i * ldo + e] = s;
        }
    }
}

template <class L, class E>
void attention_values(const float* p, int64_t nq, int64_t ldp, const E* v, int64_t ldv, int64_t n, int64_t d,
                      float* out, int64_t ldo) {
    int64_t i = 0;
    for (; i + 4 <= nq; i += 4) values_rows<L, 4>(p + i * ldp, ldp, v, ldv, n, d, out + i * ldo, ldo);
    switch (nq - i) {
        case 3: values_rows<L, 3>(p + i * ldp, ldp, v, ldv, n, d, out + i * ldo, ldo); break;
        case 2: values_rows<L, 2>(p + i * ldp, ldp, v, ldv, n, d, out + i * ldo, ldo); break;
        case 1: values_rows<L, 1>(p + i * ldp, ldp, v, ldv, n, d, out + i * ldo, ldo); break;
        default: break;
    }
}

// 8 x 8 blocks transposed in registers (F16 converted on load); the d % 8 and n % 8 tails in
// scalar code, the columns up to the multiple of 8 zeroed. The next block's keys (the n entries
// after these, when the cache has them) are prefetched at the pace these are read, so that a
// decode streaming a long cache from memory overlaps the fetch with this block's scores.
template <class L, class E>
void keys_t(const E* k, int64_t n, int64_t d, float* kt, int64_t ldkt) {
    const int64_t n8 = n & ~int64_t{7}, d8 = d & ~int64_t{7};
    const auto* ahead = reinterpret_cast<const char*>(k + n * d);
    for (int64_t j = 0; j < n8; j += 8) {
        for (int64_t b = 0; b < 8 * d * static_cast<int64_t>(sizeof(E)); b += 64) {
            _mm_prefetch(ahead + j * d * static_cast<int64_t>(sizeof(E)) + b, _MM_HINT_T0);
        }
        for (int64_t e = 0; e < d8; e += 8) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) r[i] = L::load8(k + (j + i) * d + e);
            transpose8(r);
#pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) _mm256_storeu_ps(kt + (e + i) * ldkt + j, r[i]);
        }
        for (int64_t e = d8; e < d; ++e)
            for (int64_t i = 0; i < 8; ++i) kt[e * ldkt + j + i] = L::one(k[(j + i) * d + e]);
    }
    if (n8 == n) return;
    for (int64_t e = 0; e < d; ++e) {
        for (int64_t j = n8; j < n8 + 8; ++j) kt[e * ldkt + j] = j < n ? L::one(k[j * d + e]) : 0.0f;
    }
}
}  // namespace

void attention_values_f32_avx2(const float* p, int64_t nq, int64_t ldp, const float* v, int64_t n, int64_t d,
                               float* out, int64_t ldo) {
    attention_values<F32Load>(p, nq, ldp, v, d, n, d, out, ldo);
}

void attention_values_f16_avx2(const float* p, int64_t nq, int64_t ldp, const uint16_t* v, int64_t n, int64_t d,
                               float* out, int64_t ldo) {
    attention_values<Fp16Load>(p, nq, ldp, v, d, n, d, out, ldo);
}

void keys_t_f32_avx2(const float* k, int64_t n, int64_t d, float* kt, int64_t ldkt) {
    keys_t<F32Load>(k, n, d, kt, ldkt);
}

// Block-quantised values in place (kernels.h). A row loader decodes elements e0 .. e0 + 15 (e0 a
// multiple of 16: one half of a 32-element block) of one row into two vectors of floats.
namespace {
inline const uint8_t* qblock(const uint8_t* row, int64_t e0, size_t block_bytes) {
    return row + static_cast<size_t>(e0 >> 5) * block_bytes;
}
inline __m256 half_to_ps8(const uint8_t* h) {  // the fp16 at h broadcast to 8 lanes
    uint16_t v;
    std::memcpy(&v, h, 2);
    return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(v)));
}
// 16 signed bytes to two vectors of floats times d (plus m).
inline void bytes_to_ps(__m128i q, __m256 d, __m256& a, __m256& b) {
    a = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    b = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), d);
}
inline void bytes_to_ps(__m128i q, __m256 d, __m256 m, __m256& a, __m256& b) {
    a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d, m);
    b = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), d, m);
}
// The 4-bit indices of half (e0 / 16) % 2 of the block whose 16 nibble bytes are at qs: low
// nibbles for elements 0..15, high for 16..31.
inline __m128i nibbles(const uint8_t* qs, int64_t e0) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i lo4 = _mm_set1_epi8(0x0F);
    return (e0 & 16) != 0 ? _mm_and_si128(_mm_srli_epi16(raw, 4), lo4) : _mm_and_si128(raw, lo4);
}
// Bits (e0 % 32) .. + 15 of the little-endian u32 at qh as 0x10 in the bytes whose bit is set.
inline __m128i fifth_bits(const uint8_t* qh, int64_t e0) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    const __m128i bits = _mm_set1_epi16(static_cast<int16_t>(h >> (e0 & 16)));
    const __m128i spread = _mm_shuffle_epi8(bits, _mm_set_epi8(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0));
    const __m128i mask = _mm_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
    return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(spread, mask), mask), _mm_set1_epi8(0x10));
}
struct Q8_0Rows {
    static void load16(const uint8_t* row, int64_t e0, __m256& a, __m256& b) {
        const uint8_t* blk = qblock(row, e0, 34);
        bytes_to_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2 + (e0 & 16))), half_to_ps8(blk), a, b);
    }
};
struct Q4_0Rows {
    static void load16(const uint8_t* row, int64_t e0, __m256& a, __m256& b) {
        const uint8_t* blk = qblock(row, e0, 18);
        bytes_to_ps(_mm_sub_epi8(nibbles(blk + 2, e0), _mm_set1_epi8(8)), half_to_ps8(blk), a, b);
    }
};
struct Q4_1Rows {
    static void load16(const uint8_t* row, int64_t e0, __m256& a, __m256& b) {
        const uint8_t* blk = qblock(row, e0, 20);
        bytes_to_ps(nibbles(blk + 4, e0), half_to_ps8(blk), half_to_ps8(blk + 2), a, b);
    }
};
struct Q5_0Rows {
    static void load16(const uint8_t* row, int64_t e0, __m256& a, __m256& b) {
        const uint8_t* blk = qblock(row, e0, 22);
        const __m128i q = _mm_or_si128(nibbles(blk + 6, e0), fifth_bits(blk + 2, e0));
        bytes_to_ps(_mm_sub_epi8(q, _mm_set1_epi8(16)), half_to_ps8(blk), a, b);
    }
};
struct Q5_1Rows {
    static void load16(const uint8_t* row, int64_t e0, __m256& a, __m256& b) {
        const uint8_t* blk = qblock(row, e0, 24);
        const __m128i q = _mm_or_si128(nibbles(blk + 8, e0), fifth_bits(blk + 4, e0));
        bytes_to_ps(q, half_to_ps8(blk), half_to_ps8(blk + 2), a, b);
    }
};
struct Iq4NlRows {
    static void load16(const uint8_t* row, int64_t e0, __m256& a, __m256& b) {
        const uint8_t* blk = qblock(row, e0, 18);
        const __m128i grid = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4nlValues));
        bytes_to_ps(_mm_shuffle_epi8(grid, nibbles(blk + 2, e0)), half_to_ps8(blk), a, b);
    }
};

// C query rows (C <= 4) x 16 elements per pass over the n rows: 8 accumulators, 2 decoded vectors.
template <class R, int C>
void quant_values_rows(const float* p, int64_t ldp, const uint8_t* v, size_t row_bytes, int64_t n, int64_t d,
                       float* out, int64_t ldo) {
    for (int64_t e0 = 0; e0 < d; e0 += 16) {
        __m256 acc[C][2];
#pragma GCC unroll 4
        for (int i = 0; i < C; ++i) {
            acc[i][0] = _mm256_loadu_ps(out + i * ldo + e0);
            acc[i][1] = _mm256_loadu_ps(out + i * ldo + e0 + 8);
        }
        const uint8_t* row = v;
        for (int64_t j = 0; j < n; ++j, row += row_bytes) {
            __m256 a, b;
            R::load16(row, e0, a, b);
#pragma GCC unroll 4
            for (int i = 0; i < C; ++i) {
                const __m256 pi = _mm256_broadcast_ss(p + i * ldp + j);
                acc[i][0] = _mm256_fmadd_ps(pi, a, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(pi, b, acc[i][1]);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < C; ++i) {
            _mm256_storeu_ps(out + i * ldo + e0, acc[i][0]);
            _mm256_storeu_ps(out + i * ldo + e0 + 8, acc[i][1]);
        }
    }
}

template <class R>
void quant_values(const float* p, int64_t nq, int64_t ldp, const uint8_t* v, size_t row_bytes, int64_t n, int64_t d,
                  float* out, int64_t ldo) {
    int64_t i = 0;
    for (; i + 4 <= nq; i += 4) quant_values_rows<R, 4>(p + i * ldp, ldp, v, row_bytes, n, d, out + i * ldo, ldo);
    switch (nq - i) {
        case 3: quant_values_rows<R, 3>(p + i * ldp, ldp, v, row_bytes, n, d, out + i * ldo, ldo); break;
        case 2: quant_values_rows<R, 2>(p + i * ldp, ldp, v, row_bytes, n, d, out + i * ldo, ldo); break;
        case 1: quant_values_rows<R, 1>(p + i * ldp, ldp, v, row_bytes, n, d, out + i * ldo, ldo); break;
        default: break;
    }
}
}  // namespace

bool values_in_place_avx2(GgmlType type) {
    switch (type) {
        case GgmlType::Q8_0:
        case GgmlType::Q4_0:
        case GgmlType::Q4_1:
        case GgmlType::Q5_0:
        case GgmlType::Q5_1:
        case GgmlType::IQ4_NL: return true;
        default: return false;
    }
}

void attention_values_quant_avx2(GgmlType type, const float* p, int64_t nq, int64_t ldp, const uint8_t* v,
                                 int64_t n, int64_t d, float* out, int64_t ldo) {
    KVEC_CHECK(d % 32 == 0);
    const size_t rb = ggml_row_size(type, d);
    switch (type) {
        case GgmlType::Q8_0: quant_values<Q8_0Rows>(p, nq, ldp, v, rb, n, d, out, ldo); return;
        case GgmlType::Q4_0: quant_values<Q4_0Rows>(p, nq, ldp, v, rb, n, d, out, ldo); return;
        case GgmlType::Q4_1: quant_values<Q4_1Rows>(p, nq, ldp, v, rb, n, d, out, ldo); return;
        case GgmlType::Q5_0: quant_values<Q5_0Rows>(p, nq, ldp, v, rb, n, d, out, ldo); return;
        case GgmlType::Q5_1: quant_values<Q5_1Rows>(p, nq, ldp, v, rb, n, d, out, ldo); return;
        case GgmlType::IQ4_NL: quant_values<Iq4NlRows>(p, nq, ldp, v, rb, n, d, out, ldo); return;
        default: KVEC_CHECK(false && "attention_values_quant_avx2: type without an in-place kernel");
    }
}

void keys_t_f16_avx2(const uint16_t* k, int64_t n, int64_t d, float* kt, int64_t ldkt) {
    keys_t<Fp16Load>(k, n, d, kt, ldkt);
}

// Rows given by pointers times a float panel (kernels.h, rows_times_panel_avx2): register tiles
// of C rows x DV vectors of 8 columns; per step e, DV panel vectors (the last one masked to the
// columns that remain where `tail`) against C broadcasts, 6 x 2 tiles using 12 accumulators.
namespace {
template <int C, int DV, bool Tail>
inline void panel_tile(const float* const* a, const float* b, int64_t ldb, int64_t k, __m256i tail, float* const* y,
                       bool accumulate) {
    auto load = [&](const float* p, int v) {
        return Tail && v == DV - 1 ? _mm256_maskload_ps(p + 8 * v, tail) : _mm256_loadu_ps(p + 8 * v);
    };
    __m256 acc[C][DV];
#pragma GCC unroll 6
    for (int i = 0; i < C; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < DV; ++v) acc[i][v] = accumulate ? load(y[i], v) : _mm256_setzero_ps();
    for (int64_t e = 0; e < k; ++e) {
        __m256 bv[DV];
#pragma GCC unroll 2
        for (int v = 0; v < DV; ++v) bv[v] = load(b + e * ldb, v);
#pragma GCC unroll 6
        for (int i = 0; i < C; ++i) {
            const __m256 ai = _mm256_broadcast_ss(a[i] + e);
#pragma GCC unroll 2
            for (int v = 0; v < DV; ++v) acc[i][v] = _mm256_fmadd_ps(ai, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < C; ++i) {
#pragma GCC unroll 2
        for (int v = 0; v < DV; ++v) {
            if (Tail && v == DV - 1) {
                _mm256_maskstore_ps(y[i] + 8 * v, tail, acc[i][v]);
            } else {
                _mm256_storeu_ps(y[i] + 8 * v, acc[i][v]);
            }
        }
    }
}

// One strip of columns [c, c + 8 * DV) for every row, 6 rows at a time.
template <int DV, bool Tail>
void panel_strip(int64_t rows, const float* const* a, const float* b, int64_t ldb, int64_t k, __m256i tail,
                 float* const* y, int64_t c, bool accumulate) {
    for (int64_t r = 0; r < rows; r += 6) {
        float* yc[6];
        const auto m = static_cast<int>(std::min<int64_t>(6, rows - r));
        for (int i = 0; i < m; ++i) yc[i] = y[r + i] + c;
        const float* const* ar = a + r;
        switch (m) {
            case 6: panel_tile<6, DV, Tail>(ar, b + c, ldb, k, tail, yc, accumulate); break;
            case 5: panel_tile<5, DV, Tail>(ar, b + c, ldb, k, tail, yc, accumulate); break;
            case 4: panel_tile<4, DV, Tail>(ar, b + c, ldb, k, tail, yc, accumulate); break;
            case 3: panel_tile<3, DV, Tail>(ar, b + c, ldb, k, tail, yc, accumulate); break;
            case 2: panel_tile<2, DV, Tail>(ar, b + c, ldb, k, tail, yc, accumulate); break;
            default: panel_tile<1, DV, Tail>(ar, b + c, ldb, k, tail, yc, accumulate); break;
        }
    }
}
}  // namespace

void rows_times_panel_avx2(int64_t rows, const float* const* a, const float* b, int64_t ldb, int64_t k, int64_t n,
                           float* const* y, bool accumulate) {
    const __m256i none = _mm256_setzero_si256();
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) panel_strip<2, false>(rows, a, b, ldb, k, none, y, c, accumulate);
    for (; c + 8 <= n; c += 8) panel_strip<1, false>(rows, a, b, ldb, k, none, y, c, accumulate);
    if (c == n) return;
    // Lane l of the last vector is on where c + l < n (its sign bit set).
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n - c)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    panel_strip<1, true>(rows, a, b, ldb, k, tail, y, c, accumulate);
}

// One query position over F32/F16 keys read in place (kernels.h, attention_scores_direct_avx2).
namespace {
// Lane l of the result = the sum of a[l]'s 8 lanes: two rounds of hadd (pairs, then quads within
// each 128-bit half), then the halves of a[0..3] and a[4..7] added.
inline __m256 sum8(const __m256 a[8]) {
    const __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));  // [0..3 | 0..3]
    const __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));  // [4..7 | 4..7]
    return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}

// R query rows x J = 8 / R entries: the R * J dot products over d, each entry's 8 elements
// converted once for the R rows. Entries past m (a block's end) repeat entry m - 1, so that
// nothing past the visible entries is read; their lanes are not stored. Lane r * J + j of the
// result is row r, entry j.
template <class L, int R, class E>
inline __m256 dots(const float* q, int64_t ldq, const E* k, int64_t m, int64_t d) {
    constexpr int J = 8 / R;
    const E* kj[J];
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j) kj[j] = k + std::min<int64_t>(j, m - 1) * d;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int a = 0; a < 8; ++a) acc[a] = _mm256_setzero_ps();
    for (int64_t e = 0; e < d; e += 8) {
        __m256 qr[R];
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) qr[r] = _mm256_loadu_ps(q + r * ldq + e);
#pragma GCC unroll 8
        for (int j = 0; j < J; ++j) {
            const __m256 kv = L::load8(kj[j] + e);
#pragma GCC unroll 2
            for (int r = 0; r < R; ++r) acc[r * J + j] = _mm256_fmadd_ps(qr[r], kv, acc[r * J + j]);
        }
    }
    return sum8(acc);
}

// Block by block of 128 entries (they stay in L1 while the rows pass): rows two at a time
// against 4 entries, an odd last row against 8. The first rows' pass prefetches the next block
// at the pace it reads this one (as keys_t does: a long cache streams from memory; prefetching
// past the last entry is harmless), and the values of the entries it scores (ValuePrefetch).
template <class L, class E>
void scores_direct_avx2(const float* q, int64_t nq, int64_t ldq, const E* k, int64_t n, int64_t d, float* y,
                        int64_t ldy, ValuePrefetch values) {
    constexpr int64_t kBlock = 128;
    const auto row_bytes = static_cast<int64_t>(d * sizeof(E));
    auto prefetch_next = [&](int64_t j, int64_t entries) {
        const char* p = reinterpret_cast<const char*>(k + (j + kBlock) * d);
        for (int64_t b = 0; b < entries * row_bytes; b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
    };
    // Rows i .. i + R - 1 against the entries [j0, j1), J = 8 / R at a time.
    auto rows = [&](int64_t i, int64_t j0, int64_t j1, auto r_count) {
        constexpr int R = decltype(r_count)::value, J = 8 / R;
        alignas(32) float lanes[8];
        for (int64_t j = j0; j < j1; j += J) {
            const int64_t m = std::min<int64_t>(J, j1 - j);
            if (i == 0) {
                prefetch_next(j, J);
                values(j, m);
            }
            _mm256_store_ps(lanes, dots<L, R>(q + i * ldq, ldq, k + j * d, m, d));
            for (int r = 0; r < R; ++r) std::copy_n(lanes + r * J, m, y + (i + r) * ldy + j);
        }
    };
    for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
        const int64_t j1 = std::min(n, j0 + kBlock);
        int64_t i = 0;
        for (; i + 2 <= nq; i += 2) rows(i, j0, j1, std::integral_constant<int, 2>{});
        if (i < nq) rows(i, j0, j1, std::integral_constant<int, 1>{});
    }
}
}  // namespace

bool attention_direct_avx2(GgmlType type, int64_t d) {
    return d % 8 == 0 && (type == GgmlType::F32 || type == GgmlType::F16);
}

void attention_scores_direct_avx2(GgmlType type, const float* q, int64_t nq, int64_t ldq, const void* k, int64_t n,
                                  int64_t d, float* y, int64_t ldy, ValuePrefetch values) {
    KVEC_CHECK(attention_direct_avx2(type, d));
    if (type == GgmlType::F16) {
        scores_direct_avx2<Fp16Load>(q, nq, ldq, static_cast<const uint16_t*>(k), n, d, y, ldy, values);
    } else {
        scores_direct_avx2<F32Load>(q, nq, ldq, static_cast<const float*>(k), n, d, y, ldy, values);
    }
}

// One query position with AVX-512F (kernels.h: attention_scores_direct_avx512 and
// attention_values_avx512): keys and values read in place, 16 lanes per vector.
#define KVEC_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
namespace {
struct F32Load16 {
    KVEC_AVX512 static __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
};

// R query rows x J = 16 / R consecutive keys k [J, d]: the R * J dot products over d, lane r * J
// + j = row r, entry j. The vector loop runs over d with the 16 accumulators as independent
// chains (one dependent FMA per 16 elements each), and each key's 16 elements are converted once
// for the R rows.
template <class L16, int R, class E>
KVEC_AVX512 inline __m512 dots16(const float* q, int64_t ldq, const E* k, int64_t d) {
    constexpr int J = 16 / R;
    __m512 a[16];
#pragma GCC unroll 16
    for (int x = 0; x < 16; ++x) a[x] = _mm512_setzero_ps();
    for (int64_t e = 0; e < d; e += 16) {
        __m512 qr[R];
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) qr[r] = _mm512_loadu_ps(q + r * ldq + e);
#pragma GCC unroll 16
        for (int j = 0; j < J; ++j) {
            const __m512 kv = L16::load16(k + j * d + e);
#pragma GCC unroll 2
            for (int r = 0; r < R; ++r) a[r * J + j] = _mm512_fmadd_ps(qr[r], kv, a[r * J + j]);
        }
    }
    return avx512::sum16(a);
}

// Rows i .. i + R - 1 (R = 1, 2) against the entries [j0, j1), 16 / R at a time, with the values
// of each pass's entries prefetched (ValuePrefetch; an empty one for the later rows). The last
// entries, fewer than a pass takes, are copied into a zeroed buffer first (so nothing past j1 is
// read), and only their lanes are stored.
template <class L16, int R, class E>
KVEC_AVX512 void scores_rows(const float* q, int64_t ldq, const E* k, int64_t j0, int64_t j1, int64_t d, float* y,
                             int64_t ldy, ValuePrefetch values) {
    constexpr int J = 16 / R;
    int64_t j = j0;
    for (; j < j1; j += J) {
        const int64_t m = std::min<int64_t>(J, j1 - j);
        values(j, m);
        const E* kj = k + j * d;
        if (m < J) {
            thread_local std::vector<E> pad;  // [J, d]
            pad.assign(static_cast<size_t>(J * d), E{});
            std::copy(kj, kj + m * d, pad.begin());
            kj = pad.data();
        }
        const __m512 s = dots16<L16, R>(q, ldq, kj, d);
        const __mmask16 mask = avx512::first16(m);
        _mm512_mask_storeu_ps(y + j, mask, s);
        if constexpr (R == 2) _mm512_mask_storeu_ps(y + ldy + j, mask, _mm512_shuffle_f32x4(s, s, 0x4E));
    }
}

// Block by block of 128 entries (they stay in L1 while the rows pass): rows two at a time, an odd
// last row alone; the first rows' pass prefetches the values.
template <class L16, class E>
KVEC_AVX512 void scores_direct(const float* q, int64_t nq, int64_t ldq, const E* k, int64_t n, int64_t d, float* y,
                               int64_t ldy, ValuePrefetch values) {
    constexpr int64_t kBlock = 128;
    for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
        const int64_t j1 = std::min(n, j0 + kBlock);
        ValuePrefetch first = values;  // the first rows' pass only
        int64_t i = 0;
        for (; i + 2 <= nq; i += 2) {
            scores_rows<L16, 2>(q + i * ldq, ldq, k, j0, j1, d, y + i * ldy, ldy, first);
            first = {};
        }
        if (i < nq) scores_rows<L16, 1>(q + i * ldq, ldq, k, j0, j1, d, y + i * ldy, ldy, first);
    }
}

// Value rows read in place, 16 elements of entry j from element `at` per load16(j, at): F32/F16
// rows converted by L16, or Q8_0 blocks (16 bytes sign-extended, converted, times the block's
// scale).
template <class L16, class E>
struct PlainValues {
    const E* v;  // [n, d]
    int64_t d;
    KVEC_AVX512 __m512 load16(int64_t j, int64_t at) const { return L16::load16(v + j * d + at); }
};
struct Q8_0Values {
    const uint8_t* v;  // [n] rows of d / 32 blocks
    size_t row_bytes;
    KVEC_AVX512 __m512 load16(int64_t j, int64_t at) const {
        const uint8_t* blk = q8_0_block(v, row_bytes, j, at / 32);
        const auto* bytes = reinterpret_cast<const __m128i*>(q8_0_quants(blk) + at % 32);  // 16 of the block's 32
        const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(bytes));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(q8_0_scale(blk)));
    }
};

// C query rows x 16 DV dimensions [e0, e0 + 16 DV) of out, accumulated over the n entries; each
// entry's vectors loaded once for the C rows.
template <class V, int C, int DV>
KVEC_AVX512 inline void values_tile_512(const float* p, int64_t ldp, const V& v, int64_t e0, int64_t n, float* out,
                                        int64_t ldo) {
    __m512 acc[C][DV];
#pragma GCC unroll 4
    for (int i = 0; i < C; ++i)
#pragma GCC unroll 4
        for (int e = 0; e < DV; ++e) acc[i][e] = _mm512_loadu_ps(out + i * ldo + e0 + 16 * e);
    for (int64_t j = 0; j < n; ++j) {
        __m512 vv[DV];
#pragma GCC unroll 4
        for (int e = 0; e < DV; ++e) vv[e] = v.load16(j, e0 + 16 * e);
#pragma GCC unroll 4
        for (int i = 0; i < C; ++i) {
            const __m512 pi = _mm512_set1_ps(p[i * ldp + j]);
#pragma GCC unroll 4
            for (int e = 0; e < DV; ++e) acc[i][e] = _mm512_fmadd_ps(pi, vv[e], acc[i][e]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < C; ++i)
#pragma GCC unroll 4
        for (int e = 0; e < DV; ++e) _mm512_storeu_ps(out + i * ldo + e0 + 16 * e, acc[i][e]);
}

template <class V, int C>
KVEC_AVX512 void values_rows_512(const float* p, int64_t ldp, const V& v, int64_t n, int64_t d, float* out,
                                 int64_t ldo) {
    int64_t e = 0;
    for (; e + 64 <= d; e += 64) values_tile_512<V, C, 4>(p, ldp, v, e, n, out, ldo);
    for (; e < d; e += 16) values_tile_512<V, C, 1>(p, ldp, v, e, n, out, ldo);
}

template <class V>
KVEC_AVX512 void values_512(const float* p, int64_t nq, int64_t ldp, const V& v, int64_t n, int64_t d, float* out,
                            int64_t ldo) {
    int64_t i = 0;
    for (; i + 4 <= nq; i += 4) values_rows_512<V, 4>(p + i * ldp, ldp, v, n, d, out + i * ldo, ldo);
    switch (nq - i) {
        case 3: values_rows_512<V, 3>(p + i * ldp, ldp, v, n, d, out + i * ldo, ldo); break;
        case 2: values_rows_512<V, 2>(p + i * ldp, ldp, v, n, d, out + i * ldo, ldo); break;
        case 1: values_rows_512<V, 1>(p + i * ldp, ldp, v, n, d, out + i * ldo, ldo); break;
        default: break;
    }
}

// Rows given by pointers times a float panel with AVX-512F (kernels.h, rows_times_panel_avx512):
// C rows x DV vectors of 16 columns, the last vector's lanes past the columns masked (neither read
// nor written); 8 x 2 tiles use 16 accumulators + 2 panel vectors + 1 broadcast.
template <int C, int DV>
KVEC_AVX512 inline void panel_tile_512(const float* const* a, const float* b, int64_t ldb, int64_t k, __mmask16 last,
                                       float* const* y, bool accumulate) {
    __m512 acc[C][DV];
#pragma GCC unroll 8
    for (int i = 0; i < C; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < DV; ++v) {
            acc[i][v] = accumulate ? _mm512_maskz_loadu_ps(v == DV - 1 ? last : 0xFFFF, y[i] + 16 * v) : _mm512_setzero_ps();
        }
    for (int64_t e = 0; e < k; ++e) {
        __m512 bv[DV];
#pragma GCC unroll 2
        for (int v = 0; v < DV; ++v) bv[v] = _mm512_maskz_loadu_ps(v == DV - 1 ? last : 0xFFFF, b + e * ldb + 16 * v);
#pragma GCC unroll 8
        for (int i = 0; i < C; ++i) {
            const __m512 ai = _mm512_set1_ps(a[i][e]);
#pragma GCC unroll 2
            for (int v = 0; v < DV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < C; ++i)
#pragma GCC unroll 2
        for (int v = 0; v < DV; ++v) _mm512_mask_storeu_ps(y[i] + 16 * v, v == DV - 1 ? last : 0xFFFF, acc[i][v]);
}

// One strip of columns [c, c + 16 * DV) for every row, 8 rows at a time.
template <int DV>
KVEC_AVX512 void panel_strip_512(int64_t rows, const float* const* a, const float* b, int64_t ldb, int64_t k,
                                 __mmask16 last, float* const* y, int64_t c, bool accumulate) {
    for (int64_t r = 0; r < rows; r += 8) {
        float* yc[8];
        const auto m = static_cast<int>(std::min<int64_t>(8, rows - r));
        for (int i = 0; i < m; ++i) yc[i] = y[r + i] + c;
        const float* const* ar = a + r;
        switch (m) {
            case 8: panel_tile_512<8, DV>(ar, b + c, ldb, k, last, yc, accumulate); break;
            case 7: panel_tile_512<7, DV>(ar, b + c, ldb, k, last, yc, accumulate); break;
            case 6: panel_tile_512<6, DV>(ar, b + c, ldb, k, last, yc, accumulate); break;
            case 5: panel_tile_512<5, DV>(ar, b + c, ldb, k, last, yc, accumulate); break;
            case 4: panel_tile_512<4, DV>(ar, b + c, ldb, k, last, yc, accumulate); break;
            case 3: panel_tile_512<3, DV>(ar, b + c, ldb, k, last, yc, accumulate); break;
            case 2: panel_tile_512<2, DV>(ar, b + c, ldb, k, last, yc, accumulate); break;
            default: panel_tile_512<1, DV>(ar, b + c, ldb, k, last, yc, accumulate); break;
        }
    }
}
}  // namespace
#undef KVEC_AVX512

void rows_times_panel_avx512(int64_t rows, const float* const* a, const float* b, int64_t ldb, int64_t k, int64_t n,
                             float* const* y, bool accumulate) {
    KVEC_CHECK(avx512_enabled());
    int64_t c = 0;
    for (; c + 32 <= n; c += 32) panel_strip_512<2>(rows, a, b, ldb, k, 0xFFFF, y, c, accumulate);
    for (; c < n; c += 16) panel_strip_512<1>(rows, a, b, ldb, k, avx512::first16(n - c), y, c, accumulate);
}

bool attention_direct_avx512(GgmlType type, int64_t d) {
    return avx512_enabled() && d % 16 == 0 && (type == GgmlType::F32 || type == GgmlType::F16);
}

void attention_scores_direct_avx512(GgmlType type, const float* q, int64_t nq, int64_t ldq, const void* k, int64_t n,
                                    int64_t d, float* y, int64_t ldy, ValuePrefetch values) {
    KVEC_CHECK(attention_direct_avx512(type, d));
    if (type == GgmlType::F16) {
        scores_direct<Fp16Load16>(q, nq, ldq, static_cast<const uint16_t*>(k), n, d, y, ldy, values);
    } else {
        scores_direct<F32Load16>(q, nq, ldq, static_cast<const float*>(k), n, d, y, ldy, values);
    }
}

bool values_direct_avx512(GgmlType type, int64_t d) {
    return type == GgmlType::Q8_0 ? avx512_enabled() && d % 32 == 0 : attention_direct_avx512(type, d);
}

void attention_values_avx512(GgmlType type, const float* p, int64_t nq, int64_t ldp, const void* v, int64_t n,
                             int64_t d, float* out, int64_t ldo) {
    KVEC_CHECK(values_direct_avx512(type, d));
    if (type == GgmlType::Q8_0) {
        const Q8_0Values rows{static_cast<const uint8_t*>(v), ggml_row_size(type, d)};
        values_512(p, nq, ldp, rows, n, d, out, ldo);
    } else if (type == GgmlType::F16) {
        values_512(p, nq, ldp, PlainValues<Fp16Load16, uint16_t>{static_cast<const uint16_t*>(v), d}, n, d, out, ldo);
    } else {
        values_512(p, nq, ldp, PlainValues<F32Load16, float>{static_cast<const float*>(v), d}, n, d, out, ldo);
    }
}

// exp over 8 lanes: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two parts so that n ln2 is
// exact), exp(r) by the Cephes expf polynomial (relative error about 1e-7, the same order as
// float rounding), times 2^n assembled in the exponent bits. Inputs below -87.3 give 0 and above
// 88.7 are clamped (exp(88.7) ~ 3.4e38, near FLT_MAX); used where the arguments are bounded
// (softmax: x - max <= 0; SiLU: the quotient is saturated long before).
namespace {
inline __m256 exp8(__m256 x) {
    const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_LT_OQ);
    x = _mm256_min_ps(x, _mm256_set1_ps(88.72283f));
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.33654f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    // 2^n for n in [-126, 128] as 2^(n-1) * 2: n + 126 in the exponent field, so that n = 128 (only
    // at the upper clamp, where p < 1) stays finite; n = -126, the underflow edge, gives 0.
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
    const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), _mm256_set1_ps(2.0f));
    return _mm256_andnot_ps(underflow, y);
}
}  // namespace

float softmax_avx2(float* x, int64_t n, float sink) {
    if (n <= 0) return sink;
    __m256 mv = _mm256_set1_ps(x[0] > sink ? x[0] : sink);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
    float mx = hmax(mv);
    for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    const __m256 m8 = _mm256_set1_ps(mx);
    // The sink's term in lane 0 (exp(-inf) = 0 without a sink).
    __m256 sv = _mm256_setr_ps(std::exp(sink - mx), 0, 0, 0, 0, 0, 0, 0);
    for (i = 0; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m8));
        _mm256_storeu_ps(x + i, e);
        sv = _mm256_add_ps(sv, e);
    }
    if (i < n) {  // the tail through a zero-padded vector (padding lanes: exp(-inf - mx) = 0)
        alignas(32) float t[8];
        for (int j = 0; j < 8; ++j) t[j] = i + j < n ? x[i + j] : -INFINITY;
        const __m256 e = exp8(_mm256_sub_ps(_mm256_load_ps(t), m8));
        _mm256_store_ps(t, e);
        for (int j = 0; i + j < n; ++j) x[i + j] = t[j];
        sv = _mm256_add_ps(sv, e);
    }
    const float sum = hsum(sv);
    const __m256 inv = _mm256_set1_ps(1.0f / sum);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; ++i) x[i] *= _mm256_cvtss_f32(inv);
    return mx + std::log(sum);
}

void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, exp8(_mm256_xor_ps(g, sign))));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void geglu_avx2(const float* gate, const float* up, float* out, int64_t n) {
    constexpr float kC = -2.0f * 0.7978845608028654f;  // -2 sqrt(2 / pi)
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), c = _mm256_set1_ps(kC), a = _mm256_set1_ps(0.044715f);
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 inner = _mm256_mul_ps(_mm256_mul_ps(c, g), _mm256_fmadd_ps(_mm256_mul_ps(a, g), g, one));
        const __m256 gelu = _mm256_div_ps(g, _mm256_add_ps(one, exp8(inner)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(gelu, _mm256_loadu_ps(up + i)));
    }
    for (; i < n; ++i) {
        const float g = gate[i];
        out[i] = g / (1.0f + std::exp(kC * g * (1.0f + 0.044715f * g * g))) * up[i];
    }
}

void softcap_avx2(float* x, int64_t n, float scale, float cap) {
    const float k = 2.0f * scale / cap;  // exp's argument 2y = 2 scale x / cap
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f), k8 = _mm256_set1_ps(k),
                 cap8 = _mm256_set1_ps(cap);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_mul_ps(k8, _mm256_loadu_ps(x + i)));
        const __m256 t = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(e, one)));  // tanh(y)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(cap8, t));
    }
    for (; i < n; ++i) x[i] = cap * std::tanh(scale * x[i] / cap);
}

uint64_t stream_sum_avx2(const uint64_t* p, int64_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const auto* v = reinterpret_cast<const __m256i*>(p + i);
        a = _mm256_add_epi64(a, _mm256_loadu_si256(v));
        b = _mm256_add_epi64(b, _mm256_loadu_si256(v + 1));
        c = _mm256_add_epi64(c, _mm256_loadu_si256(v + 2));
        d = _mm256_add_epi64(d, _mm256_loadu_si256(v + 3));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; i < n; ++i) s += p[i];
    return s;
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

namespace kvec::int8 {

namespace {

inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

// Weights from a panel: scale vector lanes 0-3 = first half, 4-7 = second half (the lanes of
// madd(maddubs(.)) cover elements 4l..4l+3).
struct PanelSource {
    const int8_t* q;
    const float* scale;
    int64_t k, nb;
    const int8_t* block(int64_t j, int64_t b) const { return q + j * k + b * kBlock; }
    __m256 scales(int64_t j, int64_t b) const {
        const float* s = scale + (j * nb + b) * 2;
        return _mm256_set_m128(_mm_set1_ps(s[1]), _mm_set1_ps(s[0]));
    }
};

// Q8_0 blocks read in place: fp16 scale + 32 int8.
struct Q80Source {
    const uint8_t* w;
    size_t row_bytes;
    const int8_t* block(int64_t j, int64_t b) const {
        return kernels::q8_0_quants(kernels::q8_0_block(w, row_bytes, j, b));
    }
    __m256 scales(int64_t j, int64_t b) const {
        return _mm256_set1_ps(kernels::q8_0_scale(kernels::q8_0_block(w, row_bytes, j, b)));
    }
};

// y[i, j] for R weight rows x C activation rows. Per block: maddubs(|w|, sign(x, w)) multiplies
// u8 |w| <= 128 by s8 +-x (|x| <= 127), so a pair sum stays below 2^15; madd with 1s widens to
// 8 exact int32 lanes (lane l = elements 4l..4l+3), converted to float and accumulated with one
// FMA by scale_w (per half: lanes 0-3 / 4-7) x d_x. 6 vector operations per 32 multiply-adds:
// without AVX-512 VNNI (vpdpbusd) this is about the speed of the float FMA path on Zen 3, but it
// needs no dequantised copy of the weights and reads Q8_0 blocks in place.
template <int R, int C, class Src>
inline void tile(const QuantRows& x, int64_t i0, const Src& src, int64_t j0, int64_t nb, float* y, int64_t ldy) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t* xr[C];  // activation rows of the tile
    const float* dr[C];   // their block scales
#pragma GCC unroll 8
    for (int i = 0; i < C; ++i) {
        xr[i] = x.q + (i0 + i) * x.k;
        dr[i] = x.d + (i0 + i) * nb;
    }
    __m256 acc[C][R];
#pragma GCC unroll 8
    for (int i = 0; i < C; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < R; ++j) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        // The weights' signs move onto the activations: sign(w, x) would negate w = -128 (a Q8_0
        // file may hold it) into itself.
        __m256i wq[R], wa[R];
        __m256 ws[R];
#pragma GCC unroll 8
        for (int j = 0; j < R; ++j) {
            wq[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src.block(j0 + j, b)));
            wa[j] = _mm256_abs_epi8(wq[j]);  // 128 for -128, as an unsigned byte
            ws[j] = src.scales(j0 + j, b);
        }
#pragma GCC unroll 8
        for (int i = 0; i < C; ++i) {
            const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[i] + b * kBlock));
            const __m256 dx = _mm256_broadcast_ss(dr[i] + b);
#pragma GCC unroll 8
            for (int j = 0; j < R; ++j) {
                const __m256i p16 = _mm256_maddubs_epi16(wa[j], _mm256_sign_epi8(xq, wq[j]));
                const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                acc[i][j] = _mm256_fmadd_ps(p, _mm256_mul_ps(ws[j], dx), acc[i][j]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < C; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < R; ++j) y[(i0 + i) * ldy + j0 + j] = kvec::kernels::hsum(acc[i][j]);
}

// All nx x nw outputs in tiles of (R rows, C activation rows), with smaller edge tiles.
template <class Src>
void gemm_tiles(const QuantRows& x, int64_t nx, const Src& src, int64_t nw, int64_t nb, float* y, int64_t ldy) {
    // One activation row (types without a decode kernel, int8_decode.h): 4 weight rows per tile.
    if (nx == 1) {
        int64_t j = 0;
        for (; j + 4 <= nw; j += 4) tile<4, 1>(x, 0, src, j, nb, y, ldy);
        for (; j < nw; ++j) tile<1, 1>(x, 0, src, j, nb, y, ldy);
        return;
    }
    // 2 x 4 measured fastest on Zen 3 (2x3 equal, 3x2 / 4x2 / 3x3 8-17% slower): 8 accumulators,
    // 2 scale vectors, the activation, its absolute value and scale, the constant 1s.
    constexpr int R = 2, C = 4;
    int64_t j = 0;
    for (; j + R <= nw; j += R) {
        int64_t i = 0;
        for (; i + C <= nx; i += C) tile<R, C>(x, i, src, j, nb, y, ldy);
        for (; i < nx; ++i) tile<R, 1>(x, i, src, j, nb, y, ldy);
    }
    for (; j < nw; ++j) {
        int64_t i = 0;
        for (; i + C <= nx; i += C) tile<1, C>(x, i, src, j, nb, y, ldy);
        for (; i < nx; ++i) tile<1, 1>(x, i, src, j, nb, y, ldy);
    }
}

}  // namespace

void quantize_rows_avx2(const float* x, int64_t n, int64_t k, int8_t* q, float* d, float* hsum, int32_t* qsum) {
    const int64_t nb = k / kBlock;
    const __m256 sign_mask = _mm256_set1_ps(-0.0f);
    const __m256 lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            const float* xb = x + r * k + b * kBlock;  // [32]
            __m256 v[4];
            for (int t = 0; t < 4; ++t) v[t] = _mm256_loadu_ps(xb + 8 * t);
            const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign_mask, v[0]), _mm256_andnot_ps(sign_mask, v[1])),
                                     _mm256_max_ps(_mm256_andnot_ps(sign_mask, v[2]), _mm256_andnot_ps(sign_mask, v[3])));
            const float amax = kvec::kernels::hmax(m);
            const float db = amax / 127.0f;
            const __m256 id = _mm256_set1_ps(db != 0.0f ? 1.0f / db : 0.0f);
            __m256i qi[4];
            for (int t = 0; t < 4; ++t) {
                qi[t] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(_mm256_mul_ps(v[t], id), lim), nlim));
            }
            const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]);
            const __m256i p23 = _mm256_packs_epi32(qi[2], qi[3]);
            const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + r * k + b * kBlock), p);
            d[r * nb + b] = db;
            const int s0 = hsum_epi32(_mm256_add_epi32(qi[0], qi[1])), s1 = hsum_epi32(_mm256_add_epi32(qi[2], qi[3]));
            hsum[(r * nb + b) * 2] = db * static_cast<float>(s0);
            hsum[(r * nb + b) * 2 + 1] = db * static_cast<float>(s1);
            if (qsum != nullptr) {
                qsum[(r * nb + b) * 2] = s0;
                qsum[(r * nb + b) * 2 + 1] = s1;
            }
        }
    }
}

void gemm_avx2(const QuantRows& x, int64_t nx, const Panel& w, int64_t nw, float* y, int64_t ldy) {
    const int64_t nb = x.k / kBlock;
    gemm_tiles(x, nx, PanelSource{w.q, w.scale, w.k, nb}, nw, nb, y, ldy);
    if (w.min == nullptr) return;
    // The min term: y[i, j] += sum over halves of min_w * (d_x * sum q_x).
    for (int64_t i = 0; i < nx; ++i) {
        const float* hs = x.hsum + i * nb * 2;  // [nb * 2]
        for (int64_t j = 0; j < nw; ++j) {
            const float* mn = w.min + j * nb * 2;  // [nb * 2]
            __m256 acc = _mm256_setzero_ps();
            int64_t p = 0;
            for (; p + 8 <= nb * 2; p += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(mn + p), _mm256_loadu_ps(hs + p), acc);
            float s = kvec::kernels::hsum(acc);
            for (; p < nb * 2; ++p) s += mn[p] * hs[p];
            y[i * ldy + j] += s;
        }
    }
}

void gemm_q8_0_avx2(const QuantRows& x, int64_t nx, const uint8_t* w, size_t row_bytes, int64_t nw, float* y,
                    int64_t ldy) {
    const int64_t nb = x.k / kBlock;
    gemm_tiles(x, nx, Q80Source{w, row_bytes}, nw, nb, y, ldy);
}

// One position's scores over Q8_0 keys in place (int8_gemm.h, scores_q8_0_avx2).
namespace {
// R query rows (from i0) against J = 8 / R entries at once (kj[j]), lane r * J + j of the result
// = row r, entry j (R = 3: lanes 0-5). Per entry and block: the keys' bytes and their absolute
// values loaded once for the R rows, maddubs(|k|, sign(x, k)) and madd with 1s as in `tile`, one
// FMA by d_k * d_x into a vector per (row, entry); sum8 adds 8 such vectors' lanes at once.
template <int R>
inline __m256 q8_0_dots8(const QuantRows& x, int64_t i0, const uint8_t* const* kj, int64_t nb) {
    constexpr int J = 8 / R;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[8];
#pragma GCC unroll 8
    for (int a = 0; a < 8; ++a) acc[a] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 8
        for (int j = 0; j < J; ++j) {
            const uint8_t* blk = kj[j] + b * sizeof(quant::BlockQ8_0);
            const __m256i kq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kernels::q8_0_quants(blk)));
            const __m256i ka = _mm256_abs_epi8(kq);  // 128 for -128, as an unsigned byte
            const __m256 dk = _mm256_set1_ps(kernels::q8_0_scale(blk));
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const int8_t* xq = x.q + (i0 + r) * x.k + b * kBlock;
                const __m256i p16 = _mm256_maddubs_epi16(
                    ka, _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq)), kq));
                const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                const __m256 d = _mm256_mul_ps(dk, _mm256_broadcast_ss(x.d + (i0 + r) * nb + b));
                acc[r * J + j] = _mm256_fmadd_ps(p, d, acc[r * J + j]);
            }
        }
    }
    return kernels::sum8(acc);
}

// Rows [i0, i0 + R) against entries [0, n), J = 8 / R at a time (the entries past the last
// repeat it); the first rows' pass prefetches the values of the entries it scores.
template <int R>
void q8_0_scores_rows8(const QuantRows& x, int64_t i0, const uint8_t* k, size_t row_bytes, int64_t n, float* y,
                       int64_t ldy, const kernels::ValuePrefetch& values) {
    constexpr int J = 8 / R;
    const int64_t nb = x.k / kBlock;
    alignas(32) float lanes[8];
    for (int64_t j = 0; j < n; j += J) {
        const int64_t m = std::min<int64_t>(J, n - j);
        values(j, m);
        const uint8_t* kj[J];
#pragma GCC unroll 8
        for (int e = 0; e < J; ++e) kj[e] = k + static_cast<size_t>(j + std::min<int64_t>(e, m - 1)) * row_bytes;
        _mm256_store_ps(lanes, q8_0_dots8<R>(x, i0, kj, nb));
        for (int r = 0; r < R; ++r) std::copy_n(lanes + r * J, m, y + (i0 + r) * ldy + j);
    }
}
}  // namespace

void scores_q8_0_avx2(const QuantRows& x, int64_t nx, const uint8_t* k, size_t row_bytes, int64_t n, float* y,
                      int64_t ldy, const kernels::ValuePrefetch& values) {
    kernels::ValuePrefetch first = values;  // the first pass only
    even_row_passes(nx, 4, [&](int64_t i, int64_t rows) {
        switch (rows) {
            case 4: q8_0_scores_rows8<4>(x, i, k, row_bytes, n, y, ldy, first); break;
            case 3: q8_0_scores_rows8<3>(x, i, k, row_bytes, n, y, ldy, first); break;
            case 2: q8_0_scores_rows8<2>(x, i, k, row_bytes, n, y, ldy, first); break;
            default: q8_0_scores_rows8<1>(x, i, k, row_bytes, n, y, ldy, first); break;
        }
        first = {};
    });
}

namespace {

constexpr int kSixRows = 8;  // weight rows per interleaved panel (one int32 lane each)

// Rows [j0, j0 + nj) (nj <= 8) of the panel w interleaved for six_bit_tile: per block b,
// qo [b, 8 groups, 8 rows, 4] the bytes q + 32 (0..63; rows past nj 0), so [256 b + 32 g + 4 r + t]
// is element 4 g + t of row r; so and mo [b, 2 halves, 8 rows] the scales and the mins less 32
// times the scale (the + 32 taken back). Returns whether some block's halves differ in scale or min.
bool interleave_six_bit(const Panel& w, int64_t j0, int nj, int64_t nb, uint8_t* qo, float* so, float* mo) {
    const __m256i offset = _mm256_set1_epi8(32);
    bool halves = false;
    for (int64_t b = 0; b < nb; ++b) {
        uint8_t* qb = qo + b * 256;
        for (int r = 0; r < kSixRows; ++r) {
            alignas(32) uint8_t u[kBlock] = {};
            float sc[2] = {0.0f, 0.0f}, mn[2] = {0.0f, 0.0f};
            if (r < nj) {
                const int64_t row = j0 + r;
                const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q + row * w.k + b * kBlock));
                _mm256_store_si256(reinterpret_cast<__m256i*>(u), _mm256_add_epi8(q, offset));
                for (int h = 0; h < 2; ++h) {
                    sc[h] = w.scale[(row * nb + b) * 2 + h];
                    mn[h] = (w.min != nullptr ? w.min[(row * nb + b) * 2 + h] : 0.0f) - 32.0f * sc[h];
                }
                halves |= sc[0] != sc[1] || mn[0] != mn[1];
            }
            for (int g = 0; g < 8; ++g) std::memcpy(qb + 32 * g + 4 * r, u + 4 * g, 4);
            for (int h = 0; h < 2; ++h) {
                so[(b * 2 + h) * kSixRows + r] = sc[h];
                mo[(b * 2 + h) * kSixRows + r] = mn[h];
            }
        }
    }
    return halves;
}

// The unsigned bytes u of groups g, g + 1 against activation row xq's (signed) bytes: two
// maddubs (u <= 63, |x| <= 127: a pair sum stays within 16002, two of them within 32004 < 2^15)
// added in int16, then madd with 1s into 8 int32 lanes, one per weight row.
inline __m256i six_bit_pair(__m256i u0, __m256i u1, const int8_t* xq, __m256i ones) {
    int32_t x0, x1;
    std::memcpy(&x0, xq, 4);
    std::memcpy(&x1, xq + 4, 4);
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(u0, _mm256_set1_epi32(x0)),
                                       _mm256_maddubs_epi16(u1, _mm256_set1_epi32(x1)));
    return _mm256_madd_epi16(p, ones);
}

// y[(i0 + i) * ldy + r] for i < R, r < nj: R activation rows against one interleaved panel.
// Per block: 8 weight vectors, each met by every row's broadcast 4 bytes (no horizontal sums);
// per half (Halves) or per block, the int32 sums to float times scale x d_x, and the min term
// min x d_x sum(q_x), in one accumulator per row.
template <int R, bool Halves>
void six_bit_tile(const QuantRows& x, int64_t i0, const uint8_t* qp, const float* sp, const float* mp, int64_t nb,
                  float* y, int64_t ldy, int nj) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t* xr[R];  // the rows' quantised values, scales and half sums
    const float* dr[R];
    const float* hr[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
        xr[i] = x.q + (i0 + i) * x.k;
        dr[i] = x.d + (i0 + i) * nb;
        hr[i] = x.hsum + (i0 + i) * nb * 2;
    }
    __m256 acc[R];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b, qp += 256, sp += 2 * kSixRows, mp += 2 * kSixRows) {
        __m256i s[R];
        // Groups g0, g0 + 1 of every row into s (start: the first pair of a sum).
        const auto pair = [&](int g0, bool start) {
            const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qp + 32 * g0));
            const __m256i u1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qp + 32 * g0 + 32));
#pragma GCC unroll 8
            for (int i = 0; i < R; ++i) {
                const __m256i p = six_bit_pair(u0, u1, xr[i] + 4 * g0, ones);
                s[i] = start ? p : _mm256_add_epi32(s[i], p);
            }
        };
        // The sums of one scale (half h, or the whole block with h = 0) into the accumulators.
        const auto scale = [&](int h) {
            const __m256 sc = _mm256_loadu_ps(sp + h * kSixRows), mn = _mm256_loadu_ps(mp + h * kSixRows);
#pragma GCC unroll 8
            for (int i = 0; i < R; ++i) {
                const __m256 dx = _mm256_broadcast_ss(dr[i] + b);
                const float hs = Halves ? hr[i][2 * b + h] : hr[i][2 * b] + hr[i][2 * b + 1];
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]), _mm256_mul_ps(sc, dx), acc[i]);
                acc[i] = _mm256_fmadd_ps(mn, _mm256_set1_ps(hs), acc[i]);
            }
        };
        pair(0, true);
        pair(2, false);
        if constexpr (Halves) {
            scale(0);
            pair(4, true);
        } else {
            pair(4, false);
        }
        pair(6, false);
        scale(Halves ? 1 : 0);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) xr[i] += kBlock;
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
        if (nj == kSixRows) {
            _mm256_storeu_ps(y + i * ldy, acc[i]);
        } else {
            alignas(32) float t[kSixRows];
            _mm256_store_ps(t, acc[i]);
            std::memcpy(y + i * ldy, t, sizeof(float) * static_cast<size_t>(nj));
        }
    }
}

template <bool Halves>
void six_bit_rows(const QuantRows& x, int64_t nx, const uint8_t* qp, const float* sp, const float* mp, int64_t nb,
                  float* y, int64_t ldy, int nj) {
    // 5 rows a tile: measured fastest on Zen 3 (one core, 16 x 640 weights against 512 rows:
    // 61-68 GMAC/s against 38-48 with 4 rows, 49-66 with 3, 50 with 6; a throw-away
    // microbenchmark, not kept).
    int64_t i = 0;
    for (; i + 5 <= nx; i += 5) six_bit_tile<5, Halves>(x, i, qp, sp, mp, nb, y + i * ldy, ldy, nj);
    switch (nx - i) {
        case 4: six_bit_tile<4, Halves>(x, i, qp, sp, mp, nb, y + i * ldy, ldy, nj); break;
        case 3: six_bit_tile<3, Halves>(x, i, qp, sp, mp, nb, y + i * ldy, ldy, nj); break;
        case 2: six_bit_tile<2, Halves>(x, i, qp, sp, mp, nb, y + i * ldy, ldy, nj); break;
        case 1: six_bit_tile<1, Halves>(x, i, qp, sp, mp, nb, y + i * ldy, ldy, nj); break;
        default: break;
    }
}

}  // namespace

void gemm_six_bit_avx2(const QuantRows& x, int64_t nx, const Panel& w, int64_t nw, float* y, int64_t ldy) {
    const int64_t nb = x.k / kBlock;
    thread_local std::vector<uint8_t> qbuf;  // [nb, 8, 8, 4]
    thread_local std::vector<float> sbuf, mbuf;  // [nb, 2, 8] each
    if (qbuf.size() < static_cast<size_t>(nb * 256)) qbuf.resize(static_cast<size_t>(nb * 256));
    if (sbuf.size() < static_cast<size_t>(nb * 16)) {
        sbuf.resize(static_cast<size_t>(nb * 16));
        mbuf.resize(static_cast<size_t>(nb * 16));
    }
    for (int64_t j0 = 0; j0 < nw; j0 += kSixRows) {
        const int nj = static_cast<int>(std::min<int64_t>(kSixRows, nw - j0));
        const bool halves = interleave_six_bit(w, j0, nj, nb, qbuf.data(), sbuf.data(), mbuf.data());
        (halves ? six_bit_rows<true> : six_bit_rows<false>)(x, nx, qbuf.data(), sbuf.data(), mbuf.data(), nb, y + j0,
                                                          ldy, nj);
    }
}

}  // namespace kvec::int8

#else  // not built for AVX2: never selected by the dispatcher, kept so the symbol exists.

namespace kvec::kernels {
void tile_avx2(const float* x, int64_t nx, int64_t ldx, const float* w, int64_t nw, int64_t ldw,
               int64_t k, float* y, int64_t ldy) {
    tile_generic(x, nx, ldx, w, nw, ldw, k, y, ldy);
}
void fp16_to_fp32_f16c(const uint16_t* src, float* dst, int64_t n) { fp16_to_fp32_generic(src, dst, n); }
uint64_t stream_sum_avx2(const uint64_t* p, int64_t n) {
    uint64_t s = 0;
    for (int64_t i = 0; i < n; ++i) s += p[i];
    return s;
}
float softmax_avx2(float*, int64_t, float) {
    fail("AVX2 kernel called in a build without AVX2 support");
}
void swiglu_avx2(const float*, const float*, float*, int64_t) {
    fail("AVX2 kernel called in a build without AVX2 support");
}
void geglu_avx2(const float*, const float*, float*, int64_t) {
    fail("AVX2 kernel called in a build without AVX2 support");
}
void softcap_avx2(float*, int64_t, float, float) { fail("AVX2 kernel called in a build without AVX2 support"); }
void tile_prepacked_avx2(const float*, int64_t, const float*, int64_t, int64_t, int64_t, float*, int64_t) {
    fail("AVX2 kernel called in a build without AVX2 support");
}
void tile_prepacked_f16_avx2(const float*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float*, int64_t) {
    fail("AVX2 kernel called in a build without AVX2 support");
}
void tile_prepacked_bf16_avx2(const float*, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float*, int64_t) {
    fail("AVX2 kernel called in a build without AVX2 support");
}
void tile_prepacked_q8_0_avx2(const float*, int64_t, const uint8_t*, size_t, int64_t, int64_t, float*, int64_t) {
    fail("AVX2 kernel called in a build without AVX2 support");
}
void matmul_q8_0_avx2(const float*, int64_t, int64_t, const uint8_t*, size_t, int64_t, int64_t, float*, int64_t) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
void matmul_f16_avx2(const float*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float*, int64_t) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
void matmul_bf16_avx2(const float*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, int64_t, float*, int64_t) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
void attention_values_f32_avx2(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
void attention_values_f16_avx2(const float*, int64_t, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
bool values_in_place_avx2(GgmlType) { return false; }
void attention_values_quant_avx2(GgmlType, const float*, int64_t, int64_t, const uint8_t*, int64_t, int64_t, float*,
                                 int64_t) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
void keys_t_f32_avx2(const float*, int64_t, int64_t, float*, int64_t) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
void keys_t_f16_avx2(const uint16_t*, int64_t, int64_t, float*, int64_t) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
void rows_times_panel_avx2(int64_t, const float* const*, const float*, int64_t, int64_t, int64_t, float* const*, bool) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
bool attention_direct_avx2(GgmlType, int64_t) { return false; }
void attention_scores_direct_avx2(GgmlType, const float*, int64_t, int64_t, const void*, int64_t, int64_t, float*,
                                  int64_t, ValuePrefetch) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
bool attention_direct_avx512(GgmlType, int64_t) { return false; }
void attention_scores_direct_avx512(GgmlType, const float*, int64_t, int64_t, const void*, int64_t, int64_t, float*,
                                    int64_t, ValuePrefetch) {
    KVEC_CHECK(false && "AVX-512 kernel called in a build without AVX2");
}
void attention_values_avx512(GgmlType, const float*, int64_t, int64_t, const void*, int64_t, int64_t, float*,
                             int64_t) {
    KVEC_CHECK(false && "AVX-512 kernel called in a build without AVX2");
}
void rows_times_panel_avx512(int64_t, const float* const*, const float*, int64_t, int64_t, int64_t, float* const*,
                             bool) {
    KVEC_CHECK(false && "AVX-512 kernel called in a build without AVX2");
}
}  // namespace kvec::kernels
namespace kvec::int8 {
void quantize_rows_avx2(const float* x, int64_t n, int64_t k, int8_t* q, float* d, float* hsum, int32_t* qsum) {
    const int64_t nb = k / kBlock;
    for (int64_t r = 0; r < n; ++r) {
        quantize_row_ref(x + r * k, k, q + r * k, d + r * nb, hsum + r * nb * 2, qsum != nullptr ? qsum + r * nb * 2 : nullptr);
    }
}
void gemm_avx2(const QuantRows& x, int64_t nx, const Panel& w, int64_t nw, float* y, int64_t ldy) {
    gemm_ref(x, nx, w, nw, y, ldy);
}
void gemm_q8_0_avx2(const QuantRows&, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
void scores_q8_0_avx2(const QuantRows&, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t,
                      const kernels::ValuePrefetch&) {
    KVEC_CHECK(false && "AVX2 kernel called in a build without AVX2");
}
void gemm_six_bit_avx2(const QuantRows& x, int64_t nx, const Panel& w, int64_t nw, float* y, int64_t ldy) {
    gemm_ref(x, nx, w, nw, y, ldy);
}
}  // namespace kvec::int8

#endif
