// The HTTP/1.1 transport of `kvec serve`: sockets, one thread per connection, requests parsed by
// Boost.Beast's parser (Debian's libboost-dev) under bounds, responses written whole or as chunks.
// It knows nothing of the API: every complete request goes to one handler (server.cpp routes it).
//
// What it bounds (docs/reliability.md, "The server under attack"):
//   - the request line and headers together: Limits::max_header_bytes (431 beyond), whatever the
//     number of headers;
//   - the body, announced by Content-Length or sent in chunks: Limits::max_body_bytes (413), and
//     the bodies being received by all connections together: Limits::max_body_bytes_in_flight
//     (503), so memory stays bounded by max_connections x (header bytes + read buffer) plus that;
//   - time: a request must arrive whole within Limits::request_timeout_s of its first byte
//     (slowloris: 408), an idle keep-alive connection is closed after keep_alive_s, a client that
//     reads nothing for write_timeout_s is dropped;
//   - connections: at most Limits::max_connections (one thread each); beyond, 503 and close.
// Beast refuses what RFC 9112 calls invalid: two different Content-Length values, Content-Length
// beside chunked, control characters (NUL, a bare CR) in a header, a malformed chunk (all 400).
// Pipelined requests are answered in order on their connection.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvec::server::http {

struct Limits {
    size_t max_header_bytes = size_t{32} << 10;  // request line and all header fields
    size_t max_body_bytes = size_t{8} << 20;     // one request's body
    size_t max_body_bytes_in_flight = 0;         // all bodies being received (0: 8 x max_body_bytes)
    int request_timeout_s = 30;                  // from a request's first byte to its last
    int write_timeout_s = 30;                    // a response write making no progress this long
    int keep_alive_s = 5;                        // an idle connection between requests
    int max_connections = 256;                   // open connections (each holds one thread)
};

struct Request {
    std::string method;  // "GET", "POST", ...
    std::string target;  // as sent: "/slots/0?action=save"
    std::string path;    // the target before '?', percent-decoded: "/slots/0"
    std::vector<std::pair<std::string, std::string>> params;   // the query, percent-decoded
    std::vector<std::pair<std::string, std::string>> headers;  // names lower-case, in arrival order
    std::string body;                                           // de-chunked
    std::vector<std::string> matches;  // the route's regex groups (set by Router), [0] the path
    // True once the client has closed or reset its end of the connection (or the server stops).
    // Does not block; bytes the client sent after this request (a pipelined one) do not count.
    std::function<bool()> client_gone = [] { return false; };

    // The value of the first header of that name (case-insensitive), or "".
    const std::string& header(std::string_view name) const;
    bool has_header(std::string_view name) const;
    // The value of the query parameter, or "".
    const std::string& param(std::string_view name) const;
};

// Writes one piece of a streamed body; false once the client has gone (the stream should stop).
using ChunkWriter = std::function<bool(std::string_view)>;

struct Response {
    int status = 200;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    // Set: the body is streamed (chunked transfer encoding) by this function, called once after
    // the status and headers are sent; `body` is ignored.
    std::function<void(const ChunkWriter&)> stream;

    void set_content(std::string content, std::string_view content_type);
    void set_header(std::string_view name, std::string value);  // replaces one of the same name
};

// Routes by method and a regex over the whole path (groups go to Request::matches).
class Router {
public:
    using Handler = std::function<void(Request&, Response&)>;
    void add(std::string method, const std::string& path_regex, Handler handler);
    // Runs the route's handler and returns true; false with `status` 404 (no such path) or 405
    // (the path exists for other methods) when none matches. HEAD is served by GET routes.
    bool dispatch(Request& req, Response& res, int& status) const;

private:
    struct Route {
        std::string method;
        std::regex path;
        Handler handler;
    };
    std::vector<Route> routes_;
};

class HttpServer {
public:
    // handler: every request that arrived whole. on_error: the response to what the transport
    // refuses itself (400, 408, 413, 431, 503) before any handler, `why` in words; `req` holds
    // what was parsed (its path may be empty).
    using Handler = std::function<void(Request&, Response&)>;
    using ErrorHandler = std::function<void(const Request&, int status, std::string_view why, Response&)>;

    HttpServer(Limits limits, Handler handler, ErrorHandler on_error);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds host:port (port 0: any free port) with SO_REUSEADDR only (never SO_REUSEPORT: a
    // second server on the same port is an error, not a silent sharer). Returns the port;
    // kvec::Error when it cannot bind.
    int bind(const std::string& host, int port);
    // Accepts connections until stop(); returns once every connection has closed (requests being
    // handled finish first; idle and half-received ones are closed at once).
    void run();
    void stop();
    bool running() const { return running_.load(); }
    // Serves one connected socket until the client closes it, a request is refused, or the
    // server stops (run() calls it on a thread per accepted connection; the fuzzing harness on
    // one end of a socket pair). Does not close `fd`.
    void serve(int fd);

private:
    bool reserve_body(size_t bytes);
    void release_body(size_t bytes);

    Limits limits_;
    Handler handler_;
    ErrorHandler on_error_;
    int listen_fd_ = -1;
    int stop_fd_ = -1;  // an eventfd, readable once stop() is called: wakes every wait
    std::atomic<bool> running_{false};
    std::atomic<bool> stopping_{false};
    std::mutex mutex_;
    std::condition_variable all_closed_;
    int connections_ = 0;
    size_t body_bytes_in_flight_ = 0;
};

}  // namespace kvec::server::http
