// GGUF reader and writer.
//
// File layout (all little-endian; versions 2 and 3 are identical on little-endian hosts):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32)
//   data section: tensor i at data_start + offset_i (offset_i a multiple of the alignment)
// where string = u64 length + bytes, and an array value = u32 element type + u64 count +
// elements (an element may itself be an array).
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "util/atomic_file.h"
#include "util/error.h"

namespace kvec::gguf {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint32_t kMagic = 0x46554747u;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 8;  // arrays of arrays nest at most this deep
constexpr size_t kMaxTensorNameWrite = 63;  // ggml's GGML_MAX_NAME - 1: what llama.cpp accepts

bool is_valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

// Bytes one element of this type occupies at least (strings: their length field; arrays:
// element type + count).
uint64_t min_encoded_size(ValueType t) {
    switch (t) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::BOOL: return 1;
        case ValueType::UINT16:
        case ValueType::INT16: return 2;
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::FLOAT32: return 4;
        case ValueType::UINT64:
        case ValueType::INT64:
        case ValueType::FLOAT64:
        case ValueType::STRING: return 8;
        case ValueType::ARRAY: return 12;
    }
    return 1;
}

bool is_integer_type(ValueType t) {
    switch (t) {
        case ValueType::UINT8:
        case ValueType::INT8:
        case ValueType::UINT16:
        case ValueType::INT16:
        case ValueType::UINT32:
        case ValueType::INT32:
        case ValueType::UINT64:
        case ValueType::INT64: return true;
        default: return false;
    }
}

