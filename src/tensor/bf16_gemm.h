// bfloat16 dot products for prefill with F16 / BF16 weights (AVX-512 BF16: vdpbf16ps multiplies
// 32 bf16 pairs into 16 float lanes per instruction, twice the multiply-adds of a 512-bit FMA).
//
// Both operands are rounded to bfloat16 (round to nearest even; F16 weights go through float,
// exactly), the products are summed in float. This is Fast precision (matmul.h): each product is
// off by at most about 2^-8 of |x_e w_e| (two roundings of 2^-9), so
//     |y_bf16 - y_exact| <= sum_e |x_e w_e| * 2^-8  (+ float rounding)
// which the tests use as the tolerance; KVEC_MATMUL=exact keeps float32 products.
//
// Layout: activations are converted once per matmul to rows of bf16 pairs, ld = padded(k)
// elements (a zero in the pad when k is odd). The kernel converts and transposes its weight rows
// into panels of 16 rows, one dword (a bf16 pair) per row and pair index:
//     panel[p * 16 + r] = (bf16 w[r][2p], bf16 w[r][2p + 1])
// and broadcasts one activation pair against it.
#pragma once

#include <cstdint>

namespace kvec::bf16 {

// The CPU has AVX-512F, BW, VL and BF16.
bool supported();
// Supported and AVX-512 not switched off (kernels::set_avx512, KVEC_AVX512=0).
bool enabled();

// Elements per converted activation row: k rounded up to whole pairs.
inline int64_t padded(int64_t k) { return (k + 1) & ~int64_t{1}; }

// x [n, k] floats -> xb [n, padded(k)] bf16 (round to nearest even, zero pad). Only when
// supported(); the instruction flushes denormal inputs to zero.
void convert_rows(const float* x, int64_t n, int64_t k, uint16_t* xb);

// y[i * ldy + j] = sum_e xb[i, e] * w[j, e] for i < nx, j < nw: xb rows padded(k) apart, weight
// rows ldw elements apart, F16 (w_is_f16) or BF16. Only when supported().
void gemm(const uint16_t* xb, int64_t nx, const uint16_t* w, int64_t ldw, bool w_is_f16, int64_t nw, int64_t k,
          float* y, int64_t ldy);

// Scalar reference of gemm: the same bf16 roundings (float_to_bf16), products summed in double.
void gemm_ref(const uint16_t* xb, int64_t nx, const uint16_t* w, int64_t ldw, bool w_is_f16, int64_t nw, int64_t k,
              float* y, int64_t ldy);

}  // namespace kvec::bf16
