// lib/checkpoint/chain_dir.cpp: see chain_dir.hpp.
#include "checkpoint/chain_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checkpoint/internal.hpp"
#include "detail/os/owner.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay::detail {
namespace {

constexpr std::string_view kLinkPrefix = "link-";
constexpr std::string_view kLinkSuffix = ".shmrckpt";
constexpr const char* kLockName = "chain.lock";
constexpr const char* kIdsName = "chain.ids";
constexpr const char* kIdsTemp = "chain.ids.tmp";
constexpr std::string_view kIdsFirstLine = "shmreplay chain ids 1";
constexpr uint64_t kMaxIdsBytes = 1ull << 20;

constexpr const char* kOptIn = "allow_other_owner; the CLI's --allow-other-owner";

uint32_t self_uid() { return static_cast<uint32_t>(::geteuid()); }

// What a directory entry's name is: no link name, a link's number, or a link-like name whose number no link has.
struct LinkName {
  bool link_like = false;
  uint64_t seq = 0;  // 0 with link_like: a number that is not one (empty, not decimal, 0, more than 19 digits)
};

LinkName parse_link_name(std::string_view name) {
  if (name.size() <= kLinkPrefix.size() + kLinkSuffix.size() || !name.starts_with(kLinkPrefix) ||
      !name.ends_with(kLinkSuffix)) {
    return {};
  }
  const std::string_view digits = name.substr(kLinkPrefix.size(), name.size() - kLinkPrefix.size() - kLinkSuffix.size());
  LinkName out{.link_like = true};
  if (digits.size() > 19 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return out;
  }
  uint64_t seq = 0;
  for (const char c : digits) seq = seq * 10 + static_cast<uint64_t>(c - '0');  // 19 digits fit in 64 bits
  out.seq = seq;
  return out;
}

[[noreturn]] void refuse_symlink(const std::string& path, const char* what) {
  throw Error(Errc::permission_denied,
              fmt::format("'{}' is a symbolic link, where the chain's {} goes: a chain directory's files are never "
                          "opened through a link (another user may have planted it to make this process create, "
                          "lock or read a file elsewhere); remove it",
                          path, what));
}

// Opens the file `name` of the directory `dir_fd` without following a link, as a regular file; `flags` beyond
// O_NOFOLLOW and O_CLOEXEC. Throws naming `path` and saying what the file is for.
UniqueFd open_regular(int dir_fd, const char* name, int flags, const std::string& path, const char* what,
                      struct stat& st) {
  UniqueFd fd(::openat(dir_fd, name, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600));
  if (!fd) {
    const int e = errno;
    if (e == ELOOP) refuse_symlink(path, what);
    throw_errno(e, fmt::format("cannot open '{}', the chain's {}", path, what));
  }
  if (::fstat(fd.get(), &st) != 0) throw_errno(errno, fmt::format("cannot stat '{}'", path));
  if (!S_ISREG(st.st_mode)) {
    throw Error(Errc::already_exists, fmt::format("'{}', the chain's {}, is not a regular file; remove it", path, what));
  }
  return fd;
}

}  // namespace

ChainDir::ChainDir(const std::string& path, bool allow_other_owner, const char* op)
    : path_(path), allow_other_owner_(allow_other_owner) {
  open_checked(op);
}

ChainDir ChainDir::create(const std::string& path, uint32_t mode, bool allow_other_owner) {
  const mode_t bits = static_cast<mode_t>(0700 | ((mode & 0040) ? 0050 : 0) | ((mode & 0004) ? 0005 : 0));
  if (::mkdir(path.c_str(), bits) != 0 && errno != EEXIST) {
    throw_errno(errno, fmt::format("cannot create chain directory '{}'", path));
  }
  return ChainDir(path, allow_other_owner, "cannot save a chain into");
}

void ChainDir::open_checked(const char* op) {
  const uint32_t me = self_uid();
  struct stat st {};
  if (::lstat(path_.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT) throw Error(Errc::not_found, fmt::format("{} '{}': it does not exist", op, path_));
    throw_errno(e, fmt::format("{} '{}'", op, path_));
  }
  // A link in a world-writable place may be another user's, pointing at a directory of this user's choosing.
  if (S_ISLNK(st.st_mode) && st.st_uid != me && !allow_other_owner_) {
    throw Error(Errc::permission_denied,
                fmt::format("{} '{}': it is a symbolic link that belongs to {}, not to this process's user, {}; use "
                            "the directory it names, or allow it if you trust its owner ({})",
                            op, path_, user_text(st.st_uid), user_text(me), kOptIn));
  }
  fd_ = UniqueFd(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd_) {
    const int e = errno;
    if (e == ENOTDIR) throw Error(Errc::already_exists, fmt::format("{} '{}': it is not a directory", op, path_));
    throw_errno(e, fmt::format("{} '{}'", op, path_));
  }
  if (::fstat(fd_.get(), &st) != 0) throw_errno(errno, fmt::format("{} '{}': cannot stat it", op, path_));
  owner_ = static_cast<uint32_t>(st.st_uid);
  if (owner_ != me && !allow_other_owner_) {
    throw Error(Errc::permission_denied,
                fmt::format("{} '{}': the directory belongs to {}, not to this process's user, {}: another user's "
                            "directory may hold files that user planted (a link to restore, a symbolic link where "
                            "the lock goes); use a directory of your own, or allow it if you trust its owner ({})",
                            op, path_, user_text(owner_), user_text(me), kOptIn));
  }
}

