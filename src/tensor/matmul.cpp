#include "tensor/matmul.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tensor/bf16_gemm.h"
#include "tensor/int8_decode.h"
#include "tensor/int8_gemm.h"
#include "tensor/kernels.h"
#include "tensor/ops.h"
#include "util/error.h"

namespace kvec {

namespace {

// Weight rows dequantised together (types the packed kernel cannot convert itself): two 16-wide
// panels of the packed AVX2 kernel; 32 rows of 2048 floats = 256 KiB.
constexpr int64_t kWeightBlock = 32;
// Weight rows per work item when the prepacked kernel reads them in place (F32, F16, BF16, Q8_0): no
// buffer to bound, and each activation chunk in L2 serves 4 panels (pp512 F16 +6-8 % over 32).
constexpr int64_t kPackedItemRows = 64;
// Activation rows per block, at most: each weight block is dequantised once per activation block.
constexpr int64_t kActBlock = 256;
// The same for the bf16 prefill, whose tile walks k in chunks (its activations need not stay in
// L2): each weight panel is converted and transposed once per 512-row prefill chunk
// (docs/performance.md: pp512 F16 +2-8 % over 256).
constexpr int64_t kBf16ActBlock = 512;

TileKernel tile_for(CpuKernel k) {
    return k == CpuKernel::Avx2 ? &kernels::tile_avx2 : &kernels::tile_generic;
}

// Grow-only buffer (capacity kept across calls: no allocation per token once warm).
template <class T>
T* grow(std::vector<T>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
    return v.data();
}

// Rows per activation block of a prefill matmul: equal blocks of at most max_rows rows (512 rows
// at most 256: 258 + 254, not 256 + 256 + a sliver that would cost another pass over the
// weights), each a whole number of 6-row tiles.
int64_t prefill_act_block(int64_t n, int64_t max_rows = kActBlock) {
    const int64_t n_blocks = (n + max_rows - 1) / max_rows;
    return kernels::packed_rows((n + n_blocks - 1) / n_blocks);
}

// The prepacked kernel on rows r0..r0+nw of F16 / BF16 / Q8_0 weights read in place.
void tile_prepacked_direct(const float* xp, int64_t nx, const WeightView& w, int64_t r0, int64_t nw, float* y) {
    if (w.type == GgmlType::Q8_0) {
        kernels::tile_prepacked_q8_0_avx2(xp, nx, w.row(r0), w.row_bytes, nw, w.n_in, y, w.n_out);
        return;
    }
    const auto* h = reinterpret_cast<const uint16_t*>(w.row(r0));
    const auto ldw = static_cast<int64_t>(w.row_bytes / 2);
    (w.type == GgmlType::F16 ? kernels::tile_prepacked_f16_avx2 : kernels::tile_prepacked_bf16_avx2)(
        xp, nx, h, nw, ldw, w.n_in, y, w.n_out);
}

// Blocked path: dequantise kWeightBlock rows into a thread-local buffer (F32 weights are used in
// place), then multiply them with a block of activation rows using the tile kernel.
// With AVX2 and enough rows (prefill), the activations are packed once for the whole matmul
// (kernels::pack_rows6) and every work item runs the prepacked kernel on its block; F16 / BF16 /
// Q8_0 rows are then read in place and converted as the kernel packs its weight panels.
void matmul_blocked(const float* x, int64_t n, const WeightView& w, float* y) {
    const TileKernel tile = tile_kernel();
    // Every block a multiple of kPackRows, so that every block starts a packed group.
    const int64_t act_block = prefill_act_block(n);
    const int64_t n_ab = (n + act_block - 1) / act_block;  // rounding up can leave fewer blocks
    const bool in_place = w.type == GgmlType::F32;
    const int64_t work = n * w.n_out * w.n_in;
    const bool prepack = active_cpu_kernel() == CpuKernel::Avx2 && n >= kernels::kPackedMinRows;
    // Rows the prepacked kernel converts itself while packing (no float copy of the block).
    const bool direct = prepack && (w.type == GgmlType::F16 || w.type == GgmlType::BF16 || w.type == GgmlType::Q8_0);
    const int64_t rows_per_item = prepack && (direct || in_place) ? kPackedItemRows : kWeightBlock;
    const int64_t n_wb = (w.n_out + rows_per_item - 1) / rows_per_item;
    thread_local std::vector<float> xpack;  // [packed_rows(n) / 6, n_in, 6] packed activations
    float* xp = prepack ? grow(xpack, kernels::packed_rows(n) * w.n_in) : nullptr;
#pragma omp parallel if (work >= (1 << 20))  // below ~1M multiply-adds a team costs more
    {
        if (prepack) {
#pragma omp for schedule(static)
            for (int64_t ab = 0; ab < n_ab; ++ab) {
                const int64_t a0 = ab * act_block, a1 = std::min(n, a0 + act_block);
                kernels::pack_rows6(x + a0 * w.n_in, a1 - a0, w.n_in, w.n_in, xp + a0 * w.n_in);
            }
        }
        thread_local std::vector<float> wbuf;  // [kWeightBlock, n_in] dequantised weights
        if (!in_place && !direct) grow(wbuf, kWeightBlock * w.n_in);
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t ab = 0; ab < n_ab; ++ab) {
            for (int64_t wb = 0; wb < n_wb; ++wb) {
                const int64_t a0 = ab * act_block, a1 = std::min(n, a0 + act_block);
                const int64_t r0 = wb * rows_per_item, r1 = std::min(w.n_out, r0 + rows_per_item);
                if (direct) {
                    tile_prepacked_direct(xp + a0 * w.n_in, a1 - a0, w, r0, r1 - r0, y + a0 * w.n_out + r0);
                    continue;
                }
                const float* wp = wbuf.data();
                if (in_place) {
                    wp = reinterpret_cast<const float*>(w.row(r0));
                } else if (w.type == GgmlType::F16) {
                    for (int64_t r = r0; r < r1; ++r) {
                        convert_fp16_to_fp32(reinterpret_cast<const uint16_t*>(w.row(r)),
                                             wbuf.data() + (r - r0) * w.n_in, w.n_in);
                    }
                } else {
                    for (int64_t r = r0; r < r1; ++r) {
                        ops::dequantize_weight_row(w, r, wbuf.data() + (r - r0) * w.n_in);
                    }
                }
                if (prepack) {
                    kernels::tile_prepacked_avx2(xp + a0 * w.n_in, a1 - a0, wp, r1 - r0, w.n_in, w.n_in,
                                                 y + a0 * w.n_out + r0, w.n_out);
                } else {
                    tile(x + a0 * w.n_in, a1 - a0, w.n_in, wp, r1 - r0, w.n_in, w.n_in, y + a0 * w.n_out + r0,
                         w.n_out);
                }
            }
        }
    }
}

// Q8_0 with few activation rows (decode): the weights are read in place by a fused AVX2 kernel,
// parallel over blocks of output rows; otherwise the blocked path.
void matmul_q8_0(const float* x, int64_t n, const WeightView& w, float* y) {
    if (n > 4 || active_cpu_kernel() != CpuKernel::Avx2) {
        matmul_blocked(x, n, w, y);
        return;
    }
    constexpr int64_t kRows = 16;
    const int64_t n_blocks = (w.n_out + kRows - 1) / kRows;
#pragma omp parallel for schedule(dynamic, 4) if (n * w.n_out * w.n_in >= (1 << 20))
    for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t r0 = b * kRows, r1 = std::min(w.n_out, r0 + kRows);
        kernels::matmul_q8_0_avx2(x, n, w.n_in, w.row(r0), w.row_bytes, r1 - r0, w.n_in, y + r0, w.n_out);
    }
}

