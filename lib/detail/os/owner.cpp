#include "detail/os/owner.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include <fmt/format.h>

namespace shmreplay::detail {

std::optional<std::string> user_name(uint32_t uid) {
  const long hint = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> scratch(hint > 0 ? static_cast<std::size_t>(hint) : 4096);
  for (int attempt = 0; attempt < 8; ++attempt) {
    passwd entry{};
    passwd* found = nullptr;
    const int err = ::getpwuid_r(static_cast<uid_t>(uid), &entry, scratch.data(), scratch.size(), &found);
    if (err == ERANGE) {
      scratch.resize(scratch.size() * 4);
      continue;
    }
    if (err != 0 || found == nullptr) return std::nullopt;
    return std::string(found->pw_name);
  }
  return std::nullopt;
}

std::string user_text(uint32_t uid) {
  const std::optional<std::string> name = user_name(uid);
  return name ? fmt::format("uid {} ({})", uid, *name) : fmt::format("uid {}", uid);
}

std::string other_owner_problem(uint32_t owner_uid) {
  const auto self = static_cast<uint32_t>(::geteuid());
  if (owner_uid == self) return {};
  return fmt::format("it belongs to {}, not to this process's user, {}: any local user can create a file under a "
                     "known name in the shared-memory directory, to read what your writers push or to feed your "
                     "learner; open it only if you trust its owner (OpenOptions::allow_other_owner, Python "
                     "Buffer.open(..., allow_other_owner=True), the CLI's --allow-other-owner)",
                     user_text(owner_uid), user_text(self));
}

}  // namespace shmreplay::detail
