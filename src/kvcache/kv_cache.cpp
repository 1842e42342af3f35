#include "kvcache/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "quant/quant.h"
#include "util/error.h"

namespace kvec {

const char* kv_type_name(KvType type) { return ggml_type_name(type); }

const char* kv_type_list() {
    static const std::string list = [] {
        std::string s;
        for (KvType t : kKvTypes) s += (s.empty() ? "" : ", ") + std::string(kv_type_name(t));
        return s;
    }();
    return list.c_str();
}

KvType parse_kv_type(std::string_view name, std::string_view what) {
    const std::optional<GgmlType> t = ggml_type_from_name(name);
    if (t && std::find(std::begin(kKvTypes), std::end(kKvTypes), *t) != std::end(kKvTypes)) return *t;
    fail("{}: '{}' is not a KV cache type ({})", what, name, kv_type_list());
}

size_t kv_row_bytes(KvType type, int head_dim) {
    if (std::find(std::begin(kKvTypes), std::end(kKvTypes), type) == std::end(kKvTypes)) {
        fail("{} is not a KV cache type ({})", ggml_type_name(type), kv_type_list());
    }
    const int64_t block = ggml_type_traits(type).block_size;
    if (head_dim <= 0 || head_dim % block != 0) {
        fail("KV cache type {} stores blocks of {} elements; the model's head dim {} is not a multiple of {} "
             "(use f16, bf16 or f32)", kv_type_name(type), block, head_dim, block);
    }
    return ggml_row_size(type, head_dim);
}

struct KvCache::Head {
    int32_t size = 0;
    int32_t capacity = 0;
    uint8_t* keys = nullptr;       // [capacity] rows of key_row bytes
    uint8_t* values = nullptr;     // [capacity] rows of value_row bytes
    int32_t* positions = nullptr;  // [capacity]
    std::vector<float*> aux;       // n_aux arrays of [capacity]
};

namespace {

// realloc that treats size 0 as free and throws on failure.
void* resize_block(void* p, size_t bytes) {
    if (bytes == 0) {
        std::free(p);
        return nullptr;
    }
    void* q = std::realloc(p, bytes);
    if (q == nullptr) throw std::bad_alloc();
    return q;
}

}  // namespace

void hadamard_rotate(float* x, int64_t count, int n) {
    KVEC_CHECK(n > 0 && (n & (n - 1)) == 0 && count % n == 0);
    const float norm = 1.0f / std::sqrt(static_cast<float>(n));
    for (float* v = x; v < x + count; v += n) {
        for (int len = 1; len < n; len *= 2) {
            for (int i = 0; i < n; i += 2 * len) {
                for (int j = i; j < i + len; ++j) {
                    const float a = v[j], b = v[j + len];
                    v[j] = a + b;
                    v[j + len] = a - b;
                }
            }
        }
        for (int j = 0; j < n; ++j) v[j] *= norm;
    }
}

namespace {

bool is_block_type(KvType t) { return ggml_type_traits(t).quantized; }

// llama.cpp's choice (llama-kv-cache.cpp): keys, the largest power of two >= 64 dividing
// head_dim; values, 64; only for a quantised type on a head_dim that is a multiple of 64.
int key_rotation_for(KvType t, int head_dim) {
    if (!is_block_type(t) || head_dim % 64 != 0) return 0;
    int n = 64;
    while (head_dim % (2 * n) == 0) n *= 2;
    return n;
}
int value_rotation_for(KvType t, int head_dim) { return is_block_type(t) && head_dim % 64 == 0 ? 64 : 0; }

// Rows [rows, d] (stride `stride` floats) as they are stored: x itself without a rotation (n == 0),
// else rotated by H_n into buf [rows, d], with stride set to d.
const float* as_stored(const float* x, int64_t& stride, int32_t rows, int d, int n, std::vector<float>& buf) {
    if (n == 0) return x;
    buf.resize(static_cast<size_t>(rows) * d);
    for (int32_t t = 0; t < rows; ++t) std::copy_n(x + t * stride, d, buf.begin() + static_cast<ptrdiff_t>(t) * d);
    hadamard_rotate(buf.data(), static_cast<int64_t>(rows) * d, n);
    stride = d;
    return buf.data();
}

}  // namespace

void KvCache::rotate_queries(float* q, int64_t count) const {
    if (key_rot_ > 0) hadamard_rotate(q, count, key_rot_);
}

void KvCache::unrotate_outputs(float* out, int64_t count) const {
    if (value_rot_ > 0) hadamard_rotate(out, count, value_rot_);
}

KvCache::KvCache(const KvCacheConfig& config) : config_(config) {
    if (config.n_layer <= 0 || config.n_head_kv <= 0 || config.head_dim <= 0 || config.n_aux < 0) {
        fail("invalid KV cache shape: {} layers, {} KV heads, head dim {}, {} aux scores",
             config.n_layer, config.n_head_kv, config.head_dim, config.n_aux);
    }
    key_row_ = kv_row_bytes(config.key_type, config.head_dim);
    value_row_ = kv_row_bytes(config.value_type, config.head_dim);
    // KVEC_KV_ROTATION=0 stores the rows as they are (llama.cpp: LLAMA_ATTN_ROT_DISABLE=1).
    const char* rotation = std::getenv("KVEC_KV_ROTATION");
    if (rotation == nullptr || std::string_view(rotation) != "0") {
        key_rot_ = key_rotation_for(config.key_type, config.head_dim);
        value_rot_ = value_rotation_for(config.value_type, config.head_dim);
    }
    heads_.resize(static_cast<size_t>(config.n_layer) * config.n_head_kv);
    for (Head& h : heads_) h.aux.assign(static_cast<size_t>(config.n_aux), nullptr);
}

KvCache::~KvCache() { clear(); }

KvCache::KvCache(KvCache&& other) noexcept
    : config_(other.config_),
      key_row_(other.key_row_),
      value_row_(other.value_row_),
      key_rot_(other.key_rot_),
      value_rot_(other.value_rot_),
      heads_(std::move(other.heads_)),
      bytes_(std::exchange(other.bytes_, 0)),
      peak_bytes_(other.peak_bytes_) {
    other.heads_.clear();
}

KvCache& KvCache::operator=(KvCache&& other) noexcept {
    if (this != &other) {
        clear();
        config_ = other.config_;
        key_row_ = other.key_row_;
        value_row_ = other.value_row_;
        key_rot_ = other.key_rot_;
        value_rot_ = other.value_rot_;
        heads_ = std::move(other.heads_);
        other.heads_.clear();
        bytes_ = std::exchange(other.bytes_, 0);
        peak_bytes_ = other.peak_bytes_;
    }
    return *this;
}

KvCache::Head& KvCache::head(int layer, int head) {
    KVEC_CHECK(layer >= 0 && layer < config_.n_layer && head >= 0 && head < config_.n_head_kv);
    return heads_[static_cast<size_t>(layer) * config_.n_head_kv + head];
}

const KvCache::Head& KvCache::head(int layer, int head) const {
    KVEC_CHECK(layer >= 0 && layer < config_.n_layer && head >= 0 && head < config_.n_head_kv);
    return heads_[static_cast<size_t>(layer) * config_.n_head_kv + head];
}

size_t KvCache::entry_bytes() const {
    return key_row_ + value_row_ + sizeof(int32_t) + sizeof(float) * static_cast<size_t>(config_.n_aux);
}

void KvCache::reallocate(Head& h, int32_t new_capacity) {
    if (new_capacity == h.capacity) return;
    const size_t cap = static_cast<size_t>(new_capacity);
    h.keys = static_cast<uint8_t*>(resize_block(h.keys, cap * key_row_));
    h.values = static_cast<uint8_t*>(resize_block(h.values, cap * value_row_));
    h.positions = static_cast<int32_t*>(resize_block(h.positions, cap * sizeof(int32_t)));
    for (float*& a : h.aux) a = static_cast<float*>(resize_block(a, cap * sizeof(float)));
    bytes_ -= static_cast<size_t>(h.capacity) * entry_bytes();
    bytes_ += cap * entry_bytes();
    h.capacity = new_capacity;
    peak_bytes_ = std::max(peak_bytes_, bytes_);
}

int32_t KvCache::size(int layer, int h) const { return head(layer, h).size; }
int32_t KvCache::capacity(int layer, int h) const { return head(layer, h).capacity; }

int64_t KvCache::total_entries() const {
    int64_t n = 0;
    for (const Head& h : heads_) n += h.size;
    return n;
}

size_t KvCache::used_bytes() const { return static_cast<size_t>(total_entries()) * entry_bytes(); }

void KvCache::append(int layer, int hi, int32_t n, const float* keys, int64_t key_stride,
                     const float* values, int64_t value_stride, const int32_t* positions) {
    KVEC_CHECK(n >= 0);
    if (n == 0) return;
    Head& h = head(layer, hi);
    const int64_t needed = static_cast<int64_t>(h.size) + n;
    if (needed > INT32_MAX) fail("KV cache head holds too many entries ({})", needed);
    if (needed > h.capacity) {
        if (n > 1) {
            // A prefill chunk: exactly what it needs, so that chunked prefill's peak is budget +
            // chunk per head. (The copy touches each cached entry once; the chunk's attention
            // reads it once per query.)
            reallocate(h, static_cast<int32_t>(needed));
        } else {
            // Decoding: room for max(16, capacity / 8) more entries, so reallocations stay rare
            // (one copy of the head per capacity / 8 steps) and the slack small (a decode-time
            // evicting policy compacts to exactly B, then grows to B + 16 or 12.5% at most).
            const int64_t slack = std::max<int64_t>(16, h.capacity / 8);
            reallocate(h, static_cast<int32_t>(std::min<int64_t>(INT32_MAX, needed - 1 + slack)));
        }
    }
    const int d = config_.head_dim;
    thread_local std::vector<float> key_buf, value_buf;  // [n, d] rows rotated before quantising
    keys = as_stored(keys, key_stride, n, d, key_rot_, key_buf);
    values = as_stored(values, value_stride, n, d, value_rot_, value_buf);
    for (int32_t t = 0; t < n; ++t) {
        const size_t slot = static_cast<size_t>(h.size) + t;
        quant::quantize_row_one_pass(config_.key_type, keys + t * key_stride, h.keys + slot * key_row_, d);
        quant::quantize_row_one_pass(config_.value_type, values + t * value_stride, h.values + slot * value_row_, d);
        h.positions[slot] = positions[t];
        for (float* a : h.aux) a[slot] = 0.0f;
    }
    h.size += n;
}

void KvCache::compact(int layer, int hi, std::span<const int32_t> keep) {
    Head& h = head(layer, hi);
    for (size_t i = 0; i < keep.size(); ++i) {
        if (keep[i] < 0 || keep[i] >= h.size) {
            fail("KV cache compaction of layer {} head {}: index {} is outside [0, {})", layer, hi,
                 keep[i], h.size);
        }
        if (i > 0 && keep[i] <= keep[i - 1]) {
            fail("KV cache compaction of layer {} head {}: indices are not strictly increasing "
                 "({} after {})", layer, hi, keep[i], keep[i - 1]);
        }
    }
    // keep[i] >= i, so moving forward in increasing order never overwrites an unread entry.
    for (size_t i = 0; i < keep.size(); ++i) {
        const size_t src = static_cast<size_t>(keep[i]);
        if (src == i) continue;
        std::memcpy(h.keys + i * key_row_, h.keys + src * key_row_, key_row_);
        std::memcpy(h.values + i * value_row_, h.values + src * value_row_, value_row_);
        h.positions[i] = h.positions[src];
        for (float* a : h.aux) a[i] = a[src];
    }
    h.size = static_cast<int32_t>(keep.size());
    reallocate(h, h.size);
}

void KvCache::reposition(int layer, int hi, int32_t begin, int32_t end, const float* keys,
                         const int32_t* positions) {
    Head& h = head(layer, hi);
    if (begin < 0 || begin > end || end > h.size) {
        fail("KV cache re-positioning of layer {} head {}: entries [{}, {}) outside [0, {})", layer,
             hi, begin, end, h.size);
    }
    for (int32_t i = begin; i < end; ++i) {
        const int32_t p = positions[i - begin];
        const int32_t prev = i == begin ? (begin > 0 ? h.positions[begin - 1] : -1)
                                        : positions[i - begin - 1];
        const bool last_ok = i + 1 < end || end == h.size || p < h.positions[end];
        if (p < 0 || p <= prev || !last_ok) {
            fail("KV cache re-positioning of layer {} head {}: position {} of entry {} breaks the "
                 "increasing order", layer, hi, p, i);
        }
    }
    const int d = config_.head_dim;
    thread_local std::vector<float> key_buf;  // [end - begin, d]
    int64_t stride = d;
    keys = as_stored(keys, stride, end - begin, d, key_rot_, key_buf);
    for (int32_t i = begin; i < end; ++i) {
        quant::quantize_row_one_pass(config_.key_type, keys + static_cast<int64_t>(i - begin) * d,
                            h.keys + static_cast<size_t>(i) * key_row_, d);
        h.positions[i] = positions[i - begin];
    }
}

void KvCache::assign(int layer, int hi, int32_t n, const void* keys, const void* values, const int32_t* positions,
                     std::span<const float> aux) {
    Head& h = head(layer, hi);
    if (h.size != 0) fail("KV cache of layer {} head {} is not empty ({} entries)", layer, hi, h.size);
    if (n < 0) fail("KV cache of layer {} head {}: negative entry count {}", layer, hi, n);
    if (!aux.empty() && aux.size() != static_cast<size_t>(n) * h.aux.size()) {
        fail("KV cache of layer {} head {}: {} aux scores for {} entries of {} scores", layer, hi, aux.size(), n,
             h.aux.size());
    }
    for (int32_t i = 0; i < n; ++i) {
        if (positions[i] < 0 || (i > 0 && positions[i] <= positions[i - 1])) {
            fail("KV cache of layer {} head {}: position {} of entry {} breaks the increasing order", layer, hi,
                 positions[i], i);
        }
    }
    reallocate(h, n);
    const auto rows = static_cast<size_t>(n);
    if (n > 0) {
        std::memcpy(h.keys, keys, rows * key_row_);
        std::memcpy(h.values, values, rows * value_row_);
        std::memcpy(h.positions, positions, rows * sizeof(int32_t));
    }
    for (size_t a = 0; a < h.aux.size(); ++a) {
        if (aux.empty()) {
            std::fill(h.aux[a], h.aux[a] + rows, 0.0f);
        } else {
            std::copy(aux.begin() + static_cast<std::ptrdiff_t>(a * rows),
                      aux.begin() + static_cast<std::ptrdiff_t>((a + 1) * rows), h.aux[a]);
        }
    }
    h.size = n;
}

void KvCache::clear() {
    for (Head& h : heads_) {
        reallocate(h, 0);
        h.size = 0;
    }
}

const int32_t* KvCache::positions(int layer, int h) const { return head(layer, h).positions; }

void KvCache::read_keys(int layer, int hi, int32_t begin, int32_t end, float* out) const {
    const Head& h = head(layer, hi);
    KVEC_CHECK(begin >= 0 && begin <= end && end <= h.size);
    const int64_t count = static_cast<int64_t>(end - begin) * config_.head_dim;
    quant::dequantize_row(config_.key_type, h.keys + static_cast<size_t>(begin) * key_row_, out, count);
    if (key_rot_ > 0) hadamard_rotate(out, count, key_rot_);
}

void KvCache::read_values(int layer, int hi, int32_t begin, int32_t end, float* out) const {
    const Head& h = head(layer, hi);
    KVEC_CHECK(begin >= 0 && begin <= end && end <= h.size);
    const int64_t count = static_cast<int64_t>(end - begin) * config_.head_dim;
    quant::dequantize_row(config_.value_type, h.values + static_cast<size_t>(begin) * value_row_, out, count);
    if (value_rot_ > 0) hadamard_rotate(out, count, value_rot_);
}

const void* KvCache::key_data(int layer, int h) const { return head(layer, h).keys; }
const void* KvCache::value_data(int layer, int h) const { return head(layer, h).values; }

const float* KvCache::keys_f32(int layer, int h) const {
    return config_.key_type == KvType::F32 ? reinterpret_cast<const float*>(head(layer, h).keys) : nullptr;
}

const float* KvCache::values_f32(int layer, int h) const {
    return config_.value_type == KvType::F32 ? reinterpret_cast<const float*>(head(layer, h).values) : nullptr;
}

float* KvCache::aux(int layer, int h, int a) {
    KVEC_CHECK(a >= 0 && a < config_.n_aux);
    return head(layer, h).aux[static_cast<size_t>(a)];
}

const float* KvCache::aux(int layer, int h, int a) const {
    KVEC_CHECK(a >= 0 && a < config_.n_aux);
    return head(layer, h).aux[static_cast<size_t>(a)];
}

}  // namespace kvec
