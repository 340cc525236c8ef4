// detail/os/owner.hpp: who owns a segment file, in words, and open()'s rule about it. Who calls it: Buffer (open
// refuses another user's segment unless told otherwise), the Inspector and the CLI (info and ls show the owner).
// Every function reads the password database (getpwuid_r) and is safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shmreplay::detail {

/// The user name of `uid` in the password database, or nullopt when it has none (or cannot be read).
std::optional<std::string> user_name(uint32_t uid);

/// "uid 65534 (nobody)", or "uid 1234" for a uid without a name.
std::string user_text(uint32_t uid);

/// Why a segment file owned by `owner_uid` must not be opened without the caller's consent, or "" when it belongs
/// to this process's effective user: "it belongs to uid 65534 (nobody), not to this process's user, uid 1000
/// (alice): ...". Anyone may create a file in the world-writable /dev/shm under a name another user's programs
/// will open, to read what they push or to feed their learner; the message says how to opt in.
std::string other_owner_problem(uint32_t owner_uid);

}  // namespace shmreplay::detail
