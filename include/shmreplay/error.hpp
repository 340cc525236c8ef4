// shmreplay/error.hpp: the one exception type the library throws.
//
// Cold paths (create, open, schema parsing, the CLI) throw shmreplay::Error, a std::system_error whose code is
// a shmreplay::Errc in shmreplay's error category and whose what() is a complete sentence: what went wrong,
// where (segment name, field, env id) and the expected versus the actual value. Hot paths (push, sample) do
// not throw on their normal path.
#pragma once

#include <string>
#include <system_error>

namespace shmreplay {

enum class Errc : int {
  invalid_argument = 1,  ///< a bad name, count or option passed by the caller
  invalid_schema,        ///< a schema spec that does not parse or does not validate
  already_exists,        ///< create() of a name that exists, without replace
  not_found,             ///< open() or remove() of a name that does not exist
  not_a_segment,         ///< the file does not start with shmreplay's magic
  truncated,             ///< the file is shorter than its header says it must be
  version_mismatch,      ///< the segment's layout major version is not this library's
  not_ready,             ///< the creator has not finished initialising the segment
  corrupt,               ///< the header's sizes, offsets or schema table are inconsistent
  schema_mismatch,       ///< open() with an expected schema that differs from the segment's
  no_space,              ///< the shared-memory file system lacks the room for the segment
  permission_denied,     ///< the OS refused access to the segment file
  system,                ///< any other OS error; the message carries errno's text
};

/// The error category of shmreplay::Errc (name "shmreplay").
const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(Errc e) noexcept { return {static_cast<int>(e), error_category()}; }

/// The exception thrown by shmreplay's cold paths. what() returns the full message, without a suffix.
class Error : public std::system_error {
 public:
  Error(Errc code, std::string message);

  Errc errc() const noexcept { return static_cast<Errc>(code().value()); }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

/// Throws Error(Errc::system, "<what>: <strerror(errnum)>"), mapping ENOENT, EEXIST, EACCES/EPERM and ENOSPC to
/// their own codes so that callers can tell them apart.
[[noreturn]] void throw_errno(int errnum, const std::string& what);

}  // namespace shmreplay

template <>
struct std::is_error_code_enum<shmreplay::Errc> : std::true_type {};