// F16 / BF16 prefill in Fast precision with AVX-512 BF16 (bf16_gemm.h): activations converted to
// bf16 once, work items of (activation block, kPackedItemRows weight rows) as in the float prefill.
void matmul_bf16(const float* x, int64_t n, const WeightView& w, float* y) {
    const int64_t k = w.n_in, ldx = bf16::padded(k);
    thread_local std::vector<uint16_t> xbuf;  // [n, ldx] bf16 activations
    uint16_t* xb = grow(xbuf, n * ldx);
    const int64_t act_block = prefill_act_block(n, kBf16ActBlock);
    const int64_t n_ab = (n + act_block - 1) / act_block;
    const int64_t n_wb = (w.n_out + kPackedItemRows - 1) / kPackedItemRows;
    const auto* h = reinterpret_cast<const uint16_t*>(w.data);
    const auto ldw = static_cast<int64_t>(w.row_bytes / 2);
    const bool is_f16 = w.type == GgmlType::F16;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n; ++r) bf16::convert_rows(x + r * k, 1, k, xb + r * ldx);
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t ab = 0; ab < n_ab; ++ab) {
            for (int64_t wb = 0; wb < n_wb; ++wb) {
                const int64_t a0 = ab * act_block, a1 = std::min(n, a0 + act_block);
                const int64_t r0 = wb * kPackedItemRows, r1 = std::min(w.n_out, r0 + kPackedItemRows);
                bf16::gemm(xb + a0 * ldx, a1 - a0, h + r0 * ldw, ldw, is_f16, r1 - r0, k, y + a0 * w.n_out + r0,
                           w.n_out);
            }
        }
    }
}

