// Scalar parts of the decode kernels (int8_decode.h): the layouts,
// the activations' preparation and the choice of kernel. Compiled for the baseline
// ISA; the kernels themselves are int8_decode_avx2.cpp and int8_decode_avx512.cpp.
#include "tensor/int8_decode.h"

#include <cstring>

#include "quant/blocks.h"
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

Choice kernel_for(const WeightView& w, int64_t n) {
    const Kernel natural = kernel_for(w.type, n);
    if (natural != nullptr && w.decode_rows != nullptr && !vnni_enabled()) {
        if (const Kernel repacked = kernel_avx2_repacked(w.type)) return {repacked, true};
    }
    return {natural, false};
}

namespace {

// Where a legacy block keeps its fields (quant/blocks.h), and where a repacked group keeps them.
struct LegacyFields {
    size_t block;  // bytes per block
    size_t qs;     // offset of the 16 quant bytes
    int qh;        // offset of the 32 fifth bits, or -1
    int m;         // offset of the fp16 min, or -1 (d is at 0)

    size_t scales_at() const { return 64 + (qh >= 0 ? 16 : 0); }  // in a repacked group
};

LegacyFields legacy_fields(GgmlType type) {
    using namespace quant;
    switch (type) {
        case GgmlType::Q4_0: return {sizeof(BlockQ4_0), offsetof(BlockQ4_0, qs), -1, -1};
        case GgmlType::Q4_1: return {sizeof(BlockQ4_1), offsetof(BlockQ4_1, qs), -1, offsetof(BlockQ4_1, m)};
        case GgmlType::Q5_0: return {sizeof(BlockQ5_0), offsetof(BlockQ5_0, qs), offsetof(BlockQ5_0, qh), -1};
        case GgmlType::Q5_1:
            return {sizeof(BlockQ5_1), offsetof(BlockQ5_1, qs), offsetof(BlockQ5_1, qh), offsetof(BlockQ5_1, m)};
        default: fail("weight type {} has no repacked decode rows", ggml_type_name(type));
    }
}

// One group of four blocks (natural [4 * block]) into its repacked form (group [4 * block]).
void repack_group(const LegacyFields& f, const uint8_t* natural, uint8_t* group) {
    const size_t sc = f.scales_at();
    uint8_t* plane = group + 64;  // [16] the fifth bits (Q5_0, Q5_1)
    if (f.qh >= 0) std::memset(plane, 0, 16);
    for (int b = 0; b < 4; ++b) {
        const uint8_t* blk = natural + b * f.block;
        std::memcpy(group + 16 * b, blk + f.qs, 16);
        std::memcpy(group + sc + 2 * b, blk, 2);                          // d
        if (f.m >= 0) std::memcpy(group + sc + 8 + 2 * b, blk + f.m, 2);  // m
        if (f.qh < 0) continue;
        uint32_t qh;
        std::memcpy(&qh, blk + f.qh, 4);
        for (int i = 0; i < 16; ++i) {
            plane[i] = static_cast<uint8_t>(plane[i] | (qh >> i & 1) << (4 + b) | (qh >> (16 + i) & 1) << b);
        }
    }
}

// Bit `bit` of each of the 8 bytes at p as bits 0..7 (byte j: bit j): the masked bits times
// 2^7 + 2^14 + ... + 2^56 meet, one each and without carries, in the top byte.
inline uint32_t byte_bits(const uint8_t* p, int bit) {
    uint64_t x;
    std::memcpy(&x, p, 8);
    return static_cast<uint32_t>(((x >> bit & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56);
}

// The inverse of repack_group (prefill reads the weights through it: no loop over bits).
void restore_group(const LegacyFields& f, const uint8_t* group, uint8_t* natural) {
    const size_t sc = f.scales_at();
    const uint8_t* plane = group + 64;
    for (int b = 0; b < 4; ++b) {
        uint8_t* blk = natural + b * f.block;
        std::memcpy(blk + f.qs, group + 16 * b, 16);
        std::memcpy(blk, group + sc + 2 * b, 2);
        if (f.m >= 0) std::memcpy(blk + f.m, group + sc + 8 + 2 * b, 2);
        if (f.qh < 0) continue;
        const uint32_t qh = byte_bits(plane, 4 + b) | byte_bits(plane + 8, 4 + b) << 8 | byte_bits(plane, b) << 16 |
                            byte_bits(plane + 8, b) << 24;
        std::memcpy(blk + f.qh, &qh, 4);
    }
}

// One row of k elements through `move` group by group (src and dst [row bytes]); the tail blocks
// are copied.
template <class Move>
void move_row(GgmlType type, const uint8_t* src, uint8_t* dst, int64_t k, Move move) {
    KVEC_CHECK(k % kBlock == 0);
    const LegacyFields f = legacy_fields(type);
    const int64_t groups = k / kLegacyLayout.group;
    const size_t group_bytes = 4 * f.block, row_bytes = static_cast<size_t>(k / kBlock) * f.block;
    for (int64_t g = 0; g < groups; ++g) move(f, src + g * group_bytes, dst + g * group_bytes);
    const size_t done = static_cast<size_t>(groups) * group_bytes;
    std::memcpy(dst + done, src + done, row_bytes - done);
}

}  // namespace

void repack_rows(GgmlType type, const uint8_t* w, size_t row_bytes, int64_t n_rows, int64_t k, uint8_t* out) {
    KVEC_CHECK(row_bytes == static_cast<size_t>(k / kBlock) * legacy_fields(type).block);
#pragma omp parallel for schedule(static) if (n_rows * k >= (1 << 20))
    for (int64_t r = 0; r < n_rows; ++r) move_row(type, w + r * row_bytes, out + r * row_bytes, k, repack_group);
}

void restore_row(GgmlType type, const uint8_t* repacked, int64_t k, uint8_t* natural) {
    move_row(type, repacked, natural, k, restore_group);
}

}  // namespace kvec::int8::decode
