// Shared helpers of the libFuzzer harnesses (docs/reliability.md, "Fuzzing"). Each harness defines
// LLVMFuzzerTestOneInput; an input may make kvec throw kvec::Error (a clear user error) and
// nothing else: any other exception, crash, hang, leak or sanitizer report is a finding.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace kvec::fuzz {

// The input as a file reachable by path (an in-memory file, rewritten for every input), for the
// readers that open paths (GGUF, models).
inline const std::string& as_file(const uint8_t* data, size_t size) {
    static const int fd = ::memfd_create("kvec-fuzz", MFD_CLOEXEC);
    static const std::string path = "/proc/self/fd/" + std::to_string(fd);
    if (fd < 0) std::abort();
    if (::ftruncate(fd, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
        const ssize_t w = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
        if (w <= 0) std::abort();
        done += static_cast<size_t>(w);
    }
    return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

// A file of the source tree (vocabularies the text harnesses load once).
inline std::string source_path(const std::string& relative) {
    const char* root = std::getenv("KVEC_SOURCE_DIR");
    return std::string(root != nullptr ? root : KVEC_SOURCE_DIR) + "/" + relative;
}

}  // namespace kvec::fuzz
