// Read-only memory-mapped file. The mapping lives as long as the object; moving transfers it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvec {

class MappedFile {
public:
    // Maps the whole file read-only; throws kvec::Error naming the path on failure.
    // An empty file maps to data() == nullptr, size() == 0.
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    void release();

    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace kvec
