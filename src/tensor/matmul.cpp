#include "tensor/matmul.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/ops.h"
#include "util/error.h"

namespace kvec {

namespace {

// Weight rows dequantised together: two 16-wide panels of the packed AVX2 kernel; 32 rows of
// 5632 floats = 704 KiB stay inside a 1 MiB L2.
constexpr int64_t kWeightBlock = 32;
// Activation rows per block: each weight block is dequantised once per activation block.
constexpr int64_t kActBlock = 256;

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    return false;
#endif
}

CpuKernel detect_kernel() { return cpu_has_avx2() ? CpuKernel::Avx2 : CpuKernel::Generic; }

std::atomic<CpuKernel>& kernel_choice() {
    static std::atomic<CpuKernel> choice{detect_kernel()};
    return choice;
}

TileKernel tile_for(CpuKernel k) {
    return k == CpuKernel::Avx2 ? &kernels::tile_avx2 : &kernels::tile_generic;
}

// Blocked path: dequantise kWeightBlock rows into a thread-local buffer (F32 weights are used in
// place), then multiply them with a block of activation rows using the tile kernel.
void matmul_blocked(const float* x, int64_t n, const WeightView& w, float* y) {
    const TileKernel tile = tile_kernel();
    const int64_t n_wb = (w.n_out + kWeightBlock - 1) / kWeightBlock;
    const int64_t n_ab = (n + kActBlock - 1) / kActBlock;
    const bool in_place = w.type == GgmlType::F32;
    const int64_t work = n * w.n_out * w.n_in;
#pragma omp parallel if (work >= (1 << 20))  // below ~1M multiply-adds a team costs more
    {
        std::vector<float> wbuf;  // [kWeightBlock, n_in] dequantised weights
        if (!in_place) wbuf.resize(static_cast<size_t>(kWeightBlock * w.n_in));
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t ab = 0; ab < n_ab; ++ab) {
            for (int64_t wb = 0; wb < n_wb; ++wb) {
                const int64_t a0 = ab * kActBlock, a1 = std::min(n, a0 + kActBlock);
                const int64_t r0 = wb * kWeightBlock, r1 = std::min(w.n_out, r0 + kWeightBlock);
                const float* wp;
                if (in_place) {
                    wp = reinterpret_cast<const float*>(w.row(r0));
                } else {
                    for (int64_t r = r0; r < r1; ++r) {
                        ops::dequantize_weight_row(w, r, wbuf.data() + (r - r0) * w.n_in);
                    }
                    wp = wbuf.data();
                }
                tile(x + a0 * w.n_in, a1 - a0, w.n_in, wp, r1 - r0, w.n_in, w.n_in,
                     y + a0 * w.n_out + r0, w.n_out);
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

using MatmulFn = void (*)(const float* x, int64_t n, const WeightView& w, float* y);

// Per-type implementation table: the blocked dequantising path for every type, plus kernels that
// read a type's blocks in place. Further type-specialised kernels (int8 dot products on
// quantised activations, bf16) register here.
MatmulFn implementation_for(GgmlType type) {
    switch (type) {
        case GgmlType::Q8_0:
            return &matmul_q8_0;
        default:
            return &matmul_blocked;
    }
}

}  // namespace

TileKernel tile_kernel() { return tile_for(kernel_choice().load(std::memory_order_relaxed)); }

CpuKernel active_cpu_kernel() { return kernel_choice().load(std::memory_order_relaxed); }

const char* cpu_kernel_name(CpuKernel kernel) {
    return kernel == CpuKernel::Avx2 ? "avx2+fma+f16c" : "generic";
}

bool cpu_kernel_supported(CpuKernel kernel) {
    return kernel == CpuKernel::Generic || cpu_has_avx2();
}

void set_cpu_kernel(CpuKernel kernel) {
    if (!cpu_kernel_supported(kernel)) fail("this CPU does not support the {} kernel", cpu_kernel_name(kernel));
    kernel_choice().store(kernel, std::memory_order_relaxed);
}

std::string matmul_backend_description() {
    const bool avx2 = active_cpu_kernel() == CpuKernel::Avx2;
    return std::string(cpu_kernel_name(active_cpu_kernel())) + " float tiles, weights dequantised per block" +
           (avx2 ? ", fused q8_0 decode" : "");
}

void convert_fp16_to_fp32(const uint16_t* src, float* dst, int64_t n) {
    if (active_cpu_kernel() == CpuKernel::Avx2) {
        kernels::fp16_to_fp32_f16c(src, dst, n);
    } else {
        kernels::fp16_to_fp32_generic(src, dst, n);
    }
}

void matmul(const float* x, int64_t n, const WeightView& w, float* y) {
    KVEC_CHECK(w.data != nullptr && w.n_in > 0 && w.n_out > 0);
    if (n <= 0) return;
    implementation_for(w.type)(x, n, w, y);
}

}  // namespace kvec