bool is_float_type(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

// Names of ggml types this engine does not implement, for clearer errors.
const char* unsupported_type_name(uint32_t t) {
    switch (t) {
        case 4: return "q4_2 (removed from ggml)";
        case 5: return "q4_3 (removed from ggml)";
        case 16: return "iq2_xxs";
        case 17: return "iq2_xs";
        case 18: return "iq3_xxs";
        case 19: return "iq1_s";
        case 20: return "iq4_nl";
        case 21: return "iq3_s";
        case 22: return "iq2_s";
        case 23: return "iq4_xs";
        case 24: return "i8";
        case 25: return "i16";
        case 26: return "i32";
        case 27: return "i64";
        case 28: return "f64";
        case 29: return "iq1_m";
        case 34: return "tq1_0";
        case 35: return "tq2_0";
        case 39: return "mxfp4";
        default: return nullptr;
    }
}

// Bounds-checked little-endian reader over the mapping. Every read checks the remaining size
// first; a failure names the file, what was being read and the byte offset.
class Cursor {
public:
    Cursor(const std::string& path, const uint8_t* data, size_t size)
        : path_(path), data_(data), size_(size) {}

    size_t pos() const { return pos_; }
    size_t remaining() const { return size_ - pos_; }

    void need(uint64_t n, std::string_view what) const {
        if (n > remaining()) {
            fail("'{}': file is truncated: {} needs {} bytes at byte offset {}, but the file "
                 "ends at {}",
                 path_, what, n, pos_, size_);
        }
    }

    template <typename T>
    T read(std::string_view what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }

    std::string read_string(std::string_view what) {
        const size_t at = pos_;
        const uint64_t len = read<uint64_t>(what);
        if (len > remaining()) {
            fail("'{}': {}: string length {} at byte offset {} exceeds the {} bytes left in "
                 "the file (truncated or corrupt file)",
                 path_, what, len, at, remaining());
        }
        std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return s;
    }

    const std::string& path() const { return path_; }

private:
    const std::string& path_;
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
};

Value read_value(Cursor& c, ValueType type, const std::string& where, int depth);

// Reads the body of an array (after the ARRAY tag): element type, count, elements.
void read_array(Cursor& c, Value& v, const std::string& where, int depth) {
    if (depth >= kMaxArrayDepth) {
        fail("'{}': {}: arrays nested deeper than {} levels at byte offset {}", c.path(), where,
             kMaxArrayDepth, c.pos());
    }
    const size_t type_at = c.pos();
    const uint32_t et = c.read<uint32_t>(where + " (array element type)");
    if (!is_valid_value_type(et)) {
        fail("'{}': {}: invalid array element type {} at byte offset {}", c.path(), where, et,
             type_at);
    }
    const size_t count_at = c.pos();
    const uint64_t n = c.read<uint64_t>(where + " (array count)");
    const ValueType etype = static_cast<ValueType>(et);
    // Every element occupies at least min_encoded_size bytes: a count the rest of the file
    // cannot hold is rejected before anything is allocated.
    if (n > c.remaining() / min_encoded_size(etype)) {
        fail("'{}': {}: array count {} at byte offset {} is impossible: the remaining {} bytes "
             "of the file cannot hold that many elements (truncated or corrupt file)",
             c.path(), where, n, count_at, c.remaining());
    }
    v.type = ValueType::ARRAY;
    v.array_type = etype;
    const size_t count = static_cast<size_t>(n);
    if (is_integer_type(etype) || etype == ValueType::BOOL) {
        v.ints.reserve(count);
        for (size_t i = 0; i < count; ++i) {
            const Value e = read_value(c, etype, where, depth + 1);
            v.ints.push_back(e.i);
        }
    } else if (is_float_type(etype)) {
        v.floats.reserve(count);
        for (size_t i = 0; i < count; ++i) v.floats.push_back(read_value(c, etype, where, depth + 1).f);
    } else if (etype == ValueType::STRING) {
        v.strings.reserve(count);
        for (size_t i = 0; i < count; ++i) v.strings.push_back(c.read_string(where));
    } else {  // ARRAY
        v.arrays.reserve(count);
        for (size_t i = 0; i < count; ++i) {
            Value inner;
            read_array(c, inner, where, depth + 1);
            v.arrays.push_back(std::move(inner));
        }
    }
}

Value read_value(Cursor& c, ValueType type, const std::string& where, int depth) {
    Value v;
    v.type = type;
    switch (type) {
        case ValueType::UINT8: v.u = c.read<uint8_t>(where); v.i = static_cast<int64_t>(v.u); break;
        case ValueType::UINT16: v.u = c.read<uint16_t>(where); v.i = static_cast<int64_t>(v.u); break;
        case ValueType::UINT32: v.u = c.read<uint32_t>(where); v.i = static_cast<int64_t>(v.u); break;
        case ValueType::UINT64: v.u = c.read<uint64_t>(where); v.i = static_cast<int64_t>(v.u); break;
        case ValueType::INT8: v.i = c.read<int8_t>(where); v.u = static_cast<uint64_t>(v.i); break;
        case ValueType::INT16: v.i = c.read<int16_t>(where); v.u = static_cast<uint64_t>(v.i); break;
        case ValueType::INT32: v.i = c.read<int32_t>(where); v.u = static_cast<uint64_t>(v.i); break;
        case ValueType::INT64: v.i = c.read<int64_t>(where); v.u = static_cast<uint64_t>(v.i); break;
        case ValueType::FLOAT32: v.f = c.read<float>(where); break;
        case ValueType::FLOAT64: v.f = c.read<double>(where); break;
        case ValueType::BOOL: {
            const size_t at = c.pos();
            const uint8_t b = c.read<uint8_t>(where);
            if (b > 1) {
                fail("'{}': {}: invalid bool value {} at byte offset {} (must be 0 or 1)",
                     c.path(), where, b, at);
            }
            v.b = b != 0;
            v.i = b;
            v.u = b;
            break;
        }
        case ValueType::STRING: v.str = c.read_string(where); break;
        case ValueType::ARRAY: read_array(c, v, where, depth); break;
    }
    return v;
}

// Rounds `pos` up to a multiple of `align` (a power of two); nullopt on overflow.
std::optional<uint64_t> align_up(uint64_t pos, uint64_t align) {
    const uint64_t rem = pos % align;
    if (rem == 0) return pos;
    const uint64_t add = align - rem;
    if (pos > std::numeric_limits<uint64_t>::max() - add) return std::nullopt;
    return pos + add;
}

std::string quoted(std::string_view s) {
    // Keys and names come from the file: keep messages readable if they hold odd bytes.
    std::string out = "'";
    for (unsigned char ch : s.substr(0, 200)) {
        if (ch >= 0x20 && ch < 0x7f) {
            out += static_cast<char>(ch);
        } else {
            out += fmt::format("\\x{:02x}", ch);
        }
    }
    if (s.size() > 200) out += "...";
    out += "'";
    return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Value

const char* value_type_name(ValueType type) {
    switch (type) {
        case ValueType::UINT8: return "uint8";
        case ValueType::INT8: return "int8";
        case ValueType::UINT16: return "uint16";
        case ValueType::INT16: return "int16";
        case ValueType::UINT32: return "uint32";
        case ValueType::INT32: return "int32";
        case ValueType::FLOAT32: return "float32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::UINT64: return "uint64";
        case ValueType::INT64: return "int64";
        case ValueType::FLOAT64: return "float64";
    }
    return "unknown";
}

bool Value::is_integer() const { return is_integer_type(type); }
bool Value::is_float() const { return is_float_type(type); }

size_t Value::array_size() const {
    if (type != ValueType::ARRAY) return 0;
    if (is_integer_type(array_type) || array_type == ValueType::BOOL) return ints.size();
    if (is_float_type(array_type)) return floats.size();
    if (array_type == ValueType::STRING) return strings.size();
    return arrays.size();
}

Value Value::from_u32(uint32_t v) {
    Value r;
    r.type = ValueType::UINT32;
    r.u = v;
    r.i = v;
    return r;
}

Value Value::from_i32(int32_t v) {
    Value r;
    r.type = ValueType::INT32;
    r.i = v;
    r.u = static_cast<uint64_t>(static_cast<int64_t>(v));
    return r;
}

Value Value::from_u64(uint64_t v) {
    Value r;
    r.type = ValueType::UINT64;
    r.u = v;
    r.i = static_cast<int64_t>(v);
    return r;
}

Value Value::from_f32(float v) {
    Value r;
    r.type = ValueType::FLOAT32;
    r.f = v;
    return r;
}

Value Value::from_bool(bool v) {
    Value r;
    r.type = ValueType::BOOL;
    r.b = v;
    r.i = v;
    r.u = v;
    return r;
}

Value Value::from_string(std::string v) {
    Value r;
    r.type = ValueType::STRING;
    r.str = std::move(v);
    return r;
}

Value Value::from_strings(std::vector<std::string> v) {
    Value r;
    r.type = ValueType::ARRAY;
    r.array_type = ValueType::STRING;
    r.strings = std::move(v);
    return r;
}

Value Value::from_i32s(const std::vector<int32_t>& v) {
    Value r;
    r.type = ValueType::ARRAY;
    r.array_type = ValueType::INT32;
    r.ints.assign(v.begin(), v.end());
    return r;
}

Value Value::from_f32s(const std::vector<float>& v) {
    Value r;
    r.type = ValueType::ARRAY;
    r.array_type = ValueType::FLOAT32;
    r.floats.assign(v.begin(), v.end());
    return r;
}

// ---------------------------------------------------------------------------------------------
// Reader

std::unique_ptr<File> File::open(const std::string& path, LoadMode mode) {
    std::unique_ptr<File> f(new File(MappedFile(path, LoadMode::Map)));
    f->parse();
    if (mode == LoadMode::Map) return f;
    // Copy (or map, as Auto decides) only what the header and the tensors use.
    uint64_t end = std::min<uint64_t>(f->data_offset_, f->map_.size());
    for (const TensorInfo& t : f->tensors_) {
        end = std::max<uint64_t>(end, static_cast<uint64_t>(t.data - f->map_.data()) + t.nbytes);
    }
    MappedFile held(path, mode, static_cast<size_t>(end));
    if (held.size() != end || held.file_size() != f->map_.size()) {
        fail("'{}': the file changed while it was opened", path);
    }
    for (TensorInfo& t : f->tensors_) t.data = held.data() + (t.data - f->map_.data());
    f->map_ = std::move(held);
    return f;
}

void File::parse() {
    const std::string& p = map_.path();
    Cursor c(p, map_.data(), map_.size());

    if (map_.size() < 4) {
        fail("'{}': not a GGUF file: it has {} bytes, too short for the 'GGUF' magic", p,
             map_.size());
    }
    const uint32_t magic = c.read<uint32_t>("magic");
    if (magic != kMagic) {
        fail("'{}': not a GGUF file: bad magic 0x{:08x} at byte offset 0 (expected 'GGUF')", p,
             magic);
    }
    version_ = c.read<uint32_t>("version");
    if (version_ != 2 && version_ != 3) {
        if (version_ == 1) {
            fail("'{}': unsupported GGUF version 1 (this engine reads versions 2 and 3; "
                 "re-convert the model with a current llama.cpp)",
                 p);
        }
        if ((version_ & 0xffffu) == 0 && version_ != 0) {
            fail("'{}': unsupported GGUF version {} (this looks like a big-endian file; only "
                 "little-endian versions 2 and 3 are supported)",
                 p, version_);
        }
        fail("'{}': unsupported GGUF version {} (this engine reads versions 2 and 3)", p,
             version_);
    }

    const uint64_t n_tensors = c.read<uint64_t>("tensor count");
    const uint64_t n_kv = c.read<uint64_t>("metadata count");
    // A key-value pair needs at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at
    // least 8 (name length) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8 (offset).
    if (n_kv > c.remaining() / 13) {
        fail("'{}': metadata count {} at byte offset 16 is impossible: the remaining {} bytes "
             "of the file cannot hold that many entries (truncated or corrupt file)",
             p, n_kv, c.remaining());
    }
    if (n_tensors > c.remaining() / 32) {
        fail("'{}': tensor count {} at byte offset 8 is impossible: the remaining {} bytes of "
             "the file cannot hold that many tensor entries (truncated or corrupt file)",
             p, n_tensors, c.remaining());
    }

    // Metadata.
    kv_.clear();
    kv_.reserve(static_cast<size_t>(n_kv));
    std::unordered_set<std::string> keys;
    for (uint64_t k = 0; k < n_kv; ++k) {
        const size_t key_at = c.pos();
        std::string key = c.read_string(fmt::format("key of metadata entry {}", k));
        if (key.empty()) fail("'{}': metadata entry {} at byte offset {} has an empty key", p, k, key_at);
        const std::string where = "metadata key " + quoted(key);
        if (!keys.insert(key).second) {
            fail("'{}': duplicate metadata key {} at byte offset {}", p, quoted(key), key_at);
        }
        const size_t type_at = c.pos();
        const uint32_t t = c.read<uint32_t>(where + " (value type)");
        if (!is_valid_value_type(t)) {
            fail("'{}': {}: invalid value type {} at byte offset {}", p, where, t, type_at);
        }
        Value v = read_value(c, static_cast<ValueType>(t), where, 0);
        kv_.emplace_back(std::move(key), std::move(v));
    }

    // Alignment.
    alignment_ = kDefaultAlignment;
    if (const Value* a = find("general.alignment")) {
        if (!a->is_integer()) {
            fail("'{}': invalid general.alignment: it has type {}, expected an unsigned integer",
                 p, value_type_name(a->type));
        }
        const bool negative =
            (a->type == ValueType::INT8 || a->type == ValueType::INT16 ||
             a->type == ValueType::INT32 || a->type == ValueType::INT64) && a->i < 0;
        if (negative || a->u == 0 || !std::has_single_bit(a->u)) {
            fail("'{}': invalid general.alignment {} (must be a non-zero power of two)", p,
                 negative ? std::to_string(a->i) : std::to_string(a->u));
        }
        alignment_ = a->u;
    }

    // Tensor directory.
    tensors_.clear();
    tensors_.reserve(static_cast<size_t>(n_tensors));
    tensor_index_.clear();
    for (uint64_t ti = 0; ti < n_tensors; ++ti) {
        const size_t name_at = c.pos();
        TensorInfo t;
        t.name = c.read_string(fmt::format("name of tensor {}", ti));
        if (t.name.empty()) fail("'{}': tensor {} at byte offset {} has an empty name", p, ti, name_at);
        const std::string where = "tensor " + quoted(t.name);
        if (tensor_index_.count(t.name) != 0) {
            fail("'{}': duplicate tensor name {} at byte offset {}", p, quoted(t.name), name_at);
        }
        const size_t ndims_at = c.pos();
        const uint32_t n_dims = c.read<uint32_t>(where + " (n_dims)");
        if (n_dims < 1 || n_dims > 4) {
            fail("'{}': {}: invalid number of dimensions {} at byte offset {} (must be 1..4)", p,
                 where, n_dims, ndims_at);
        }
        t.n_dims = static_cast<int>(n_dims);
        int64_t n_elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const size_t dim_at = c.pos();
            const uint64_t ne = c.read<uint64_t>(where + " (dimensions)");
            if (ne == 0) {
                fail("'{}': {}: dimension {} is zero (byte offset {})", p, where, d, dim_at);
            }
            if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
                fail("'{}': {}: dimension {} = {} is too large (byte offset {})", p, where, d, ne,
                     dim_at);
            }
            t.ne[d] = static_cast<int64_t>(ne);
            if (__builtin_mul_overflow(n_elements, t.ne[d], &n_elements)) {
                fail("'{}': {}: element count overflows (dimensions at byte offset {})", p, where,
                     ndims_at + 4);
            }
        }
        const size_t type_at = c.pos();
        const uint32_t type = c.read<uint32_t>(where + " (type)");
        const std::optional<GgmlTypeTraits> traits = ggml_type_traits(type);
        if (!traits) {
            const char* known = unsupported_type_name(type);
            fail("'{}': {}: unsupported tensor type {}{} at byte offset {}", p, where, type,
                 known ? fmt::format(" ({})", known) : std::string(), type_at);
        }
        t.type = static_cast<GgmlType>(type);
        if (t.ne[0] % traits->block_size != 0) {
            fail("'{}': {}: row length ne[0] = {} is not a multiple of the {} block size {}", p,
                 where, t.ne[0], traits->name, traits->block_size);
        }
        // nbytes = rows * (ne[0] / block) * type_size, checked for overflow.
        uint64_t row_bytes = 0;
        uint64_t nbytes = 0;
        if (__builtin_mul_overflow(static_cast<uint64_t>(t.ne[0] / traits->block_size),
                                   static_cast<uint64_t>(traits->type_size), &row_bytes) ||
            __builtin_mul_overflow(row_bytes, static_cast<uint64_t>(t.n_rows()), &nbytes) ||
            nbytes > std::numeric_limits<size_t>::max()) {
            fail("'{}': {}: data size overflows", p, where);
        }
        t.nbytes = static_cast<size_t>(nbytes);
        const size_t offset_at = c.pos();
        t.offset = c.read<uint64_t>(where + " (offset)");
        if (t.offset % alignment_ != 0) {
            fail("'{}': {}: data offset {} (byte offset {}) is not a multiple of the alignment {}",
                 p, where, t.offset, offset_at, alignment_);
        }
        tensor_index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
    }

    // Data section: starts at the next multiple of the alignment after the directory.
    const std::optional<uint64_t> data_start = align_up(c.pos(), alignment_);
    data_offset_ = data_start.value_or(0);
    const uint64_t file_size = map_.size();
    for (TensorInfo& t : tensors_) {
        uint64_t begin = 0;
        uint64_t end = 0;
        if (!data_start || __builtin_add_overflow(*data_start, t.offset, &begin) ||
            __builtin_add_overflow(begin, static_cast<uint64_t>(t.nbytes), &end) ||
            end > file_size) {
            fail("'{}': tensor {}: data range [{}, {}) (offset {} + {} bytes after the data "
                 "section start {}) lies beyond the end of the file ({} bytes)",
                 p, quoted(t.name), data_start ? *data_start + t.offset : 0,
                 data_start ? *data_start + t.offset + t.nbytes : 0, t.offset, t.nbytes,
                 data_start ? *data_start : 0, file_size);
        }
        // A general.alignment of 1 or 2 lets a tensor start at any byte; its kernels would read
        // floats from misaligned addresses (found by fuzz_forward).
        const size_t need = ggml_type_alignment(t.type);
        if (begin % need != 0) {
            fail("'{}': tensor {}: data at file offset {} is not aligned to the {} bytes its type {} "
                 "needs (general.alignment is {})",
                 p, quoted(t.name), begin, need, ggml_type_name(t.type), alignment_);
        }
        t.data = map_.data() + begin;
    }

    // No two tensors may share bytes.
    std::vector<const TensorInfo*> by_offset;
    by_offset.reserve(tensors_.size());
    for (const TensorInfo& t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const TensorInfo* prev = by_offset[i - 1];
        const TensorInfo* cur = by_offset[i];
        if (prev->offset + prev->nbytes > cur->offset) {
            fail("'{}': tensors {} (data offset {}, {} bytes) and {} (data offset {}) overlap", p,
                 quoted(prev->name), prev->offset, prev->nbytes, quoted(cur->name), cur->offset);
        }
    }
}

