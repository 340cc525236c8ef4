// tools/cli/http_server.hpp: the HTTP/1.1 server of `shmreplay metrics --listen`. GET and HEAD only, one request
// per connection, and every resource a client can hold bounded by HttpLimits (docs/cli.md lists them).
//
// Why our own rather than cpp-httplib (Debian 12's 0.11.4, which served until then): it cannot bound what a hostile
// local client costs. Its read timeout is per recv (a client that sends one header byte every few seconds keeps a
// pool thread for good, and 8 such clients stop every scrape); its TaskQueue receives each accepted connection as
// an opaque closure (`enqueue` returns void and `Server::process_and_close_socket` is private), so a connection over
// a cap can be neither refused nor closed, only queued; it reads a request line or a header line into a string that
// grows until the newline, and a POST's whole body into memory, before any handler or hook can refuse them.
//
// This one is a single thread around poll(2) with non-blocking sockets: a client costs a file descriptor and at most
// max_head_bytes of memory, never a thread, and nothing it does delays another client's request beyond the time
// the handler takes. One HttpServer is used by one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace shmreplay::cli {

/// What one client may hold. The defaults are `shmreplay metrics`' (tests/cli/metrics_clients.cpp checks them).
struct HttpLimits {
  /// From a connection's accept to its response's last byte: a connection still open then is closed, whatever it
  /// is doing (a request sent a byte at a time, a response the client does not read).
  std::chrono::milliseconds request_deadline{5000};
  /// Connections open at once; when one more arrives, the oldest one still waiting for its request is closed (the
  /// oldest of all when every one has its answer), so idle connections cannot keep a new request out.
  std::size_t max_connections = 64;
  /// The request line and the headers together, in bytes; a longer head is refused (414 or 431) unread.
  std::size_t max_head_bytes = 8192;
};

/// A response: its status, Content-Type and body (the server adds Content-Length and `Connection: close`).
struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

/// Answers a GET or HEAD of `path`: the request target up to its '?' (not decoded). Runs on the serving thread.
using HttpHandler = std::function<HttpResponse(std::string_view path)>;

/// The reason phrase of an HTTP status code ("Not Found"); "" for one this server never sends.
std::string_view http_reason(int status);

/// What the server answers to a complete request head `head` (request line and headers, up to the blank line),
/// calling `handler` only for a well-formed GET or HEAD without a body: 400 for a malformed head, 505 for a version
/// other than HTTP/1.0 or 1.1, 405 (with `Allow: GET, HEAD`) for another method, 413 for a request that announces a
/// body (a Content-Length other than 0, or a Transfer-Encoding). The bytes to send: the status line, headers and,
/// but for HEAD, the body.
std::string http_answer(std::string_view head, const HttpHandler& handler);

class HttpServer {
 public:
  /// Binds and listens on `host`:`port` (a name or an address; port 0: any free port). Throws Error
  /// (Errc::invalid_argument when `host` does not resolve, else from the failing call's errno) when it cannot.
  HttpServer(const std::string& host, int port, HttpLimits limits = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// The port listened on.
  int port() const noexcept { return port_; }

  /// Serves until `stop_fd` is readable (a signalfd, say; -1: until an error), then closes every connection and
  /// returns. Throws Error when poll(2) fails.
  void serve(const HttpHandler& handler, int stop_fd);

 private:
  struct Connection;
  using Clock = std::chrono::steady_clock;

  void accept_new();
  void on_ready(Connection& c, const HttpHandler& handler);
  void read_head(Connection& c, const HttpHandler& handler);
  void write_some(Connection& c);
  void drain(Connection& c);
  void close_expired(Clock::time_point now);
  void close_oldest();
  int poll_timeout_ms(Clock::time_point now) const;

  HttpLimits limits_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::vector<Connection> connections_;  // in accept order: the front is the oldest
};

}  // namespace shmreplay::cli
