// Integer (int8 x int8) matrix multiplication for quantised weights.
//
// Activations are quantised once per matmul, row by row, in blocks of 32 (Q8_0-style, with a
// float32 scale): x[e] ~ d * q[e], q in [-127, 127], d = max|x| / 127 over the block. Weights of
// every quantised type are brought into one common form, a panel: per block of 32 elements
// 32 int8 values and, for each half of 16 elements, a float scale and (types with a minimum) a
// float offset, so that the weight element is
//     w[e] = scale[half(e)] * q[e] + min[half(e)]
// This form holds exactly for every block type: Q8_0, Q4_0, Q5_0 (scale d, q shifted to signed),
// Q4_1, Q5_1 (scale d, min m), Q4_K, Q5_K (32-element sub-blocks: scale d*sc, min -dmin*m),
// Q2_K, Q3_K, Q6_K (16-element sub-blocks: the two halves carry their own scale), IQ4_NL, IQ4_XS,
// MXFP4 (q = the grid level of the 4-bit index, in [-127, 113]; scale d, d * (ls - 32) per
// 32-element sub-block, or 2^(e - 128)). A dot product
// is then, per block and half,
//     sum_e w[e] x[e] ~ d_x * (scale * sum_e q_w[e] q_x[e] + min * sum_e q_x[e])
// with the integer sums computed exactly (AVX2: maddubs/madd; AVX-512 VNNI: vpdpbusd, used for
// prefill where the CPU has it, see gemm_vnni below). Q8_0 weights are also read in place (no
// panel) by gemm_q8_0_avx2. Decode and batches of up to 16 rows (int8_decode.h) compute the same
// sums with the blocks unpacked in registers instead of a panel. Using 32-element activation
// blocks for the k-quants too (llama.cpp uses 256-element Q8_K there) is finer, so at least as
// accurate.
//
// Error: each activation element is off by at most d/2 (rounding), so
//     |y_int8 - y_exact| <= sum_e |w[e]| * d_x(block of e) / 2  (+ float rounding)
// which the tests use as the tolerance against the exact float reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/kernels.h"
#include "tensor/weight.h"

namespace kvec::int8 {

constexpr int kBlock = 32;  // elements per block (activations and panels)

// Quantised activation rows: n rows of k elements (k a multiple of 32), nb = k / 32.
struct QuantRows {
    const int8_t* q = nullptr;     // [n, k] quantised values
    const float* d = nullptr;      // [n, nb] block scales
    const float* hsum = nullptr;   // [n, nb, 2] d * sum of q over each half block
    int64_t k = 0;
    const int32_t* qsum = nullptr; // [n, nb, 2] sum of q over each half block (the VNNI kernels)

