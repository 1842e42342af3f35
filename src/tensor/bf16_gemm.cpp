// AVX-512 BF16 prefill kernel (see bf16_gemm.h) and its scalar reference. Every function that uses
// AVX-512 carries the target attribute and is called only after supported(); the rest of the file
// is baseline code.
//
// Register tile: R activation rows x NP panels (16 NP weight rows), R x NP float accumulators.
// Per pair index: NP panel vectors are loaded, each activation row's pair is broadcast, R x NP
// vdpbf16ps. The pairs are walked in chunks of kChunk (4 panels x 1024 pairs = 256 KiB, in L2),
// partial sums added into y between chunks; chunks of 128 pairs (32 KiB, in L1) gave 6-22 % less
// pp512 (docs/performance.md).
#include "tensor/bf16_gemm.h"

#include <cstring>
#include <vector>

#include "tensor/avx512.h"
#include "tensor/kernels.h"
#include "tensor/dispatch.h"
#include "util/error.h"
#include "util/fp16.h"

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 warns inside its own AVX-512 intrinsics (their intentionally undefined pass-through
// operands).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace kvec::bf16 {

void gemm_ref(const uint16_t* xb, int64_t nx, const uint16_t* w, int64_t ldw, bool w_is_f16, int64_t nw, int64_t k,
              float* y, int64_t ldy) {
    const int64_t ldx = padded(k);
    for (int64_t i = 0; i < nx; ++i) {
        for (int64_t j = 0; j < nw; ++j) {
            double acc = 0.0;
            for (int64_t e = 0; e < k; ++e) {
                const uint16_t h = w[j * ldw + e];
                const float wj = bf16_to_float(w_is_f16 ? float_to_bf16(fp16_to_float(h)) : h);
                acc += static_cast<double>(bf16_to_float(xb[i * ldx + e])) * wj;
            }
            y[i * ldy + j] = static_cast<float>(acc);
        }
    }
}

#if defined(__x86_64__)

namespace {

constexpr int kPanelRows = 16;
constexpr int kMaxPanels = 4;   // 64 weight rows per group, the matmul's work item
constexpr int64_t kChunk = 1024;   // pairs per chunk of the tiles (k = 2048 in one)
constexpr int64_t kPrefetch = 256;  // elements ahead that pack_panel prefetches (8 lines of F16)

#define KVEC_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

// 32 weights (16 pairs) of one row from element e0 as bf16: the first `left` of them (all when 32
// or more), zeros past.
KVEC_BF16 inline __m512i load_pairs(const uint16_t* row, int64_t e0, int64_t left, bool is_f16) {
    const __m512i raw = _mm512_maskz_loadu_epi16(avx512::first32(left), row + e0);
    if (!is_f16) return raw;
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(raw));
    const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(raw, 1));
    return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Rows [0, nj) (nj <= 16) of w into one panel of pairs_pad (a multiple of 16) pairs; rows past
// nj and pairs past k are zero.
KVEC_BF16 void pack_panel(const uint16_t* w, int64_t ldw, bool is_f16, int nj, int64_t k, int64_t pairs_pad,
                          uint32_t* panel) {
    for (int64_t p0 = 0; p0 < pairs_pad; p0 += 16) {
        const int64_t e0 = 2 * p0;
        __m512i v[16];
#pragma GCC unroll 16
        for (int r = 0; r < kPanelRows; ++r) {
            if (r >= nj) {
                v[r] = _mm512_setzero_si512();
                continue;
            }
            // 16 rows are 16 streams from memory (each weight is read once per prefill): fetch
            // each row kPrefetch elements ahead, past the row's end harmlessly.
            _mm_prefetch(reinterpret_cast<const char*>(w + r * ldw + e0 + kPrefetch), _MM_HINT_T0);
            v[r] = load_pairs(w + r * ldw, e0, k - e0, is_f16);
        }
        avx512::transpose16(v);
#pragma GCC unroll 16
        for (int p = 0; p < 16; ++p) _mm512_storeu_si512(panel + (p0 + p) * kPanelRows, v[p]);
    }
}

// y[i, j] (+)= over pairs [c0, c1) for i < R rows of xb (ldx apart), j < nj from NP panels.
template <int R, int NP>
KVEC_BF16 void tile(const uint16_t* xb, int64_t ldx, const uint32_t* panels, int64_t panel_dwords, int64_t c0,
                    int64_t c1, float* y, int64_t ldy, int nj, bool accumulate) {
    __m512 acc[R][NP];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_setzero_ps();
    for (int64_t q = c0; q < c1; ++q) {
        __m512bh wv[NP];
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
            wv[p] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(panels + p * panel_dwords + q * kPanelRows));
        }
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
            uint32_t pair;
            std::memcpy(&pair, xb + i * ldx + 2 * q, 4);
            const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
#pragma GCC unroll 4
            for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_dpbf16_ps(acc[i][p], wv[p], xv);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) avx512::store_row<NP>(y + i * ldy, acc[i], nj, accumulate);
}

