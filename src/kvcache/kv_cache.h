// KV cache designed for eviction: for every layer and every KV head, a compact variable-length
// list of entries (post-RoPE key [head_dim], value [head_dim], original position int32, and
// n_aux auxiliary floats). Heads of one layer may hold different numbers of entries.
//
// Element types (KvType): keys and values each have their own, f32, f16, bf16 or a block-quantised
// type (q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl: ggml's block layouts, quant/blocks.h). A key or value is one
// row of head_dim elements, head_dim / 32 whole blocks for a quantised type (a head_dim that is not
// a multiple of 32 is refused), so compaction moves whole rows and eviction is the same for every
// type. Rows are quantised on append() and reposition() (quant::quantize_row_one_pass, as llama.cpp's
// cache) and dequantised by
// read_keys() / read_values().
//
// Rotation (as llama.cpp since its commit of PR 21038, attn_rot_k / attn_rot_v): a quantised key
// type on a head_dim that is a multiple of 64 stores H k instead of k, with H the orthonormal
// Walsh-Hadamard matrix of the largest power of two n >= 64 dividing head_dim, applied to each n
// consecutive elements; a quantised value type stores H v with n = 64. H spreads a row's outliers
// over its elements, which usually lets the blocks round with less loss (not always: on one
// held-out text 4-bit keys lost more; docs/evaluation.md). H is symmetric and its own inverse, and
// preserves dot products: attention scores the queries rotated the same way (rotate_queries),
// and takes the weighted sum of the stored values back with H (unrotate_outputs). read_keys() and
// read_values() return the rows unrotated, reposition() takes them unrotated, so that nothing but
// the attention kernels sees the rotation. KVEC_KV_ROTATION=0 in the environment switches it off
// for caches made afterwards (llama.cpp: LLAMA_ATTN_ROT_DISABLE=1).
//
// Memory is real: compact() moves the kept entries together and shrinks the allocation to
// exactly the kept count, so bytes() drops; there are no masks. bytes() reports exactly the bytes
// allocated for entries (capacity x entry size, summed over layers and heads); used_bytes() the
// bytes of live entries; peak_bytes() the largest bytes() seen since construction or
// reset_peak().
//
// Growth: append() of one entry (decoding) into a full head grows its allocation by max(16
// entries, 1/8 of the capacity), so decoding reallocates rarely and over-allocation stays below
// max(16 entries, 12.5%). append() of several
// entries (a prefill chunk) allocates exactly the needed size, so that the peak of chunked prefill
// with eviction is exactly budget + chunk entries per head.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "gguf/ggml_type.h"

namespace kvec {

// y = H_n x for each n consecutive elements of x [count] (count a multiple of n, n a power of
// two): H_n the orthonormal Walsh-Hadamard matrix of Sylvester's construction, H_2m = [[H_m, H_m],
// [H_m, -H_m]] / sqrt(2), symmetric and its own inverse (a fast transform, n log2 n additions).
void hadamard_rotate(float* x, int64_t count, int n);

// The element type of cached keys or values: one of kKvTypes.
using KvType = GgmlType;

// The types a cache may hold, in the order --cache-type-k/-v list them.
inline constexpr KvType kKvTypes[] = {KvType::F32,  KvType::F16,  KvType::BF16, KvType::Q8_0,
                                      KvType::Q4_0, KvType::Q4_1, KvType::Q5_0, KvType::Q5_1,
                                      KvType::IQ4_NL};

// "f16", "q8_0"..., as llama.cpp spells them.
const char* kv_type_name(KvType type);
// "f32, f16, bf16, q8_0, ..." (for help texts and error messages).
const char* kv_type_list();
// Parses a type name (case-insensitive); kvec::Error naming `what` (a flag) and the allowed types
// otherwise.
KvType parse_kv_type(std::string_view name, std::string_view what);
// Bytes of one key or value of head_dim elements; kvec::Error if the type is not a cache type or
// cannot hold head_dim elements in whole blocks (the message names both).
size_t kv_row_bytes(KvType type, int head_dim);

struct KvCacheConfig {
    int n_layer = 0;
    int n_head_kv = 0;
    int head_dim = 0;
    KvType key_type = KvType::F16;    // element type of the keys
    KvType value_type = KvType::F16;  // element type of the values
    int n_aux = 0;                    // auxiliary float scores per entry (moved by compact())
};

class KvCache {
public:
    explicit KvCache(const KvCacheConfig& config);
    ~KvCache();
    KvCache(KvCache&&) noexcept;
    KvCache& operator=(KvCache&&) noexcept;
    KvCache(const KvCache&) = delete;
    KvCache& operator=(const KvCache&) = delete;

