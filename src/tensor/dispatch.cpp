#include "tensor/dispatch.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/cpu.h"
#include "util/error.h"

namespace kvec {

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = [] {
        CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_cpu_init();
        f.avx2_fma_f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
        f.avx512f = __builtin_cpu_supports("avx512f");
        f.avx512bw = __builtin_cpu_supports("avx512bw");
        f.avx512vl = __builtin_cpu_supports("avx512vl");
        f.avx512vnni = __builtin_cpu_supports("avx512vnni");
        f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
        return f;
    }();
    return features;
}

namespace {

std::atomic<CpuKernel>& kernel_choice() {
    static std::atomic<CpuKernel> choice{cpu_features().avx2_fma_f16c ? CpuKernel::Avx2 : CpuKernel::Generic};
    return choice;
}

std::atomic<MatmulPrecision>& precision_choice() {
    static std::atomic<MatmulPrecision> choice{[] {
        const char* v = std::getenv("KVEC_MATMUL");
        return v != nullptr && std::strcmp(v, "exact") == 0 ? MatmulPrecision::Exact : MatmulPrecision::Fast;
    }()};
    return choice;
}

// AVX-512 kernels exist only where the AVX2 kernel file was built with vector instructions (x86-64).
bool avx512_built() {
#if defined(__x86_64__) || defined(_M_X64)
    return true;
#else
    return false;
#endif
}

// On where the CPU has AVX-512F, unless the environment sets KVEC_AVX512=0.
std::atomic<bool>& avx512_choice() {
    static std::atomic<bool> on{kernels::avx512_supported() && [] {
        const char* e = std::getenv("KVEC_AVX512");
        return e == nullptr || std::string(e) != "0";
    }()};
    return on;
}

}  // namespace

CpuKernel active_cpu_kernel() { return kernel_choice().load(std::memory_order_relaxed); }

const char* cpu_kernel_name(CpuKernel kernel) { return kernel == CpuKernel::Avx2 ? "avx2+fma+f16c" : "generic"; }

bool cpu_kernel_supported(CpuKernel kernel) { return kernel == CpuKernel::Generic || cpu_features().avx2_fma_f16c; }

void set_cpu_kernel(CpuKernel kernel) {
    if (!cpu_kernel_supported(kernel)) fail("this CPU does not support the {} kernel", cpu_kernel_name(kernel));
    kernel_choice().store(kernel, std::memory_order_relaxed);
}

void set_matmul_precision(MatmulPrecision p) { precision_choice().store(p, std::memory_order_relaxed); }

MatmulPrecision matmul_precision() { return precision_choice().load(std::memory_order_relaxed); }

namespace kernels {

bool avx512_supported() { return avx512_built() && cpu_features().avx512f; }
bool avx512_enabled() { return avx512_choice().load(std::memory_order_relaxed); }
void set_avx512(bool on) {
    if (on && !avx512_built()) fail("this build has no AVX-512 kernels");
    if (on && !avx512_supported()) fail("this CPU has no AVX-512F");
    avx512_choice().store(on, std::memory_order_relaxed);
}

}  // namespace kernels

}  // namespace kvec
