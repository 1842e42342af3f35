#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <utility>

#include "util/error.h"

namespace kvec {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Closes the descriptor when the constructor leaves, by return or by throw.
struct Fd {
    int fd;
    ~Fd() { ::close(fd); }
};

// Anonymous memory for `size` bytes starting on a 2 MiB boundary, advised for huge pages; nullptr
// if it cannot be allocated. `region_size` receives its length (size rounded up to 2 MiB pages),
// what munmap must release from the start.
uint8_t* map_huge_region(size_t size, size_t& region_size) {
    const size_t rounded = (size + kHugePage - 1) / kHugePage * kHugePage;
    const size_t span = rounded + kHugePage;  // room to move the start to a 2 MiB boundary
    void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    const auto base = reinterpret_cast<uintptr_t>(p);
    const uintptr_t start = (base + kHugePage - 1) & ~(uintptr_t{kHugePage} - 1);
    if (start > base) ::munmap(p, start - base);
    const uintptr_t end = base + span;
    if (end > start + rounded) ::munmap(reinterpret_cast<void*>(start + rounded), end - (start + rounded));
    region_size = rounded;
    ::madvise(reinterpret_cast<void*>(start), rounded, MADV_HUGEPAGE);  // advice only: ignored where THP is off
    return reinterpret_cast<uint8_t*>(start);
}

void read_all(int fd, uint8_t* dst, size_t size, const std::string& path) {
    size_t done = 0;
    while (done < size) {
        const size_t chunk = std::min<size_t>(size - done, size_t{1} << 30);
        const ssize_t r = ::pread(fd, dst + done, chunk, static_cast<off_t>(done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) fail("cannot read '{}': {}", path, std::strerror(errno));
        if (r == 0) fail("cannot read '{}': the file shrank while it was read", path);
        done += static_cast<size_t>(r);
    }
}

}  // namespace

bool transparent_huge_pages_available() {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    if (!std::getline(f, line)) return false;
    return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}

size_t available_memory_bytes() {
    std::ifstream f("/proc/meminfo");
    std::string key;
    size_t kib = 0;
    std::string unit;
    while (f >> key >> kib >> unit) {
        if (key == "MemAvailable:") return kib * 1024;
    }
    return 0;
}

MappedFile::MappedFile(const std::string& path, LoadMode mode) : MappedFile(path, mode, SIZE_MAX) {}

MappedFile::MappedFile(const std::string& path, LoadMode mode, size_t max_bytes) : path_(path) {
    const Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd.fd, &st) != 0) fail("cannot stat '{}': {}", path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("'{}' is not a regular file", path);
    file_size_ = static_cast<size_t>(st.st_size);
    size_ = std::min(file_size_, max_bytes);
    if (size_ == 0) return;
    const bool copy = mode == LoadMode::Copy || (mode == LoadMode::Auto && auto_copies(size_));
    uint8_t* p = copy ? map_huge_region(size_, region_size_) : nullptr;
    if (copy && p == nullptr && mode == LoadMode::Copy) {
        fail("cannot allocate {} bytes to copy '{}' into: {} (--mmap maps it instead)", size_, path,
             std::strerror(errno));
    }
    if (p != nullptr) {
        data_ = p;
        try {
            read_all(fd.fd, p, size_, path);
        } catch (...) {
            release();
            throw;
        }
        ::mprotect(p, region_size_, PROT_READ);  // the weights are read-only from here on
        copied_ = true;
        return;
    }
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (m == MAP_FAILED) fail("cannot map '{}': {}", path, std::strerror(errno));
    ::madvise(m, size_, MADV_HUGEPAGE);  // pages read from here on come in 2 MiB folios where they can
    region_size_ = size_;
    data_ = static_cast<const uint8_t*>(m);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      file_size_(std::exchange(other.file_size_, 0)),
      region_size_(std::exchange(other.region_size_, 0)),
      copied_(std::exchange(other.copied_, false)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        release();
        path_ = std::move(other.path_);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        file_size_ = std::exchange(other.file_size_, 0);
        region_size_ = std::exchange(other.region_size_, 0);
        copied_ = std::exchange(other.copied_, false);
    }
    return *this;
}

size_t huge_page_bytes_in(const void* p, size_t n) {
    if (p == nullptr || n == 0) return 0;
    const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + n;
    std::ifstream f("/proc/self/smaps");
    std::string line;
    bool inside = false;
    size_t kib = 0;
    while (std::getline(f, line)) {
        uintptr_t a = 0, b = 0;
        if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &a, &b) == 2) {
            inside = a < hi && b > lo;  // a mapping's header line: "start-end perms offset ..."
            continue;
        }
        size_t v = 0;
        if (inside && (std::sscanf(line.c_str(), "AnonHugePages: %zu kB", &v) == 1 ||
                       std::sscanf(line.c_str(), "FilePmdMapped: %zu kB", &v) == 1)) {
            kib += v;
        }
    }
    return std::min(kib * 1024, n);
}

size_t MappedFile::huge_page_bytes() const { return std::min(huge_page_bytes_in(data_, region_size_), size_); }

void MappedFile::release_pages(const uint8_t* p, size_t n) const {
    KVEC_CHECK(p >= data_ && p + n <= data_ + size_);
    if (copied_) return;  // anonymous memory: dropped pages would read back as zeros
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

HugeBuffer::HugeBuffer(size_t size) : size_(size) {
    if (size == 0) return;
    data_ = map_huge_region(size, region_size_);
    if (data_ == nullptr) fail("cannot allocate {} bytes: {}", size, std::strerror(errno));
}

HugeBuffer::~HugeBuffer() {
    if (data_ != nullptr) ::munmap(data_, region_size_);
}

HugeBuffer::HugeBuffer(HugeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      region_size_(std::exchange(other.region_size_, 0)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& other) noexcept {
    if (this != &other) {
        if (data_ != nullptr) ::munmap(data_, region_size_);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        region_size_ = std::exchange(other.region_size_, 0);
    }
    return *this;
}

void MappedFile::release() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), region_size_);
    region_size_ = 0;
    data_ = nullptr;
    size_ = 0;
    file_size_ = 0;
    copied_ = false;
}

bool auto_copies(size_t bytes) {
    return transparent_huge_pages_available() && bytes <= available_memory_bytes() / 2;
}

}  // namespace kvec
