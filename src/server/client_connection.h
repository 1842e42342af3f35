// The client connection of a request being handled, to notice a client that went away before
// anything is written to it: while its request waits in the queue or its prompt is prefilled (a
// streamed response notices at its next write; a whole response only here).
//
// cpp-httplib 0.11 hands a handler no socket, so the socket is found by the request's addresses:
// the one of this process's sockets whose local and peer address and port are the request's
// (unique among connected sockets). The handler's thread owns that socket until it returns, so the
// descriptor stays valid for the handler's lifetime. No socket found: the client is never seen gone.
#pragma once

namespace httplib {
struct Request;
}

namespace kvec::server {

class ClientConnection {
public:
    explicit ClientConnection(const httplib::Request& req);

    // The client closed or reset its end of the connection. Does not block; what the client has
    // sent but the server not read yet (a pipelined request) does not count as gone.
    bool gone() const;

private:
    int fd_ = -1;
};

}  // namespace kvec::server
