// AVX-512 VNNI int8 kernels for prefill (see int8_gemm.h). Every function that uses AVX-512 carries
// the target attribute and is called only after vnni_supported(); the rest of the file is baseline
// code, so nothing here runs AVX-512 instructions on a CPU without them.
//
// Panel layout (16 weight rows per panel, one int32 lane per row), for block b of 32 elements:
//   qp[(b * 8 + g) * 64 + 4 * r + t] = w[r][32 b + 4 g + t] ^ 0x80     [nb, 8, 16, 4] unsigned bytes
//   sp[(b * 2 + h) * 16 + r]         = scale of half h of block b of row r   [nb, 2, 16]
//   mp[(b * 2 + h) * 16 + r]         = its min, for the types with one      [nb, 2, 16]
// Rows past the last weight row are zero bytes with scale and min 0.
//
// Register tile: R activation rows x NP panels (16 NP weight rows). Per block and group g of 4
// elements: NP panel vectors are loaded, each activation row's 4 bytes are broadcast, and R x NP
// vpdpbusd add them into int32 sums that started at -128 * sum(q_x) (per half where the panel's
// halves have their own scales). After the block: y += float(sum) * (scale_w * d_x), one
// conversion, one multiply and one FMA per 32 x 16 multiply-adds, and for the types with a min
// one more FMA, y += min_w * (d_x * sum(q_x)).
#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "quant/blocks.h"
#include "tensor/avx512.h"
#include "tensor/dispatch.h"
#include "tensor/int8_gemm.h"
#include "tensor/kernels.h"
#include "util/error.h"
#include "util/fp16.h"

#if defined(__x86_64__)
#include <immintrin.h>
// GCC 12 warns inside its own _mm512_cvtepi32_ps and _mm512_shuffle_f32x4 (avx512::sum16): an
// intentionally undefined pass-through operand.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace kvec::int8 {

#if defined(__x86_64__)

