// lib/checkpoint/chain.cpp: chains of incremental checkpoints in a directory (include/shmreplay/checkpoint.hpp,
// "Chains"): the links there (list_links), which links a link needs (needed_links: each step of each env's window
// from the newest link that holds it), writing the next link with only the steps published since the previous one
// and removing links no kept link needs (save_link), and finding the newest link that restores (verify_chain,
// load_chain). Who calls it: the CLI's `save --every`, `load DIR`, `verify DIR`; the Python Checkpointer.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <random>
#include <set>

#include <fmt/format.h>

#include "checkpoint/chain_dir.hpp"
#include "checkpoint/internal.hpp"
#include "detail/storage/cold_files.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay {
namespace {

using detail::ChainDir;
using detail::Link;
using detail::Listing;

std::string link_name(uint64_t seq) { return fmt::format("link-{:010}.shmrckpt", seq); }

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

// What a listing did not take, as notes: the names that are no link's, the links not taken (each named), and, in
// a directory without its chain list, that every link was taken.
std::vector<std::string> listing_notes(const ChainDir& dir, const Listing& listing, bool without_list_note = true) {
  std::vector<std::string> notes;
  for (const std::string& s : listing.skipped) notes.push_back("skipped " + s);
  for (const Link& l : listing.links) {
    if (!l.info) notes.push_back(fmt::format("skipped link {} ('{}'): {}", l.entry.seq, l.entry.path, l.entry.error));
  }
  if (without_list_note && !listing.has_chain_ids && !listing.links.empty()) {
    notes.push_back(fmt::format("'{}' has no list of its chains (chain.ids: saved by a shmreplay that did not write "
                                "one), so its links were not checked to be of one directory's chains",
                                dir.path()));
  }
  return notes;
}

Restorable newest_restorable(const std::string& path, bool allow_other_owner, const CheckpointProgressFn& progress) {
  const ChainDir dir(path, allow_other_owner, "cannot read the chain directory");
  const Listing listing = dir.list();
  const std::vector<Link>& links = listing.links;
  std::vector<std::string> skipped = listing_notes(dir, listing);
  for (std::size_t n = links.size(); n-- > 0;) {
    if (!links[n].info) continue;  // in the notes already
    std::string why;
    const std::vector<std::size_t> needed = needed_links(links, n, &why);
    if (needed.empty()) {
      skipped.push_back("skipped " + why);
      continue;
    }
    Restorable r;
    try {
      for (const std::size_t k : needed) {
        r.files.push_back(std::make_unique<detail::InFile>(dir.open_link(links[k])));
        r.infos.push_back(detail::verify_file(*r.files.back(), progress));
      }
    } catch (const Error& e) {
      skipped.push_back(fmt::format("skipped link {}: {}", links[n].entry.seq, e.what()));
      continue;
    }
    r.notes = std::move(skipped);
    return r;
  }
  std::string listed;
  for (const std::string& s : skipped) listed += "; " + s;
  throw Error(Errc::not_found, fmt::format("no link in chain directory '{}' restores{}", path,
                                           links.empty() ? std::string(": it holds no link files (link-N.shmrckpt)") + listed
                                                         : listed));
}

uint64_t random_chain_id(const std::vector<Link>& links) {
  std::random_device rd;
  for (;;) {
    const uint64_t id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    const bool used = std::any_of(links.begin(), links.end(), [&](const Link& l) { return l.entry.chain_id == id; });
    if (id != 0 && !used) return id;
  }
}

// The previous link a new one builds on (its chain and each env's head and update_seq), or a plan without a chain:
// the newest link of this buffer whose headers check, that has every link it needs, and whose own data verifies
// (every checksum: a link built on a damaged one would not restore, and the prune would count the damaged one as a
// restore point). The earlier links it needs were checked so when they were the previous link, by this save or an
// earlier one; verify_chain and load_chain check them all again. `damaged` gets the seqs that failed that check.
detail::LinkPlan previous_link(const Buffer& source, const ChainDir& dir, const std::vector<Link>& links,
                               const ChainOptions& options, std::set<uint64_t>& damaged) {
  detail::LinkPlan plan;
  for (std::size_t n = links.size(); n-- > 0;) {
    if (!links[n].info) continue;
    const CheckpointInfo& prev = *links[n].info;
    if (prev.source_name != source.name() ||
        prev.source_creation_time_ns != segment_of(source).header().creation_time_ns ||
        prev.num_envs != source.num_envs() || prev.capacity != source.capacity() || !(prev.schema == source.schema())) {
      break;  // another buffer (or a recreated one): start a new chain
    }
    const std::vector<std::size_t> needed = needed_links(links, n, nullptr);
    if (needed.empty()) continue;
    const double budget = options.compact_ratio * static_cast<double>(std::max<uint64_t>(prev.window_bytes(), 1u << 20));
    if (static_cast<double>(bytes_of(links, needed)) > budget) break;  // compact: a whole link starts a new chain
    try {
      detail::verify_file(dir.open_link(links[n]), {});
    } catch (const Error&) {
      damaged.insert(links[n].entry.seq);
      continue;
    }
    plan.chain_id = prev.chain_id;
    for (const CheckpointEnv& e : prev.envs) plan.envs.push_back({e.head, e.update_seq});
    break;
  }
  return plan;
}

// Keeps the newest `keep` links that restore and every link they need, and removes the rest of the links it takes
// (a link it does not take, unreadable or not this directory's, is never removed). Fills `result`'s removed and
// chain_bytes.
void prune(const ChainDir& dir, uint32_t keep_points, const std::set<uint64_t>& damaged, LinkResult& result) {
  const std::vector<Link> now = dir.list().links;
  std::set<std::size_t> keep;
  uint32_t kept_points = 0;
  for (std::size_t n = now.size(); n-- > 0 && kept_points < std::max<uint32_t>(keep_points, 1);) {
    if (!now[n].info) {
      keep.insert(n);
      continue;
    }
    if (damaged.count(now[n].entry.seq) != 0) continue;  // no restore point: removed unless a kept link needs it
    const std::vector<std::size_t> needed = needed_links(now, n, nullptr);
    if (needed.empty()) continue;
    keep.insert(needed.begin(), needed.end());
    ++kept_points;
  }
  for (std::size_t k = 0; k < now.size(); ++k) {
    if (keep.count(k) != 0 || !now[k].ours) {
      result.chain_bytes += now[k].entry.file_bytes;
      continue;
    }
    if (dir.remove(now[k])) result.removed.push_back(now[k].entry.path);
  }
}

}  // namespace

