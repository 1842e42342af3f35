// kvec serve's request handling: the bytes a client sends over a connection through the HTTP
// transport (server/http.h: Beast's parser under the server's bounds, chunked bodies, pipelining,
// refusals), and a request body through the JSON-to-options layer (server/request.h:
// parse_request, the `kv` extension resolved into a policy). The first byte picks which (and the
// endpoint); the rest is the input. An ApiError (the 4xx a client gets) is expected; any other
// exception, crash, hang or sanitizer report is a finding.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "fuzz_common.h"
#include "server/api_error.h"
#include "server/cross_site.h"
#include "server/http.h"
#include "server/request.h"

namespace {

using namespace kvec::server;

RequestDefaults defaults(uint8_t flags) {
    RequestDefaults d;
    d.n_ctx = 256;
    if ((flags & 4) != 0) {
        d.policy = "snapkv";
        d.budget = 32;
    }
    d.reuse = (flags & 8) != 0;
    return d;
}

void parse_body(std::string_view body, uint8_t flags) {
    try {
        const CompletionRequest r = parse_request(body, (flags & 2) != 0 ? Endpoint::Chat : Endpoint::Completion, defaults(flags));
        volatile size_t sink = r.kv.spec.size() + r.messages.size() + r.prompt.size();
        (void)sink;
    } catch (const ApiError& e) {
        if (e.status() < 400 || e.status() >= 500) std::abort();  // a client's mistake is a 4xx
    }
}

// A transport with small bounds whose handler checks what the server's does before routing:
// cross-site rules, then the body through parse_request.
http::HttpServer& transport() {
    static http::HttpServer server(
        [] {
            http::Limits l;
            l.max_header_bytes = 4096;
            l.max_body_bytes = 16384;
            l.request_timeout_s = 2;
            l.write_timeout_s = 2;
            return l;
        }(),
        [](http::Request& req, http::Response& res) {
            if (const auto refused = check_cross_site(req.header("Host"), req.header("Origin"), req.header("Content-Type"),
                                                      !req.body.empty(), CrossSitePolicy{})) {
                res.status = refused->status;
                return;
            }
            if (req.method == "POST") parse_body(req.body, req.path.size() % 16);
            res.set_content(req.path + "?" + req.param("action"), "text/plain");
        },
        [](const http::Request&, int status, std::string_view why, http::Response& res) {
            if (status < 400 || status >= 600) std::abort();
            res.status = status;
            res.set_content(std::string(why), "text/plain");
        });
    return server;
}

void serve_bytes(std::string_view bytes) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
    // The client: sends everything, closes its sending side, reads every response.
    std::thread client([fd = fds[1], bytes] {
        size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
            if (n <= 0) break;
            done += static_cast<size_t>(n);
        }
        ::shutdown(fd, SHUT_WR);
        char buf[4096];
        while (::recv(fd, buf, sizeof(buf), 0) > 0) {
        }
    });
    transport().serve(fds[0]);
    ::close(fds[0]);
    client.join();
    ::close(fds[1]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1 || size > 65536) return 0;
    const uint8_t flags = data[0];
    const std::string_view rest = kvec::fuzz::as_text(data + 1, size - 1);
    if ((flags & 1) != 0) {
        serve_bytes(rest);
    } else {
        parse_body(rest, flags);
    }
    return 0;
}