namespace {

constexpr int kPanelRows = 16;
constexpr int64_t kPanelBlockBytes = kBlock * kPanelRows;  // 512 bytes: one block of 16 rows

#define KVEC_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")))

// Weight rows as signed bytes and per-half scales: a Panel, or Q8_0 blocks in place.
struct PanelRows {
    const Panel& w;
    int64_t nb;
    const int8_t* block(int64_t j, int64_t b) const { return w.q + j * w.k + b * kBlock; }
    float scale(int64_t j, int64_t b, int h) const { return w.scale[(j * nb + b) * 2 + h]; }
    bool has_min() const { return w.min != nullptr; }
    float min(int64_t j, int64_t b, int h) const { return w.min[(j * nb + b) * 2 + h]; }
};

struct Q80Rows {
    const uint8_t* w;
    size_t row_bytes;
    const quant::BlockQ8_0& blk(int64_t j, int64_t b) const {
        return reinterpret_cast<const quant::BlockQ8_0*>(w + static_cast<size_t>(j) * row_bytes)[b];
    }
    const int8_t* block(int64_t j, int64_t b) const { return blk(j, b).qs; }
    float scale(int64_t j, int64_t b, int) const { return fp16_to_float(blk(j, b).d); }
    static bool has_min() { return false; }
    static float min(int64_t, int64_t, int) { return 0.0f; }
};

// Rows [j0, j0 + nj) (nj <= 16) of nb blocks into one panel (layout above; mp only when the rows
// have a min). Returns whether any block's two halves have different scales or mins (then the
// tile keeps a sum per half).
template <class Rows>
bool pack_panel(const Rows& rows, int64_t j0, int nj, int64_t nb, uint8_t* qp, float* sp, float* mp) {
    bool halves = false;
    for (int64_t b = 0; b < nb; ++b) {
        uint8_t* qb = qp + b * kPanelBlockBytes;  // [8, 16, 4]
        float* sb = sp + b * 2 * kPanelRows;      // [2, 16]
        float* mb = rows.has_min() ? mp + b * 2 * kPanelRows : nullptr;  // [2, 16]
        for (int r = 0; r < kPanelRows; ++r) {
            if (r >= nj) {
                for (int g = 0; g < 8; ++g) std::memset(qb + g * 64 + 4 * r, 0, 4);
                sb[r] = sb[kPanelRows + r] = 0.0f;
                if (mb != nullptr) mb[r] = mb[kPanelRows + r] = 0.0f;
                continue;
            }
            uint32_t words[8];  // the row's 32 bytes
            std::memcpy(words, rows.block(j0 + r, b), kBlock);
            for (int g = 0; g < 8; ++g) {
                const uint32_t u = words[g] ^ 0x80808080u;  // each byte + 128
                std::memcpy(qb + g * 64 + 4 * r, &u, 4);
            }
            sb[r] = rows.scale(j0 + r, b, 0);
            sb[kPanelRows + r] = rows.scale(j0 + r, b, 1);
            halves |= sb[r] != sb[kPanelRows + r];
            if (mb != nullptr) {
                mb[r] = rows.min(j0 + r, b, 0);
                mb[kPanelRows + r] = rows.min(j0 + r, b, 1);
                halves |= mb[r] != mb[kPanelRows + r];
            }
        }
    }
    return halves;
}

// Weight rows of a type packed by its own packer straight from the blocks (int8_decode.h).
struct PackedRows {
    const uint8_t* w;
    size_t row_bytes;
    PanelPacker pack;
    bool min;
    bool has_min() const { return min; }
};

bool pack_panel(const PackedRows& rows, int64_t j0, int nj, int64_t nb, uint8_t* qp, float* sp, float* mp) {
    return rows.pack(rows.w + static_cast<size_t>(j0) * rows.row_bytes, rows.row_bytes, nj, nb, qp, sp, mp);
}


// NP consecutive panels packed by gemm_rows (layout above): bytes at qp, scales and mins at sp
// and mp, panel after panel.
struct PackedPanels {
    const uint8_t* qp;
    const float* sp;
    const float* mp;
    int64_t nb;
    const uint8_t* q(int p, int64_t b, int g) const { return qp + (p * nb + b) * kPanelBlockBytes + g * 64; }
    KVEC_VNNI __m512 scale(int p, int64_t b, int h) const { return _mm512_loadu_ps(sp + ((p * nb + b) * 2 + h) * kPanelRows); }
    KVEC_VNNI __m512 min(int p, int64_t b, int h) const { return _mm512_loadu_ps(mp + ((p * nb + b) * 2 + h) * kPanelRows); }
};

// NP consecutive panels of Q8_0 weights repacked at load (int8_gemm.h, pack_q8_0_panels): each
// block's bytes followed by the 16 rows' fp16 scales. No min; one scale per block (H = 1).
struct Q8Panels {
    const uint8_t* base;
    int64_t nb;
    const uint8_t* q(int p, int64_t b, int g) const { return base + (p * nb + b) * kQ8PanelBlockBytes + g * 64; }
    KVEC_VNNI __m512 scale(int p, int64_t b, int) const {
        const uint8_t* scales = base + (p * nb + b) * kQ8PanelBlockBytes + kPanelBlockBytes;
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
    }
    KVEC_VNNI __m512 min(int, int64_t, int) const { return _mm512_setzero_ps(); }
};

// y[i0 + i, j] for i < R, j < nj <= 16 NP, from NP consecutive panels. H = 2 keeps an int32 sum
// per half block (panels whose halves have their own scales); M adds the min term.
template <int R, int NP, int H, bool M, class P>
KVEC_VNNI void tile(const QuantRows& x, int64_t i0, const P& panels, float* y, int64_t ldy, int nj) {
    const int64_t nb = panels.nb;
    const int8_t* xr[R];   // activation rows
    const float* dr[R];    // their block scales [nb]
    const int32_t* sr[R];  // their half sums [nb, 2]
    const float* hr[R];    // the same times d_x [nb, 2] (the min term)
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
        xr[i] = x.q + (i0 + i) * x.k;
        dr[i] = x.d + (i0 + i) * nb;
        sr[i] = x.qsum + (i0 + i) * nb * 2;
        hr[i] = x.hsum + (i0 + i) * nb * 2;
    }
    __m512 acc[R][NP];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) acc[i][p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        __m512i sum[R][NP][H];
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
            for (int h = 0; h < H; ++h) {
                const int32_t q = H == 2 ? sr[i][2 * b + h] : sr[i][2 * b] + sr[i][2 * b + 1];
                const __m512i start = _mm512_set1_epi32(-128 * q);
#pragma GCC unroll 4
                for (int p = 0; p < NP; ++p) sum[i][p][h] = start;
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) {
            const int h = H == 2 ? g / 4 : 0;
            __m512i wv[NP];
#pragma GCC unroll 4
            for (int p = 0; p < NP; ++p) wv[p] = _mm512_loadu_si512(panels.q(p, b, g));
#pragma GCC unroll 8
            for (int i = 0; i < R; ++i) {
                int32_t four;
                std::memcpy(&four, xr[i] + b * kBlock + 4 * g, 4);
                const __m512i xv = _mm512_set1_epi32(four);
#pragma GCC unroll 4
                for (int p = 0; p < NP; ++p) sum[i][p][h] = _mm512_dpbusd_epi32(sum[i][p][h], wv[p], xv);
            }
        }
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
            __m512 sw[H], mw[H];
#pragma GCC unroll 2
            for (int h = 0; h < H; ++h) {
                sw[h] = panels.scale(p, b, h);
                if constexpr (M) mw[h] = panels.min(p, b, h);
            }
#pragma GCC unroll 8
            for (int i = 0; i < R; ++i) {
                const __m512 dx = _mm512_set1_ps(dr[i][b]);
#pragma GCC unroll 2
                for (int h = 0; h < H; ++h) {
                    acc[i][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[i][p][h]), _mm512_mul_ps(sw[h], dx), acc[i][p]);
                    if constexpr (M) {  // one min for the block when H = 1 (pack_panel checks)
                        const float hs = H == 2 ? hr[i][2 * b + h] : hr[i][2 * b] + hr[i][2 * b + 1];
                        acc[i][p] = _mm512_fmadd_ps(mw[h], _mm512_set1_ps(hs), acc[i][p]);
                    }
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) avx512::store_row<NP>(y + (i0 + i) * ldy, acc[i], nj, false);
}