const Value* File::find(std::string_view key) const {
    for (const auto& [k, v] : kv_) {
        if (k == key) return &v;
    }
    return nullptr;
}

namespace {

[[noreturn]] void missing_key(const std::string& path, std::string_view key) {
    fail("'{}': missing metadata key '{}'", path, key);
}

[[noreturn]] void wrong_type(const std::string& path, std::string_view key, const Value& v,
                             std::string_view expected) {
    std::string actual = value_type_name(v.type);
    if (v.type == ValueType::ARRAY) actual = fmt::format("array of {}", value_type_name(v.array_type));
    fail("'{}': metadata key '{}' has type {}, expected {}", path, key, actual, expected);
}

bool is_signed_type(ValueType t) {
    return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
           t == ValueType::INT64;
}

uint64_t as_uint(const std::string& path, std::string_view key, const Value& v) {
    if (!v.is_integer()) wrong_type(path, key, v, "an unsigned integer");
    if (is_signed_type(v.type) && v.i < 0) {
        fail("'{}': metadata key '{}' has the negative value {}, expected an unsigned integer",
             path, key, v.i);
    }
    return v.u;
}

double as_float(const std::string& path, std::string_view key, const Value& v) {
    if (v.is_float()) return v.f;
    if (v.is_integer()) {
        return is_signed_type(v.type) ? static_cast<double>(v.i) : static_cast<double>(v.u);
    }
    wrong_type(path, key, v, "a float");
}

}  // namespace

