// tests/cli/metrics_helpers.hpp: what the parts of test_cli_metrics share: the exporter's port, and a plain HTTP
// client on raw sockets (with deadlines, so that a test against an exporter that does not answer fails rather than
// hangs; and able to send what no well-behaved client sends).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>

#include "cli/cli_helpers.hpp"

namespace metrics_test {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The exporter's port, from its "serving http://127.0.0.1:PORT/metrics" line on stderr.
inline int serving_port(RunningCli& cli) {
  const std::optional<std::string> line = cli.next_line();
  REQUIRE(line.has_value());
  INFO(*line);
  const std::size_t at = line->find("http://127.0.0.1:");
  REQUIRE(at != std::string::npos);
  return std::stoi(line->substr(at + std::strlen("http://127.0.0.1:")));
}

// A socket connected to 127.0.0.1:port (blocking; sends give up after 2 s); -1 when the connection failed.
inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  const timeval two_s{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &two_s, sizeof two_s);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// What the peer sends on `fd` until it closes, `timeout_ms` pass, or 1 MiB came; `closed` says whether it closed.
inline std::string read_until_closed(int fd, int timeout_ms, bool* closed = nullptr) {
  std::string out;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  if (closed != nullptr) *closed = false;
  while (out.size() < (1u << 20)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char chunk[65536];
    const ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);
    if (got <= 0) {
      if (closed != nullptr) *closed = true;
      break;
    }
    out.append(chunk, static_cast<std::size_t>(got));
  }
  return out;
}

// A response and how long it took from the connect.
struct Exchange {
  std::string response;  // status line, headers and body as received ("" when none came)
  double seconds = 0;
  std::string status_line() const { return response.substr(0, response.find("\r\n")); }
};

// Sends `request` to 127.0.0.1:port on a new connection and reads the response until the server closes it or
// `timeout_ms` pass.
inline Exchange http_exchange(int port, const std::string& request, int timeout_ms = 2000) {
  const auto start = Clock::now();
  const int fd = connect_to(port);
  if (fd < 0) return {"", seconds_since(start)};
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  Exchange e{read_until_closed(fd, timeout_ms), 0};
  e.seconds = seconds_since(start);
  ::close(fd);
  return e;
}

inline Exchange scrape(int port, int timeout_ms = 2000) {
  return http_exchange(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", timeout_ms);
}

// A field of /proc/PID/status in bytes (VmRSS, VmHWM); 0 when unreadable.
inline uint64_t status_bytes(pid_t pid, const std::string& field) {
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

// The number of file descriptors process `pid` has open.
inline std::size_t open_fds(pid_t pid) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid))) ++n;
  return n;
}

}  // namespace metrics_test