// F16 / BF16 with up to 4 activation rows (decode): weights converted in registers inside the dot
// products, parallel over blocks of output rows. More rows: bf16 dot products (Fast precision, CPU
// with AVX-512 BF16; pp16 2.1-2.4x the blocked path), otherwise the blocked path (float tiles).
void matmul_half(const float* x, int64_t n, const WeightView& w, float* y) {
    if (n > 4 && matmul_precision() == MatmulPrecision::Fast && bf16::enabled()) {
        matmul_bf16(x, n, w, y);
        return;
    }
    if (n > 4 || active_cpu_kernel() != CpuKernel::Avx2) {
        matmul_blocked(x, n, w, y);
        return;
    }
    constexpr int64_t kRows = 64;  // one work item (the 4-row tiles prefetch within it)
    const int64_t n_blocks = (w.n_out + kRows - 1) / kRows;
    const auto* h = reinterpret_cast<const uint16_t*>(w.data);
    const int64_t ldw = static_cast<int64_t>(w.row_bytes / 2);
    const auto kernel = w.type == GgmlType::F16 ? &kernels::matmul_f16_avx2 : &kernels::matmul_bf16_avx2;
#pragma omp parallel for schedule(dynamic, 1) if (n * w.n_out * w.n_in >= (1 << 20))
    for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t r0 = b * kRows, r1 = std::min(w.n_out, r0 + kRows);
        kernel(x, n, w.n_in, h + r0 * ldw, ldw, r1 - r0, w.n_in, y + r0, w.n_out);
    }
}

