// Files replaced whole. An AtomicFile writes to a temporary file beside the destination (mkstemp:
// a new name, created with O_EXCL, so never through a planted link), then commit() flushes it to
// disk, renames it over the destination and syncs the directory: a reader sees the old file or
// the new one, never a torn one, and a write that fails or is abandoned leaves the old file as it
// was and no temporary behind. The destination must be absent or a regular file: a symbolic link,
// directory, device or FIFO there is refused before anything is written (running as root, an
// output name of /dev/full stays a device).
#pragma once

#include <string>
#include <string_view>

namespace kvec {

class AtomicFile {
public:
    // Checks the destination and creates the temporary (kvec::Error naming `path` if it cannot).
    explicit AtomicFile(std::string path);
    ~AtomicFile();  // removes the temporary unless committed
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    int fd() const { return fd_; }
    const std::string& temp_path() const { return temp_; }
    // Writes all of `bytes` at the current offset (kvec::Error on a short or failed write).
    void write(std::string_view bytes);
    // Mode 0644, fsync, close, rename over the destination (checked again), fsync of the directory.
    void commit();

private:
    std::string path_, temp_;
    int fd_ = -1;
};

// One AtomicFile holding `bytes`.
void write_file_atomic(const std::string& path, std::string_view bytes);

// kvec::Error unless `path` is absent or a regular file (lstat: a link is refused, not followed).
void check_replaceable(const std::string& path);

// True for the names of the temporaries AtomicFile makes (NAME.tmp-XXXXXX), and for NAME.part.
bool is_temporary_name(std::string_view name);

// Removes the regular files directly in `dir` whose names are temporaries (is_temporary_name):
// what writes killed before their rename left. Returns how many it removed.
int remove_stale_temporaries(const std::string& dir);

}  // namespace kvec