uint64_t File::get_uint(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) missing_key(path(), key);
    return as_uint(path(), key, *v);
}

uint64_t File::get_uint(std::string_view key, uint64_t fallback) const {
    const Value* v = find(key);
    return v == nullptr ? fallback : as_uint(path(), key, *v);
}

int64_t File::get_int(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) missing_key(path(), key);
    if (!v->is_integer()) wrong_type(path(), key, *v, "an integer");
    if (v->type == ValueType::UINT64 && v->u > static_cast<uint64_t>(INT64_MAX)) {
        fail("'{}': metadata key '{}' has the value {}, too large for a signed 64-bit integer",
             path(), key, v->u);
    }
    return v->i;
}

double File::get_float(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) missing_key(path(), key);
    return as_float(path(), key, *v);
}

double File::get_float(std::string_view key, double fallback) const {
    const Value* v = find(key);
    return v == nullptr ? fallback : as_float(path(), key, *v);
}

bool File::get_bool(std::string_view key, bool fallback) const {
    const Value* v = find(key);
    if (v == nullptr) return fallback;
    if (v->type != ValueType::BOOL) wrong_type(path(), key, *v, "bool");
    return v->b;
}

const std::string& File::get_string(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) missing_key(path(), key);
    if (v->type != ValueType::STRING) wrong_type(path(), key, *v, "string");
    return v->str;
}

