// tools/cli/http_server.cpp: see http_server.hpp. A connection goes reading (its request head) -> writing (the whole
// response, built at once) -> draining (the write side shut, what the client still sends read and dropped, so that
// closing does not reset the connection under a response it has not read) -> closed; or closed at its deadline, or
// when it is the oldest and one more arrives. A request's body is never read: a request that announces one is
// answered from its head.
#include "http_server.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "shmreplay/error.hpp"

namespace shmreplay::cli {

namespace {

// After the response, what a client may still send (a small body it sent along) before the connection closes.
constexpr std::size_t kDrainBytes = 64 * 1024;
constexpr std::chrono::milliseconds kDrainTime{1000};

bool is_token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::string response_bytes(const HttpResponse& r, bool with_body, std::string_view extra_headers = {}) {
  std::string out = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
                                r.status, http_reason(r.status), r.content_type, r.body.size(), extra_headers);
  if (with_body) out += r.body;
  return out;
}

std::string refusal(int status, std::string_view why, std::string_view extra_headers = {}) {
  return response_bytes({status, "text/plain; charset=utf-8", fmt::format("shmreplay metrics: {}\n", why)}, true,
                        extra_headers);
}

// The request line's three parts; false when it is not METHOD SP TARGET SP VERSION.
bool split_request_line(std::string_view line, std::string_view& method, std::string_view& target,
                        std::string_view& version) {
  const std::size_t a = line.find(' ');
  const std::size_t b = a == std::string_view::npos ? a : line.find(' ', a + 1);
  if (b == std::string_view::npos || line.find(' ', b + 1) != std::string_view::npos) return false;
  method = line.substr(0, a);
  target = line.substr(a + 1, b - a - 1);
  version = line.substr(b + 1);
  return !method.empty() && std::all_of(method.begin(), method.end(), is_token_char) && !target.empty() &&
         target.front() == '/';
}

}  // namespace

std::string_view http_reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 505: return "HTTP Version Not Supported";
    default: return "";
  }
}

std::string http_answer(std::string_view head, const HttpHandler& handler) {
  std::size_t eol = head.find('\n');
  std::string_view method, target, version;
  if (!split_request_line(trim(head.substr(0, eol)), method, target, version)) {
    return refusal(400, "the request line is not METHOD /PATH HTTP/1.1");
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return version.substr(0, 5) == "HTTP/" ? refusal(505, fmt::format("{} is not HTTP/1.0 or HTTP/1.1", version))
                                           : refusal(400, "the request line is not METHOD /PATH HTTP/1.1");
  }
  bool body = false;
  while (eol != std::string_view::npos && eol + 1 < head.size()) {
    const std::size_t next = head.find('\n', eol + 1);
    const std::string_view line = trim(head.substr(eol + 1, next == std::string_view::npos ? next : next - eol - 1));
    eol = next;
    if (line.empty()) continue;
    const std::size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos) return refusal(400, "a header line has no NAME: VALUE");
    const std::string name = lower(line.substr(0, colon));
    const std::string_view value = trim(line.substr(colon + 1));
    if (name == "transfer-encoding") body = true;
    if (name == "content-length") {
      if (value.empty() || value.find_first_not_of("0123456789") != std::string_view::npos) {
        return refusal(400, fmt::format("Content-Length '{}' is not a number", value));
      }
      body = body || value.find_first_not_of('0') != std::string_view::npos;
    }
  }
  if (method != "GET" && method != "HEAD") {
    return refusal(405, fmt::format("{} is not served here: only GET and HEAD", method), "Allow: GET, HEAD\r\n");
  }
  if (body) return refusal(413, "a GET or HEAD request takes no body");
  HttpResponse r;
  try {
    r = handler(target.substr(0, target.find('?')));
  } catch (const std::exception& e) {
    r = {500, "text/plain; charset=utf-8", fmt::format("shmreplay metrics: {}\n", e.what())};
  }
  return response_bytes(r, method == "GET");
}

struct HttpServer::Connection {
  enum class Phase { reading, writing, draining };
  int fd = -1;
  Clock::time_point deadline;
  Phase phase = Phase::reading;
  std::string in;   // the request head so far
  std::string out;  // the response
  std::size_t sent = 0;
  std::size_t drained = 0;
};

HttpServer::HttpServer(const std::string& host, int port, HttpLimits limits) : limits_(limits) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); rc != 0) {
    throw Error(Errc::invalid_argument, fmt::format("cannot listen on {}:{}: the host does not resolve ({})", host,
                                                    port, ::gai_strerror(rc)));
  }
  int err = 0;
  for (const addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    const int on = 1;
    if (fd >= 0 && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) == 0 &&
        ::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
      break;
    }
    err = errno;
    if (fd >= 0) ::close(fd);
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) throw_errno(err, fmt::format("cannot listen on {}:{}", host, port));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(bound).sin6_port
                                            : reinterpret_cast<const sockaddr_in&>(bound).sin_port);
}

