// Matrix multiplication of float32 activations by a weight matrix of any supported type:
//   y[n, w.n_out] = x[n, w.n_in] . W^T      (W stored as GGUF rows: ne[0] = n_in, ne[1] = n_out)
//
// Dispatch point. matmul() picks an implementation per weight type and precision; the kernels
// are chosen at start-up according to the CPU (AVX2+FMA+F16C or generic; AVX-512 where present):
//   up to 4 rows with AVX-512 VNNI, 16 without (decode, small batches; int8::decode::kernel_for),
//       quantised types, Fast precision (AVX2): int8 activations x int8 weights read in place,
//       each block unpacked in registers (int8_decode.h; AVX-512 VNNI where enabled). Q8_0
//       without VNNI: its in-place AVX2 int8 kernel (int8_gemm.h);
//   more rows, Fast precision, CPU with AVX-512 VNNI / BF16: quantised types by int8 dot
//       products on 16-row panels (int8_gemm.h, gemm_vnni_packed; every type's blocks unpacked in
//       registers as for decode and transposed into panels, int8::decode::panel_packer), F16/BF16
//       (from 5 rows on) by bf16 dot products (bf16_gemm.h);
//   more rows without VNNI, Fast precision, the types whose panel values fit in 6 bits (Q4_0,
//       Q4_1, Q5_0, Q5_1, Q2_K..Q6_K; int8::panel_fits_six_bits): int8 activations x the weights
//       unpacked per 16 rows and interleaved per 8 (int8_gemm.h, gemm_six_bit_avx2);
//   prefill (kernels::kPackedMinRows rows or more, AVX2), otherwise: activations packed once,
//       weights converted to float by the packed tile kernel as it packs them (F16, BF16, Q8_0,
//       F32 read in place) or dequantised per block of rows first (other types);
//   17 to kPackedMinRows - 1 rows without VNNI, the other quantised types, Fast precision: int8
//       activations x int8 weights (int8_gemm.h), Q8_0 read in place, other types unpacked per
//       16 rows into a panel;
//   fewer rows, quantised types, Exact precision: dequantise a block of rows, float tile kernel
//       (Q8_0 decode: fused float kernel on the blocks in place);
//   fewer rows, F16/BF16: the weights read in place (F16C / shift); F32: float tiles in place.
// Every implementation is tested against ref::matmul.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "tensor/dispatch.h"
#include "tensor/weight.h"

namespace kvec {

// y[n, w.n_out] = x[n, w.n_in] . W^T. Parallel over output rows with OpenMP; each weight row is
// dequantised once per block of activation rows (prefill is matrix-matrix work).
void matmul(const float* x, int64_t n, const WeightView& w, float* y);

// y[n, w->n_out] = x[n, k] . W^T for each weight that reads the same input (Q, K, V; gate, up):
// the bits of matmul() on each, but decode on panels (WeightView::panels; up to 4 weights) runs
// all their rows in one parallel pass (one fork and join, the threads' chunks spread over them).
struct MatmulOut {
    const WeightView* w;
    float* y;  // [n, w->n_out]
};
void matmul_group(const float* x, int64_t n, std::span<const MatmulOut> outs);

// The float tile kernel used by the blocked path (and by attention for q.K^T of F32 caches):
//   y[i * ldy + j] = dot(x + i * ldx, w + j * ldw, k)   for i < nx, j < nw.
using TileKernel = void (*)(const float* x, int64_t nx, int64_t ldx, const float* w, int64_t nw,
                            int64_t ldw, int64_t k, float* y, int64_t ldy);

// The tile kernel in use (of the active kernel family, tensor/dispatch.h).
TileKernel tile_kernel();

// dst[n] = the fp16 values src[n] as float (F16C when the CPU has it). Used for F16 KV caches.
void convert_fp16_to_fp32(const uint16_t* src, float* dst, int64_t n);

// Sum of p[0..n) read as fast as the CPU allows (AVX2 when active): the inner loop of a
// streaming-read bandwidth measurement (`kvec bench`). Call it on disjoint slices per thread.
uint64_t stream_read_sum(const uint64_t* p, int64_t n);

// A one-line description of the active dispatch ("avx2+fma tiles, dequantise per block").
std::string matmul_backend_description();

}  // namespace kvec
