// GGUF files (versions 2 and 3): a validated, memory-mapped reader and a writer.
//
// Reader guarantees: after File::open returns, every metadata value was parsed within the file,
// every tensor's type is supported, its dimensions are positive and their product fits, its
// data range [offset, offset + nbytes) lies inside the file and is aligned; so TensorInfo::data
// can be read without further checks. Any violation throws kvec::Error with one message naming
// the file, the problem, and where (key, tensor name, byte offset).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gguf/ggml_type.h"
#include "util/mapped_file.h"

namespace kvec::gguf {

enum class ValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

const char* value_type_name(ValueType type);

// One metadata value. Scalars of integer types are held as int64/uint64, floats as double.
// Arrays hold their element type and one of three typed vectors (no nested arrays of arrays
// beyond what the file has: an array of arrays is held in `arrays`).
class Value {
public:
    ValueType type = ValueType::UINT32;
    ValueType array_type = ValueType::UINT32;  // element type when type == ARRAY

    // Scalars. The reader fills both integer views; the writer uses whichever is non-zero.
    int64_t i = 0;      // every integer type (UINT64 values above INT64_MAX: see u)
    uint64_t u = 0;     // every integer type, unsigned view
    double f = 0.0;     // FLOAT32 / FLOAT64
    bool b = false;     // BOOL
    std::string str;    // STRING

    // Arrays (type == ARRAY): exactly one is filled according to array_type.
    std::vector<int64_t> ints;         // integer and bool elements
    std::vector<double> floats;        // float elements
    std::vector<std::string> strings;  // string elements
    std::vector<Value> arrays;         // array elements (rare)

    bool is_integer() const;  // any signed/unsigned integer scalar type
    bool is_float() const;
    size_t array_size() const;

    // Convenience constructors for the writer.
    static Value from_u32(uint32_t v);
    static Value from_i32(int32_t v);
    static Value from_u64(uint64_t v);
    static Value from_f32(float v);
    static Value from_bool(bool v);
    static Value from_string(std::string v);
    static Value from_strings(std::vector<std::string> v);
    static Value from_i32s(const std::vector<int32_t>& v);
    static Value from_f32s(const std::vector<float>& v);
};

struct TensorInfo {
    std::string name;
    GgmlType type = GgmlType::F32;
    int n_dims = 0;
    std::array<int64_t, 4> ne = {1, 1, 1, 1};  // ne[0] = elements per row (fastest), as in ggml
    uint64_t offset = 0;                        // relative to the start of the data section
    const uint8_t* data = nullptr;              // into the mapping
    size_t nbytes = 0;

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
};

class File {
public:
    // Maps (or copies, see LoadMode) and validates the file. Throws kvec::Error. The header is
    // parsed from a mapping; only the bytes up to the end of the last tensor are then copied
    // (a tail nothing references is never read).
    static std::unique_ptr<File> open(const std::string& path, LoadMode mode = LoadMode::Map);

    const std::string& path() const { return map_.path(); }
    const MappedFile& bytes() const { return map_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    size_t file_size() const { return map_.file_size(); }
    // Byte offset of the data section (a multiple of alignment()); TensorInfo::offset is
    // relative to it. For a file without tensors: where the data section would start.
    uint64_t data_offset() const { return data_offset_; }

    // Metadata in file order.
    const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
    const Value* find(std::string_view key) const;  // nullptr if absent
    bool has(std::string_view key) const { return find(key) != nullptr; }

    // Typed getters. The required forms throw "'<path>': missing metadata key '<key>'" or
    // "... key '<key>' has type <t>, expected <u>". Integer getters accept any integer type
    // whose value fits; float getters accept FLOAT32/FLOAT64 (and integers).
    uint64_t get_uint(std::string_view key) const;
    uint64_t get_uint(std::string_view key, uint64_t fallback) const;
    int64_t get_int(std::string_view key) const;
    double get_float(std::string_view key) const;
    double get_float(std::string_view key, double fallback) const;
    bool get_bool(std::string_view key, bool fallback) const;
    const std::string& get_string(std::string_view key) const;
    std::string get_string(std::string_view key, std::string fallback) const;
    // Arrays: integer element types are interchangeable (all held in `ints`), as are FLOAT32
    // and FLOAT64 (held in `floats`); otherwise the element type must match.
    const Value& get_array(std::string_view key, ValueType element_type) const;

    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find_tensor(std::string_view name) const;  // nullptr if absent
    const TensorInfo& tensor(std::string_view name) const;       // throws if absent

private:
    explicit File(MappedFile map) : map_(std::move(map)) {}
    void parse();

    MappedFile map_;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    std::vector<std::pair<std::string, Value>> kv_;
    std::vector<TensorInfo> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;  // name -> index into tensors_
};

// Writes GGUF version 3 files. Tensor data is copied at add time; write() lays out the file with
// the alignment set by "general.alignment" (default 32): tensors in add order, each offset a
// multiple of the alignment, zero padding between them and after the last one. A file without
// tensors ends right after its metadata (as llama.cpp's writers do).
class Writer {
public:
    void set(const std::string& key, Value value);  // replaces an existing key, keeps order
    void set_u32(const std::string& key, uint32_t v) { set(key, Value::from_u32(v)); }
    void set_i32(const std::string& key, int32_t v) { set(key, Value::from_i32(v)); }
    void set_f32(const std::string& key, float v) { set(key, Value::from_f32(v)); }
    void set_bool(const std::string& key, bool v) { set(key, Value::from_bool(v)); }
    void set_string(const std::string& key, std::string v) { set(key, Value::from_string(std::move(v))); }

    // dims: ne[0] first (elements per row). nbytes must equal the size the type implies.
    void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& dims,
                    const void* data, size_t nbytes);

    // Like add_tensor, but the data is produced at write() time: `fill` receives a buffer of
    // exactly the size the type and dims imply and must fill it (it may throw kvec::Error to
    // abort the write). Lets a quantiser stream a large model with one tensor in memory.
    using FillFn = std::function<void(uint8_t* dst, size_t nbytes)>;
    void add_tensor_fill(const std::string& name, GgmlType type, const std::vector<int64_t>& dims,
                         FillFn fill);

    // Writes atomically (temporary file + rename): on error nothing is left at `path`.
    void write(const std::string& path) const;

    size_t n_tensors() const { return tensors_.size(); }
    const Value* find(std::string_view key) const;  // nullptr if not set

private:
    struct PendingTensor {
        std::string name;
        GgmlType type;
        std::vector<int64_t> dims;
        std::vector<uint8_t> data;  // [nbytes], empty when `fill` is set
        FillFn fill;
        size_t nbytes = 0;
    };
    size_t check_tensor(const std::string& name, GgmlType type,
                        const std::vector<int64_t>& dims) const;
    std::vector<std::pair<std::string, Value>> kv_;
    std::vector<PendingTensor> tensors_;
};

}  // namespace kvec::gguf
