#include "tensor/attention.h"

#include <algorithm>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/matmul.h"
#include "tensor/ops.h"
#include "util/error.h"

namespace kvec {

namespace {

// The kernels of one block of n <= kEntryBlock entries (rows d elements apart):
//   scores: y[i * ldy + j] = dot(q_i, k_j);   values: out[i * ldo + e] += sum_j p[i * ldp + j] v[j, e]
struct BlockKernels {
    void (*scores)(const float* q, int64_t nq, int64_t ldq, const void* k, int64_t n, int64_t d, float* y,
                   int64_t ldy);
    void (*values)(const float* p, int64_t nq, int64_t ldp, const void* v, int64_t n, int64_t d, float* out,
                   int64_t ldo);
};

const float* as_f32(const void* p) { return static_cast<const float*>(p); }
const uint16_t* as_f16(const void* p) { return static_cast<const uint16_t*>(p); }

// Generic F16: the block converted to float in a grow-only thread-local buffer [n, d].
const float* block_to_f32(const void* rows, int64_t n, int64_t d) {
    thread_local std::vector<float> buf;  // [kEntryBlock, d]
    if (buf.size() < static_cast<size_t>(n * d)) buf.resize(static_cast<size_t>(n * d));
    kernels::fp16_to_fp32_generic(as_f16(rows), buf.data(), n * d);
    return buf.data();
}

constexpr BlockKernels kAvx2F32 = {
    [](const float* q, int64_t nq, int64_t ldq, const void* k, int64_t n, int64_t d, float* y, int64_t ldy) {
        kernels::tile_avx2(q, nq, ldq, as_f32(k), n, d, d, y, ldy);
    },
    [](const float* p, int64_t nq, int64_t ldp, const void* v, int64_t n, int64_t d, float* out, int64_t ldo) {
        kernels::attention_values_f32_avx2(p, nq, ldp, as_f32(v), n, d, out, ldo);
    }};

constexpr BlockKernels kAvx2F16 = {
    [](const float* q, int64_t nq, int64_t ldq, const void* k, int64_t n, int64_t d, float* y, int64_t ldy) {
        kernels::matmul_f16_avx2(q, nq, ldq, as_f16(k), d, n, d, y, ldy);
    },
    [](const float* p, int64_t nq, int64_t ldp, const void* v, int64_t n, int64_t d, float* out, int64_t ldo) {
        kernels::attention_values_f16_avx2(p, nq, ldp, as_f16(v), n, d, out, ldo);
    }};

constexpr BlockKernels kGenericF32 = {
    [](const float* q, int64_t nq, int64_t ldq, const void* k, int64_t n, int64_t d, float* y, int64_t ldy) {
        kernels::tile_generic(q, nq, ldq, as_f32(k), n, d, d, y, ldy);
    },
    [](const float* p, int64_t nq, int64_t ldp, const void* v, int64_t n, int64_t d, float* out, int64_t ldo) {
        kernels::attention_values_generic(p, nq, ldp, as_f32(v), n, d, out, ldo);
    }};

constexpr BlockKernels kGenericF16 = {
    [](const float* q, int64_t nq, int64_t ldq, const void* k, int64_t n, int64_t d, float* y, int64_t ldy) {
        kernels::tile_generic(q, nq, ldq, block_to_f32(k, n, d), n, d, d, y, ldy);
    },
    [](const float* p, int64_t nq, int64_t ldp, const void* v, int64_t n, int64_t d, float* out, int64_t ldo) {
        kernels::attention_values_generic(p, nq, ldp, block_to_f32(v, n, d), n, d, out, ldo);
    }};

size_t element_size(const KvHeadData& kv) {
    if (kv.type == GgmlType::F32) return 4;
    if (kv.type == GgmlType::F16) return 2;
    fail("attention: the KV cache element type must be f32 or f16, got {}", ggml_type_traits(kv.type).name);
}

const BlockKernels& block_kernels(const KvHeadData& kv) {
    const bool f16 = element_size(kv) == 2;
    if (active_cpu_kernel() == CpuKernel::Avx2) return f16 ? kAvx2F16 : kAvx2F32;
    return f16 ? kGenericF16 : kGenericF32;
}

// Entry j of a [n, head_dim] array of the cache's element type.
const void* entry(const KvHeadData& kv, const void* rows, int32_t j) {
    return static_cast<const uint8_t*>(rows) + static_cast<size_t>(j) * static_cast<size_t>(kv.head_dim) * element_size(kv);
}

void check_args(int64_t nq, const KvHeadData& kv, int32_t n_vis, int64_t ldp) {
    KVEC_CHECK(nq >= 0 && kv.head_dim > 0 && kv.keys != nullptr && n_vis >= 1 && ldp >= n_vis);
}

void probs(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis, float scale, float* p,
           int64_t ldp, const BlockKernels& k) {
    const int64_t D = kv.head_dim;
    for (int32_t j0 = 0; j0 < n_vis; j0 += kEntryBlock) {
        const int32_t n = std::min(kEntryBlock, n_vis - j0);
        k.scores(q, nq, ldq, entry(kv, kv.keys, j0), n, D, p + j0, ldp);
    }
    for (int64_t i = 0; i < nq; ++i) {
        float* row = p + i * ldp;  // [n_vis]
        for (int32_t j = 0; j < n_vis; ++j) row[j] *= scale;
        ops::softmax(row, n_vis);
    }
}

}  // namespace

void attention_probs(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis, float scale,
                     float* p, int64_t ldp) {
    check_args(nq, kv, n_vis, ldp);
    probs(q, nq, ldq, kv, n_vis, scale, p, ldp, block_kernels(kv));
}

void attention(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis, float scale, float* p,
               int64_t ldp, float* out, int64_t ldo) {
    check_args(nq, kv, n_vis, ldp);
    KVEC_CHECK(kv.values != nullptr);
    const BlockKernels& k = block_kernels(kv);
    probs(q, nq, ldq, kv, n_vis, scale, p, ldp, k);
    const int64_t D = kv.head_dim;
    for (int64_t i = 0; i < nq; ++i) std::fill(out + i * ldo, out + i * ldo + D, 0.0f);
    for (int32_t j0 = 0; j0 < n_vis; j0 += kEntryBlock) {
        const int32_t n = std::min(kEntryBlock, n_vis - j0);
        k.values(p + j0, nq, ldp, entry(kv, kv.values, j0), n, D, out, ldo);
    }
}

}  // namespace kvec
