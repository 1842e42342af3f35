// A read-only file held in memory, mapped or copied. The bytes live as long as the object;
// moving transfers them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvec {

// How a file's bytes come into memory.
//   Map:  mmap'd read-only. Pages are shared with the page cache (and other processes reading the
//         file) and read on first touch. The mapping is advised for huge pages, so pages read from
//         disk through it come in 2 MiB folios where the kernel has them; pages already cached keep
//         the size they were cached with (measured on Linux 6.18, ext4: 37-54 % of a model in
//         2 MiB pages when it was cached by reads without the advice, 91 % when read cold through
//         the advised mapping).
//   Copy: read into anonymous memory advised for transparent huge pages: the whole file in
//         2 MiB pages where the kernel has them free. Decoding streams every weight once per
//         token and waits on memory; with one TLB entry per 2 MiB it runs faster
//         (docs/performance.md, "Weights in huge pages"). Costs one read of the file at start
//         and its size in private memory; the page cache's copy stays reclaimable.
//   Auto: Copy where transparent huge pages are on ("always" or "madvise" in
//         /sys/kernel/mm/transparent_hugepage/enabled) and the file takes at most half of the
//         available memory, else Map; Map too if the copy cannot be allocated.
enum class LoadMode { Auto, Map, Copy };

class MappedFile {
public:
    // Opens the file and maps or copies it (see LoadMode); throws kvec::Error naming the path on
    // failure. An empty file gives data() == nullptr, size() == 0.
    explicit MappedFile(const std::string& path, LoadMode mode = LoadMode::Map);
    // The same for the first min(max_bytes, file size) bytes only: a file whose tail nothing
    // references (a sparse or padded file) is not read or copied whole.
    MappedFile(const std::string& path, LoadMode mode, size_t max_bytes);
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }            // bytes held (the prefix given by max_bytes)
    size_t file_size() const { return file_size_; }  // the whole file's size
    const std::string& path() const { return path_; }
    // Whether the bytes were copied into anonymous memory (LoadMode::Copy, or Auto that chose it).
    bool copied() const { return copied_; }
    // Bytes of the file now held in 2 MiB pages (from /proc/self/smaps; 0 where it is unreadable).
    size_t huge_page_bytes() const;
    // A mapped file only (not copied): gives the whole pages inside [p, p + n) back to the page
    // cache (MADV_DONTNEED), so they stop counting in this process's memory until read again
    // (bytes that a repacked copy replaced).
    void release_pages(const uint8_t* p, size_t n) const;

private:
    void release();

    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    size_t file_size_ = 0;
    size_t region_size_ = 0;  // bytes munmap releases from data_: size_, or the copy's whole 2 MiB pages
    bool copied_ = false;
};

// Bytes of the memory [p, p + n) held in 2 MiB pages now (from /proc/self/smaps; 0 where it is
// unreadable).
size_t huge_page_bytes_in(const void* p, size_t n);

// Anonymous read-write memory of `size` bytes, starting on a 2 MiB boundary and advised for
// transparent huge pages (weights repacked at load). Throws kvec::Error if it cannot be allocated.
class HugeBuffer {
public:
    HugeBuffer() = default;
    explicit HugeBuffer(size_t size);
    ~HugeBuffer();
    HugeBuffer(HugeBuffer&& other) noexcept;
    HugeBuffer& operator=(HugeBuffer&& other) noexcept;
    HugeBuffer(const HugeBuffer&) = delete;
    HugeBuffer& operator=(const HugeBuffer&) = delete;

    uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    size_t huge_page_bytes() const { return huge_page_bytes_in(data_, region_size_); }

private:
    uint8_t* data_ = nullptr;
    size_t size_ = 0;
    size_t region_size_ = 0;
};

// Whether transparent huge pages can be had with madvise (THP "always" or "madvise").
bool transparent_huge_pages_available();
// MemAvailable of /proc/meminfo in bytes (0 where it is unreadable).
size_t available_memory_bytes();
// Whether LoadMode::Auto copies a file of this many bytes (the rule above).
bool auto_copies(size_t bytes);

}  // namespace kvec
