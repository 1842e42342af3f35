#include "eval/out_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "util/error.h"
#include "util/terminal.h"

namespace kvec::eval {

std::string lock_holder_description() {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
    const std::time_t t = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return fmt::format("pid {} on host {}, started {}", ::getpid(), host, when);
}

DirLock::DirLock(const std::string& dir) {
    const std::string path = dir + "/.kvec-eval.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open the lock file '{}': {}", path, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        std::string holder;
        char buf[512];
        const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
        if (n > 0) holder.assign(buf, static_cast<size_t>(n));
        while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
        ::close(fd_);
        fd_ = -1;
        if (err == EWOULDBLOCK) {
            fail("output directory '{}' is in use by another kvec eval ({}); wait for it to finish or use "
                 "another --out", dir, holder.empty() ? std::string("holder unknown") : escape_control(holder));
        }
        fail("cannot lock '{}': {}", path, std::strerror(err));
    }
    const std::string me = lock_holder_description() + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
        // The lock holds without the description; a second run then says "holder unknown".
    }
}

DirLock::~DirLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
}

RecordAppender::RecordAppender(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot open '{}' for appending: {}", path, std::strerror(errno));
}

RecordAppender::~RecordAppender() {
    if (fd_ >= 0) ::close(fd_);
}

void RecordAppender::append(const std::string& line) {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail("cannot stat '{}': {}", path_, std::strerror(errno));
    std::string text = line;
    text += '\n';
    const ssize_t w = ::write(fd_, text.data(), text.size());
    if (w == static_cast<ssize_t>(text.size())) return;
    const int err = w < 0 ? errno : ENOSPC;  // a short write: the disk (or the file size limit) is full
    // Cut the partial record so that the file ends with a whole record.
    const bool cut = ::ftruncate(fd_, st.st_size) == 0;
    fail("cannot write a prediction to '{}': {}{}", path_, std::strerror(err),
         cut ? "; the predictions written before are intact: run the same command again to resume"
             : "; its last line may be incomplete and is dropped when the same command runs again");
}

}  // namespace kvec::eval
