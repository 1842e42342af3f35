// Q4_K and Q6_K weights repacked at load into 16-row panels that keep their bits (int8_gemm.h,
// pack_k_panels): the decode kernel reads 16 rows in one stream, loads each activation byte once
// for all of them, and takes the sub-block scales of 16 rows with one vector load, where the
// kernels on the rows (int8_decode_impl.h) unpack each row's scales and load the activations once
// per row. Prefill unpacks a panel into the VNNI panel form (int8_vnni.cpp) and runs its tiles.
//
// Super-block g of panel P (rows 16 P .. 16 P + 15, elements 256 g .. 256 g + 255), in the order
// the kernel reads it: the scales first, so that each thread reads its panels in ascending order,
// which the hardware prefetcher follows without help (with the scales last, or with software
// prefetches as the kernels on the rows issue, decode read memory slower than those kernels;
// docs/performance.md). Every block j of 32 elements (j < 8) holds the low 4 bits of its quants
// as 4 x 64 bytes:
//   [64 v + 4 r + t]   low nibble: element 32 j + 4 v + t of row r; high nibble: 32 j + 16 + 4 v + t
// so that a 64-byte load gives two segments of 4 elements of 16 rows (the VNNI panel's order).
// Q4_K (w = d * sc * q - dmin * m; 2368 bytes where its 16 blocks take 2304):
//   [2 r] fp16 d, [32 + 2 r] fp16 dmin                     [16] each
//   [64 + 16 j + r] 6-bit scale sc, [192 + 16 j + r] min m  [8, 16] each
//   [320 + 256 j ...] the nibbles of block j                [8, 4, 64]
// Q6_K (w = d * sc * (q - 32), q of 6 bits; 3360 bytes, as its 16 blocks):
//   [2 r] fp16 d                                            [16]
//   [32 + 16 s + r] int8 scale of the 16 elements s         [16, 16]
//   [288 + 384 j ...] the nibbles of block j, then 2 x 64 bytes of their high 2 bits:
//     [288 + 384 j + 256 + 64 h + 4 r + t] bits 2 i, 2 i + 1: element 32 j + 16 h + 4 i + t
// Rows past the last are zero.
#include <cstring>
#include <type_traits>

#include "quant/blocks.h"
#include "tensor/int8_gemm.h"
#include "util/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 warns inside its own _mm512_cvtepi32_ps (an intentionally undefined pass-through operand).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvec::int8 {

