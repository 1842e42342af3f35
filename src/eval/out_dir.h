// The safety of an output directory of `kvec eval` (docs/reliability.md):
//   - DirLock: an exclusive lock (flock) for the whole run; a second run on the same directory
//     gets an error naming the holder (pid, host, start time). The kernel drops the lock when the
//     holder exits, also when it is killed.
//   - RecordAppender: each record is appended with one write(2) on an O_APPEND descriptor; a
//     short or failed write (a full disk) is cut back, so the file only ever holds whole records.
//   - write_file_atomic: a temporary file in the same directory, fsync, rename, fsync of the
//     directory: readers see the old file or the new one, never a torn one.
#pragma once

#include <string>

namespace kvec::eval {

class DirLock {
public:
    // Locks `dir` (which must exist) through the file `dir`/.kvec-eval.lock. kvec::Error naming the
    // holder if another process holds it.
    explicit DirLock(const std::string& dir);
    ~DirLock();
    DirLock(const DirLock&) = delete;
    DirLock& operator=(const DirLock&) = delete;

private:
    int fd_ = -1;
};

class RecordAppender {
public:
    explicit RecordAppender(const std::string& path);  // creates the file if needed
    ~RecordAppender();
    RecordAppender(const RecordAppender&) = delete;
    RecordAppender& operator=(const RecordAppender&) = delete;
    // Appends `line` (a newline is added) with one write; kvec::Error if it cannot be written
    // whole, after cutting the file back to where it ended before.
    void append(const std::string& line);

private:
    std::string path_;
    int fd_ = -1;
};

// Writes `text` to `path` atomically (see above); kvec::Error naming the path on failure, which
// leaves the previous file (if any) in place.
void write_file_atomic(const std::string& path, const std::string& text);

// "pid 1234 on host h, started 2025-01-01T12:00:00Z": what DirLock records of its holder.
std::string lock_holder_description();

}  // namespace kvec::eval
