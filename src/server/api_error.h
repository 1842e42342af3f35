// Errors a request gets, in the OpenAI API's form: an HTTP status and a body
// {"error": {"message", "type", "code"}}. Request handlers throw ApiError; the server turns it
// (and anything else thrown) into that body. Messages name the problem, never a file path or a
// stack trace.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kvec::server {

class ApiError : public std::runtime_error {
public:
    ApiError(int status, std::string type, std::string code, const std::string& message)
        : std::runtime_error(message), status_(status), type_(std::move(type)), code_(std::move(code)) {}

    // Seconds after which the client may try again (503: sent as Retry-After); 0: none.
    ApiError& retry_after(int seconds) {
        retry_after_ = seconds;
        return *this;
    }
    int retry_after() const { return retry_after_; }
    int status() const { return status_; }
    const std::string& type() const { return type_; }  // "invalid_request_error", "authentication_error", ...
    const std::string& code() const { return code_; }  // machine-readable, e.g. "invalid_json"

private:
    int status_;
    std::string type_;
    std::string code_;
    int retry_after_ = 0;
};

// 400 invalid_request_error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void bad_request(const char* code, fmt::format_string<Args...> format, Args&&... args) {
    throw ApiError(400, "invalid_request_error", code, fmt::format(format, std::forward<Args>(args)...));
}

// The error body: {"error": {"message": ..., "type": ..., "code": ..., "param": null}}.
std::string error_body(const std::string& message, const std::string& type, const std::string& code);
std::string error_body(const ApiError& e);

// The type and code of an error status the server produces itself (401, 404, 405, 413, 500, ...).
std::string error_type_for_status(int status);

}  // namespace kvec::server
