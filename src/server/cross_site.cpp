#include "server/cross_site.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "util/terminal.h"

namespace kvec::server {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

bool is_ip_literal(const std::string& name) {
    unsigned char buf[16];
    return ::inet_pton(AF_INET, name.c_str(), buf) == 1 || ::inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

bool listed(const std::vector<std::string>& list, const std::string& value) {
    return std::any_of(list.begin(), list.end(), [&](const std::string& x) { return lower(x) == value; });
}

// Shown in a message: at most 100 bytes of the header, control characters escaped.
std::string shown(std::string_view s) { return escape_control(s.substr(0, 100)); }

}  // namespace

std::string host_name(std::string_view host_header) {
    std::string_view h = host_header;
    if (!h.empty() && h.front() == '[') {
        const size_t close = h.find(']');
        return lower(close == std::string_view::npos ? h.substr(1) : h.substr(1, close - 1));
    }
    const size_t colon = h.find(':');
    if (colon != std::string_view::npos && h.find(':', colon + 1) == std::string_view::npos) h = h.substr(0, colon);
    return lower(h);
}

std::optional<CrossSiteRefusal> check_cross_site(std::string_view host, std::string_view origin,
                                                 std::string_view content_type, bool has_body,
                                                 const CrossSitePolicy& policy) {
    if (!host.empty()) {
        const std::string name = host_name(host);
        if (!is_ip_literal(name) && name != "localhost" && !listed(policy.allowed_hosts, name)) {
            return CrossSiteRefusal{403, "host_not_allowed",
                                    fmt::format("requests for host '{}' are refused (DNS rebinding protection); start the "
                                                "server with --allowed-host {} to serve that name", shown(name), shown(name))};
        }
    }
    if (!origin.empty()) {
        const std::string o = lower(origin);
        const bool same = !host.empty() && (o == "http://" + lower(host) || o == "https://" + lower(host));
        if (!same && !listed(policy.allowed_origins, o)) {
            return CrossSiteRefusal{403, "origin_not_allowed",
                                    fmt::format("cross-origin requests from '{}' are refused; start the server with "
                                                "--allowed-origin {} to allow that site", shown(origin), shown(origin))};
        }
    }
    if (has_body) {
        const std::string type = lower(content_type.substr(0, content_type.find(';')));
        const auto trimmed = type.substr(0, type.find_last_not_of(" \t") + 1);
        if (trimmed != "application/json") {
            return CrossSiteRefusal{415, "unsupported_media_type",
                                    fmt::format("the request body must be sent as 'Content-Type: application/json' (got "
                                                "'{}')", shown(content_type))};
        }
    }
    return std::nullopt;
}

}  // namespace kvec::server
