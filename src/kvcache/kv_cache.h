// KV cache designed for eviction: for every layer and every KV head, a compact variable-length
// list of entries (post-RoPE key [head_dim], value [head_dim], original position int32, and
// n_aux auxiliary floats). Heads of one layer may hold different numbers of entries.
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
#include <vector>

namespace kvec {

enum class KvType { F32, F16 };

const char* kv_type_name(KvType type);
size_t kv_type_size(KvType type);

struct KvCacheConfig {
    int n_layer = 0;
    int n_head_kv = 0;
    int head_dim = 0;
    KvType type = KvType::F16;  // element type of keys and values
    int n_aux = 0;              // auxiliary float scores per entry (moved by compact())
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
    // the element type) and their positions with positions [end - begin], which must keep the
    // head's positions strictly increasing (kvec::Error otherwise; nothing changes then). Used to
    // re-rotate kept keys to new positions.
    void reposition(int layer, int head, int32_t begin, int32_t end, const float* keys,
                    const int32_t* positions);

    // Drops every entry and frees all memory (peak is kept).
    void clear();

    // Original positions of the entries: [size].
    const int32_t* positions(int layer, int head) const;

    // Keys / values of entries [begin, end) as float: out [end - begin, head_dim].
    void read_keys(int layer, int head, int32_t begin, int32_t end, float* out) const;
    void read_values(int layer, int head, int32_t begin, int32_t end, float* out) const;

    // Raw storage: [size, head_dim] of the element type (float or uint16_t fp16 bits).
    const void* key_data(int layer, int head) const;
    const void* value_data(int layer, int head) const;
    // For KvType::F32 caches: the keys/values as float [size, head_dim]; nullptr otherwise.
    const float* keys_f32(int layer, int head) const;
    const float* values_f32(int layer, int head) const;

    // Auxiliary score a of the entries: [size] (requires a < n_aux). Invalidated by append,
    // compact and clear.
    float* aux(int layer, int head, int a);
    const float* aux(int layer, int head, int a) const;

    // Bytes of one entry: 2 * head_dim * element size + 4 (position) + 4 * n_aux.
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
    std::vector<Head> heads_;  // [n_layer * n_head_kv]
    size_t bytes_ = 0;
    size_t peak_bytes_ = 0;
};

}  // namespace kvec
