// The safety of an output directory of `kvec eval` (docs/reliability.md):
//   - DirLock: an exclusive lock (flock) for the whole run; a second run on the same directory
//     gets an error naming the holder (pid, host, start time). The kernel drops the lock when the
//     holder exits, also when it is killed.
//   - RecordAppender: each record is appended with one write(2) on an O_APPEND descriptor; a
//     short or failed write (a full disk) is cut back, so the file only ever holds whole records.
//   - whole files (summaries, metrics, configs) are replaced atomically: util/atomic_file.h.
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

// "pid 1234 on host h, started 2025-01-01T12:00:00Z": what DirLock records of its holder.
std::string lock_holder_description();

}  // namespace kvec::eval