// Quantised weights, fast precision (AVX2), where the decode kernels (matmul_int8_decode) do not
// apply: activations quantised to int8 once (int8_gemm.h), then int8 dot products. Work items are
// (activation block, block of weight rows). With AVX-512 VNNI (more rows than the decode kernels
// take) the VNNI kernel packs each item's rows into 16-row panels (every type unpacked in
// registers: int8::decode::panel_packer) and runs on activation blocks of at most 256 rows, as
// the float prefill does. Without VNNI (17 to 23 rows, and IQ4_NL and IQ4_XS from one row,
// which have no AVX2 decode kernel; any number of rows of the types that fit six bits) a work
// item unpacks its rows into a thread-local panel (Q8_0 rows are read in place) and runs the AVX2
// tiles on activation blocks of about 256 KiB, which stay in L2 while the weight blocks pass (the
// six-bit tiles: on all the rows at once).
void matmul_int8(const float* x, int64_t n, const WeightView& w, float* y) {
    constexpr int64_t kPanelRows = 16;
    const int64_t k = w.n_in, nb = k / int8::kBlock;
    const bool vnni = n > int8::decode::kMaxVnniRows && int8::vnni_enabled();
    thread_local std::vector<int8_t> aq;   // [n, k] quantised activations
    thread_local std::vector<float> ad;    // [n, nb] their block scales
    thread_local std::vector<float> ah;    // [n, nb, 2] their half-block sums (times the scale)
    thread_local std::vector<int32_t> as;  // [n, nb, 2] their integer half-block sums (VNNI)
    int8::QuantRows xq;
    xq.q = grow(aq, n * k);
    xq.d = grow(ad, n * nb);
    xq.hsum = grow(ah, n * nb * 2);
    xq.qsum = vnni ? grow(as, n * nb * 2) : nullptr;
    xq.k = k;
    int8_t* q_out = aq.data();
    float* d_out = ad.data();
    float* h_out = ah.data();
    int32_t* s_out = vnni ? as.data() : nullptr;
    const bool has_min = int8::panel_has_min(w.type);
    // With VNNI every type is packed into panels straight from its blocks (in registers; Q8_0 too:
    // its scalar in-place packing cost batched decode half its speed); without, Q8_0 rows are read
    // in place.
    const int8::PanelPacker packer = vnni ? int8::decode::panel_packer(w.type) : nullptr;
    const bool in_place = w.type == GgmlType::Q8_0 && packer == nullptr;
    const bool six_bits = !vnni && int8::panel_fits_six_bits(w.type);
    // The six-bit tiles take every row against a work item's 16 weight rows, which are unpacked
    // once and stay in L1 while the activations stream by.
    const int64_t act_block = vnni ? prefill_act_block(n)
                              : n <= 4 || six_bits ? n
                                       : std::max<int64_t>(4, ((256 * 1024) / k) & ~int64_t{3});
    const int64_t n_ab = (n + act_block - 1) / act_block;
    // VNNI items: 64 rows, four of its 16-row panels.
    const int64_t item_rows = vnni ? kPackedItemRows : kPanelRows;
    const int64_t n_wb = (w.n_out + item_rows - 1) / item_rows;
#pragma omp parallel if (n * w.n_out * k >= (1 << 20))
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n; ++r) {
            int8::quantize_rows_avx2(x + r * k, 1, k, q_out + r * k, d_out + r * nb, h_out + r * nb * 2,
                                     s_out != nullptr ? s_out + r * nb * 2 : nullptr);
        }
        thread_local std::vector<int8_t> pq;  // [item_rows, k] unpacked weights
        thread_local std::vector<float> ps;   // [item_rows, nb, 2] scales
        thread_local std::vector<float> pm;   // [item_rows, nb, 2] mins (types with a min)
        int8::Panel panel;
        if (!in_place && packer == nullptr) {
            panel.q = grow(pq, item_rows * k);
            panel.scale = grow(ps, item_rows * nb * 2);
            panel.min = has_min ? grow(pm, item_rows * nb * 2) : nullptr;
            panel.k = k;
        }
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t wb = 0; wb < n_wb; ++wb) {
            for (int64_t ab = 0; ab < n_ab; ++ab) {
                const int64_t a0 = ab * act_block, a1 = std::min(n, a0 + act_block);
                const int64_t r0 = wb * item_rows, r1 = std::min(w.n_out, r0 + item_rows);
                const int8::QuantRows xb = xq.from(a0);
                float* yb = y + a0 * w.n_out + r0;
                if (in_place) {
                    (vnni ? int8::gemm_q8_0_vnni : int8::gemm_q8_0_avx2)(xb, a1 - a0, w.row(r0), w.row_bytes, r1 - r0,
                                                                         yb, w.n_out);
                } else if (packer != nullptr) {
                    int8::gemm_vnni_packed(xb, a1 - a0, packer, has_min, w.row(r0), w.row_bytes, r1 - r0, yb, w.n_out);
                } else {
                    int8::unpack_rows(w, r0, r1 - r0, pq.data(), ps.data(), has_min ? pm.data() : nullptr);
                    (vnni ? int8::gemm_vnni : six_bits ? int8::gemm_six_bit_avx2 : int8::gemm_avx2)(xb, a1 - a0, panel,
                                                                                            r1 - r0, yb, w.n_out);
                }
            }
        }
    }
}

