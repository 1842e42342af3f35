#include "server/http.h"

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <thread>

#include "util/error.h"

namespace kvec::server::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kEmpty;

bool same_name(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// %XX decoded (a malformed escape stays as it is); in a query, '+' is a space.
std::string percent_decode(std::string_view s, bool plus_is_space) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
            out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            i += 2;
        } else {
            out += plus_is_space && s[i] == '+' ? ' ' : s[i];
        }
    }
    return out;
}

void split_target(Request& req) {
    const std::string_view target = req.target;
    const size_t q = target.find('?');
    req.path = percent_decode(target.substr(0, q), false);
    if (q == std::string_view::npos) return;
    std::string_view query = target.substr(q + 1);
    while (!query.empty()) {
        const size_t amp = query.find('&');
        const std::string_view pair = query.substr(0, amp);
        if (!pair.empty()) {
            const size_t eq = pair.find('=');
            req.params.emplace_back(percent_decode(pair.substr(0, eq), true),
                                    eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true));
        }
        if (amp == std::string_view::npos) break;
        query.remove_prefix(amp + 1);
    }
}

// The status of a request the transport refuses, from the error that stopped its reading; 0
// when there is nobody to answer (the client closed, reset, or the server stops).
int status_of(const error_code& ec) {
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) return 431;
    if (ec == bhttp::error::body_limit) return 413;
    if (ec == beast::error::timeout) return 408;
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message || ec == net::error::eof ||
        ec == net::error::operation_aborted || ec.category() == boost::system::system_category()) {
        return 0;
    }
    return 400;  // every other parse error: a malformed request line, header or chunk
}

// A connected socket whose reads and writes wait at most until a deadline (reads also end when
// the server stops): Beast's SyncReadStream and SyncWriteStream over poll(2).
class Socket {
public:
    Socket(int fd, int stop_fd) : fd_(fd), stop_fd_(stop_fd) {}

    void read_deadline(Clock::time_point t) { read_deadline_ = t; }
    void write_timeout(Clock::duration d) { write_timeout_ = d; }

    template <class Buffers>
    size_t read_some(const Buffers& buffers, error_code& ec) {
        for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers); ++it) {
            const net::mutable_buffer b = *it;
            if (b.size() == 0) continue;
            for (;;) {
                if (!wait(POLLIN, read_deadline_, true, ec)) return 0;
                const ssize_t n = ::recv(fd_, b.data(), b.size(), 0);
                if (n > 0) return ec = {}, static_cast<size_t>(n);
                if (n == 0) return ec = net::error::eof, 0;
                if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
                    return ec = error_code(errno, boost::system::system_category()), 0;
                }
            }
        }
        return ec = {}, 0;
    }
    template <class Buffers>
    size_t read_some(const Buffers& buffers) {
        error_code ec;
        const size_t n = read_some(buffers, ec);
        if (ec) throw boost::system::system_error(ec);
        return n;
    }

    template <class Buffers>
    size_t write_some(const Buffers& buffers, error_code& ec) {
        iovec iov[16];
        int count = 0;
        for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers) && count < 16; ++it) {
            const net::const_buffer b = *it;
            if (b.size() > 0) iov[count++] = {const_cast<void*>(b.data()), b.size()};
        }
        if (count == 0) return ec = {}, 0;
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = static_cast<size_t>(count);
        const Clock::time_point deadline = Clock::now() + write_timeout_;
        for (;;) {
            // Writes do not end when the server stops: a request being answered is answered.
            if (!wait(POLLOUT, deadline, false, ec)) return 0;
            const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
            if (n >= 0) return ec = {}, static_cast<size_t>(n);
            if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
                return ec = error_code(errno, boost::system::system_category()), 0;
            }
        }
    }
    template <class Buffers>
    size_t write_some(const Buffers& buffers) {
        error_code ec;
        const size_t n = write_some(buffers, ec);
        if (ec) throw boost::system::system_error(ec);
        return n;
    }