// Every activation row against the panels (nj rows in all), in tiles of at most R rows of equal
// height (8 rows with R = 6: two tiles of 4, not 6 + 1 + 1: a tile of one row reads the panels
// for one row's work).
template <int R, int NP, int H, bool M, class P>
KVEC_VNNI void tile_rows(const QuantRows& x, int64_t nx, const P& panels, float* y, int64_t ldy, int nj) {
    using Tile = void (*)(const QuantRows&, int64_t, const P&, float*, int64_t, int);
    static constexpr auto kTiles = []<int... I>(std::integer_sequence<int, I...>) {
        return std::array<Tile, R>{&tile<I + 1, NP, H, M, P>...};
    }(std::make_integer_sequence<int, R>{});
    even_row_passes(nx, R, [&](int64_t i, int64_t rows) { kTiles[rows - 1](x, i, panels, y, ldy, nj); });
}

// The tile for the panels' shape: two panels or one, sums per half or per block.
template <bool M, class P>
void tile_panels(const QuantRows& x, int64_t nx, const P& panels, float* y, int64_t ldy, int nj, bool halves) {
    if (nj > kPanelRows) {
        if (halves) tile_rows<4, 2, 2, M>(x, nx, panels, y, ldy, nj);
        else tile_rows<6, 2, 1, M>(x, nx, panels, y, ldy, nj);
    } else {
        if (halves) tile_rows<6, 1, 2, M>(x, nx, panels, y, ldy, nj);
        else tile_rows<8, 1, 1, M>(x, nx, panels, y, ldy, nj);
    }
}

