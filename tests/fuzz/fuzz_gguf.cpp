// GGUF reader: any file opens or throws kvec::Error; a file that opens is walked completely
// (every metadata value and every byte of every tensor, which ASan checks are inside the file).
#include "fuzz_common.h"
#include "gguf/gguf.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string& path = kvec::fuzz::as_file(data, size);
    // Map, and Copy (which copies only what the tensors reference) on alternate inputs.
    const auto mode = size % 2 == 0 ? kvec::LoadMode::Map : kvec::LoadMode::Copy;
    try {
        auto f = kvec::gguf::File::open(path, mode);
        size_t sum = 0;
        for (const auto& [key, v] : f->metadata()) {
            sum += key.size() + v.str.size() + v.array_size();
            for (const auto& s : v.strings) sum += s.size();
        }
        for (const auto& t : f->tensors()) {
            for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
        }
        volatile size_t sink = sum;
        (void)sink;
    } catch (const kvec::Error&) {
    }
    return 0;
}
