#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace kvec::server {

std::string error_body(const std::string& message, const std::string& type, const std::string& code) {
    const nlohmann::json body = {{"error", {{"message", message}, {"type", type}, {"code", code}, {"param", nullptr}}}};
    // Messages may quote bytes of the request: invalid UTF-8 becomes U+FFFD instead of throwing.
    return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string error_body(const ApiError& e) { return error_body(e.what(), e.type(), e.code()); }

std::string error_type_for_status(int status) {
    switch (status) {
        case 401: return "authentication_error";
        case 404:
        case 405: return "not_found_error";
        case 413: return "invalid_request_error";
        case 503: return "server_busy_error";
        default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

}  // namespace kvec::server