std::vector<ChainLink> list_links(const std::string& dir, bool allow_other_owner) {
  std::vector<ChainLink> out;
  for (Link& l : ChainDir(dir, allow_other_owner, "cannot list the chain directory").list().links) {
    out.push_back(std::move(l.entry));
  }
  return out;
}

bool is_chain_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

LinkResult save_link(const Buffer& source, const std::string& path, const ChainOptions& options) {
  detail::refuse_cold(segment_of(source), "save a checkpoint link of", "checkpoints do not hold it yet");  // (1.11) the first slice of the cold tier
  const ChainDir dir = ChainDir::create(path, source.mode(), options.allow_other_owner);
  const detail::UniqueFd lock = dir.lock();
  const Listing listing = dir.list();
  if (listing.last_seq >= kMaxLinkSeq) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot save a link into '{}': its newest link file is '{}', and the next number, {}, is "
                            "past {}, the largest a link's name holds (19 digits), so no load would find that link; "
                            "save the chain into a new directory (a file of that name copied or planted there ends "
                            "a chain)",
                            path, dir.file(link_name(listing.last_seq)), listing.last_seq + 1, kMaxLinkSeq));
  }
  const uint64_t seq = listing.last_seq + 1;
  std::set<uint64_t> damaged;  // seqs of links whose data failed the previous link's check
  detail::LinkPlan plan = previous_link(source, dir, listing.links, options, damaged);
  if (plan.chain_id == 0) plan.chain_id = random_chain_id(listing.links);
  plan.link_seq = seq;

  // The list of the directory's chains names this link's chain before the link exists (so a load that lists the
  // links first, then reads the list, never finds a link of this save that the list lacks). Once: at the link
  // that starts a chain, or in a directory saved before the list existed, whose links it then adopts.
  std::set<uint64_t> ids{plan.chain_id};
  for (const Link& l : listing.links) {
    if (l.info) ids.insert(l.info->chain_id);
  }
  const bool new_chain = std::none_of(listing.links.begin(), listing.links.end(),
                                      [&](const Link& l) { return l.info && l.info->chain_id == plan.chain_id; });
  if (new_chain || !listing.has_chain_ids) dir.write_chain_ids(ids, (source.mode() & 0044u) | 0600u);

  SaveOptions save = options.save;
  save.force = false;
  LinkResult result;
  result.info = detail::write_checkpoint(source, dir.file(link_name(seq)), save, plan);
  result.whole = result.info.self_contained();
  result.record_bytes = result.info.total_steps * result.info.record_bytes;
  result.notes = listing_notes(dir, listing, /*without_list_note=*/false);  // the list exists now
  prune(dir, options.keep, damaged, result);
  return result;
}

CheckpointInfo verify_chain(const std::string& dir, std::vector<std::string>* notes,
                            const CheckpointProgressFn& progress, bool allow_other_owner) {
  Restorable r = newest_restorable(dir, allow_other_owner, progress);
  if (notes) *notes = std::move(r.notes);
  return r.infos.back();
}

LoadResult load_chain(const std::string& dir, std::string_view name, const LoadOptions& options) {
  Restorable r = newest_restorable(dir, options.allow_other_owner, options.progress);
  detail::LoadSources sources;
  for (std::size_t k = 0; k < r.files.size(); ++k) {
    sources.files.push_back(r.files[k].get());
    sources.infos.push_back(&r.infos[k]);
  }
  return detail::load_sources(sources, name, options, std::move(r.notes));
}

}  // namespace shmreplay
