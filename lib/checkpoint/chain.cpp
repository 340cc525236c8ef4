// lib/checkpoint/chain.cpp: chains of incremental checkpoints in a directory (include/shmreplay/checkpoint.hpp,
// "Chains"): the links there (list_links), which links a link needs (needed_links: each step of each env's window
// from the newest link that holds it), writing the next link with only the steps published since the previous one
// and removing links no kept link needs (save_link), and finding the newest link that restores (verify_chain,
// load_chain). Who calls it: the CLI's `save --every`, `load DIR`, `verify DIR`; the Python Checkpointer.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <random>
#include <set>

#include <fmt/format.h>

#include "checkpoint/internal.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {
namespace {

constexpr std::string_view kLinkPrefix = "link-";
constexpr std::string_view kLinkSuffix = ".shmrckpt";

std::string link_path(const std::string& dir, uint64_t seq) {
  return fmt::format("{}/{}{:010}{}", dir, kLinkPrefix, seq, kLinkSuffix);
}

// The seq of a link file's name "link-<digits>.shmrckpt", or 0 for another name.
uint64_t seq_of(std::string_view name) {
  if (!name.starts_with(kLinkPrefix) || !name.ends_with(kLinkSuffix)) return 0;
  const std::string_view digits = name.substr(kLinkPrefix.size(), name.size() - kLinkPrefix.size() - kLinkSuffix.size());
  if (digits.empty() || digits.size() > 19) return 0;
  uint64_t seq = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return 0;
    seq = seq * 10 + static_cast<uint64_t>(c - '0');
  }
  return seq;
}

// A link with its headers read (info.envs filled, records not checked), or the error that stopped it.
struct Link {
  ChainLink entry;
  std::optional<CheckpointInfo> info;
};

std::vector<Link> read_links(const std::string& dir) {
  std::vector<Link> links;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    const int e = errno;
    if (e == ENOENT) throw Error(Errc::not_found, fmt::format("chain directory '{}' does not exist", dir));
    throw_errno(e, fmt::format("cannot read chain directory '{}'", dir));
  }
  while (const dirent* ent = ::readdir(d)) {
    const uint64_t seq = seq_of(ent->d_name);
    if (seq == 0) continue;
    Link link;
    link.entry.path = fmt::format("{}/{}", dir, ent->d_name);
    link.entry.seq = seq;
    try {
      const detail::InFile in(link.entry.path);
      link.entry.file_bytes = in.size();
      link.info = detail::read_headers(in);
      link.entry.chain_id = link.info->chain_id;
      link.entry.saved_time_ns = link.info->saved_time_ns;
    } catch (const Error& e) {
      link.entry.error = e.what();
    }
    links.push_back(std::move(link));
  }
  ::closedir(d);
  std::sort(links.begin(), links.end(), [](const Link& a, const Link& b) { return a.entry.seq < b.entry.seq; });
  return links;
}

// Whether two links describe the same buffer: name, creation, geometry and schema.
bool same_source(const CheckpointInfo& a, const CheckpointInfo& b) {
  return a.source_name == b.source_name && a.source_creation_time_ns == b.source_creation_time_ns &&
         a.num_envs == b.num_envs && a.capacity == b.capacity && a.schema == b.schema;
}