std::string File::get_string(std::string_view key, std::string fallback) const {
    const Value* v = find(key);
    if (v == nullptr) return fallback;
    if (v->type != ValueType::STRING) wrong_type(path(), key, *v, "string");
    return v->str;
}

const Value& File::get_array(std::string_view key, ValueType element_type) const {
    const Value* v = find(key);
    if (v == nullptr) missing_key(path(), key);
    const std::string expected = fmt::format("array of {}", value_type_name(element_type));
    if (v->type != ValueType::ARRAY) wrong_type(path(), key, *v, expected);
    // Integer element types are interchangeable (all are held in `ints`), as are the two
    // float types (held in `floats`).
    const bool ok = v->array_type == element_type ||
                    (is_integer_type(v->array_type) && is_integer_type(element_type)) ||
                    (is_float_type(v->array_type) && is_float_type(element_type));
    if (!ok) wrong_type(path(), key, *v, expected);
    return *v;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(std::string(name));
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
    const TensorInfo* t = find_tensor(name);
    if (t == nullptr) fail("'{}': missing tensor '{}'", path(), name);
    return *t;
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

// Buffered writes into an AtomicFile; every failure throws naming the path.
class OutFile {
public:
    explicit OutFile(AtomicFile& file) : file_(file) { buf_.reserve(1 << 20); }

    void put(const void* data, size_t n) {
        const auto* p = static_cast<const uint8_t*>(data);
        if (buf_.size() + n > buf_.capacity()) flush();
        if (n >= buf_.capacity()) {
            file_.write(std::string_view(reinterpret_cast<const char*>(p), n));
        } else {
            buf_.insert(buf_.end(), p, p + n);
        }
        written_ += n;
    }

    template <typename T>
    void put_scalar(T v) {
        put(&v, sizeof v);
    }

    void put_string(const std::string& s) {
        put_scalar<uint64_t>(s.size());
        put(s.data(), s.size());
    }

    void pad_to(uint64_t alignment) {
        static const uint8_t zeros[256] = {};
        while (written_ % alignment != 0) {
            const uint64_t n = std::min<uint64_t>(sizeof zeros, alignment - written_ % alignment);
            put(zeros, static_cast<size_t>(n));
        }
    }

    void flush() {
        file_.write(std::string_view(reinterpret_cast<const char*>(buf_.data()), buf_.size()));
        buf_.clear();
    }

    uint64_t written() const { return written_; }

private:
    AtomicFile& file_;
    std::vector<uint8_t> buf_;
    uint64_t written_ = 0;
};

void check_value(const std::string& key, const Value& v, int depth) {
    if (!is_valid_value_type(static_cast<uint32_t>(v.type))) {
        fail("gguf writer: metadata key '{}' has an invalid value type", key);
    }
    if (v.type != ValueType::ARRAY) return;
    if (!is_valid_value_type(static_cast<uint32_t>(v.array_type))) {
        fail("gguf writer: metadata key '{}' has an invalid array element type", key);
    }
    if (depth >= kMaxArrayDepth) {
        fail("gguf writer: metadata key '{}': arrays nested deeper than {} levels", key,
             kMaxArrayDepth);
    }
    if (v.array_type == ValueType::BOOL) {
        for (int64_t b : v.ints) {
            if (b != 0 && b != 1) fail("gguf writer: metadata key '{}': bool element {} is not 0 or 1", key, b);
        }
    }
    if (v.array_type == ValueType::ARRAY) {
        for (const Value& e : v.arrays) {
            if (e.type != ValueType::ARRAY) {
                fail("gguf writer: metadata key '{}': an element of an array of arrays is not an "
                     "array",
                     key);
            }
            check_value(key, e, depth + 1);
        }
    }
}

void put_integer(OutFile& out, ValueType t, int64_t i, uint64_t u) {
    switch (t) {
        case ValueType::UINT8: out.put_scalar<uint8_t>(static_cast<uint8_t>(u)); break;
        case ValueType::INT8: out.put_scalar<int8_t>(static_cast<int8_t>(i)); break;
        case ValueType::UINT16: out.put_scalar<uint16_t>(static_cast<uint16_t>(u)); break;
        case ValueType::INT16: out.put_scalar<int16_t>(static_cast<int16_t>(i)); break;
        case ValueType::UINT32: out.put_scalar<uint32_t>(static_cast<uint32_t>(u)); break;
        case ValueType::INT32: out.put_scalar<int32_t>(static_cast<int32_t>(i)); break;
        case ValueType::UINT64: out.put_scalar<uint64_t>(u); break;
        case ValueType::INT64: out.put_scalar<int64_t>(i); break;
        case ValueType::BOOL: out.put_scalar<uint8_t>(i != 0 ? 1 : 0); break;
        default: KVEC_CHECK(false);
    }
}

void put_array_body(OutFile& out, const Value& v);

void put_value(OutFile& out, const Value& v) {
    switch (v.type) {
        case ValueType::FLOAT32: out.put_scalar<float>(static_cast<float>(v.f)); break;
        case ValueType::FLOAT64: out.put_scalar<double>(v.f); break;
        case ValueType::BOOL: out.put_scalar<uint8_t>(v.b ? 1 : 0); break;
        case ValueType::STRING: out.put_string(v.str); break;
        case ValueType::ARRAY: put_array_body(out, v); break;
        default: {
            // Integers: the reader fills both views; a hand-made Value may have set only one,
            // so take whichever is non-zero (both agree when both are set).
            const uint64_t bits = v.u != 0 ? v.u : static_cast<uint64_t>(v.i);
            put_integer(out, v.type, static_cast<int64_t>(bits), bits);
            break;
        }
    }
}

void put_array_body(OutFile& out, const Value& v) {
    out.put_scalar<uint32_t>(static_cast<uint32_t>(v.array_type));
    out.put_scalar<uint64_t>(v.array_size());
    const ValueType et = v.array_type;
    if (is_integer_type(et) || et == ValueType::BOOL) {
        for (int64_t x : v.ints) put_integer(out, et, x, static_cast<uint64_t>(x));
    } else if (et == ValueType::FLOAT32) {
        for (double x : v.floats) out.put_scalar<float>(static_cast<float>(x));
    } else if (et == ValueType::FLOAT64) {
        for (double x : v.floats) out.put_scalar<double>(x);
    } else if (et == ValueType::STRING) {
        for (const std::string& s : v.strings) out.put_string(s);
    } else {
        for (const Value& e : v.arrays) put_array_body(out, e);
    }
}

}  // namespace