    // The rows from `row` on.
    QuantRows from(int64_t row) const {
        const int64_t nb = k / kBlock;
        return {q + row * k, d + row * nb, hsum + row * nb * 2, k, qsum != nullptr ? qsum + row * nb * 2 : nullptr};
    }
};

// pass(first, rows) over rows [0, nx) in the fewest passes of at most max_rows, their sizes as
// even as they go (8 rows by 6: 4 + 4, not 6 + 2, since a pass of few rows reads the weights or
// keys for little work; 7 by 4: 4 + 3).
template <class Pass>
void even_row_passes(int64_t nx, int64_t max_rows, Pass&& pass) {
    const int64_t passes = (nx + max_rows - 1) / max_rows;
    for (int64_t p = 0, i = 0; p < passes; ++p) {
        const int64_t rows = (nx - i + (passes - p) - 1) / (passes - p);  // <= max_rows
        pass(i, rows);
        i += rows;
    }
}

// Unpacked weight rows (see the header comment).
struct Panel {
    const int8_t* q = nullptr;      // [rows, k]
    const float* scale = nullptr;   // [rows, nb, 2] scale of each half block
    const float* min = nullptr;     // [rows, nb, 2] offset of each half block, or null (none)
    int64_t k = 0;
};

// True for the types that have a panel form (every quantised weight type; not F32/F16/BF16).
bool has_panel_form(GgmlType type);
// True when the type's panel needs the min term (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K).
bool panel_has_min(GgmlType type);

// Scalar reference of the activation quantisation of one row: q[k], d[k/32], hsum[k/32 * 2] and,
// unless null, the integer half-block sums qsum[k/32 * 2].
void quantize_row_ref(const float* x, int64_t k, int8_t* q, float* d, float* hsum, int32_t* qsum = nullptr);

// Unpacks rows [r0, r0 + n) of w into panel buffers (q [n, k], scale/min [n, nb, 2]; min may be
// null when !panel_has_min). Scalar code; throws kvec::Error for a type without a panel form.
void unpack_rows(const WeightView& w, int64_t r0, int64_t n, int8_t* q, float* scale, float* min);
// The same for nb blocks of 32 of one row, starting at src (K-quants: whole super-blocks, nb a
// multiple of 8): q [nb * 32], scale and min [nb, 2].
void unpack_blocks(GgmlType type, const uint8_t* src, int64_t nb, int8_t* q, float* scale, float* min);

// Scalar reference of the integer dot products (int32 sums per half, scales in double):
//   y[i * ldy + j] = dot(activation row i, panel row j) for i < nx, j < nw.
void gemm_ref(const QuantRows& x, int64_t nx, const Panel& w, int64_t nw, float* y, int64_t ldy);

// AVX2 kernels (kernels_avx2.cpp; only call when the CPU has AVX2+FMA+F16C).
void quantize_rows_avx2(const float* x, int64_t n, int64_t k, int8_t* q, float* d, float* hsum,
                        int32_t* qsum = nullptr);
// Same contract as gemm_ref.
void gemm_avx2(const QuantRows& x, int64_t nx, const Panel& w, int64_t nw, float* y, int64_t ldy);
// Prefill without VNNI for the types whose panel values lie in [-32, 31] (panel_fits_six_bits):
// per 8 weight rows the panel is interleaved, 4 consecutive elements of 8 rows per vector as
// unsigned bytes q + 32, and each activation row's 4 bytes are broadcast against it (maddubs of
// two groups added in int16, madd with 1s: 8 int32 lanes, no horizontal sums); the + 32 is taken
// back in the min term. Same contract and the same integer sums as gemm_ref.
bool panel_fits_six_bits(GgmlType type);
void gemm_six_bit_avx2(const QuantRows& x, int64_t nx, const Panel& w, int64_t nw, float* y, int64_t ldy);
// Q8_0 weights in place: nw rows starting at w (row_bytes apart), same contract as gemm_ref.
void gemm_q8_0_avx2(const QuantRows& x, int64_t nx, const uint8_t* w, size_t row_bytes, int64_t nw,
                    float* y, int64_t ldy);
// scores_q8_0_vnni below with AVX2: per entry and block the keys' bytes read once for up to 4
// query rows (maddubs as gemm_q8_0_avx2), 8 (row, entry) vectors summed across lanes at once.
void scores_q8_0_avx2(const QuantRows& x, int64_t nx, const uint8_t* k, size_t row_bytes, int64_t n, float* y,
                      int64_t ldy, const kernels::ValuePrefetch& values);

// AVX-512 VNNI kernels for prefill (int8_vnni.cpp). vpdpbusd multiplies 64 unsigned x signed byte
// pairs into 16 int32 lanes, four times the multiply-adds of a 512-bit float FMA. The weight rows
// are repacked into 16-row panels, 4 consecutive elements of 16 rows per vector, each byte offset
// by 128 to be unsigned (w ^ 0x80 = w + 128); one activation's 4 bytes are broadcast against it.
// The offset is taken back exactly by starting each block's int32 sums at -128 * sum(q_x), so
// the integer sums equal gemm_ref's; the min term is one more FMA per block. Same contract as
// gemm_ref; x.qsum must be set. Only call when vnni_supported().
bool vnni_supported();  // the CPU has AVX-512F, BW and VNNI
// Supported and AVX-512 not switched off (kernels::set_avx512, KVEC_AVX512=0).
bool vnni_enabled();
void gemm_vnni(const QuantRows& x, int64_t nx, const Panel& w, int64_t nw, float* y, int64_t ldy);
void gemm_q8_0_vnni(const QuantRows& x, int64_t nx, const uint8_t* w, size_t row_bytes, int64_t nw,
                    float* y, int64_t ldy);
// One position's attention scores over Q8_0 keys read in place (decode): the contract of
// gemm_q8_0_vnni (nx query rows, n keys row_bytes apart) without packing the keys into panels,
// which for a few rows cost more than the products. Per entry and pair of blocks, the keys' 64
// bytes (+ 128) in one vector and one vpdpbusd per query row; 16 (row, entry) vectors summed
// across lanes at once; rows in passes of up to 4. The same integer sums as gemm_ref (the float
// sums in another order). The values of the scored entries are prefetched as it goes (the first
// pass only), so that the values pass after the softmax finds them in L2.
void scores_q8_0_vnni(const QuantRows& x, int64_t nx, const uint8_t* k, size_t row_bytes, int64_t n, float* y,
                      int64_t ldy, const kernels::ValuePrefetch& values);
// Rows [0, nr) (nr <= 16) of the weight rows at w (row_bytes apart; nb blocks of 32) packed into one
// 16-row panel of the layout above (qp [nb, 8, 16, 4], sp and mp [nb, 2, 16]); returns whether a
// block's two halves have their own scales. int8::decode::panel_packer gives one per type.
using PanelPacker = bool (*)(const uint8_t* w, size_t row_bytes, int nr, int64_t nb, uint8_t* qp, float* sp,
                             float* mp);
// The weight rows packed by `pack` (no panel form first); has_min: the type has a min term.
void gemm_vnni_packed(const QuantRows& x, int64_t nx, PanelPacker pack, bool has_min, const uint8_t* w,
                      size_t row_bytes, int64_t nw, float* y, int64_t ldy);

// Q8_0 weights repacked once (at load, WeightView::panels) into the 16-row panels above, so no
// matmul packs them: panel j holds rows 16 j..16 j + 15, and its block b, at byte
// (j * nb + b) * kQ8PanelBlockBytes, is the [8, 16, 4] bytes w + 128 followed by the 16 rows' fp16
// scales (0 past the last row). The same bytes as the Q8_0 rows (16 x 34 per block), the last
// panel filled up to 16 rows.
constexpr int64_t kQ8PanelBlockBytes = 16 * 34;
size_t q8_0_panels_bytes(int64_t n_rows, int64_t k);
// Packs n_rows Q8_0 rows (row_bytes apart, k elements each) into out[q8_0_panels_bytes]. Scalar
// code (OpenMP over panels); runs on any CPU.
void pack_q8_0_panels(const uint8_t* w, size_t row_bytes, int64_t n_rows, int64_t k, uint8_t* out);
// The VNNI tiles on such panels: weight rows [0, nw) of the panels at `panels` (the first row of a
// panel), same contract as gemm_ref and the same sums, in the same order, as gemm_q8_0_vnni.
void gemm_q8_0_panels(const QuantRows& x, int64_t nx, const uint8_t* panels, int64_t nw, float* y, int64_t ldy);

// Q4_K and Q6_K weights repacked once (at load, WeightView::panels) into 16-row panels that keep
// their bits (layouts in int8_k_panels.cpp): per 16 rows and super-block of 256 elements, the
// nibbles of 4 elements of each row side by side (Q6_K: then their high 2 bits), and the rows'
// scales one byte each (Q4_K: 2.8 % more bytes than its rows; Q6_K: the same bytes).
size_t k_panels_bytes(GgmlType type, int64_t n_rows, int64_t k);
// Packs n_rows rows of the type (row_bytes apart, k elements each) into out[k_panels_bytes].
// Scalar code (OpenMP over panels); runs on any CPU.
void pack_k_panels(GgmlType type, const uint8_t* w, size_t row_bytes, int64_t n_rows, int64_t k, uint8_t* out);
// Weight rows [0, nw) of such panels (from a panel's first row), same contract as gemm_ref: up to
// 8 activation rows (k_panels_decode_rows) by a kernel that unpacks the bits in registers (decode
// and batched decode), more by the VNNI
// tiles on each panel unpacked (prefill; x.qsum must be set), with the sums, in the same order,
// of gemm_vnni_packed on the rows (int8::decode::panel_packer).
void gemm_k_panels(GgmlType type, const QuantRows& x, int64_t nx, const uint8_t* panels, int64_t nw, float* y,
                   int64_t ldy);
constexpr int64_t k_panels_decode_rows = 8;

// The weight types repacked at load (Q8_0, Q4_K, Q6_K), dispatching to the functions above: the bytes
// of n_rows rows of k elements repacked, their packing, and the matmul on them.
bool has_load_panels(GgmlType type);
size_t load_panels_bytes(GgmlType type, int64_t n_rows, int64_t k);
void pack_load_panels(GgmlType type, const uint8_t* w, size_t row_bytes, int64_t n_rows, int64_t k, uint8_t* out);
void gemm_load_panels(GgmlType type, const QuantRows& x, int64_t nx, const uint8_t* panels, int64_t nw, float* y,
                      int64_t ldy);

}  // namespace kvec::int8
