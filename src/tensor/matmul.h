// Matrix multiplication of float32 activations by a weight matrix of any supported type:
//   y[n, w.n_out] = x[n, w.n_in] . W^T      (W stored as GGUF rows: ne[0] = n_in, ne[1] = n_out)
//
// Dispatch point. matmul() picks an implementation per weight type from a table filled once at
// start-up according to the CPU (today: the blocked dequantise-then-multiply path for every type,
// with an AVX2+FMA or a generic float tile kernel). A later SIMD int8/bf16 kernel registers here
// for its types without touching callers. Every implementation is tested against ref::matmul.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/weight.h"

namespace kvec {

// y[n, w.n_out] = x[n, w.n_in] . W^T. Parallel over output rows with OpenMP; each weight row is
// dequantised once per block of activation rows (prefill is matrix-matrix work).
void matmul(const float* x, int64_t n, const WeightView& w, float* y);

// The float tile kernel used by the blocked path (and by attention for q.K^T):
//   y[i * ldy + j] = dot(x + i * ldx, w + j * ldw, k)   for i < nx, j < nw.
using TileKernel = void (*)(const float* x, int64_t nx, int64_t ldx, const float* w, int64_t nw,
                            int64_t ldw, int64_t k, float* y, int64_t ldy);

enum class CpuKernel { Generic, Avx2 };

// The tile kernel in use (chosen from the CPU on first use).
TileKernel tile_kernel();
CpuKernel active_cpu_kernel();
const char* cpu_kernel_name(CpuKernel kernel);
bool cpu_kernel_supported(CpuKernel kernel);
// Forces a kernel (tests compare kernels; throws kvec::Error if the CPU lacks it).
void set_cpu_kernel(CpuKernel kernel);

// dst[n] = the fp16 values src[n] as float (F16C when the CPU has it). Used for F16 KV caches.
void convert_fp16_to_fp32(const uint16_t* src, float* dst, int64_t n);

// A one-line description of the active dispatch ("avx2+fma tiles, dequantise per block").
std::string matmul_backend_description();

}  // namespace kvec