void Writer::set(const std::string& key, Value value) {
    if (key.empty()) fail("gguf writer: empty metadata key");
    check_value(key, value, 0);
    for (auto& [k, v] : kv_) {
        if (k == key) {
            v = std::move(value);
            return;
        }
    }
    kv_.emplace_back(key, std::move(value));
}

const Value* Writer::find(std::string_view key) const {
    for (const auto& [k, v] : kv_) {
        if (k == key) return &v;
    }
    return nullptr;
}

size_t Writer::check_tensor(const std::string& name, GgmlType type,
                            const std::vector<int64_t>& dims) const {
    if (name.empty()) fail("gguf writer: empty tensor name");
    if (name.size() > kMaxTensorNameWrite) {
        fail("gguf writer: tensor name '{}' is longer than {} bytes", name, kMaxTensorNameWrite);
    }
    for (const PendingTensor& t : tensors_) {
        if (t.name == name) fail("gguf writer: duplicate tensor name '{}'", name);
    }
    const std::optional<GgmlTypeTraits> traits = ggml_type_traits(static_cast<uint32_t>(type));
    if (!traits) fail("gguf writer: tensor '{}': unsupported type {}", name, static_cast<uint32_t>(type));
    if (dims.empty() || dims.size() > 4) {
        fail("gguf writer: tensor '{}': {} dimensions (must be 1..4)", name, dims.size());
    }
    int64_t n_rows = 1;
    for (size_t d = 0; d < dims.size(); ++d) {
        if (dims[d] <= 0) fail("gguf writer: tensor '{}': dimension {} is {} (must be > 0)", name, d, dims[d]);
        if (d > 0 && __builtin_mul_overflow(n_rows, dims[d], &n_rows)) {
            fail("gguf writer: tensor '{}': element count overflows", name);
        }
    }
    if (dims[0] % traits->block_size != 0) {
        fail("gguf writer: tensor '{}': ne[0] = {} is not a multiple of the {} block size {}",
             name, dims[0], traits->name, traits->block_size);
    }
    size_t nbytes = 0;
    if (__builtin_mul_overflow(ggml_row_size(type, dims[0]), static_cast<size_t>(n_rows), &nbytes)) {
        fail("gguf writer: tensor '{}': data size overflows", name);
    }
    return nbytes;
}