namespace {

constexpr int kRows = 16;
constexpr int64_t kSuper = 256;  // elements per super-block

struct Q4K {
    static constexpr size_t kD = 0, kDmin = 32, kScales = 64, kMins = 192, kQuants = 320, kBlockBytes = 256;
    static constexpr size_t kGroupBytes = kQuants + 8 * kBlockBytes;
    static_assert(kGroupBytes == 16 * 148 && sizeof(quant::BlockQ4_K) == 144);  // 148 bytes a row for 144
    // The 4-bit quants q[256] of a block (quant/blocks.h).
    static void quants(const uint8_t* blk, uint8_t* q) {
        const auto& b = *reinterpret_cast<const quant::BlockQ4_K*>(blk);
        for (int c = 0; c < 4; ++c) {
            for (int l = 0; l < 32; ++l) {
                q[64 * c + l] = b.qs[32 * c + l] & 0x0F;
                q[64 * c + 32 + l] = b.qs[32 * c + l] >> 4;
            }
        }
    }
    static void pack_scales(const uint8_t* blk, int r, uint8_t* pg) {
        const auto& b = *reinterpret_cast<const quant::BlockQ4_K*>(blk);
        for (int j = 0; j < 8; ++j) quant::get_scale_min_k4(j, b.scales, pg + kScales + 16 * j + r, pg + kMins + 16 * j + r);
        std::memcpy(pg + kD + 2 * r, &b.d, 2);
        std::memcpy(pg + kDmin + 2 * r, &b.dmin, 2);
    }
};

struct Q6K {
    static constexpr size_t kD = 0, kScales = 32, kQuants = 288, kBlockBytes = 384, kHigh = 256;
    static constexpr size_t kGroupBytes = kQuants + 8 * kBlockBytes;
    static_assert(kGroupBytes == 16 * sizeof(quant::BlockQ6_K));
    // The 6-bit quants q[256] of a block (quant/blocks.h): per half of 128, quarter i takes the
    // low (i < 2) or high nibbles of ql[32 (i % 2) + l] and bits 2 i, 2 i + 1 of qh[l].
    static void quants(const uint8_t* blk, uint8_t* q) {
        const auto& b = *reinterpret_cast<const quant::BlockQ6_K*>(blk);
        for (int h = 0; h < 2; ++h) {
            const uint8_t* ql = b.ql + 64 * h;
            const uint8_t* qh = b.qh + 32 * h;
            uint8_t* qo = q + 128 * h;
            for (int l = 0; l < 32; ++l) {
                qo[l] = static_cast<uint8_t>((ql[l] & 0x0F) | (qh[l] & 3) << 4);
                qo[32 + l] = static_cast<uint8_t>((ql[32 + l] & 0x0F) | ((qh[l] >> 2) & 3) << 4);
                qo[64 + l] = static_cast<uint8_t>((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
                qo[96 + l] = static_cast<uint8_t>((ql[32 + l] >> 4) | ((qh[l] >> 6) & 3) << 4);
            }
        }
    }
    static void pack_scales(const uint8_t* blk, int r, uint8_t* pg) {
        const auto& b = *reinterpret_cast<const quant::BlockQ6_K*>(blk);
        for (int s = 0; s < 16; ++s) pg[kScales + 16 * s + r] = static_cast<uint8_t>(b.scales[s]);
        std::memcpy(pg + kD + 2 * r, &b.d, 2);
    }
};

template <class T>
size_t panels_bytes(int64_t n_rows, int64_t k) {
    return static_cast<size_t>((n_rows + kRows - 1) / kRows) * static_cast<size_t>(k / kSuper) * T::kGroupBytes;
}

template <class T>
void pack_panels(const uint8_t* w, size_t row_bytes, int64_t n_rows, int64_t k, uint8_t* out) {
    KVEC_CHECK(k % kSuper == 0);
    const int64_t ng = k / kSuper, n_panels = (n_rows + kRows - 1) / kRows;
    const size_t block_bytes = row_bytes / static_cast<size_t>(ng);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < n_panels; ++p) {
        for (int64_t g = 0; g < ng; ++g) {
            uint8_t* pg = out + (p * ng + g) * T::kGroupBytes;  // this super-block of 16 rows
            std::memset(pg, 0, T::kGroupBytes);
            for (int r = 0; r < kRows && p * kRows + r < n_rows; ++r) {
                const uint8_t* blk = w + static_cast<size_t>(p * kRows + r) * row_bytes + g * block_bytes;
                T::pack_scales(blk, r, pg);
                uint8_t q[kSuper];
                T::quants(blk, q);
                for (int j = 0; j < 8; ++j) {
                    uint8_t* qb = pg + T::kQuants + j * T::kBlockBytes;
                    const uint8_t* qj = q + 32 * j;
                    for (int v = 0; v < 4; ++v) {
                        for (int t = 0; t < 4; ++t) {
                            const uint8_t lo = qj[4 * v + t], hi = qj[16 + 4 * v + t];
                            qb[64 * v + 4 * r + t] = static_cast<uint8_t>((lo & 0x0F) | (hi & 0x0F) << 4);
                            if constexpr (std::is_same_v<T, Q6K>) {
                                // High bits of segment v (first half) and 4 + v (second half).
                                qb[Q6K::kHigh + 4 * r + t] |= static_cast<uint8_t>((lo >> 4) << (2 * v));
                                qb[Q6K::kHigh + 64 + 4 * r + t] |= static_cast<uint8_t>((hi >> 4) << (2 * v));
                            }
                        }
                    }
                }
            }
        }
    }
}

#if defined(__x86_64__)

#define KVEC_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")))

KVEC_VNNI inline __m512 fp16x16(const uint8_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
KVEC_VNNI inline __m512 u8x16(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
KVEC_VNNI inline __m512 i8x16(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
KVEC_VNNI inline __m512i broadcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// The 4 x 64 nibble bytes of a block at qb as its 8 segments u (4 elements of 16 rows each, in the
// VNNI panel's order: u[s] holds elements 4 s .. 4 s + 3).
KVEC_VNNI inline void nibbles(const uint8_t* qb, __m512i u[8]) {
    const __m512i low = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
        const __m512i raw = _mm512_loadu_si512(qb + 64 * v);
        u[v] = _mm512_and_si512(raw, low);
        u[4 + v] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
    }
}

// Block j of the super-block at p as its 8 segments of unsigned quants.
KVEC_VNNI inline void segments(const Q4K&, const uint8_t* p, int j, __m512i u[8]) {
    nibbles(p + Q4K::kQuants + j * Q4K::kBlockBytes, u);
}
KVEC_VNNI inline void segments(const Q6K&, const uint8_t* p, int j, __m512i u[8]) {
    const uint8_t* qb = p + Q6K::kQuants + j * Q6K::kBlockBytes;
    nibbles(qb, u);
    // Bits 2 v, 2 v + 1 of the high-bit bytes (h0: segments 0..3, h1: 4..7) to bits 4, 5.
    const __m512i h0 = _mm512_loadu_si512(qb + Q6K::kHigh), h1 = _mm512_loadu_si512(qb + Q6K::kHigh + 64);
    const __m512i top = _mm512_set1_epi8(0x30);
    u[0] = _mm512_or_si512(u[0], _mm512_and_si512(_mm512_slli_epi16(h0, 4), top));
    u[1] = _mm512_or_si512(u[1], _mm512_and_si512(_mm512_slli_epi16(h0, 2), top));
    u[2] = _mm512_or_si512(u[2], _mm512_and_si512(h0, top));
    u[3] = _mm512_or_si512(u[3], _mm512_and_si512(_mm512_srli_epi16(h0, 2), top));
    u[4] = _mm512_or_si512(u[4], _mm512_and_si512(_mm512_slli_epi16(h1, 4), top));
    u[5] = _mm512_or_si512(u[5], _mm512_and_si512(_mm512_slli_epi16(h1, 2), top));
    u[6] = _mm512_or_si512(u[6], _mm512_and_si512(h1, top));
    u[7] = _mm512_or_si512(u[7], _mm512_and_si512(_mm512_srli_epi16(h1, 2), top));
}

// y[(i0 + i) * ldy + l] for i < R, l < nj <= 16: activation rows i0.. against the panel at p (ng
// super-blocks). Per block of 32: 8 segments, which every activation row meets in 8 vpdpbusd (its
// 4 bytes broadcast), the two halves' sums apart for Q6_K (a scale per 16 elements); then one FMA
// per half with the 16 rows' scales times the row's d_x, and one with their min (Q4_K: dmin * m;
// Q6_K: the offset 32 * d * sc) times d_x * sum(q_x).
template <class T, int R>
KVEC_VNNI void gemv_panel(const QuantRows& x, int64_t i0, const uint8_t* p, int64_t ng, float* y, int64_t ldy, int nj) {
    constexpr bool kQ6 = std::is_same_v<T, Q6K>;
    const int64_t nb = x.k / kBlock;
    __m512 acc[R][2], bacc[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = bacc[i] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; ++g, p += T::kGroupBytes) {
        const __m512 d = fp16x16(p + T::kD);  // [16 rows]
        __m512 dmin;
        if constexpr (!kQ6) dmin = fp16x16(p + Q4K::kDmin);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            __m512i u[8];
            segments(T{}, p, j, u);
            __m512 sc[2], mn[2];  // per half: the rows' scales, and the factor of d_x * sum(q_x)
            if constexpr (kQ6) {
                sc[0] = _mm512_mul_ps(i8x16(p + Q6K::kScales + 32 * j), d);
                sc[1] = _mm512_mul_ps(i8x16(p + Q6K::kScales + 32 * j + 16), d);
                mn[0] = _mm512_mul_ps(sc[0], _mm512_set1_ps(32.0f));
                mn[1] = _mm512_mul_ps(sc[1], _mm512_set1_ps(32.0f));
            } else {
                sc[0] = sc[1] = _mm512_mul_ps(u8x16(p + Q4K::kScales + 16 * j), d);
                mn[0] = mn[1] = _mm512_mul_ps(u8x16(p + Q4K::kMins + 16 * j), dmin);
            }
            const int64_t b = g * 8 + j;  // the activation block
#pragma GCC unroll 4
            for (int i = 0; i < R; ++i) {
                const int64_t row = i0 + i;
                const int8_t* xq = x.q + row * x.k + b * kBlock;
                const float* hs = x.hsum + (row * nb + b) * 2;  // d_x * sum(q_x) per half
                const __m512 dx = _mm512_set1_ps(x.d[row * nb + b]);
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int v = 0; v < 4; ++v) {
                    s0 = _mm512_dpbusd_epi32(s0, u[v], broadcast4(xq + 4 * v));
                    s1 = _mm512_dpbusd_epi32(s1, u[4 + v], broadcast4(xq + 16 + 4 * v));
                }
                if constexpr (kQ6) {
                    acc[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(sc[0], dx), acc[i][0]);
                    acc[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(sc[1], dx), acc[i][1]);
                    bacc[i] = _mm512_fmadd_ps(mn[0], _mm512_set1_ps(hs[0]), bacc[i]);
                    bacc[i] = _mm512_fmadd_ps(mn[1], _mm512_set1_ps(hs[1]), bacc[i]);
                } else {
                    acc[i][j % 2] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                                    _mm512_mul_ps(sc[0], dx), acc[i][j % 2]);
                    bacc[i] = _mm512_fmadd_ps(mn[0], _mm512_set1_ps(hs[0] + hs[1]), bacc[i]);
                }
            }
        }
    }
    const __mmask16 keep = static_cast<__mmask16>((1u << nj) - 1);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
        _mm512_mask_storeu_ps(y + i * ldy, keep, _mm512_sub_ps(_mm512_add_ps(acc[i][0], acc[i][1]), bacc[i]));
    }
}

