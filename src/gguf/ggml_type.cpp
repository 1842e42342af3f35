#include "gguf/ggml_type.h"

#include <array>
#include <cctype>
#include <string>

#include "util/error.h"

namespace kvec {
namespace {

struct TypeEntry {
    GgmlType type;
    GgmlTypeTraits traits;
};

// Block geometry as in llama.cpp's ggml-common.h (QK_K = 256); sizes are pinned by the
// static_asserts in src/quant/blocks.h.
constexpr std::array<TypeEntry, 18> kTypes = {{
    {GgmlType::F32, {"f32", 1, 4, false}},
    {GgmlType::F16, {"f16", 1, 2, false}},
    {GgmlType::Q4_0, {"q4_0", 32, 18, true}},
    {GgmlType::Q4_1, {"q4_1", 32, 20, true}},
    {GgmlType::Q5_0, {"q5_0", 32, 22, true}},
    {GgmlType::Q5_1, {"q5_1", 32, 24, true}},
    {GgmlType::Q8_0, {"q8_0", 32, 34, true}},
    {GgmlType::Q8_1, {"q8_1", 32, 36, true}},
    {GgmlType::Q2_K, {"q2_K", 256, 84, true}},
    {GgmlType::Q3_K, {"q3_K", 256, 110, true}},
    {GgmlType::Q4_K, {"q4_K", 256, 144, true}},
    {GgmlType::Q5_K, {"q5_K", 256, 176, true}},
    {GgmlType::Q6_K, {"q6_K", 256, 210, true}},
    {GgmlType::Q8_K, {"q8_K", 256, 292, true}},
    {GgmlType::IQ4_NL, {"iq4_nl", 32, 18, true}},
    {GgmlType::IQ4_XS, {"iq4_xs", 256, 136, true}},
    {GgmlType::BF16, {"bf16", 1, 2, false}},
    {GgmlType::MXFP4, {"mxfp4", 32, 17, true}},
}};

const TypeEntry* find_entry(uint32_t type) {
    for (const auto& e : kTypes) {
        if (static_cast<uint32_t>(e.type) == type) return &e;
    }
    return nullptr;
}

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type) {
    const TypeEntry* e = find_entry(type);
    if (e == nullptr) return std::nullopt;
    return e->traits;
}

const GgmlTypeTraits& ggml_type_traits(GgmlType type) {
    const TypeEntry* e = find_entry(static_cast<uint32_t>(type));
    if (e == nullptr) fail("unsupported tensor type {}", static_cast<uint32_t>(type));
    return e->traits;
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
    std::string lower(name);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (const auto& e : kTypes) {
        std::string candidate(e.traits.name);
        for (char& c : candidate) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (candidate == lower) return e.type;
    }
    return std::nullopt;
}

const char* ggml_type_name(GgmlType type) {
    const TypeEntry* e = find_entry(static_cast<uint32_t>(type));
    return e == nullptr ? "unknown" : e->traits.name;
}

size_t ggml_type_alignment(GgmlType type) {
    if (type == GgmlType::F32 || type == GgmlType::Q8_K) return 4;
    return type == GgmlType::MXFP4 ? 1 : 2;
}

size_t ggml_row_size(GgmlType type, int64_t n) {
    const GgmlTypeTraits& t = ggml_type_traits(type);
    if (n < 0 || n % t.block_size != 0) {
        fail("row of {} elements is not a multiple of the {} block size {}", n, t.name,
             t.block_size);
    }
    return static_cast<size_t>(n / t.block_size) * t.type_size;
}

}  // namespace kvec