void Writer::add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& dims,
                        const void* data, size_t nbytes) {
    const size_t expected = check_tensor(name, type, dims);
    if (nbytes != expected) {
        fail("gguf writer: tensor '{}': got {} bytes of data, its type {} and shape imply {}",
             name, nbytes, ggml_type_name(type), expected);
    }
    PendingTensor t;
    t.name = name;
    t.type = type;
    t.dims = dims;
    const auto* p = static_cast<const uint8_t*>(data);
    t.data.assign(p, p + nbytes);
    t.nbytes = nbytes;
    tensors_.push_back(std::move(t));
}

void Writer::add_tensor_fill(const std::string& name, GgmlType type,
                             const std::vector<int64_t>& dims, FillFn fill) {
    const size_t nbytes = check_tensor(name, type, dims);
    if (!fill) fail("gguf writer: tensor '{}': no fill function", name);
    PendingTensor t;
    t.name = name;
    t.type = type;
    t.dims = dims;
    t.fill = std::move(fill);
    t.nbytes = nbytes;
    tensors_.push_back(std::move(t));
}

void Writer::write(const std::string& path) const {
    uint64_t alignment = kDefaultAlignment;
    if (const Value* a = find("general.alignment")) {
        if (!a->is_integer() || (is_signed_type(a->type) && a->i < 0) || a->u == 0 ||
            !std::has_single_bit(a->u)) {
            fail("gguf writer: general.alignment must be an unsigned integer power of two");
        }
        alignment = a->u;
    }

    // A temporary file in the same directory, renamed over `path` once complete (AtomicFile).
    AtomicFile file(path);
    {
        OutFile out(file);
        out.put_scalar<uint32_t>(kMagic);
        out.put_scalar<uint32_t>(3);
        out.put_scalar<uint64_t>(tensors_.size());
        out.put_scalar<uint64_t>(kv_.size());
        for (const auto& [k, v] : kv_) {
            out.put_string(k);
            out.put_scalar<uint32_t>(static_cast<uint32_t>(v.type));
            put_value(out, v);
        }
        uint64_t offset = 0;
        for (const PendingTensor& t : tensors_) {
            out.put_string(t.name);
            out.put_scalar<uint32_t>(static_cast<uint32_t>(t.dims.size()));
            for (int64_t d : t.dims) out.put_scalar<uint64_t>(static_cast<uint64_t>(d));
            out.put_scalar<uint32_t>(static_cast<uint32_t>(t.type));
            out.put_scalar<uint64_t>(offset);
            offset += t.nbytes;
            offset = *align_up(offset, alignment);
        }
        // The data section starts aligned. A file without tensors ends after its directory (as
        // llama.cpp's and gguf-py's writers do).
        if (!tensors_.empty()) out.pad_to(alignment);
        std::vector<uint8_t> scratch;  // [nbytes] of the tensor being produced by `fill`
        for (const PendingTensor& t : tensors_) {
            if (t.fill) {
                scratch.assign(t.nbytes, 0);
                t.fill(scratch.data(), scratch.size());
                out.put(scratch.data(), scratch.size());
            } else {
                out.put(t.data.data(), t.data.size());
            }
            out.pad_to(alignment);
        }
        out.flush();
    }
    file.commit();
}

}  // namespace kvec::gguf
