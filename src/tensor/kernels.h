// Float tile kernels behind the matmul dispatch (see matmul.h for the contract of TileKernel).
// kernels_generic.cpp compiles for the baseline ISA; kernels_avx2.cpp with -mavx2 -mfma and is
// only called when the CPU reports both.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/ggml_type.h"
#include "tensor/dispatch.h"

namespace kvec::kernels {

void tile_generic(const float* x, int64_t nx, int64_t ldx, const float* w, int64_t nw,
                  int64_t ldw, int64_t k, float* y, int64_t ldy);

void tile_avx2(const float* x, int64_t nx, int64_t ldx, const float* w, int64_t nw, int64_t ldw,
               int64_t k, float* y, int64_t ldy);

// Activations packed for the prefill kernel: rows in groups of kPackRows, each group k-major,
//   xp[(g * k + p) * kPackRows + r] = x[(kPackRows * g + r) * ldx + p]
// with the rows past nx zero; xp holds packed_rows(nx) * k floats. A block of rows starting at a
// multiple of kPackRows is itself packed at xp + row * k.
constexpr int kPackRows = 6;
constexpr int64_t kPackedMinRows = 24;  // fewer rows than this: the unpacked tiles are faster
inline int64_t packed_rows(int64_t nx) { return (nx + kPackRows - 1) / kPackRows * kPackRows; }
void pack_rows6(const float* x, int64_t nx, int64_t ldx, int64_t k, float* xp);
// tile_avx2's contract with x already packed (xp as above); the F16 / BF16 / Q8_0 variants read
// their weight rows in place and convert them while packing their 16-row panels.
void tile_prepacked_avx2(const float* xp, int64_t nx, const float* w, int64_t nw, int64_t ldw, int64_t k, float* y,
                         int64_t ldy);
void tile_prepacked_f16_avx2(const float* xp, int64_t nx, const uint16_t* w, int64_t nw, int64_t ldw, int64_t k,
                             float* y, int64_t ldy);
void tile_prepacked_bf16_avx2(const float* xp, int64_t nx, const uint16_t* w, int64_t nw, int64_t ldw, int64_t k,
                              float* y, int64_t ldy);
// Q8_0 rows (row_bytes apart, k a multiple of 32) dequantised while packing.
void tile_prepacked_q8_0_avx2(const float* xp, int64_t nx, const uint8_t* w, size_t row_bytes, int64_t nw, int64_t k,
                              float* y, int64_t ldy);

// Q8_0 weights used in place (no dequantised copy), for few activation rows (decode):
// y[i * ldy + j] = dot(x + i * ldx, row j of w) for i < nx, j < nw; w rows are row_bytes apart,
// k a multiple of 32. AVX2 + F16C only.
void matmul_q8_0_avx2(const float* x, int64_t nx, int64_t ldx, const uint8_t* w, size_t row_bytes,
                      int64_t nw, int64_t k, float* y, int64_t ldy);

// F16 / BF16 weights used in place (rows ldw elements apart), same contract as matmul_q8_0_avx2.
void matmul_f16_avx2(const float* x, int64_t nx, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t nw,
                     int64_t k, float* y, int64_t ldy);
void matmul_bf16_avx2(const float* x, int64_t nx, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t nw,
                      int64_t k, float* y, int64_t ldy);

// Attention scores over one block of n entries (tensor/attention.h), in two steps. First the
// block's keys [n, d] are transposed to float, once for every query row that reads them:
//   kt[e * ldkt + j] = k[j * d + e]   for j < n, e < d;  columns n .. round_up(n, 8) zero
// then each query row is multiplied by kt with 8 entries' scores per vector, no horizontal sums:
//   y[i * ldy + j] = sum_{e < d} q[i * ldq + e] * kt[e * ldkt + j]   for i < nq, j < n (n % 8 == 0)
void keys_t_f32_generic(const float* k, int64_t n, int64_t d, float* kt, int64_t ldkt);
void keys_t_f16_generic(const uint16_t* k, int64_t n, int64_t d, float* kt, int64_t ldkt);
void keys_t_f32_avx2(const float* k, int64_t n, int64_t d, float* kt, int64_t ldkt);
void keys_t_f16_avx2(const uint16_t* k, int64_t n, int64_t d, float* kt, int64_t ldkt);
void attention_scores_generic(const float* q, int64_t nq, int64_t ldq, const float* kt, int64_t ldkt, int64_t d,
                              int64_t n, float* y, int64_t ldy);

// The rows of a block of query positions against a float panel with AVX2, the rows given by
// pointers (the query rows of several positions and heads, or their probability rows):
//   y[r][c] (+)= sum_{e < k} a[r][e] * b[e * ldb + c]     for r < rows, c < n (any n)
// written (accumulate false) or added to. Strips of 16 columns outer, tiles of 6 rows x 16
// columns inner, so that a strip of b (k x 16 floats) is read from memory or L2 once and from L1
// by every tile of rows; 4 * ldb bytes should be an odd number of 64-byte lines, or the strip's
// k rows fall into few L1 sets and evict each other (ldb = 128: 8 of 64 sets).
//   scores: a = the query rows, b = kt (keys_t_*), k = d, n = the entries (a multiple of 8)
//   values: a = the probability rows, b = the block's values as float rows, k = the entries,
//           n = d, accumulated
// The product of attention_scores_generic / attention_values_generic for many rows at a time.
void rows_times_panel_avx2(int64_t rows, const float* const* a, const float* b, int64_t ldb, int64_t k, int64_t n,
                           float* const* y, bool accumulate);

// The values of the entries a one-position scores kernel reads (rows row_bytes apart, any type),
// prefetched into L2 a pass of entries at a time while their keys are scored: the values pass
// that follows the softmax then finds them there, and the two streams from memory overlap. Empty
// (rows == nullptr): nothing prefetched.
struct ValuePrefetch {
    const char* rows = nullptr;  // entry 0's value row
    size_t row_bytes = 0;

