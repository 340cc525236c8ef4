#include "shmreplay/error.hpp"

#include <cerrno>
#include <cstring>

namespace shmreplay {
namespace {

class Category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "shmreplay"; }
  std::string message(int value) const override {
    switch (static_cast<Errc>(value)) {
      case Errc::invalid_argument: return "invalid argument";
      case Errc::invalid_schema: return "invalid schema";
      case Errc::already_exists: return "segment already exists";
      case Errc::not_found: return "segment not found";
      case Errc::not_a_segment: return "not a shmreplay segment";
      case Errc::truncated: return "segment truncated";
      case Errc::version_mismatch: return "layout version mismatch";
      case Errc::not_ready: return "segment not ready";
      case Errc::corrupt: return "segment corrupt";
      case Errc::schema_mismatch: return "schema mismatch";
      case Errc::no_space: return "no space for segment";
      case Errc::permission_denied: return "permission denied";
      case Errc::system: return "system error";
      case Errc::env_out_of_range: return "env id out of range";
      case Errc::lease_held: return "lease held by another process";
      case Errc::not_leased: return "env not leased by this writer";
      case Errc::size_mismatch: return "size does not match the schema";
      case Errc::empty_view: return "nothing to sample";
      case Errc::timeout: return "timed out";
      case Errc::contended: return "sample kept failing its copy";
      case Errc::read_only: return "read-only mapping";
      case Errc::rate_limited: return "held back by the rate limiter";
    }
    return "unknown shmreplay error";
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const Category category;
  return category;
}

Error::Error(Errc code, std::string message)
    : std::system_error(make_error_code(code), message), message_(std::move(message)) {}

void throw_errno(int errnum, const std::string& what) {
  Errc code = Errc::system;
  switch (errnum) {
    case ENOENT: code = Errc::not_found; break;
    case EEXIST: code = Errc::already_exists; break;
    case EACCES:
    case EPERM: code = Errc::permission_denied; break;
    case ENOSPC: code = Errc::no_space; break;
    default: break;
  }
  throw Error(code, what + ": " + std::strerror(errnum));
}

}  // namespace shmreplay
