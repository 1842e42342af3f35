// Server-sent events as OpenAI streams them: one "data: <json>\n\n" event per chunk, and
// "data: [DONE]\n\n" at the end. The stream notices a client that has gone (a failed write) and
// says so, so that the generation feeding it can stop and free its slot.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <string>
#include <string_view>

namespace kvec::server {

std::string sse_event(const nlohmann::json& data);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

class SseStream {
public:
    // write: sends bytes to the client; false when the connection is gone.
    explicit SseStream(std::function<bool(std::string_view)> write) : write_(std::move(write)) {}

    bool send(const nlohmann::json& chunk);  // false once the client has gone
    bool done();                              // data: [DONE]
    bool open() const { return open_; }

private:
    bool write(std::string_view bytes);

    std::function<bool(std::string_view)> write_;
    bool open_ = true;
};

}  // namespace kvec::server
