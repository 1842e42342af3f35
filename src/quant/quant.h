// Conversions between float32 and every supported tensor type, one row at a time.
// These are the scalar reference implementations: clear, exact about the block layouts that
// llama.cpp's quantiser writes, and the baseline every optimised kernel is tested against.
#pragma once

#include <cstdint>

#include "gguf/ggml_type.h"

namespace kvec::quant {

// dst[0..n) = values encoded in src. n must be a multiple of the type's block size.
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);

// Encodes src[0..n) into dst (ggml_row_size(type, n) bytes). Produces blocks in llama.cpp's
// layout, which llama.cpp and this engine both decode; round-trip error is what the type allows.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

// The same in one pass, as llama.cpp writes rows it quantises while it runs (its CPU from_float:
// KV cache entries): quantize_row for every type but IQ4_NL, whose scale is fitted once to the
// levels nearest at max / -127 instead of searched (llama.cpp's quantize_row_iq4_nl_ref).
void quantize_row_one_pass(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace kvec::quant