std::string ChainDir::owner_problem(uint32_t uid) const {
  const uint32_t me = self_uid();
  if (uid == me || (allow_other_owner_ && uid == owner_)) return {};
  return fmt::format("it belongs to {}, not to this process's user, {}{}: another user may have planted it{}",
                     user_text(uid), user_text(me),
                     allow_other_owner_ ? fmt::format(", nor to the directory's owner, {}", user_text(owner_)) : "",
                     allow_other_owner_ ? std::string() : fmt::format(" (take it only if you trust its owner: {})", kOptIn));
}

UniqueFd ChainDir::lock() const {
  const std::string path = file(kLockName);
  struct stat st {};
  UniqueFd fd = open_regular(fd_.get(), kLockName, O_RDWR | O_CREAT, path, "lock", st);
  if (const std::string problem = owner_problem(static_cast<uint32_t>(st.st_uid)); !problem.empty()) {
    throw Error(Errc::permission_denied, fmt::format("cannot lock '{}': {}; remove it", path, problem));
  }
  // One saver per directory: a second one would number and prune links under the first one's feet.
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    throw Error(Errc::lease_held, fmt::format("cannot save a link into '{}': another save into that directory is "
                                              "running (it holds {})",
                                              path_, path));
  }
  return fd;
}

InFile ChainDir::open_link_at(int dir_fd, const std::string& name, Link& link) const {
  struct stat st {};
  UniqueFd fd;
  try {
    fd = open_regular(dir_fd, name.c_str(), O_RDONLY, link.entry.path, "link", st);
  } catch (const Error& e) {
    if (e.code() != make_error_code(Errc::not_found)) link.ours = false;  // a symbolic link or no file: not a save's
    throw;
  }
  if (const std::string problem = owner_problem(static_cast<uint32_t>(st.st_uid)); !problem.empty()) {
    link.ours = false;
    throw Error(Errc::permission_denied, problem);
  }
  return InFile(link.entry.path, std::move(fd));
}

InFile ChainDir::open_link(const Link& link) const {
  Link copy;
  copy.entry.path = link.entry.path;
  const std::size_t slash = link.entry.path.rfind('/');
  return open_link_at(fd_.get(), link.entry.path.substr(slash + 1), copy);
}

