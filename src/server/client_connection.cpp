#include "server/client_connection.h"

#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace kvec::server {

namespace {

// The numeric host and port of a socket address ("127.0.0.1", 8080), as httplib writes them into
// the request (getnameinfo with NI_NUMERICHOST).
bool host_and_port(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
    char h[NI_MAXHOST];
    char p[NI_MAXSERV];
    if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof(h), p, sizeof(p),
                      NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        return false;
    }
    host = h;
    port = std::atoi(p);
    return true;
}

bool is_connection_of(int fd, const httplib::Request& req) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    std::string host;
    int port = -1;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || !host_and_port(addr, len, host, port) ||
        port != req.local_port || host != req.local_addr) {
        return false;
    }
    len = sizeof(addr);
    return ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 && host_and_port(addr, len, host, port) &&
           port == req.remote_port && host == req.remote_addr;
}

}  // namespace

ClientConnection::ClientConnection(const httplib::Request& req) {
    if (req.remote_port < 0 || req.local_port < 0) return;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        const std::string name = entry.path().filename().string();
        int fd = -1;
        if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc{}) continue;
        if (is_connection_of(fd, req)) {
            fd_ = fd;
            return;
        }
    }
}

bool ClientConnection::gone() const {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;  // nothing arrived: still connected
    if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) return true;
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace kvec::server