template <int NP>
KVEC_BF16 void tile_rows(const uint16_t* xb, int64_t nx, int64_t ldx, const uint32_t* panels, int64_t panel_dwords,
                         int64_t pairs, float* y, int64_t ldy, int nj) {
    constexpr int R = NP >= 3 ? 6 : 8;  // R x NP accumulators + NP panel vectors within 32 registers
    for (int64_t c0 = 0; c0 < pairs; c0 += kChunk) {
        const int64_t c1 = pairs - c0 < kChunk ? pairs : c0 + kChunk;
        const bool accumulate = c0 > 0;
        int64_t i = 0;
        for (; i + R <= nx; i += R) {
            tile<R, NP>(xb + i * ldx, ldx, panels, panel_dwords, c0, c1, y + i * ldy, ldy, nj, accumulate);
        }
        for (; i < nx; ++i) tile<1, NP>(xb + i * ldx, ldx, panels, panel_dwords, c0, c1, y + i * ldy, ldy, nj, accumulate);
    }
}

}  // namespace

bool supported() {
    const CpuFeatures& f = cpu_features();
    return f.avx512f && f.avx512bw && f.avx512vl && f.avx512bf16 && f.avx2_fma_f16c;
}

bool enabled() { return supported() && kernels::avx512_enabled(); }

KVEC_BF16 void convert_rows(const float* x, int64_t n, int64_t k, uint16_t* xb) {
    KVEC_CHECK(supported());
    const int64_t ldx = padded(k);
    for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * k;
        uint16_t* out = xb + r * ldx;
        for (int64_t e = 0; e < ldx; e += 32) {
            const int64_t left = k - e;  // 0 when the chunk holds only the pad element
            const __m512 lo = _mm512_maskz_loadu_ps(avx512::first16(left), xr + e);
            const __m512 hi = _mm512_maskz_loadu_ps(avx512::first16(left - 16), xr + e + 16);
            const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_mask_storeu_epi16(out + e, avx512::first32(ldx - e), v);
        }
    }
}

void gemm(const uint16_t* xb, int64_t nx, const uint16_t* w, int64_t ldw, bool w_is_f16, int64_t nw, int64_t k,
          float* y, int64_t ldy) {
    KVEC_CHECK(supported() && k > 0);
    const int64_t ldx = padded(k), pairs = ldx / 2;
    const int64_t pairs_pad = (pairs + 15) / 16 * 16;
    thread_local std::vector<uint32_t> buf;  // [kMaxPanels, pairs_pad, 16] packed weight pairs
    if (buf.size() < static_cast<size_t>(kMaxPanels * pairs_pad * kPanelRows)) {
        buf.resize(static_cast<size_t>(kMaxPanels * pairs_pad * kPanelRows));
    }
    const int64_t panel_dwords = pairs_pad * kPanelRows;
    for (int64_t j0 = 0; j0 < nw; j0 += kMaxPanels * kPanelRows) {
        const int nj = static_cast<int>(nw - j0 < kMaxPanels * kPanelRows ? nw - j0 : kMaxPanels * kPanelRows);
        const int np = (nj + kPanelRows - 1) / kPanelRows;
        for (int p = 0; p < np; ++p) {
            const int rows = nj - p * kPanelRows < kPanelRows ? nj - p * kPanelRows : kPanelRows;
            pack_panel(w + (j0 + p * kPanelRows) * ldw, ldw, w_is_f16, rows, k, pairs_pad, buf.data() + p * panel_dwords);
        }
        float* yj = y + j0;
        switch (np) {
            case 4: tile_rows<4>(xb, nx, ldx, buf.data(), panel_dwords, pairs, yj, ldy, nj); break;
            case 3: tile_rows<3>(xb, nx, ldx, buf.data(), panel_dwords, pairs, yj, ldy, nj); break;
            case 2: tile_rows<2>(xb, nx, ldx, buf.data(), panel_dwords, pairs, yj, ldy, nj); break;
            default: tile_rows<1>(xb, nx, ldx, buf.data(), panel_dwords, pairs, yj, ldy, nj); break;
        }
    }
}

#else  // not x86-64

bool supported() { return false; }
bool enabled() { return false; }
void convert_rows(const float*, int64_t, int64_t, uint16_t*) { fail("this build has no AVX-512 BF16 kernels"); }
void gemm(const uint16_t*, int64_t, const uint16_t*, int64_t, bool, int64_t, int64_t, float*, int64_t) {
    fail("this build has no AVX-512 BF16 kernels");
}

#endif

}  // namespace kvec::bf16