// One panel into the VNNI panel form (int8_vnni.cpp: bytes w + 128 as [nb, 8, 16, 4], scales and
// mins [nb, 2, 16]; Q6_K's w = q - 32 and no min): a PanelPacker whose "rows" are the panels
// (row_bytes = a panel's bytes / 16). Returns whether the halves have their own scales (Q6_K).
template <class T>
KVEC_VNNI bool unpack_panel(const uint8_t* w, size_t, int, int64_t nb, uint8_t* qp, float* sp, float* mp) {
    constexpr bool kQ6 = std::is_same_v<T, Q6K>;
    const __m512i offset = _mm512_set1_epi8(static_cast<char>(kQ6 ? 96 : 128));
    for (int64_t g = 0; g < nb / 8; ++g, w += T::kGroupBytes) {
        const __m512 d = fp16x16(w + T::kD);
        for (int j = 0; j < 8; ++j) {
            __m512i u[8];
            segments(T{}, w, j, u);
            uint8_t* qb = qp + (g * 8 + j) * kBlock * kRows;  // [8, 16, 4]
            for (int s = 0; s < 8; ++s) _mm512_storeu_si512(qb + 64 * s, _mm512_add_epi8(u[s], offset));
            float* sb = sp + (g * 8 + j) * 2 * kRows;  // [2, 16]
            if constexpr (kQ6) {
                _mm512_storeu_ps(sb, _mm512_mul_ps(i8x16(w + Q6K::kScales + 32 * j), d));
                _mm512_storeu_ps(sb + kRows, _mm512_mul_ps(i8x16(w + Q6K::kScales + 32 * j + 16), d));
            } else {
                const __m512 sc = _mm512_mul_ps(u8x16(w + Q4K::kScales + 16 * j), d);
                const __m512 mn = _mm512_sub_ps(_mm512_setzero_ps(),
                                                _mm512_mul_ps(u8x16(w + Q4K::kMins + 16 * j), fp16x16(w + Q4K::kDmin)));
                float* mb = mp + (g * 8 + j) * 2 * kRows;
                _mm512_storeu_ps(sb, sc);
                _mm512_storeu_ps(sb + kRows, sc);
                _mm512_storeu_ps(mb, mn);
                _mm512_storeu_ps(mb + kRows, mn);
            }
        }
    }
    return kQ6;
}

