// shmreplay/error.hpp: the one exception type the library throws.
//
// Cold paths (create, open, schema parsing, leases, the CLI) throw shmreplay::Error, a std::system_error whose code is
// a shmreplay::Errc in shmreplay's error category and whose what() is a complete sentence: what went wrong,
// where (segment name, field, env id) and the expected versus the actual value. Hot paths (push, sample) do
// not allocate or throw on their normal path; they validate their arguments first and throw before writing
// anything when an argument is wrong.
#pragma once

#include <string>
#include <system_error>

namespace shmreplay {

/// The error codes of shmreplay::Error, one per way a call can fail (the Python exceptions are named after them,
/// shmreplay/_errors.py). Their values are stable: a program may store or compare them.
enum class Errc : int {
  invalid_argument = 1,  ///< a bad name, count or option passed by the caller
  invalid_schema,        ///< a schema spec that does not parse or does not validate
  already_exists,        ///< create() of a name that exists, without replace
  not_found,             ///< open() or remove() of a name that does not exist
  not_a_segment,         ///< the file does not start with shmreplay's magic
  truncated,             ///< the file is shorter than its header says it must be
  version_mismatch,      ///< the segment's layout major version is not this library's
  not_ready,             ///< the creator has not finished initialising the segment
  corrupt,               ///< the header's sizes, offsets or schema table are inconsistent (or, found when
                         ///< sampling by priority, a priority tree holds a weight that is not finite)
  schema_mismatch,       ///< open() with an expected schema that differs from the segment's
  no_space,              ///< the shared-memory file system lacks the room for the segment; or a checkpoint's file
                         ///< system or quota is full, or the file passed the process's size limit (RLIMIT_FSIZE)
  permission_denied,     ///< the OS refused access to the segment file, or open() found it owned by another user
  system,                ///< any other OS error; the message carries errno's text
  env_out_of_range,      ///< an env id >= num_envs (or negative)
  lease_held,            ///< the env (or the learner role) is leased by another live process
  not_leased,            ///< a push to an env that this Writer does not lease
  size_mismatch,         ///< field data whose byte size does not match the schema
  empty_view,            ///< sampling a view that holds no steps, fewer than SampleOptions::min_steps, (with
                         ///< Episodes::within) no start whose whole sequence lies in one episode, or (prioritized)
                         ///< only steps of priority 0
  timeout,               ///< a blocking wait ran out of time
  contended,             ///< a sample's rows kept failing their copy (overwritten by writers, or their envs
                         ///< rewritten by learners' updates) and it gave up after its retry limit (or its
                         ///< snapshots kept having no start to draw from; the message says which)
  read_only,             ///< a writing role on a read-only mapping
  rate_limited,          ///< the rate limiter held a sample or a waiting writer's push back past its timeout (or,
                         ///< with a timeout of 0, at once: "not now")
};

/// The error category of shmreplay::Errc (name "shmreplay").
const std::error_category& error_category() noexcept;

/// The std::error_code of `e` in shmreplay's category (what lets an Errc compare with a std::error_code).
inline std::error_code make_error_code(Errc e) noexcept { return {static_cast<int>(e), error_category()}; }

/// The exception thrown by shmreplay's cold paths. what() returns the full message, without a suffix.
class Error : public std::system_error {
 public:
  /// An error of code `code` whose what() is `message`, a complete sentence.
  Error(Errc code, std::string message);

  /// The error code.
  Errc errc() const noexcept { return static_cast<Errc>(code().value()); }
  /// The message, as given to the constructor.
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
