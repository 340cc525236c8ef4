// lib/checkpoint/sampling_state.cpp: the sampling policies' settings and per-step state in a checkpoint (format 2.3;
// layout 1.11; docs/design/checkpoints.md, "Sampling policies"): the consuming queue (its flag and next insertion
// ticket, each window step's ticket; each step's state, free or delivered, goes through the cap counts of
// policy_state.cpp), the initial priority (with +infinity, each window step's fresh flag), and sequence priorities
// (the length; a load recomputes the window trees from the loaded step leaves).
//
// Who calls it: read_source_state and save_env_extras (save), state_mismatches, create_options_of, load_env_extras
// and load_global_state (load), which holds every env's and learner slot's lease.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "detail/protocol/consume.hpp"
#include "detail/protocol/priorities.hpp"
#include "detail/protocol/sequence_priorities.hpp"
#include "detail/protocol/walk.hpp"
#include "internal.hpp"

namespace shmreplay::detail {
namespace {

std::string initial_text(const std::optional<double>& p) {
  return p ? fmt::format("initial priority {}", *p) : std::string("the running maximum as initial priority");
}

// Every leaf of `t` to 0, then `leaf(step)` for the steps [first, head), and the inner nodes rebuilt.
template <class Leaf>
void store_leaves(const PriorityTree& t, uint64_t first, uint64_t head, Leaf&& leaf) {
  for (uint64_t s = 0; s < t.leaves; ++s) t.words[t.leaves + s].store(0, std::memory_order_relaxed);
  for (uint64_t s = first; s < head; ++s) t.words[t.leaves + s % t.capacity].store(leaf(s), std::memory_order_relaxed);
  rebuild(t);
}

}  // namespace

void read_sampling_state(const Buffer& b, CheckpointInfo& info) {
  const Segment& seg = segment_of(b);
  info.consuming_queue = seg.consuming_queue();
  info.queue_next_ticket = seg.consuming_queue() ? seg.queue_control().tickets.load(std::memory_order_relaxed) : 0;
  info.initial_priority = seg.initial_priority();
  info.sequence_priority_length = seg.sequence_priority_length();
  info.reanalyse_chunk = seg.reanalyse_chunk();
}

uint64_t save_sampling_extras(const Buffer& b, uint64_t env, uint64_t first_step, uint64_t head, OutFile& out,
                              uint64_t at, uint32_t& crc, checkpoint_format::EnvSection& section) {
  const Segment& seg = segment_of(b);
  uint64_t bytes = 0;
  section.fresh = section.queue_tickets = 0;
  if (seg.fresh_trees()) {
    // A step is fresh while its fresh leaf, tagged with it, has weight 1; a slot a writer gave to a newer step since
    // says nothing of the step: saved as not fresh (the step left the buffer after the instant the window describes).
    const PriorityTreeView tree = fresh_tree_of(seg, env);
    std::vector<uint8_t> fresh;
    fresh.reserve(static_cast<std::size_t>(head - first_step));
    for (uint64_t s = first_step; s < head; ++s) fresh.push_back(step_weight(tree, seg.env_control(env), s) > 0 ? 1 : 0);
    out.write_at(at, fresh.data(), fresh.size());
    crc = crc32(crc, fresh.data(), fresh.size());
    bytes += fresh.size();
    section.fresh = fresh.size();
  }
  if (seg.consuming_queue()) {
    // relaxed: each ticket was stored before its step's head store, which the save's copy acquired.
    const std::atomic<uint64_t>* tickets = seg.queue_tickets(env);
    std::vector<uint64_t> saved;
    saved.reserve(static_cast<std::size_t>(head - first_step));
    for (uint64_t s = first_step; s < head; ++s) saved.push_back(tickets[s % seg.capacity()].load(std::memory_order_relaxed));
    const uint64_t n = saved.size() * sizeof(uint64_t);
    out.write_at(at + bytes, saved.data(), n);
    crc = crc32(crc, saved.data(), n);
    bytes += n;
    section.queue_tickets = saved.size();
  }
  return bytes;
}

uint64_t save_walk_extras(const Buffer& b, uint64_t env, uint64_t first_step, uint64_t head, OutFile& out,
                          uint64_t at, uint32_t& crc, checkpoint_format::EnvSection& section) {
  section.walk_versions = 0;
  if (b.reanalyse_chunk() == 0) return 0;
  std::vector<uint64_t> versions;
  walk_save_versions(segment_of(b), env, first_step, head, versions);
  const uint64_t n = versions.size() * sizeof(uint64_t);
  out.write_at(at, versions.data(), n);
  crc = crc32(crc, versions.data(), n);
  section.walk_versions = versions.size();
  return n;
}

void load_sampling_extras(Buffer& target, const CheckpointEnv& e, const std::vector<uint8_t>& fresh,
                          const std::vector<uint64_t>& tickets) {
  Segment& seg = segment_of(target);
  const uint64_t cap = seg.capacity();
  // relaxed throughout: the load holds every lease; the leases' release publishes the env to the next learner.
  if (seg.fresh_trees()) {
    // Each loaded step stays as fresh as it was saved; steps without a flag (an older file, or one saved without
    // initial priority +inf) are not fresh: they were pushed under another rule, and were drawable by priority.
    store_leaves(fresh_tree_of(seg, e.env), e.first_step, e.head, [&](uint64_t s) {
      const uint64_t k = s - e.first_step;
      return make_leaf(s, k < fresh.size() && fresh[k] != 0 ? 1.0 : 0.0);
    });
  }
  if (seg.sequence_priority_length() > 0) {
    // The window leaves are tagged with their starts, then computed from the loaded step leaves (refresh_windows
    // stores only a leaf tagged with its start): without this, L-step prioritized draws would find nothing.
    const SequenceTrees trees = sequence_trees_of(seg, e.env);
    for (const PriorityTree* t : {&trees.max, &trees.mean}) {
      store_leaves(*t, e.first_step, e.head, [](uint64_t s) { return make_leaf(s, 0.0); });
    }
    refresh_all_windows(trees, e.first_step, e.head);
  }
  if (seg.consuming_queue()) {
    std::atomic<uint64_t>* words = seg.cap_words(e.env);
    std::atomic<uint64_t>* slots = seg.queue_tickets(e.env);
    const uint64_t head = e.head;
    for (uint64_t s = head > cap ? head - cap : 0; s < head; ++s) {
      const uint64_t k = s - e.first_step;
      slots[s % cap].store(s >= e.first_step && k < tickets.size() ? tickets[k] : 0, std::memory_order_relaxed);
      // A step below the window (the slot the writer was writing at the save) holds no loaded step: delivered, so
      // that no learner takes its slot's bytes for it and the next writer may overwrite it.
      if (s < e.first_step) words[s % cap].store(layout::cap_word(s, 1), std::memory_order_relaxed);
    }
    seg.queue_env(e.env).frontier.store(std::min(e.first_step, head), std::memory_order_relaxed);
    raise_frontier(seg, e.env, head);
  }
}

void load_sampling_state(Buffer& target, const CheckpointInfo& info, bool created) {
  Segment& seg = segment_of(target);
  if (!seg.consuming_queue()) return;
  std::atomic<uint64_t>& next = seg.queue_control().tickets;
  const uint64_t mine = next.load(std::memory_order_relaxed);
  // The next push call's ticket follows every loaded step's (a file without tickets gave them 0).
  next.store(created ? info.queue_next_ticket : std::max(mine, info.queue_next_ticket), std::memory_order_relaxed);
}

void sampling_mismatches(const Buffer& target, const CheckpointInfo& info, std::vector<std::string>& out) {
  // A file older than 2.3 does not record these settings: it says nothing against the target's (its steps load as
  // a buffer without them would hold them: undelivered, not fresh, windows computed from their weights).
  if (info.format_major == 2 && info.format_minor < 3) return;
  if (target.consuming_queue() != info.consuming_queue) {
    out.push_back(fmt::format("consuming queue: the segment {} one, the checkpoint's buffer {} (each step's "
                              "delivered-once state would {})",
                              target.consuming_queue() ? "is" : "is not", info.consuming_queue ? "was" : "was not",
                              info.consuming_queue ? "be lost" : "start as not delivered"));
  }
  const std::optional<double> mine = target.initial_priority();
  if (std::bit_cast<uint64_t>(mine.value_or(0.0)) != std::bit_cast<uint64_t>(info.initial_priority.value_or(0.0)) ||
      mine.has_value() != info.initial_priority.has_value()) {
    out.push_back(fmt::format("initial priority: the segment has {}, the checkpoint {}", initial_text(mine),
                              initial_text(info.initial_priority)));
  }
  if (target.sequence_priority_length() != info.sequence_priority_length) {
    out.push_back(fmt::format("sequence priorities: the segment's length is {}, the checkpoint's {} (0: none)",
                              target.sequence_priority_length(), info.sequence_priority_length));
  }
  // (2.4) A 2.3 file does not say: a load keeps the target's walk (reset), as before.
  if (info.reanalyse_chunk && target.reanalyse_chunk() != *info.reanalyse_chunk) {
    out.push_back(fmt::format("reanalyse walk: the segment's chunk is {} steps, the checkpoint's {} (0: no walk)",
                              target.reanalyse_chunk(), *info.reanalyse_chunk));
  }
}

}  // namespace shmreplay::detail