    // Prefetches the cache lines of the values of entries [j, j + m).
    void operator()(int64_t j, int64_t m) const {
        if (rows == nullptr) return;
        const char* p = rows + static_cast<size_t>(j) * row_bytes;
        const size_t bytes = static_cast<size_t>(m) * row_bytes;
        for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 2);  // 2: into L2
    }
};

// One query position's scores with AVX2, keys read in place (F32 or F16 rows of d elements, d a
// multiple of 8: where attention_direct_avx2(type, d)): two query rows against 4 entries at a time,
// each entry converted once for both, the 8 horizontal sums gathered by hadd (an odd last row
// against 8 entries); y as attention_scores_direct_avx512 below.
bool attention_direct_avx2(GgmlType type, int64_t d);
void attention_scores_direct_avx2(GgmlType type, const float* q, int64_t nq, int64_t ldq, const void* k, int64_t n,
                                  int64_t d, float* y, int64_t ldy, ValuePrefetch values = {});

// One query position's scores and values with AVX-512F, keys and values read in place without
// the transposition above (F32 or F16 rows of d elements, d a multiple of 16: where
// attention_direct_avx512(type, d), which also asks that AVX-512 is on). The scores are one dot
// product per entry, 16 entries' horizontal sums gathered into one vector by lane shuffles; the
// values as attention_values_* (accumulated), 64 dimensions of up to 4 rows per pass:
//   y[i * ldy + j]    = sum_{e < d} q[i * ldq + e] * k_j[e]      for i < nq, j < n
//   out[i * ldo + e] += sum_{j < n} p[i * ldp + j] * v_j[e]      for i < nq, e < d
// The values also take Q8_0 rows (d a multiple of 32: values_direct_avx512), each 16 bytes
// sign-extended, converted and scaled in registers.
bool attention_direct_avx512(GgmlType type, int64_t d);
void attention_scores_direct_avx512(GgmlType type, const float* q, int64_t nq, int64_t ldq, const void* k, int64_t n,
                                    int64_t d, float* y, int64_t ldy, ValuePrefetch values = {});