// Quantised activation rows in the calling thread's own buffers (grow-only).
struct ActRows {
    int8_t* q;   // [n, k] quantised values
    float* d;    // [n, nb] block scales
    float* h;    // [n, nb, 2] half-block sums times the scale
    int32_t* s;  // [n, nb, 2] integer half-block sums
    int64_t k;
    static ActRows of_this_thread(int64_t n, int64_t k) {
        thread_local std::vector<int8_t> aq;
        thread_local std::vector<float> ad, ah;
        thread_local std::vector<int32_t> as;
        const int64_t nb = k / int8::kBlock;
        return {grow(aq, n * k), grow(ad, n * nb), grow(ah, n * nb * 2), grow(as, n * nb * 2), k};
    }
    void quantise(const float* x, int64_t r) const {
        const int64_t nb = k / int8::kBlock;
        int8::quantize_rows_avx2(x + r * k, 1, k, q + r * k, d + r * nb, h + r * nb * 2, s + r * nb * 2);
    }
    int8::QuantRows view() const { return {q, d, h, k, s}; }
};

// Multiply-adds from which the int8 decode paths below run on a team: even the small matrices of
// small models pay for one. At the former limit of 1M (that of the float paths) every matrix of
// SmolLM2-135M ran on one thread and its decode was 162 t/s; at 64K, 258-270 (Gemma 3 270M +10 %,
// Qwen2.5 0.5B +3-9 %; 2 threads; limits from 16K to 256K measured, docs/performance.md).
constexpr int64_t kDecodeTeamMin = 1 << 16;
constexpr size_t kMaxOuts = 4;  // weights in one pass of the decode paths

// The work items of one decode pass over up to kMaxOuts weights that read the same input: items of
// kRows weight rows, weight i's items [first[i], first[i + 1]) in turn.
struct PassItems {
    static constexpr int64_t kRows = 32;
    std::array<int64_t, kMaxOuts + 1> first{};
    int64_t count = 0;  // items of the pass
    int64_t k = 0;      // the weights' n_in
    int64_t work = 0;   // multiply-adds of the pass for n activation rows

    PassItems(int64_t n, std::span<const MatmulOut> outs) {
        KVEC_CHECK(!outs.empty() && outs.size() <= kMaxOuts);
        k = outs[0].w->n_in;
        for (size_t i = 0; i < outs.size(); ++i) {
            const WeightView& w = *outs[i].w;
            KVEC_CHECK(w.n_in == k);
            first[i + 1] = first[i] + (w.n_out + kRows - 1) / kRows;
            work += n * w.n_out * k;
        }
        count = first[outs.size()];
    }
    // The weight of an item and the item's index within that weight.
    std::pair<size_t, int64_t> locate(int64_t item) const {
        size_t i = 0;
        while (item >= first[i + 1]) ++i;
        return {i, item - first[i]};
    }
};