// Packs each run of up to NP panels (32 rows) and runs every activation row against it; the
// packed rows (32 x k bytes, 64 KiB at k = 2048) stay in L1/L2 while the activation rows pass.
template <class Rows>
void gemm_rows(const QuantRows& x, int64_t nx, const Rows& rows, int64_t nw, float* y, int64_t ldy) {
    KVEC_CHECK(x.qsum != nullptr && x.k % kBlock == 0);
    constexpr int NP = 2;
    const int64_t nb = x.k / kBlock;
    const int64_t panel_floats = nb * 2 * kPanelRows;
    thread_local std::vector<uint8_t> qbuf;  // [NP, nb, 8, 16, 4] packed weight bytes
    thread_local std::vector<float> sbuf;    // [NP, nb, 2, 16] their scales
    thread_local std::vector<float> mbuf;    // [NP, nb, 2, 16] their mins (types with a min)
    if (qbuf.size() < static_cast<size_t>(NP * nb * kPanelBlockBytes)) qbuf.resize(NP * nb * kPanelBlockBytes);
    if (sbuf.size() < static_cast<size_t>(NP * panel_floats)) sbuf.resize(NP * panel_floats);
    if (rows.has_min() && mbuf.size() < static_cast<size_t>(NP * panel_floats)) mbuf.resize(NP * panel_floats);
    for (int64_t j0 = 0; j0 < nw; j0 += NP * kPanelRows) {
        const int nj = static_cast<int>(nw - j0 < NP * kPanelRows ? nw - j0 : NP * kPanelRows);
        bool halves = false;
        for (int p = 0; p * kPanelRows < nj; ++p) {
            const int rows_p = nj - p * kPanelRows < kPanelRows ? nj - p * kPanelRows : kPanelRows;
            halves |= pack_panel(rows, j0 + p * kPanelRows, rows_p, nb, qbuf.data() + p * nb * kPanelBlockBytes,
                                 sbuf.data() + p * panel_floats,
                                 rows.has_min() ? mbuf.data() + p * panel_floats : nullptr);
        }
        const PackedPanels panels{qbuf.data(), sbuf.data(), rows.has_min() ? mbuf.data() : nullptr, nb};
        if (rows.has_min()) {
            tile_panels<true>(x, nx, panels, y + j0, ldy, nj, halves);
        } else {
            tile_panels<false>(x, nx, panels, y + j0, ldy, nj, halves);
        }
    }
}

// One position's scores over Q8_0 keys in place (int8_gemm.h, scores_q8_0_vnni). Per query row
// and pair of blocks b, b + 1, prepared once per call (an odd last block's second half zero):
//   q:     the row's 64 bytes of the two blocks (signed)
//   dx:    [d_x(b) x 8, d_x(b + 1) x 8]
//   start: -128 * sum(q over block b) in lane 0, the same for b + 1 in lane 8, else 0
struct RowPairs {
    int8_t q[64];
    int32_t start[16];
    float dx[16];
};

// R query rows (rows[0, R)) against J = 16 / R entries at once (kj[j], the entries past the last
// repeating it), lane r * J + j of the result = row r, entry j. Per entry and pair of blocks: the
// keys' 64 bytes made unsigned (^ 0x80: + 128) in one vector, one vpdpbusd per row from `start`
// (so each block's int32 lanes add up to gemm_ref's integer sum), the lanes converted and scaled
// by d_k * d_x, into one float vector per (row, entry); sum16 adds the 16 vectors' lanes at once.
template <int R>
KVEC_VNNI inline __m512 q8_0_dots(const RowPairs* rows, int64_t nb, const uint8_t* const* kj) {
    const int64_t pairs = (nb + 1) / 2;
    constexpr int J = 16 / R;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int a = 0; a < 16; ++a) acc[a] = _mm512_setzero_ps();
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for (int64_t pr = 0; pr < pairs; ++pr) {
        const bool two = 2 * pr + 1 < nb;  // an odd last block is alone
#pragma GCC unroll 16
        for (int j = 0; j < J; ++j) {
            const auto* blk = reinterpret_cast<const quant::BlockQ8_0*>(kj[j]) + 2 * pr;  // blocks 2 pr, 2 pr + 1
            uint16_t d0 = blk[0].d, d1 = 0;
            __m256i hi = _mm256_setzero_si256();  // no second block: its lanes add 0 (query bytes and scale 0)
            if (two) {
                d1 = blk[1].d;
                hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].qs));
            }
            const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs));
            const __m512i kv = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), flip);
            const __m128 dk2 = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d0 | uint32_t{d1} << 16)));
            const __m512 dk = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(dk2));
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const RowPairs& x = rows[r * pairs + pr];  // rows [R, pairs]
                const __m512i sum = _mm512_dpbusd_epi32(_mm512_loadu_si512(x.start), kv, _mm512_loadu_si512(x.q));
                acc[r * J + j] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dk, _mm512_loadu_ps(x.dx)), acc[r * J + j]);
            }
        }
    }
    return avx512::sum16(acc);
}

