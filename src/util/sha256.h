// SHA-256 (FIPS 180-4) of byte strings and files: the provenance of evaluation runs (the
// model file's hash in config.json), shard assignment, saved slot files (their model and integrity).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvec {

class Sha256 {
public:
    Sha256();
    void update(const void* data, size_t size);
    void update(std::string_view s) { update(s.data(), s.size()); }
    // The digest as 64 lower-case hex digits. The object must not be updated afterwards.
    std::string hex_digest();

private:
    void block(const uint8_t* p);  // one 64-byte block

    std::array<uint32_t, 8> h_;
    std::array<uint8_t, 64> buffer_;  // [64] pending bytes
    size_t buffered_ = 0;
    uint64_t length_ = 0;  // bytes hashed so far
    bool finished_ = false;
};

std::string sha256_hex(std::string_view data);
// Streams the file; kvec::Error if it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace kvec