// Quantised weights with up to 4 (VNNI) or 16 activation rows (decode, small batches),
// Fast precision, for one or more weights of one type that read the same input (n_in k): the
// activations are quantised and laid out for the weight type (int8_decode.h) by every thread into
// its own buffers (a few microseconds, cheaper than waiting for each other at a barrier), then each
// thread streams its share of the weights' rows once through the decode kernel, which unpacks the
// blocks in registers (the rows repacked at load where `decode` reads those, WeightView::decode_rows).
// Several weights are one pass (one team) over all their rows.
void matmul_int8_decode(const float* x, int64_t n, std::span<const MatmulOut> outs, int8::decode::Choice decode) {
    const PassItems items(n, outs);  // one kernel call per item
    const GgmlType type = outs[0].w->type;
    for (const MatmulOut& o : outs) KVEC_CHECK(o.w->type == type);
    const int64_t k = items.k, ns = k / int8::decode::layout(type).sub;
#pragma omp parallel if (items.work >= kDecodeTeamMin)
    {
        const ActRows nat = ActRows::of_this_thread(n, k);  // natural order
        for (int64_t r = 0; r < n; ++r) nat.quantise(x, r);
        thread_local std::vector<int8_t> dq;   // [n, k] the same in the type's order
        thread_local std::vector<float> ddx;   // [n, ns] block scale of each sub-block
        thread_local std::vector<float> dxs;   // [n, ns] scale times the sum over each sub-block
        const int8::decode::Rows xr{grow(dq, n * k), grow(ddx, n * ns), grow(dxs, n * ns), k};
        int8::decode::prepare_rows(type, nat.view(), n, dq.data(), ddx.data(), dxs.data());
        // One contiguous share of the rows per thread: each thread reads one long stream. Items
        // handed out in turn (dynamic, 1) chop both streams into 36 KiB pieces; decode then ran at
        // 27-32 instead of 42-46 t/s (TinyLlama Q4_K_M, 2 threads, docs/performance.md).
#pragma omp for schedule(static)
        for (int64_t item = 0; item < items.count; ++item) {
            const auto [i, wb] = items.locate(item);
            const WeightView& w = *outs[i].w;
            const int64_t r0 = wb * PassItems::kRows, r1 = std::min(w.n_out, r0 + PassItems::kRows);
            const uint8_t* rows = (decode.repacked ? w.decode_rows : w.data) + static_cast<size_t>(r0) * w.row_bytes;
            decode.kernel(xr, n, rows, w.row_bytes, r1 - r0, outs[i].y + r0, w.n_out);
        }
    }
}

// Whether matmul_panels takes n rows of w in its decode form.
bool panels_decode(int64_t n, const WeightView& w) {
    return n <= (w.type == GgmlType::Q8_0 ? int8::decode::kMaxVnniRows : int8::k_panels_decode_rows);
}

// Decode on panels, for one or more weights that read the same input (n_in k): every thread
// quantises the few rows itself (a few microseconds, cheaper than a barrier), then streams the
// panels in contiguous chunks of about 1/16 of its share, handed out in turn: a thread whose
// memory runs slower takes fewer, where equal static shares left the other waiting at the end of
// the matmul (14 % of decode in libgomp's spin on the Phi-4-mini shape; Gemma-3-4B shape tg64
// +19 %, Phi +1-7 %; docs/performance.md). Several weights are one pass over all their rows.
void matmul_panels_decode(const float* x, int64_t n, std::span<const MatmulOut> outs) {
    constexpr int64_t kChunksPerThread = 16;
    const PassItems items(n, outs);  // whole panels
    const int64_t k = items.k;
    std::array<size_t, kMaxOuts> item_bytes{};
    for (size_t i = 0; i < outs.size(); ++i) {
        item_bytes[i] = int8::load_panels_bytes(outs[i].w->type, PassItems::kRows, k);
    }
#pragma omp parallel if (items.work >= kDecodeTeamMin)
    {
        const ActRows a = ActRows::of_this_thread(n, k);
        for (int64_t r = 0; r < n; ++r) a.quantise(x, r);
        const int64_t chunk = std::max<int64_t>(1, items.count / (kChunksPerThread * omp_get_num_threads()));
#pragma omp for schedule(dynamic, chunk) nowait
        for (int64_t item = 0; item < items.count; ++item) {
            const auto [i, wb] = items.locate(item);
            const WeightView& w = *outs[i].w;
            const int64_t r0 = wb * PassItems::kRows, r1 = std::min(w.n_out, r0 + PassItems::kRows);
            int8::gemm_load_panels(w.type, a.view(), n, w.panels + wb * item_bytes[i], r1 - r0, outs[i].y + r0,
                                   w.n_out);
        }
    }
}