// Rows [0, R) of `rows` against entries [0, n), J = 16 / R at a time; the first rows' pass
// prefetches the values of the entries it scores.
template <int R>
KVEC_VNNI void q8_0_scores_rows(const RowPairs* rows, int64_t nb, const uint8_t* k, size_t row_bytes, int64_t n,
                                float* y, int64_t ldy, const kernels::ValuePrefetch& values) {
    constexpr int J = 16 / R;
    for (int64_t j = 0; j < n; j += J) {
        const int64_t m = std::min<int64_t>(J, n - j);
        values(j, m);
        const uint8_t* kj[J];
#pragma GCC unroll 16
        for (int e = 0; e < J; ++e) kj[e] = k + static_cast<size_t>(j + std::min<int64_t>(e, m - 1)) * row_bytes;
        const __m512 s = q8_0_dots<R>(rows, nb, kj);
        // Row r's lanes r J .. r J + m - 1 moved to lanes 0 .. m - 1, stored to y[r, j ..].
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const __m512 row = r == 0 ? s : _mm512_permutexvar_ps(_mm512_add_epi32(lane, _mm512_set1_epi32(r * J)), s);
            _mm512_mask_storeu_ps(y + r * ldy + j, avx512::first16(m), row);
        }
    }
}

// scores_q8_0_vnni, its checks done.
KVEC_VNNI void q8_0_scores(const QuantRows& x, int64_t nx, const uint8_t* k, size_t row_bytes, int64_t n, float* y,
                           int64_t ldy, const kernels::ValuePrefetch& values) {
    const int64_t nb = x.k / kBlock, pairs = (nb + 1) / 2;
    thread_local std::vector<RowPairs> prepared;  // [nx, pairs]
    prepared.resize(static_cast<size_t>(nx * pairs));
    for (int64_t i = 0; i < nx; ++i) {
        for (int64_t pr = 0; pr < pairs; ++pr) {
            const int64_t b = 2 * pr;
            const bool two = b + 1 < nb;
            const int32_t* qs = x.qsum + (i * nb + b) * 2;
            const float* d = x.d + i * nb + b;
            RowPairs& r = prepared[static_cast<size_t>(i * pairs + pr)];
            r = RowPairs{};
            std::memcpy(r.q, x.q + i * x.k + b * kBlock, static_cast<size_t>(two ? 2 : 1) * kBlock);
            r.start[0] = -128 * (qs[0] + qs[1]);
            r.start[8] = two ? -128 * (qs[2] + qs[3]) : 0;
            std::fill(r.dx, r.dx + 8, d[0]);
            std::fill(r.dx + 8, r.dx + 16, two ? d[1] : 0.0f);
        }
    }
    kernels::ValuePrefetch first = values;  // the first pass only
    even_row_passes(nx, 4, [&](int64_t i, int64_t r) {
        const RowPairs* rows = prepared.data() + i * pairs;
        float* yi = y + i * ldy;
        switch (r) {
            case 4: q8_0_scores_rows<4>(rows, nb, k, row_bytes, n, yi, ldy, first); break;
            case 3: q8_0_scores_rows<3>(rows, nb, k, row_bytes, n, yi, ldy, first); break;
            case 2: q8_0_scores_rows<2>(rows, nb, k, row_bytes, n, yi, ldy, first); break;
            default: q8_0_scores_rows<1>(rows, nb, k, row_bytes, n, yi, ldy, first); break;
        }
        first = {};
    });
}
}  // namespace

bool vnni_supported() {
    const CpuFeatures& f = cpu_features();
    return f.avx512f && f.avx512bw && f.avx512vnni;
}

bool vnni_enabled() { return vnni_supported() && kernels::avx512_enabled(); }

void gemm_vnni(const QuantRows& x, int64_t nx, const Panel& w, int64_t nw, float* y, int64_t ldy) {
    KVEC_CHECK(vnni_supported() && w.k == x.k);
    gemm_rows(x, nx, PanelRows{w, x.k / kBlock}, nw, y, ldy);
}

void gemm_q8_0_vnni(const QuantRows& x, int64_t nx, const uint8_t* w, size_t row_bytes, int64_t nw, float* y,
                    int64_t ldy) {
    KVEC_CHECK(vnni_supported());
    gemm_rows(x, nx, Q80Rows{w, row_bytes}, nw, y, ldy);
}