// The links (indices into `links`, oldest first) that link `n` needs: those of its chain up to it holding a step of
// one of its envs' windows that no newer link up to n holds, and n. Empty with `why` set when a step is in none.
std::vector<std::size_t> needed_links(const std::vector<Link>& links, std::size_t n, std::string* why) {
  const CheckpointInfo& last = *links[n].info;
  std::vector<std::size_t> chain;  // the candidates, oldest first
  for (std::size_t k = 0; k <= n; ++k) {
    if (links[k].info && links[k].info->chain_id == last.chain_id && same_source(*links[k].info, last)) {
      chain.push_back(k);
    }
  }
  std::set<std::size_t> needed{n};
  for (std::size_t e = 0; e < last.envs.size(); ++e) {
    const CheckpointEnv& w = last.envs[e];
    uint64_t next = w.first_step;
    for (std::size_t c = 0; c < chain.size(); ++c) {
      const CheckpointEnv& fe = links[chain[c]].info->envs[e];
      uint64_t hi = std::min(fe.head, w.head);
      for (std::size_t j = c + 1; j < chain.size(); ++j) hi = std::min(hi, links[chain[j]].info->envs[e].data_from);
      const uint64_t lo = std::max(w.first_step, fe.data_from);
      if (lo >= hi) continue;
      if (lo != next) break;  // a gap: reported below
      needed.insert(chain[c]);
      next = hi;
    }
    if (next < w.head) {
      if (why) {
        *why = fmt::format("link {}: no link of its chain holds steps {} .. {} of env {}", links[n].entry.seq, next,
                           w.head - 1, e);
      }
      return {};
    }
  }
  return {needed.begin(), needed.end()};
}

uint64_t bytes_of(const std::vector<Link>& links, const std::vector<std::size_t>& which) {
  uint64_t bytes = 0;
  for (const std::size_t k : which) bytes += links[k].entry.file_bytes;
  return bytes;
}

// The newest link of `dir` that restores, its needed links verified whole (every checksum) and kept open.
struct Restorable {
  std::vector<std::unique_ptr<detail::InFile>> files;
  std::vector<CheckpointInfo> infos;
  std::vector<std::string> notes;
};

Restorable newest_restorable(const std::string& dir, const CheckpointProgressFn& progress) {
  const std::vector<Link> links = read_links(dir);
  std::vector<std::string> skipped;
  for (std::size_t n = links.size(); n-- > 0;) {
    if (!links[n].info) {
      skipped.push_back(fmt::format("link {}: {}", links[n].entry.seq, links[n].entry.error));
      continue;
    }
    std::string why;
    const std::vector<std::size_t> needed = needed_links(links, n, &why);
    if (needed.empty()) {
      skipped.push_back(why);
      continue;
    }
    Restorable r;
    try {
      for (const std::size_t k : needed) {
        r.files.push_back(std::make_unique<detail::InFile>(links[k].entry.path));
        r.infos.push_back(detail::verify_file(*r.files.back(), progress));
      }
    } catch (const Error& e) {
      skipped.push_back(fmt::format("link {}: {}", links[n].entry.seq, e.what()));
      continue;
    }
    for (const std::string& s : skipped) r.notes.push_back("skipped " + s);
    return r;
  }
  std::string listed;
  for (const std::string& s : skipped) listed += "; " + s;
  throw Error(Errc::not_found, fmt::format("no link in chain directory '{}' restores{}", dir,
                                           links.empty() ? std::string(": it holds no link files (link-N.shmrckpt)")
                                                         : listed));
}

// Creates `dir` when missing, with the owner's bits and the group's and others' read bits of `mode` (plus search).
void make_dir(const std::string& dir, uint32_t mode) {
  const mode_t bits = static_cast<mode_t>(0700 | ((mode & 0040) ? 0050 : 0) | ((mode & 0004) ? 0005 : 0));
  if (::mkdir(dir.c_str(), bits) != 0 && errno != EEXIST) {
    throw_errno(errno, fmt::format("cannot create chain directory '{}'", dir));
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Error(Errc::already_exists, fmt::format("cannot save a chain into '{}': it is not a directory", dir));
  }
}

uint64_t random_chain_id() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return id;
}

}  // namespace

std::vector<ChainLink> list_links(const std::string& dir) {
  std::vector<ChainLink> out;
  for (Link& l : read_links(dir)) out.push_back(std::move(l.entry));
  return out;
}

bool is_chain_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

