// lib/checkpoint/chain_dir.hpp: a chain directory as save_link, load_chain, verify_chain and list_links see it,
// private to lib/checkpoint/ (chain_dir.cpp; chain.cpp works on what it returns). It holds the directory's rules:
// - whose files are taken: the directory, its lock, its chain list and each link must belong to this process's
//   user, or with allow_other_owner to the directory's owner (the rule Buffer::open applies to segments: a
//   directory in a world-writable place may have been made by another user, who can then plant files there);
//   the lock, the list and the links are opened without following a symbolic link (O_NOFOLLOW);
// - which links are the directory's: `chain.ids` lists the chain ids of the links save_link wrote there (written
//   before each link of a new chain), and a link of another chain (copied from another directory or buffer) is
//   not restored; a directory without the list (saved before it existed) takes every link, with a note;
// - which names are links: `link-N.shmrckpt` with N from 1 to kMaxLinkSeq in at most 19 digits; any other name
//   of that shape is named in the notes, never read.
// Nothing here is shared across threads; one ChainDir is one call's.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/internal.hpp"
#include "detail/os/file.hpp"
#include "shmreplay/checkpoint.hpp"

namespace shmreplay::detail {

/// A link file with its headers read (info; records not checked), or, with `info` empty, why it is not taken
/// (entry.error: unreadable, another owner's, another chain's).
struct Link {
  ChainLink entry;
  std::optional<CheckpointInfo> info;
  bool ours = true;  ///< false for a file a save did not write here: another owner's, a symbolic link, another
                     ///< chain's; a save never removes one
};

/// A directory's links, oldest first, and what was not taken.
struct Listing {
  std::vector<Link> links;            ///< every file named as a link, taken or not
  std::vector<std::string> skipped;   ///< each file named like a link that is not one (bad number), a sentence
  uint64_t last_seq = 0;              ///< the largest link number among `links`, 0 when none
  bool has_chain_ids = false;         ///< whether the directory has its chain list (chain.ids)
};

/// One call's view of a chain directory: opened and checked once, its files opened relative to it.
class ChainDir {
 public:
  /// Opens the existing directory `path` (Errc::not_found when missing) for reading; `op` starts messages
  /// ("cannot load a chain from"). Refuses another user's directory (Errc::permission_denied) unless
  /// `allow_other_owner`, and a symbolic link `path` of another user alike.
  ChainDir(const std::string& path, bool allow_other_owner, const char* op);
  /// Creates `path` when missing (mode 0700 plus the group's and others' read bits of `mode`, with search), then
  /// opens it as the constructor does: save_link's.
  static ChainDir create(const std::string& path, uint32_t mode, bool allow_other_owner);

  /// Opens `chain.lock` (created when missing, never through a symbolic link, owner checked) and takes its
  /// exclusive flock without waiting: Errc::lease_held while another save into the directory runs.
  UniqueFd lock() const;
  /// Reads every link's headers, then the chain list, and marks the links it does not take (Link::info empty).
  Listing list() const;
  /// Opens the link file of `link` again (as list() did: no symbolic link, owner checked) to read it whole.
  InFile open_link(const Link& link) const;
  /// Replaces the chain list with `ids` (a temporary file, synced, renamed, the directory synced); the caller
  /// holds the lock. `mode`: the file's permission bits.
  void write_chain_ids(const std::set<uint64_t>& ids, uint32_t mode) const;
  /// Removes the link file `link` (a name in this directory); false when it could not.
  bool remove(const Link& link) const;

  const std::string& path() const noexcept { return path_; }
  /// `path`/`name`.
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  void open_checked(const char* op);
  /// "" when a file owned by `uid` may be taken (this process's user's, or with allow_other_owner the
  /// directory owner's); else why not.
  std::string owner_problem(uint32_t uid) const;
  std::optional<std::set<uint64_t>> read_chain_ids() const;
  /// Opens the file `name` of `dir_fd` as the link `link` (path set); clears link.ours when it is not a save's.
  InFile open_link_at(int dir_fd, const std::string& name, Link& link) const;

  std::string path_;
  UniqueFd fd_;
  uint32_t owner_ = 0;
  bool allow_other_owner_ = false;
};

}  // namespace shmreplay::detail
