#include "util/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace kvec {

namespace {

std::string parent_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

const char* kind_of(mode_t mode) {
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

}  // namespace

void check_replaceable(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return;
        fail("cannot write '{}': {}", path, std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) fail("refusing to write '{}': it is {}, not a regular file", path, kind_of(st.st_mode));
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
    check_replaceable(path_);
    temp_ = path_ + ".tmp-XXXXXX";
    fd_ = ::mkstemp(temp_.data());
    if (fd_ < 0) fail("cannot create a temporary file for '{}': {}", path_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::write(std::string_view bytes) {
    while (!bytes.empty()) {
        const ssize_t w = ::write(fd_, bytes.data(), bytes.size());
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fail("cannot write '{}': {}", path_, w < 0 ? std::strerror(errno) : "short write (disk full?)");
        bytes.remove_prefix(static_cast<size_t>(w));
    }
}

void AtomicFile::commit() {
    if (::fchmod(fd_, 0644) != 0 || ::fsync(fd_) != 0) fail("cannot write '{}': {}", path_, std::strerror(errno));
    const int closed = ::close(fd_);
    fd_ = -1;
    if (closed != 0) fail("cannot write '{}': {}", path_, std::strerror(errno));
    check_replaceable(path_);  // again: the destination may have changed while the file was written
    if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("cannot rename '{}' to '{}': {}", temp_, path_, std::strerror(errno));
    temp_.clear();
    const int dir = ::open(parent_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
        ::fsync(dir);  // the rename itself reaches the disk
        ::close(dir);
    }
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
    AtomicFile f(path);
    f.write(bytes);
    f.commit();
}

bool is_temporary_name(std::string_view name) {
    constexpr std::string_view tmp = ".tmp-", part = ".part";
    if (name.size() > part.size() && name.ends_with(part)) return true;
    return name.size() > tmp.size() + 6 && name.substr(name.size() - 6 - tmp.size(), tmp.size()) == tmp;
}

int remove_stale_temporaries(const std::string& dir) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) fail("cannot read directory '{}': {}", dir, std::strerror(errno));
    int removed = 0;
    while (const dirent* e = ::readdir(d)) {
        const std::string_view name(e->d_name);
        if (!is_temporary_name(name)) continue;
        struct stat st {};
        if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            ::unlinkat(::dirfd(d), e->d_name, 0) == 0) {
            ++removed;
        }
    }
    ::closedir(d);
    return removed;
}

}  // namespace kvec
