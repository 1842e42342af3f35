// Scalar parts of the decode kernels (int8_decode.h): the layouts,
// the activations' preparation and the choice of kernel. Compiled for the baseline
// ISA; the kernels themselves are int8_decode_avx2.cpp and int8_decode_avx512.cpp.
#include "tensor/int8_decode.h"

#include <cstring>

#include "tensor/kernels.h"
#include "tensor/dispatch.h"
#include "util/error.h"

namespace kvec::int8::decode {

const Layout& layout(GgmlType type) {
    switch (type) {
        case GgmlType::Q4_0:
        case GgmlType::Q4_1:
        case GgmlType::Q5_0:
        case GgmlType::Q5_1:
        case GgmlType::IQ4_NL:
        case GgmlType::MXFP4:
            return kLegacyLayout;
        case GgmlType::IQ4_XS:
            return kIq4XsLayout;
        case GgmlType::Q8_0:
            return kQ8_0Layout;
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
            return kQ2KLayout;
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
            return kQ4KLayout;
        case GgmlType::Q6_K:
            return kQ6KLayout;
        default:
            fail("weight type {} has no decode kernel", ggml_type_name(type));
    }
}

void prepare_rows(GgmlType type, const QuantRows& x, int64_t n, int8_t* q, float* dx, float* xs) {
    const Layout& L = layout(type);
    KVEC_CHECK(x.qsum != nullptr && x.k % kBlock == 0);
    const int64_t k = x.k, nb = k / kBlock, ns = k / L.sub, full = k / L.group * L.group;
    for (int64_t r = 0; r < n; ++r) {
        const int8_t* src = x.q + r * k;  // [k] natural order
        int8_t* dst = q + r * k;          // [k] the kernel's order
        for (int64_t g = 0; g < full; g += L.group) to_kernel_order(L, src + g, dst + g);
        std::memcpy(dst + full, src + full, static_cast<size_t>(k - full));  // the tail in natural order
        float* dr = dx + r * ns;  // [ns]
        float* sr = xs + r * ns;  // [ns]
        for (int64_t b = 0; b < nb; ++b) {
            const float d = x.d[r * nb + b];
            const int32_t s0 = x.qsum[(r * nb + b) * 2], s1 = x.qsum[(r * nb + b) * 2 + 1];
            if (L.sub == kBlock) {
                dr[b] = d;
                sr[b] = d * static_cast<float>(s0 + s1);
            } else {
                dr[2 * b] = dr[2 * b + 1] = d;
                sr[2 * b] = d * static_cast<float>(s0);
                sr[2 * b + 1] = d * static_cast<float>(s1);
            }
        }
    }
}

Kernel kernel_for(GgmlType type, int64_t n) {
    if (active_cpu_kernel() != CpuKernel::Avx2) return nullptr;
    if (!vnni_enabled()) return n <= kMaxRows ? kernel_avx2(type) : nullptr;
    return n <= kMaxVnniRows ? kernel_avx512(type) : nullptr;
}

}  // namespace kvec::int8::decode