    const KvCacheConfig& config() const { return config_; }
    int n_layer() const { return config_.n_layer; }
    int n_head_kv() const { return config_.n_head_kv; }
    int head_dim() const { return config_.head_dim; }
    int n_aux() const { return config_.n_aux; }

    // Entries and allocated entries of one (layer, head).
    int32_t size(int layer, int head) const;
    int32_t capacity(int layer, int head) const;
    int64_t total_entries() const;  // over all layers and heads

    // Appends n entries to (layer, head). Row t of the keys is keys[t * key_stride .. + head_dim)
    // (likewise values); positions [n]. Converted to the element type; aux of new entries = 0.
    void append(int layer, int head, int32_t n, const float* keys, int64_t key_stride,
                const float* values, int64_t value_stride, const int32_t* positions);

    // Keeps entries keep[0..k) (strictly increasing indices < size), in that order, and frees
    // the rest: afterwards size == capacity == k. Throws kvec::Error on a bad index list.
    void compact(int layer, int head, std::span<const int32_t> keep);

    // Overwrites the keys of entries [begin, end) with keys [end - begin, head_dim] (converted to
    // the element type: a quantised cache requantises the rows, so the caller's rotation of
    // read_keys()'s dequantised rows costs one more rounding) and their positions with positions [end - begin], which must keep the
    // head's positions strictly increasing (kvec::Error otherwise; nothing changes then). Used to
    // re-rotate kept keys to new positions.
    void reposition(int layer, int head, int32_t begin, int32_t end, const float* keys,
                    const int32_t* positions);

    // Replaces the entries of (layer, head), which must be empty, by n stored rows: keys and values
    // as key_data() / value_data() hold them ([n] rows of the element type's bytes), positions
    // [n] (>= 0, strictly increasing), aux [n_aux][n] (empty: zeros). Restores a saved cache
    // (engine/session_file.h). kvec::Error on a non-empty head or bad positions (nothing changes).
    void assign(int layer, int head, int32_t n, const void* keys, const void* values, const int32_t* positions,
                std::span<const float> aux);
    // Drops every entry and frees all memory (peak is kept).
    void clear();

    // Original positions of the entries: [size].
    const int32_t* positions(int layer, int head) const;

    // The n of the keys' and values' rotation (0: stored as they are).
    int key_rotation() const { return key_rot_; }
    int value_rotation() const { return value_rot_; }
    // Query rows [count floats, a multiple of head_dim] into the keys' rotated space, and the
    // attention outputs (weighted sums of stored values) out of the values'; nothing without a
    // rotation.
    void rotate_queries(float* q, int64_t count) const;
    void unrotate_outputs(float* out, int64_t count) const;

    // Keys / values of entries [begin, end) as float (dequantised): out [end - begin, head_dim].
    void read_keys(int layer, int head, int32_t begin, int32_t end, float* out) const;
    void read_values(int layer, int head, int32_t begin, int32_t end, float* out) const;

    // Raw storage: [size] rows of kv_row_bytes(type, head_dim) bytes (floats, fp16 / bf16 bits,
    // or head_dim / 32 ggml blocks).
    const void* key_data(int layer, int head) const;
    const void* value_data(int layer, int head) const;
    // For F32 keys / values: the keys / values as float [size, head_dim]; nullptr otherwise.
    const float* keys_f32(int layer, int head) const;
    const float* values_f32(int layer, int head) const;

    // Auxiliary score a of the entries: [size] (requires a < n_aux). Invalidated by append,
    // compact and clear.
    float* aux(int layer, int head, int a);
    const float* aux(int layer, int head, int a) const;

    // Bytes of one entry: key row + value row + 4 (position) + 4 * n_aux.
    size_t entry_bytes() const;
    size_t bytes() const { return bytes_; }            // allocated, exactly
    size_t used_bytes() const;                         // live entries only
    size_t peak_bytes() const { return peak_bytes_; }  // largest bytes() so far
    void reset_peak() { peak_bytes_ = bytes_; }

private:
    struct Head;
    Head& head(int layer, int head);
    const Head& head(int layer, int head) const;
    void reallocate(Head& h, int32_t new_capacity);

    KvCacheConfig config_;
    size_t key_row_ = 0;    // bytes of one key: kv_row_bytes(key_type, head_dim)
    size_t value_row_ = 0;  // bytes of one value
    int key_rot_ = 0;       // key_rotation()
    int value_rot_ = 0;     // value_rotation()
    std::vector<Head> heads_;  // [n_layer * n_head_kv]
    size_t bytes_ = 0;
    size_t peak_bytes_ = 0;
};

}  // namespace kvec
