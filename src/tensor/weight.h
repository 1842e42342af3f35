// A read-only view of a weight matrix stored as GGUF rows: ne[0] = n_in elements per row (the
// weights of one output feature), ne[1] = n_out rows. The bytes live elsewhere (usually in the
// model's memory mapping); a view never owns or copies them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/ggml_type.h"

namespace kvec {

struct WeightView {
    GgmlType type = GgmlType::F32;
    const uint8_t* data = nullptr;  // [n_out rows of row_bytes]
    int64_t n_in = 0;               // ne[0]: elements per row
    int64_t n_out = 0;              // ne[1]: rows
    size_t row_bytes = 0;           // ggml_row_size(type, n_in)
    // Q8_0, Q4_K, Q6_K: the same rows repacked at load into 16-row panels (int8::pack_load_panels),
    // which the matmul reads instead of `data` where it can (AVX-512 VNNI, fast precision), or null.
    const uint8_t* panels = nullptr;
    // Q4_0, Q4_1, Q5_0, Q5_1 on CPUs with AVX2 but no AVX-512 VNNI: the same rows repacked at load
    // for the decode kernels (int8::decode::repack_rows; row_bytes apart, as `data`), or null.
    const uint8_t* decode_rows = nullptr;

    const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
    bool empty() const { return data == nullptr; }
    // Rows [first, first + n) as a view of their own (one part of a fused projection, one expert);
    // the panels stay with it when `first` starts one, the repacked rows always.
    WeightView rows(int64_t first, int64_t n) const;
};

// Builds a view after checking that n_in is a whole number of the type's blocks
// (throws kvec::Error naming `name` otherwise).
WeightView make_weight_view(const char* name, GgmlType type, const void* data, int64_t n_in,
                            int64_t n_out);

}  // namespace kvec
