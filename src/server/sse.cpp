#include "server/sse.h"

#include "server/responses.h"

namespace kvec::server {

std::string sse_event(const nlohmann::json& data) { return "data: " + dump(data) + "\n\n"; }

bool SseStream::write(std::string_view bytes) {
    if (open_ && !write_(bytes)) open_ = false;
    return open_;
}

bool SseStream::send(const nlohmann::json& chunk) { return write(sse_event(chunk)); }

bool SseStream::done() { return write(kSseDone); }

}  // namespace kvec::server