Listing ChainDir::list() const {
  Listing out;
  // A descriptor of its own: readdir moves the offset, which a dup would share with fd_.
  UniqueFd own(::openat(fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DIR* d = own ? ::fdopendir(own.get()) : nullptr;
  if (d == nullptr) throw_errno(errno, fmt::format("cannot read chain directory '{}'", path_));
  own.release();  // closedir closes it
  while (const dirent* ent = ::readdir(d)) {
    const std::string name = ent->d_name;
    const LinkName parsed = parse_link_name(name);
    if (!parsed.link_like) continue;
    if (parsed.seq == 0) {
      out.skipped.push_back(fmt::format("'{}' is named like a link, but no link has that number (link-N.shmrckpt, "
                                        "N from 1 to {}: at most 19 digits): not read",
                                        file(name), kMaxLinkSeq));
      continue;
    }
    Link link;
    link.entry.path = file(name);
    link.entry.seq = parsed.seq;
    out.last_seq = std::max(out.last_seq, parsed.seq);
    try {
      const InFile in = open_link_at(::dirfd(d), name, link);
      if (link.ours) {
        link.entry.file_bytes = in.size();
        link.info = read_headers(in);
        link.entry.chain_id = link.info->chain_id;
        link.entry.saved_time_ns = link.info->saved_time_ns;
      }
    } catch (const Error& e) {
      link.entry.error = e.what();
      link.info.reset();
    }
    out.links.push_back(std::move(link));
  }
  ::closedir(d);
  std::sort(out.links.begin(), out.links.end(), [](const Link& a, const Link& b) { return a.entry.seq < b.entry.seq; });

  // After the links: a save writes the list before the link of a new chain, so every link listed above is in it.
  const std::optional<std::set<uint64_t>> ids = read_chain_ids();
  out.has_chain_ids = ids.has_value();
  if (!ids) return out;
  for (Link& l : out.links) {
    if (!l.info || ids->count(l.info->chain_id) != 0) continue;
    l.entry.error = fmt::format("its chain, {:016x}, is not one of this directory's ({} lists {:016x}): a link "
                                "copied from another chain directory, or saved from another buffer",
                                l.info->chain_id, file(kIdsName), fmt::join(*ids, ", "));
    l.info.reset();
    l.ours = false;
  }
  return out;
}

std::optional<std::set<uint64_t>> ChainDir::read_chain_ids() const {
  const std::string path = file(kIdsName);
  struct stat st {};
  UniqueFd fd;
  try {
    fd = open_regular(fd_.get(), kIdsName, O_RDONLY, path, "list of chains", st);
  } catch (const Error& e) {
    if (e.code() == make_error_code(Errc::not_found)) return std::nullopt;  // saved before the list existed
    throw;
  }
  if (const std::string problem = owner_problem(static_cast<uint32_t>(st.st_uid)); !problem.empty()) {
    throw Error(Errc::permission_denied, fmt::format("cannot read '{}', the chain directory's list of chains: {}; "
                                                     "remove it",
                                                     path, problem));
  }
  const auto bad = [&](const std::string& what) {
    return Error(Errc::corrupt, fmt::format("the chain directory's list of chains '{}' is corrupt: {}; remove it "
                                            "to take every link of the directory as its chain's",
                                            path, what));
  };
  if (static_cast<uint64_t>(st.st_size) > kMaxIdsBytes) {
    throw bad(fmt::format("it is {} bytes, more than {}", st.st_size, kMaxIdsBytes));
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  const InFile in(path, std::move(fd));
  in.read_at(0, text.data(), text.size());
  std::set<uint64_t> ids;
  std::size_t line_no = 0;
  for (std::size_t at = 0; at < text.size(); ++line_no) {
    const std::size_t end = text.find('\n', at);
    if (end == std::string::npos) throw bad(fmt::format("line {} has no end", line_no + 1));
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    if (line_no == 0) {
      if (line != kIdsFirstLine) throw bad(fmt::format("its first line is '{}', expected '{}'", line, kIdsFirstLine));
      continue;
    }
    uint64_t id = 0;
    const bool hex = line.size() == 16 && std::all_of(line.begin(), line.end(), [](char c) {
                       return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                     });
    if (hex) id = std::stoull(std::string(line), nullptr, 16);
    if (id == 0) throw bad(fmt::format("line {} is '{}', expected a chain id: 16 hex digits, not all 0", line_no + 1, line));
    ids.insert(id);
  }
  if (line_no == 0) throw bad("it is empty");
  return ids;
}

void ChainDir::write_chain_ids(const std::set<uint64_t>& ids, uint32_t mode) const {
  std::string text = fmt::format("{}\n", kIdsFirstLine);
  for (const uint64_t id : ids) text += fmt::format("{:016x}\n", id);
  const std::string temp = file(kIdsTemp);
  ::unlinkat(fd_.get(), kIdsTemp, 0);  // a killed save's (this process holds the lock)
  UniqueFd fd(::openat(fd_.get(), kIdsTemp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) throw_errno(errno, fmt::format("cannot create '{}'", temp));
  TempFile remove_on_error(temp);
  if (::fchmod(fd.get(), static_cast<mode_t>(mode)) != 0) throw_errno(errno, fmt::format("cannot chmod '{}'", temp));
  const ssize_t wrote = ::write(fd.get(), text.data(), text.size());
  if (wrote < 0) throw_errno(errno, fmt::format("cannot write '{}'", temp));
  if (static_cast<std::size_t>(wrote) != text.size()) {
    throw Error(Errc::no_space, fmt::format("cannot write '{}': {} of {} bytes written", temp, wrote, text.size()));
  }
  if (::fsync(fd.get()) != 0) throw_errno(errno, fmt::format("cannot sync '{}'", temp));
  if (::renameat(fd_.get(), kIdsTemp, fd_.get(), kIdsName) != 0) {
    throw_errno(errno, fmt::format("cannot rename '{}' to '{}'", temp, file(kIdsName)));
  }
  remove_on_error.commit();
  if (::fsync(fd_.get()) != 0) throw_errno(errno, fmt::format("cannot sync chain directory '{}'", path_));
}

bool ChainDir::remove(const Link& link) const {
  const std::size_t slash = link.entry.path.rfind('/');
  return ::unlinkat(fd_.get(), link.entry.path.c_str() + slash + 1, 0) == 0;
}

}  // namespace shmreplay::detail