bool values_direct_avx512(GgmlType type, int64_t d);
void attention_values_avx512(GgmlType type, const float* p, int64_t nq, int64_t ldp, const void* v, int64_t n,
                             int64_t d, float* out, int64_t ldo);

// rows_times_panel_avx2 with AVX-512F (where avx512_enabled()): strips of 32 columns outer,
// register tiles of 8 rows x 32 columns inner, the lanes past n masked.
void rows_times_panel_avx512(int64_t rows, const float* const* a, const float* b, int64_t ldb, int64_t k, int64_t n,
                             float* const* y, bool accumulate);

// Attention values over one block of n entries (tensor/attention.h), accumulated:
//   out[i * ldo + e] += sum_{j < n} p[i * ldp + j] * v[j * d + e]   for i < nq, e < d
void attention_values_generic(const float* p, int64_t nq, int64_t ldp, const float* v, int64_t n, int64_t d,
                              float* out, int64_t ldo);
void attention_values_f32_avx2(const float* p, int64_t nq, int64_t ldp, const float* v, int64_t n, int64_t d,
                               float* out, int64_t ldo);
// F16 values in place, converted in registers (F16C).
void attention_values_f16_avx2(const float* p, int64_t nq, int64_t ldp, const uint16_t* v, int64_t n, int64_t d,
                               float* out, int64_t ldo);
// Block-quantised values read from their blocks: 16 elements of a row at a time decoded in
// registers (the scale broadcast, the 4-bit indices masked/shifted, Q5's fifth bits spread from
// qh, IQ4_NL's grid looked up by a byte shuffle), no float copy:
//   out[i * ldo + e] += sum_{j < n} p[i * ldp + j] * v_j[e]   for i < nq, e < d
// with v_j the row at v + j * ggml_row_size(type, d) as quant::dequantize_row decodes it (d a
// multiple of 32). Types: values_in_place_avx2(type) (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL).
bool values_in_place_avx2(GgmlType type);
void attention_values_quant_avx2(GgmlType type, const float* p, int64_t nq, int64_t ldp, const uint8_t* v,
                                 int64_t n, int64_t d, float* out, int64_t ldo);

// In place softmax of x[n] (with the sink logit in the denominator; -inf: none; returns its
// log-sum-exp, as ops::softmax) and
// out[i] = silu(gate[i]) * up[i], with a vectorised exp (relative error ~1e-7); the baseline-ISA
// versions are ops::softmax / ops::swiglu's own loops.
float softmax_avx2(float* x, int64_t n, float sink);
void swiglu_avx2(const float* gate, const float* up, float* out, int64_t n);
// out = gelu_tanh(gate) * up as gate * sigmoid(2 sqrt(2/pi) (gate + 0.044715 gate^3)) * up (the
// tanh form rewritten), with the vectorised exp of swiglu_avx2.
void geglu_avx2(const float* gate, const float* up, float* out, int64_t n);
// Soft-capping in place: x[i] = cap * tanh(scale * x[i] / cap) (cap > 0), tanh(y) as
// 1 - 2 / (exp(2y) + 1) with the vectorised exp of swiglu_avx2 (absolute error ~1e-7 cap); the
// baseline-ISA version is ops::softcap's own loop.
void softcap_avx2(float* x, int64_t n, float scale, float cap);

// Sum of p[0..n): a streaming read with four 256-bit loads in flight (bandwidth measurement).
uint64_t stream_sum_avx2(const uint64_t* p, int64_t n);

// dst[n] = fp16 values of src[n] as float.
void fp16_to_fp32_generic(const uint16_t* src, float* dst, int64_t n);
void fp16_to_fp32_f16c(const uint16_t* src, float* dst, int64_t n);  // needs F16C (AVX2 builds)

}  // namespace kvec::kernels
