// Attention of the query heads that share one KV head, over that head's cache entries as stored
// (F32 or F16; no float copy of the cache):
//
//   p[i, j]  = softmax over j < n_vis of  scale * (q_i . k_j)      i < nq query rows
//   out[i]   = sum over j < n_vis of  p[i, j] * v_j
//
// The probability rows p are returned to the caller (the engine derives the eviction policies'
// observations from them: column sums, window means, last rows).
//
// Dispatch: the AVX2 kernels (kernels_avx2.cpp) read F16 keys and values in place and convert
// them in registers (F16C) inside the dot-product and accumulation loops; the generic kernels
// (kernels_generic.cpp) convert a block of kEntryBlock entries at a time into a small buffer.
// Both walk the entries in blocks of kEntryBlock so that a block stays in L1 while every query
// row passes over it. ref::attention (reference.h) is the scalar reference the tests use.
#pragma once

#include <cstdint>

#include "gguf/ggml_type.h"

namespace kvec {

// One KV head's entries as the cache stores them: rows of head_dim elements, head_dim apart.
struct KvHeadData {
    GgmlType type = GgmlType::F16;  // F32 or F16 (anything else: kvec::Error)
    const void* keys = nullptr;     // [n, head_dim]
    const void* values = nullptr;   // [n, head_dim] (unused by attention_probs)
    int head_dim = 0;
};

// Entries per block of the kernels' walk over the cache (128 x 64 F16 keys = 16 KiB).
constexpr int32_t kEntryBlock = 128;

// p [nq, ldp] (columns < n_vis written) = the probability rows above for the query rows
// q [nq, head_dim] (rows ldq apart); n_vis >= 1 entries of kv are visible to every row.
void attention_probs(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis,
                     float scale, float* p, int64_t ldp);

// attention_probs, then out [nq, head_dim] (rows ldo apart) = the weighted sums of the values.
void attention(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis, float scale,
               float* p, int64_t ldp, float* out, int64_t ldo);

}  // namespace kvec