void scores_q8_0_vnni(const QuantRows& x, int64_t nx, const uint8_t* k, size_t row_bytes, int64_t n, float* y,
                      int64_t ldy, const kernels::ValuePrefetch& values) {
    KVEC_CHECK(vnni_supported() && x.qsum != nullptr && x.k % kBlock == 0);
    q8_0_scores(x, nx, k, row_bytes, n, y, ldy, values);
}

void gemm_vnni_packed(const QuantRows& x, int64_t nx, PanelPacker pack, bool has_min, const uint8_t* w,
                      size_t row_bytes, int64_t nw, float* y, int64_t ldy) {
    KVEC_CHECK(vnni_supported() && pack != nullptr);
    gemm_rows(x, nx, PackedRows{w, row_bytes, pack, has_min}, nw, y, ldy);
}

void gemm_q8_0_panels(const QuantRows& x, int64_t nx, const uint8_t* panels, int64_t nw, float* y, int64_t ldy) {
    KVEC_CHECK(vnni_supported() && x.qsum != nullptr && x.k % kBlock == 0);
    constexpr int NP = 2;
    const int64_t nb = x.k / kBlock, panel_bytes = nb * kQ8PanelBlockBytes;
    for (int64_t j0 = 0; j0 < nw; j0 += NP * kPanelRows) {
        const int nj = static_cast<int>(nw - j0 < NP * kPanelRows ? nw - j0 : NP * kPanelRows);
        tile_panels<false>(x, nx, Q8Panels{panels + j0 / kPanelRows * panel_bytes, nb}, y + j0, ldy, nj, false);
    }
}

#else  // not x86-64

bool vnni_supported() { return false; }
bool vnni_enabled() { return false; }
void gemm_vnni(const QuantRows&, int64_t, const Panel&, int64_t, float*, int64_t) {
    fail("this build has no AVX-512 VNNI kernels");
}
void gemm_q8_0_vnni(const QuantRows&, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t) {
    fail("this build has no AVX-512 VNNI kernels");
}
void gemm_vnni_packed(const QuantRows&, int64_t, PanelPacker, bool, const uint8_t*, size_t, int64_t, float*,
                      int64_t) {
    fail("this build has no AVX-512 VNNI kernels");
}
void gemm_q8_0_panels(const QuantRows&, int64_t, const uint8_t*, int64_t, float*, int64_t) {
    fail("this build has no AVX-512 VNNI kernels");
}
void scores_q8_0_vnni(const QuantRows&, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t,
                      const kernels::ValuePrefetch&) {
    fail("this build has no AVX-512 VNNI kernels");
}

#endif

size_t q8_0_panels_bytes(int64_t n_rows, int64_t k) {
    return static_cast<size_t>((n_rows + 15) / 16) * static_cast<size_t>(k / kBlock) * kQ8PanelBlockBytes;
}

void pack_q8_0_panels(const uint8_t* w, size_t row_bytes, int64_t n_rows, int64_t k, uint8_t* out) {
    KVEC_CHECK(k % kBlock == 0);
    const int64_t nb = k / kBlock, n_panels = (n_rows + 15) / 16;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n_panels; ++j) {
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t* qb = out + (j * nb + b) * kQ8PanelBlockBytes;  // [8, 16, 4] bytes, then [16] fp16 scales
            for (int r = 0; r < 16; ++r) {
                const int64_t row = j * 16 + r;
                uint16_t scale = 0;
                uint32_t words[8] = {};  // past the last row: scale 0 (the bytes do not matter then)
                if (row < n_rows) {
                    const auto* blk = reinterpret_cast<const quant::BlockQ8_0*>(w + static_cast<size_t>(row) * row_bytes) + b;
                    scale = blk->d;
                    std::memcpy(words, blk->qs, kBlock);
                }
                for (int g = 0; g < 8; ++g) {
                    const uint32_t u = words[g] ^ 0x80808080u;  // each byte + 128
                    std::memcpy(qb + g * 64 + 4 * r, &u, 4);
                }
                std::memcpy(qb + 8 * 64 + 2 * r, &scale, 2);
            }
        }
    }
}

}  // namespace kvec::int8