LinkResult save_link(const Buffer& source, const std::string& dir, const ChainOptions& options) {
  make_dir(dir, source.mode());
  // One saver per directory: a second one would number and prune links under the first one's feet.
  const std::string lock_path = dir + "/chain.lock";
  detail::UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock) throw_errno(errno, fmt::format("cannot open '{}'", lock_path));
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    throw Error(Errc::lease_held, fmt::format("cannot save a link into '{}': another save into that directory is "
                                              "running (it holds {})",
                                              dir, lock_path));
  }
  const std::vector<Link> links = read_links(dir);
  uint64_t seq = links.empty() ? 1 : links.back().entry.seq + 1;

  // The previous link: the newest one of this buffer whose headers check, that has every link it needs, and whose
  // own data verifies (every checksum: a link built on a damaged one would not restore, and the prune below would
  // count the damaged one as a restore point). The earlier links it needs were checked so when they were the
  // previous link, by this save or an earlier one; verify_chain and load_chain check them all again.
  detail::LinkPlan plan;
  std::set<uint64_t> damaged;  // seqs of links whose data failed that check
  std::string why;
  for (std::size_t n = links.size(); n-- > 0;) {
    if (!links[n].info) continue;
    const CheckpointInfo& prev = *links[n].info;
    if (prev.source_name != source.name() ||
        prev.source_creation_time_ns != source.segment().header().creation_time_ns ||
        prev.num_envs != source.num_envs() || prev.capacity != source.capacity() || !(prev.schema == source.schema())) {
      break;  // another buffer (or a recreated one): start a new chain
    }
    const std::vector<std::size_t> needed = needed_links(links, n, &why);
    if (needed.empty()) continue;
    const double budget = options.compact_ratio * static_cast<double>(std::max<uint64_t>(prev.window_bytes(), 1u << 20));
    if (static_cast<double>(bytes_of(links, needed)) > budget) break;  // compact: a whole link starts a new chain
    try {
      detail::verify_file(detail::InFile(links[n].entry.path), {});
    } catch (const Error&) {
      damaged.insert(links[n].entry.seq);
      continue;
    }
    plan.chain_id = prev.chain_id;
    for (const CheckpointEnv& e : prev.envs) plan.envs.push_back({e.head, e.update_seq});
    break;
  }
  const bool chained = plan.chain_id != 0;
  if (!chained) plan.chain_id = random_chain_id();
  plan.link_seq = seq;

  SaveOptions save = options.save;
  save.force = false;
  LinkResult result;
  result.info = detail::write_checkpoint(source, link_path(dir, seq), save, plan);
  result.whole = result.info.self_contained();
  result.record_bytes = result.info.total_steps * result.info.schema.step_bytes();

  // Prune: keep the newest `keep` links that restore and every link they need.
  const std::vector<Link> now = read_links(dir);
  std::set<std::size_t> keep;
  uint32_t kept_points = 0;
  for (std::size_t n = now.size(); n-- > 0 && kept_points < std::max<uint32_t>(options.keep, 1);) {
    if (!now[n].info) {
      keep.insert(n);  // unreadable now (being written? damaged?): never removed by a save
      continue;
    }
    if (damaged.count(now[n].entry.seq) != 0) continue;  // no restore point: removed unless a kept link needs it
    const std::vector<std::size_t> needed = needed_links(now, n, nullptr);
    if (needed.empty()) continue;
    keep.insert(needed.begin(), needed.end());
    ++kept_points;
  }
  for (std::size_t k = 0; k < now.size(); ++k) {
    if (keep.count(k) != 0) {
      result.chain_bytes += now[k].entry.file_bytes;
      continue;
    }
    if (::unlink(now[k].entry.path.c_str()) == 0) result.removed.push_back(now[k].entry.path);
  }
  return result;
}

CheckpointInfo verify_chain(const std::string& dir, std::vector<std::string>* notes,
                            const CheckpointProgressFn& progress) {
  Restorable r = newest_restorable(dir, progress);
  if (notes) *notes = std::move(r.notes);
  return r.infos.back();
}

LoadResult load_chain(const std::string& dir, std::string_view name, const LoadOptions& options) {
  Restorable r = newest_restorable(dir, options.progress);
  detail::LoadSources sources;
  for (std::size_t k = 0; k < r.files.size(); ++k) {
    sources.files.push_back(r.files[k].get());
    sources.infos.push_back(&r.infos[k]);
  }
  return detail::load_sources(sources, name, options, std::move(r.notes));
}

}  // namespace shmreplay