private:
    bool wait(short events, Clock::time_point deadline, bool watch_stop, error_code& ec) const {
        for (;;) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
            if (left <= 0) return ec = beast::error::timeout, false;
            pollfd p[2] = {{fd_, events, 0}, {stop_fd_, POLLIN, 0}};
            const int r = ::poll(p, watch_stop ? 2 : 1, static_cast<int>(std::min<long long>(left, INT_MAX)));
            if (r < 0 && errno != EINTR) return ec = error_code(errno, boost::system::system_category()), false;
            if (r <= 0) continue;
            if (watch_stop && p[1].revents != 0) return ec = net::error::operation_aborted, false;
            if (p[0].revents != 0) return true;  // ready, or an error the next call reports
        }
    }

    int fd_;
    int stop_fd_;
    Clock::time_point read_deadline_ = Clock::now();
    Clock::duration write_timeout_ = std::chrono::seconds(30);
};

// The client closed or reset its end; never blocks. Unread bytes (a pipelined request) are not
// a close.
bool peer_gone(int fd) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) return true;
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

template <class Message>
void add_headers(Message& m, const Response& res) {
    for (const auto& [name, value] : res.headers) m.insert(name, value);
    if (res.status == 499) m.reason("Client Closed Request");  // nginx's; Beast knows no reason for it
}

// Whole responses (HEAD: the headers alone, with the body's length).
bool write_whole(Socket& sock, const Request& req, Response& res, bool keep_alive) {
    error_code ec;
    if (req.method == "HEAD") {
        bhttp::response<bhttp::empty_body> m{static_cast<bhttp::status>(res.status), 11};
        add_headers(m, res);
        m.content_length(res.body.size());
        m.keep_alive(keep_alive);
        bhttp::response_serializer<bhttp::empty_body> sr{m};
        bhttp::write_header(sock, sr, ec);
        return !ec;
    }
    bhttp::response<bhttp::string_body> m{static_cast<bhttp::status>(res.status), 11};
    add_headers(m, res);
    m.body() = std::move(res.body);
    m.keep_alive(keep_alive);
    m.prepare_payload();
    bhttp::write(sock, m, ec);
    return !ec;
}

bool write_streamed(Socket& sock, Response& res, bool keep_alive) {
    bhttp::response<bhttp::empty_body> m{static_cast<bhttp::status>(res.status), 11};
    add_headers(m, res);
    m.keep_alive(keep_alive);
    m.chunked(true);
    bhttp::response_serializer<bhttp::empty_body> sr{m};
    error_code ec;
    bhttp::write_header(sock, sr, ec);
    bool open = !ec;
    const ChunkWriter write = [&](std::string_view bytes) {
        if (open && !bytes.empty()) {
            net::write(sock, bhttp::make_chunk(net::const_buffer(bytes.data(), bytes.size())), ec);
            open = !ec;
        }
        return open;
    };
    res.stream(write);
    if (open) net::write(sock, bhttp::make_chunk_last(), ec);
    return open && !ec;
}

// Closing with unread input makes the kernel reset the connection, which can destroy the
// response the client has not read yet (and a client still sending a refused body sees a broken
// pipe): stop sending, then read and drop what the client still sends, up to 64 MiB, until the
// request's deadline and while it keeps coming (1 s gaps at most).
void linger_close(int fd, Clock::time_point deadline) {
    ::shutdown(fd, SHUT_WR);
    char sink[65536];
    size_t drained = 0;
    while (drained < (size_t{64} << 20)) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(
            std::min(deadline, Clock::now() + std::chrono::seconds(1)) - Clock::now()).count();
        if (left <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
        const ssize_t n = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (n <= 0) break;
        drained += static_cast<size_t>(n);
    }
}

}  // namespace

const std::string& Request::header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
        if (same_name(n, name)) return v;
    }
    return kEmpty;
}

bool Request::has_header(std::string_view name) const {
    return std::any_of(headers.begin(), headers.end(), [&](const auto& h) { return same_name(h.first, name); });
}

const std::string& Request::param(std::string_view name) const {
    for (const auto& [n, v] : params) {
        if (n == name) return v;
    }
    return kEmpty;
}