// Q8_0, Q4_K and Q6_K weights repacked at load into panels (WeightView::panels), any number of
// rows: the activations are quantised, then the panel kernels run (Q8_0: nothing packed per
// call; K-quant prefill: each panel's bits unpacked into the VNNI form).
// Up to the panels' decode rows (Q8_0: kMaxVnniRows; K-quants: 8), matmul_panels_decode; more
// rows: items of (activation block, 64 weight rows), as the VNNI path of matmul_int8.
void matmul_panels(const float* x, int64_t n, const WeightView& w, float* y) {
    if (panels_decode(n, w)) {
        const MatmulOut out{&w, y};
        matmul_panels_decode(x, n, {&out, 1});
        return;
    }
    const int64_t k = w.n_in;
    const ActRows a = ActRows::of_this_thread(n, k);
    const int8::QuantRows xq = a.view();
    const int64_t act_block = prefill_act_block(n);
    const int64_t n_ab = (n + act_block - 1) / act_block;
    const int64_t n_wb = (w.n_out + kPackedItemRows - 1) / kPackedItemRows;
    const size_t item_bytes = int8::load_panels_bytes(w.type, kPackedItemRows, k);
#pragma omp parallel if (n * w.n_out * k >= (1 << 20))
    {
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n; ++r) a.quantise(x, r);
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t wb = 0; wb < n_wb; ++wb) {
            for (int64_t ab = 0; ab < n_ab; ++ab) {
                const int64_t a0 = ab * act_block, a1 = std::min(n, a0 + act_block);
                const int64_t r0 = wb * kPackedItemRows, r1 = std::min(w.n_out, r0 + kPackedItemRows);
                int8::gemm_load_panels(w.type, xq.from(a0), a1 - a0, w.panels + wb * item_bytes, r1 - r0,
                                       y + a0 * w.n_out + r0, w.n_out);
            }
        }
    }
}

bool use_int8(const WeightView& w) {
    return matmul_precision() == MatmulPrecision::Fast &&
           active_cpu_kernel() == CpuKernel::Avx2 && int8::has_panel_form(w.type) && w.n_in % int8::kBlock == 0;
}

// Whether matmul() runs w on its panels (matmul_panels).
bool takes_panels(const WeightView& w) { return w.panels != nullptr && use_int8(w) && int8::vnni_enabled(); }

// Whether matmul() runs n rows of w, not on panels, through int8 dot products (matmul_int8_decode
// where the type has a decode kernel for n rows, else matmul_int8).
bool takes_int8(int64_t n, const WeightView& w) {
    return !takes_panels(w) && use_int8(w) &&
           (n < kernels::kPackedMinRows || int8::vnni_enabled() || int8::panel_fits_six_bits(w.type));
}

using MatmulFn = void (*)(const float* x, int64_t n, const WeightView& w, float* y);

// Per-type implementation table: the blocked dequantising path for every type, plus kernels that
// read a type's blocks in place. Further type-specialised kernels (int8 dot products on
// quantised activations, bf16) register here.
MatmulFn implementation_for(GgmlType type) {
    switch (type) {
        case GgmlType::Q8_0:
            return &matmul_q8_0;
        case GgmlType::F16:
        case GgmlType::BF16:
            return &matmul_half;
        default:
            return &matmul_blocked;
    }
}

}  // namespace

TileKernel tile_kernel() { return tile_for(active_cpu_kernel()); }

