// libFuzzer target for the GGUF reader (built only with -DKVEC_FUZZ=ON and clang; not in CI):
//   cmake -B build/fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DKVEC_FUZZ=ON
//   build/fuzz/tests/gguf/gguf_fuzzer -max_len=4096 corpus/
// Every input must open or throw kvec::Error.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "gguf/gguf.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const int fd = ::memfd_create("gguf-fuzz", 0);
    if (fd < 0) std::abort();
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    try {
        auto f = kvec::gguf::File::open(path);
        volatile uint8_t sink = 0;
        for (const auto& t : f->tensors()) {
            for (size_t i = 0; i < t.nbytes; ++i) sink = static_cast<uint8_t>(sink + t.data[i]);
        }
    } catch (const kvec::Error&) {
    }
    return 0;
}