template <class T>
void gemm_panels(const QuantRows& x, int64_t nx, const uint8_t* panels, int64_t nw, float* y, int64_t ldy) {
    KVEC_CHECK(vnni_supported() && x.k % kSuper == 0);
    const int64_t ng = x.k / kSuper;
    const size_t panel_bytes = panels_bytes<T>(kRows, x.k);
    if (nx > k_panels_decode_rows) {  // prefill: the VNNI tiles on each panel unpacked
        KVEC_CHECK(x.qsum != nullptr);
        gemm_vnni_packed(x, nx, &unpack_panel<T>, !std::is_same_v<T, Q6K>, panels, panel_bytes / kRows, nw, y, ldy);
        return;
    }
    // Each panel against the rows 4 at a time: read from memory by the first 4, from the cache by
    // the next (a panel of 16 rows is a few tens of KiB).
    for (int64_t j0 = 0; j0 < nw; j0 += kRows, panels += panel_bytes) {
        const int nj = static_cast<int>(nw - j0 < kRows ? nw - j0 : kRows);
        for (int64_t i0 = 0; i0 < nx; i0 += 4) {
            float* yi = y + i0 * ldy + j0;
            switch (nx - i0) {
                case 1: gemv_panel<T, 1>(x, i0, panels, ng, yi, ldy, nj); break;
                case 2: gemv_panel<T, 2>(x, i0, panels, ng, yi, ldy, nj); break;
                case 3: gemv_panel<T, 3>(x, i0, panels, ng, yi, ldy, nj); break;
                default: gemv_panel<T, 4>(x, i0, panels, ng, yi, ldy, nj); break;
            }
        }
    }
}

