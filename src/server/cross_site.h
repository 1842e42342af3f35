// Cross-site protection, on with or without an API key (docs/server.md, "Cross-site requests"): a
// web page the user visits must not drive the server from the user's browser.
//   - Host (DNS rebinding: a name the attacker controls, resolved to 127.0.0.1): an IP literal,
//     `localhost`, or a name given with --allowed-host; anything else is a 403.
//   - Origin (a page of another site posting with the user's browser): absent (not a browser, or
//     a same-origin GET), the origin of the Host the request was sent to, or one given with
//     --allowed-origin; anything else, `null` included, is a 403.
//   - Content-Type of a request with a body: application/json; a text/plain or form body (the
//     "simple" requests a browser sends cross-site without asking the server first) is a 415.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvec::server {

struct CrossSitePolicy {
    std::vector<std::string> allowed_hosts;    // --allowed-host: host names beyond IP literals and localhost
    std::vector<std::string> allowed_origins;  // --allowed-origin: scheme://host[:port], exactly
};

struct CrossSiteRefusal {
    int status;
    const char* code;
    std::string message;
};

// The request's headers against the policy: nullopt when it may go on.
std::optional<CrossSiteRefusal> check_cross_site(std::string_view host, std::string_view origin,
                                                 std::string_view content_type, bool has_body,
                                                 const CrossSitePolicy& policy);

// The host part of a Host header value ("127.0.0.1:8080" -> "127.0.0.1", "[::1]:80" -> "::1"),
// lower-cased.
std::string host_name(std::string_view host_header);

}  // namespace kvec::server