std::string matmul_backend_description() {
    const bool avx2 = active_cpu_kernel() == CpuKernel::Avx2;
    std::string s = std::string(cpu_kernel_name(active_cpu_kernel())) + " float tiles";
    if (avx2) s += ", prefill: weights converted while packing";
    if (avx2 && kernels::avx512_enabled()) s += " (avx512 tiles)";
    if (avx2 && matmul_precision() == MatmulPrecision::Fast) {
        s += int8::vnni_enabled() ? ", quantised prefill: avx512-vnni int8 dot products"
                                  : ", 4/5-bit and q2_k..q6_k prefill: avx2 six-bit int8 tiles";
        if (bf16::enabled()) s += ", f16/bf16 prefill: avx512-bf16 dot products";
        s += fmt::format(", quantised decode (up to {} rows): blocks unpacked in registers, {} int8 dot products",
                         int8::vnni_enabled() ? int8::decode::kMaxVnniRows : int8::decode::kMaxRows,
                         int8::vnni_enabled() ? "avx512-vnni" : "avx2");
    } else {
        s += ", quantised decode: dequantised per block (exact)";
    }
    if (avx2 && matmul_precision() == MatmulPrecision::Fast && int8::vnni_enabled()) {
        s += ", q8_0, q4_k and q6_k matrices repacked at load: avx512-vnni panels at every row count";
    }
    if (avx2) s += ", f16/bf16 decode in place";
    return s;
}

void convert_fp16_to_fp32(const uint16_t* src, float* dst, int64_t n) {
    if (active_cpu_kernel() == CpuKernel::Avx2) {
        kernels::fp16_to_fp32_f16c(src, dst, n);
    } else {
        kernels::fp16_to_fp32_generic(src, dst, n);
    }
}

uint64_t stream_read_sum(const uint64_t* p, int64_t n) {
    if (active_cpu_kernel() == CpuKernel::Avx2) return kernels::stream_sum_avx2(p, n);
    uint64_t s = 0;
    for (int64_t i = 0; i < n; ++i) s += p[i];
    return s;
}

void matmul(const float* x, int64_t n, const WeightView& w, float* y) {
    KVEC_CHECK(w.data != nullptr && w.n_in > 0 && w.n_out > 0);
    if (n <= 0) return;
    // Prefill (many rows): the packed float tiles on dequantised weights beat the int8 tiles on
    // AVX2 without VNNI (pp512 Q4_K 1.6x, Q8_0 1.15x) and need no activation quantisation, so
    // there int8 dot products serve decode and small batches only; with AVX-512 VNNI they serve
    // prefill too.
    if (takes_panels(w)) {
        matmul_panels(x, n, w, y);
        return;
    }
    if (takes_int8(n, w)) {
        if (const int8::decode::Choice decode = int8::decode::kernel_for(w, n); decode.kernel != nullptr) {
            const MatmulOut out{&w, y};
            matmul_int8_decode(x, n, {&out, 1}, decode);
        } else {
            matmul_int8(x, n, w, y);
        }
        return;
    }
    implementation_for(w.type)(x, n, w, y);
}

void matmul_group(const float* x, int64_t n, std::span<const MatmulOut> outs) {
    if (outs.empty()) return;
    const auto all = [&](auto&& pred) {
        return n > 0 && outs.size() > 1 && outs.size() <= kMaxOuts &&
               std::all_of(outs.begin(), outs.end(), [&](const MatmulOut& o) {
                   return o.w->n_in == outs[0].w->n_in && pred(*o.w);
               });
    };
    if (all([&](const WeightView& w) { return takes_panels(w) && panels_decode(n, w); })) {
        matmul_panels_decode(x, n, outs);
        return;
    }
    // The int8 decode kernels for weights of one type (matmul's choice for each of them).
    const WeightView& w0 = *outs[0].w;
    const int8::decode::Choice decode = takes_int8(n, w0) ? int8::decode::kernel_for(w0, n) : int8::decode::Choice{};
    if (decode.kernel != nullptr && all([&](const WeightView& w) {
            return w.type == w0.type && takes_int8(n, w) && (w.decode_rows != nullptr) == (w0.decode_rows != nullptr);
        })) {
        matmul_int8_decode(x, n, outs, decode);
        return;
    }
    for (const MatmulOut& o : outs) matmul(x, n, *o.w, o.y);
}

}  // namespace kvec