#else  // not x86-64

template <class T>
void gemm_panels(const QuantRows&, int64_t, const uint8_t*, int64_t, float*, int64_t) {
    fail("this build has no AVX-512 VNNI kernels");
}

#endif

}  // namespace

size_t k_panels_bytes(GgmlType type, int64_t n_rows, int64_t k) {
    KVEC_CHECK(type == GgmlType::Q4_K || type == GgmlType::Q6_K);
    return type == GgmlType::Q4_K ? panels_bytes<Q4K>(n_rows, k) : panels_bytes<Q6K>(n_rows, k);
}

void pack_k_panels(GgmlType type, const uint8_t* w, size_t row_bytes, int64_t n_rows, int64_t k, uint8_t* out) {
    KVEC_CHECK(type == GgmlType::Q4_K || type == GgmlType::Q6_K);
    (type == GgmlType::Q4_K ? pack_panels<Q4K> : pack_panels<Q6K>)(w, row_bytes, n_rows, k, out);
}

void gemm_k_panels(GgmlType type, const QuantRows& x, int64_t nx, const uint8_t* panels, int64_t nw, float* y,
                   int64_t ldy) {
    KVEC_CHECK(type == GgmlType::Q4_K || type == GgmlType::Q6_K);
    (type == GgmlType::Q4_K ? gemm_panels<Q4K> : gemm_panels<Q6K>)(x, nx, panels, nw, y, ldy);
}

}  // namespace kvec::int8
