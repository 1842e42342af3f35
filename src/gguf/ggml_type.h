// Tensor element types as numbered in GGUF files (ggml_type), with their block geometry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvec {

enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ4_NL = 20,
    IQ4_XS = 23,
    BF16 = 30,
    MXFP4 = 39,
};

struct GgmlTypeTraits {
    const char* name;    // "q4_K", as llama.cpp prints it
    int64_t block_size;  // elements per block (1 for F32/F16/BF16)
    size_t type_size;    // bytes per block
    bool quantized;
};

// Traits of a type the engine supports; std::nullopt for any other numeric value
// (a GGUF file may name types this engine does not implement).
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type);
const GgmlTypeTraits& ggml_type_traits(GgmlType type);

// Parses "q4_k", "Q8_0", "f16", "bf16"... (case-insensitive); std::nullopt if unknown.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);
const char* ggml_type_name(GgmlType type);

// Bytes of a row of n elements; n must be a multiple of the block size.
size_t ggml_row_size(GgmlType type, int64_t n);

// Alignment in bytes the kernels read a block of this type with: 4 for F32 and Q8_K (a float
// scale), 1 for MXFP4 (17-byte blocks of bytes), 2 for every other type (F16/BF16 elements or an
// f16 scale first in each block).
size_t ggml_type_alignment(GgmlType type);

}  // namespace kvec
