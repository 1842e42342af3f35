// Kernel dispatch in one place: what the CPU can run (probed once), which kernel family and
// matmul precision are active, and the AVX-512 switch. Every kernel file asks here (ops,
// attention, the int8 and bf16 kernels, matmul), none asks another kernel file.
#pragma once

namespace kvec {

// The CPU's features the kernels use, read once (CPUID).
struct CpuFeatures {
    bool avx2_fma_f16c = false;  // the AVX2 kernel family (kernels_avx2.cpp)
    bool avx512f = false;
    bool avx512bw = false;
    bool avx512vl = false;
    bool avx512vnni = false;
    bool avx512bf16 = false;
};
const CpuFeatures& cpu_features();

enum class CpuKernel { Generic, Avx2 };

// The kernel family in use (chosen from the CPU on first use).
CpuKernel active_cpu_kernel();
const char* cpu_kernel_name(CpuKernel kernel);
bool cpu_kernel_supported(CpuKernel kernel);
// Forces a kernel (tests compare kernels; throws kvec::Error if the CPU lacks it).
void set_cpu_kernel(CpuKernel kernel);

// Precision of matmul() for quantised weights.
//   Fast:  with fewer than kernels::kPackedMinRows rows (decode), activations are quantised to
//          int8 (blocks of 32, one float scale each) and multiplied with int8 dot products (as
//          llama.cpp does, which quantises them in blocks of 256 for the K-quants; see
//          int8_gemm.h for the error bound). Prefill of the types whose values fit in 6 bits
//          (int8::panel_fits_six_bits: the legacy 4/5-bit types and Q2_K..Q6_K) is int8 too.
//          The other types' prefill is float32, except on
//          CPUs with AVX-512 VNNI (quantised types: int8 as in decode, from 5 rows on) and
//          AVX-512 BF16 (F16 and BF16 weights from 5 rows on: both operands rounded to bf16,
//          bf16_gemm.h), so results there differ slightly from other CPUs'. The default on CPUs
//          with AVX2; elsewhere matmul() is exact.
//   Exact: weights dequantised to float and multiplied in float32 (what the PyTorch reference
//          computes; the parity tests use it), on every CPU.
// The initial value comes from the environment: KVEC_MATMUL=exact selects Exact.
// F32 weights are always multiplied in float32, F16/BF16 too except in Fast prefill (above).
enum class MatmulPrecision { Fast, Exact };
void set_matmul_precision(MatmulPrecision precision);
MatmulPrecision matmul_precision();

namespace kernels {
// Where the CPU has AVX-512F, the prepacked tiles use 512-bit vectors against 32-row panels and
// one-row F16/BF16 decode reads each weight row as one 512-bit stream (on by default there; the
// environment variable KVEC_AVX512=0 keeps the 256-bit kernels, and with them the VNNI and BF16
// kernels). Tests switch between the two; switching on where the CPU lacks AVX-512F throws
// kvec::Error.
bool avx512_supported();
bool avx512_enabled();
void set_avx512(bool on);
}  // namespace kernels

}  // namespace kvec