void Response::set_content(std::string content, std::string_view content_type) {
    body = std::move(content);
    set_header("Content-Type", std::string(content_type));
}

void Response::set_header(std::string_view name, std::string value) {
    for (auto& [n, v] : headers) {
        if (same_name(n, name)) {
            v = std::move(value);
            return;
        }
    }
    headers.emplace_back(std::string(name), std::move(value));
}

void Router::add(std::string method, const std::string& path_regex, Handler handler) {
    routes_.push_back({std::move(method), std::regex(path_regex), std::move(handler)});
}

bool Router::dispatch(Request& req, Response& res, int& status) const {
    const std::string_view method = req.method == "HEAD" ? std::string_view("GET") : std::string_view(req.method);
    bool path_known = false;
    for (const Route& route : routes_) {
        std::smatch m;
        if (!std::regex_match(req.path, m, route.path)) continue;
        path_known = true;
        if (route.method != method) continue;
        req.matches.assign(m.begin(), m.end());
        route.handler(req, res);
        return true;
    }
    status = path_known ? 405 : 404;
    return false;
}

HttpServer::HttpServer(Limits limits, Handler handler, ErrorHandler on_error)
    : limits_(limits), handler_(std::move(handler)), on_error_(std::move(on_error)) {
    if (limits_.max_body_bytes_in_flight == 0) limits_.max_body_bytes_in_flight = 8 * limits_.max_body_bytes;
    if (limits_.max_connections < 1) fail("the server needs at least 1 connection, got {}", limits_.max_connections);
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd_ < 0) fail("cannot create an eventfd: {}", std::strerror(errno));
}

HttpServer::~HttpServer() {
    stop();
    {
        std::unique_lock lock(mutex_);
        all_closed_.wait(lock, [this] { return connections_ == 0; });
    }
    if (listen_fd_ >= 0) ::close(listen_fd_);
    ::close(stop_fd_);
}

int HttpServer::bind(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port);
    if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
        fail("cannot bind to {}:{}: {}", host, port, ::gai_strerror(rc));
    }
    int error = 0;
    for (const addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        const int yes = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
            listen_fd_ = fd;
        } else {
            error = errno;
            ::close(fd);
        }
    }
    ::freeaddrinfo(found);
    if (listen_fd_ < 0) {
        fail("cannot bind to {}:{} ({}: in use, or not an address of this machine)", host, port, std::strerror(error));
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    return ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

void HttpServer::run() {
    if (listen_fd_ < 0) fail("the server is not bound to a port");
    running_ = true;
    while (!stopping_) {
        pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
        if (::poll(p, 2, -1) < 0 || p[1].revents != 0) continue;
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            // Out of descriptors: the connection waits in the queue; try again shortly.
            if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(10));
            continue;
        }
        const int yes = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
        bool admitted = false;
        {
            std::lock_guard lock(mutex_);
            if (connections_ < limits_.max_connections) {
                ++connections_;
                admitted = true;
            }
        }
        if (!admitted) {
            // Answered from here without a thread: one small write the socket buffer takes.
            Response res;
            on_error_(Request{}, 503, "too many open connections; try again", res);
            res.set_header("Retry-After", "1");
            Socket sock(fd, stop_fd_);
            sock.write_timeout(std::chrono::milliseconds(100));
            write_whole(sock, Request{}, res, false);
            ::close(fd);
            continue;
        }
        try {
            std::thread([this, fd] {
                serve(fd);
                ::close(fd);
                std::lock_guard lock(mutex_);
                --connections_;
                all_closed_.notify_all();  // under the lock: the server is not destroyed before it
            }).detach();
        } catch (const std::system_error&) {  // no thread to be had: as too many connections
            ::close(fd);
            std::lock_guard lock(mutex_);
            --connections_;
        }
    }
    std::unique_lock lock(mutex_);
    all_closed_.wait(lock, [this] { return connections_ == 0; });
    running_ = false;
}

void HttpServer::stop() {
    stopping_ = true;
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(stop_fd_, &one, sizeof(one));
}