HttpServer::~HttpServer() {
  for (const Connection& c : connections_) ::close(c.fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void HttpServer::serve(const HttpHandler& handler, int stop_fd) {
  std::vector<pollfd> fds;
  for (;;) {
    close_expired(Clock::now());
    fds.assign({{stop_fd, POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    for (const Connection& c : connections_) {
      fds.push_back({c.fd, static_cast<short>(c.phase == Connection::Phase::writing ? POLLOUT : POLLIN), 0});
    }
    if (::poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now())) < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, "poll(2) on the exporter's sockets");
    }
    if (fds[0].revents != 0) break;
    for (std::size_t i = 0; i < connections_.size(); ++i) {
      if (fds[i + 2].revents != 0) on_ready(connections_[i], handler);
    }
    std::erase_if(connections_, [](const Connection& c) { return c.fd < 0; });
    if (fds[1].revents != 0) accept_new();
  }
  for (Connection& c : connections_) ::close(c.fd);
  connections_.clear();
}

void HttpServer::accept_new() {
  // At most half the cap per poll round: a connection accepted now is read in the next round before a flood of
  // newer ones can make it the oldest (close_oldest), so a client that sends its request at once is answered.
  const std::size_t per_round = std::max<std::size_t>(limits_.max_connections / 2, 1);
  for (std::size_t i = 0; i < per_round; ++i) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // Out of descriptors: the oldest connection makes room, once a round (the next poll comes back for the rest).
      if ((errno == EMFILE || errno == ENFILE) && !connections_.empty()) close_oldest();
      return;  // EAGAIN: none left; another error: the next round tries again
    }
    if (connections_.size() >= limits_.max_connections) close_oldest();
    connections_.push_back({.fd = fd, .deadline = Clock::now() + limits_.request_deadline});
  }
}

void HttpServer::on_ready(Connection& c, const HttpHandler& handler) {
  switch (c.phase) {
    case Connection::Phase::reading: read_head(c, handler); break;
    case Connection::Phase::writing: write_some(c); break;
    case Connection::Phase::draining: drain(c); break;
  }
}

void HttpServer::read_head(Connection& c, const HttpHandler& handler) {
  char chunk[4096];
  const std::size_t room = limits_.max_head_bytes + 1 - c.in.size();  // one byte over the limit tells it is over
  const ssize_t got = ::recv(c.fd, chunk, std::min(room, sizeof chunk), 0);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (got <= 0) {  // closed before its request was whole, or reset
    ::close(c.fd);
    c.fd = -1;
    return;
  }
  // The head ends at its first blank line; a search from a little before the new bytes finds one split across reads.
  const std::size_t from = c.in.size() < 3 ? 0 : c.in.size() - 3;
  c.in.append(chunk, static_cast<std::size_t>(got));
  const std::size_t crlf = c.in.find("\r\n\r\n", from);
  const std::size_t lf = c.in.find("\n\n", from);
  const std::size_t end = std::min(crlf == std::string::npos ? crlf : crlf + 4, lf == std::string::npos ? lf : lf + 2);
  if (end != std::string::npos && end <= limits_.max_head_bytes) {
    c.out = http_answer(std::string_view(c.in).substr(0, end), handler);
  } else if (c.in.size() > limits_.max_head_bytes) {
    c.out = c.in.find('\n') == std::string::npos
                ? refusal(414, fmt::format("the request line is longer than {} bytes", limits_.max_head_bytes))
                : refusal(431, fmt::format("the request's head is longer than {} bytes", limits_.max_head_bytes));
  } else {
    return;  // not whole yet
  }
  c.in = std::string();
  c.phase = Connection::Phase::writing;
  write_some(c);
}

void HttpServer::write_some(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      ::close(c.fd);
      c.fd = -1;
      return;
    }
    c.sent += static_cast<std::size_t>(n);
  }
  c.out = std::string();
  ::shutdown(c.fd, SHUT_WR);
  c.phase = Connection::Phase::draining;
  c.deadline = std::min(c.deadline, Clock::now() + kDrainTime);
}

void HttpServer::drain(Connection& c) {
  char chunk[4096];
  const ssize_t got = ::recv(c.fd, chunk, sizeof chunk, 0);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
  c.drained += got > 0 ? static_cast<std::size_t>(got) : 0;
  if (got <= 0 || c.drained > kDrainBytes) {
    ::close(c.fd);
    c.fd = -1;
  }
}

void HttpServer::close_expired(Clock::time_point now) {
  std::erase_if(connections_, [now](const Connection& c) {
    if (c.deadline > now) return false;
    ::close(c.fd);
    return true;
  });
}

void HttpServer::close_oldest() {
  // The oldest still waiting for its request (idle or slow); when every one has been answered, the oldest of those.
  auto victim = std::find_if(connections_.begin(), connections_.end(),
                             [](const Connection& c) { return c.phase == Connection::Phase::reading; });
  if (victim == connections_.end()) victim = connections_.begin();
  ::close(victim->fd);
  connections_.erase(victim);
}

int HttpServer::poll_timeout_ms(Clock::time_point now) const {
  auto wait = std::chrono::milliseconds(1000);
  for (const Connection& c : connections_) {
    wait = std::min(wait, std::chrono::ceil<std::chrono::milliseconds>(c.deadline - now));
  }
  return static_cast<int>(std::max<std::chrono::milliseconds::rep>(wait.count(), 0));
}

}  // namespace shmreplay::cli