bool HttpServer::reserve_body(size_t bytes) {
    std::lock_guard lock(mutex_);
    if (bytes > limits_.max_body_bytes_in_flight - body_bytes_in_flight_) return false;
    body_bytes_in_flight_ += bytes;
    return true;
}

void HttpServer::release_body(size_t bytes) {
    std::lock_guard lock(mutex_);
    body_bytes_in_flight_ -= bytes;
}

void HttpServer::serve(int fd) {
    Socket sock(fd, stop_fd_);
    sock.write_timeout(std::chrono::seconds(limits_.write_timeout_s));
    // The read buffer holds a request's headers and at most one read beyond them.
    beast::flat_buffer buffer(limits_.max_header_bytes + 65536);
    const auto request_time = std::chrono::seconds(limits_.request_timeout_s);
    bool first = true;
    while (!stopping_) {
        error_code ec;
        if (buffer.size() == 0) {
            // Idle: the first request gets the request timeout to begin, a kept-alive connection less.
            sock.read_deadline(Clock::now() + (first ? request_time : std::chrono::seconds(limits_.keep_alive_s)));
            const size_t n = sock.read_some(buffer.prepare(65536), ec);
            if (ec) return;  // closed, idle too long, or the server stops: nobody to answer
            buffer.commit(n);
        }
        first = false;
        const Clock::time_point deadline = Clock::now() + request_time;  // the whole request, from its first byte
        sock.read_deadline(deadline);

        Request req;
        Response res;
        const auto refuse = [&](int status, std::string_view why) {
            if (status == 0) return;
            on_error_(req, status, why, res);
            write_whole(sock, req, res, false);
            linger_close(fd, deadline);
        };
        bhttp::request_parser<bhttp::string_body> parser;
        parser.header_limit(static_cast<std::uint32_t>(std::min<size_t>(limits_.max_header_bytes, UINT32_MAX)));
        parser.body_limit(limits_.max_body_bytes);
        bhttp::read_header(sock, buffer, parser, ec);
        {  // what was parsed, also when it stopped early (a body over the limit is found in the header)
            const auto& head = parser.get();
            req.method = std::string(head.method_string());
            req.target = std::string(head.target());
            split_target(req);
            req.headers.reserve(static_cast<size_t>(std::distance(head.begin(), head.end())));
            for (const auto& field : head) {
                std::string name(field.name_string());
                std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
                req.headers.emplace_back(std::move(name), std::string(field.value()));
            }
            if (ec) return refuse(status_of(ec), ec.message());
            if (req.target.empty() || req.target[0] != '/') {
                return refuse(400, "the request target must be a path beginning with '/'");
            }
            if (head.version() != 11 && head.version() != 10) return refuse(400, "only HTTP/1.0 and HTTP/1.1 are served");
        }
        if (ec) return refuse(status_of(ec), ec.message());

        // What the body may take, held until the request is answered.
        const size_t announced = parser.content_length() ? static_cast<size_t>(*parser.content_length())
                                 : parser.chunked()      ? limits_.max_body_bytes
                                                         : 0;
        if (!reserve_body(announced)) {
            res.set_header("Retry-After", "1");
            return refuse(503, "the server is receiving too many request bodies; try again");
        }
        struct Release {
            HttpServer* server;
            size_t bytes;
            ~Release() { server->release_body(bytes); }
        } release{this, announced};
        if (!parser.is_done() && same_name(req.header("expect"), "100-continue")) {
            net::write(sock, net::buffer(std::string_view("HTTP/1.1 100 Continue\r\n\r\n")), ec);
            if (ec) return;
        }
        bhttp::read(sock, buffer, parser, ec);
        if (ec) return refuse(status_of(ec), ec.message());
        const bool keep_alive = parser.keep_alive();
        req.body = std::move(parser.get().body());
        req.client_gone = [this, fd] { return stopping_.load() || peer_gone(fd); };

        handler_(req, res);
        const bool written = res.stream && res.status == 200 ? write_streamed(sock, res, keep_alive)
                                                              : write_whole(sock, req, res, keep_alive);
        if (!written || !keep_alive) return;
    }
}

}  // namespace kvec::server::http
