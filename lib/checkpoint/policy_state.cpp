// lib/checkpoint/policy_state.cpp: policy versions in a checkpoint (format 2.2; layout 1.11, docs/design/policy.md):
// the version the learners had published and their window are saved, and a load publishes them in the target, and
// gives each env the newest version of its newest loaded step, so that its next writer goes on from it (an env's
// versions never decrease) and pacing learners see where each env stands. The sample cap (format 2.2, layout 1.11)
// is saved beside them, and (format 2.3) each window step's count of deliveries, which a load gives back to the
// step's count word (docs/design/sample_caps.md).
//
// Who calls it: read_source_state and save_env_extras (save), load_into and load_env_extras (load), which holds
// every env's and slot's lease.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <cstdint>
#include <vector>

#include "detail/protocol/policy.hpp"
#include "detail/protocol/seqlock.hpp"
#include "internal.hpp"
#include "shmreplay/internal/queue_layout.hpp"

namespace shmreplay::detail {
namespace {

// A consuming queue's step `s` whose word is a pending claim: its call's verdict. A live learner ends its call within
// microseconds (it gives the claim back or commits and marks it delivered), so the save waits up to 100 ms for the
// word to settle and saves what it became: a claim whose call had committed (delivered at its commit, the word not
// yet stored) is never saved as free. A claim still pending then is a dead (or stopped) learner's: saved as the
// slot's repair would settle it (repair_dead_claims): delivered when the slot's call word says its call committed
// (no claiming bit), free otherwise.
uint64_t settled_claim(const Segment& seg, const std::atomic<uint64_t>& word, uint64_t s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  for (;;) {
    // acquire: pairs with the learner's release store of delivered or free (deliver, give_back).
    const uint64_t w = word.load(std::memory_order_acquire);
    if (!layout::cap_word_for(w, s) || !layout::queue_is_pending(w)) return w;
    if (std::chrono::steady_clock::now() >= until) {
      const uint64_t call = seg.queue_learner(layout::queue_pending_slot(w)).call.load(std::memory_order_acquire);
      return layout::cap_word(s, (call & layout::kQueueClaiming) != 0 ? 0 : 1);
    }
    std::this_thread::yield();
  }
}

}  // namespace

void read_policy_state(const Buffer& b, CheckpointInfo& info) {
  const PolicyWindow w = load_policy_window(segment_of(b).policy_control());
  info.policy_version = w.version;
  info.policy_max_staleness = w.on() ? std::optional<uint64_t>(w.max_staleness) : std::nullopt;
  info.max_times_sampled = b.max_times_sampled();
}

std::vector<uint8_t> save_cap_counts(const Buffer& b, uint64_t env, uint64_t first_step, uint64_t head) {
  const Segment& seg = segment_of(b);
  const uint64_t cap = b.capacity();
  const uint64_t most = seg.max_times_sampled();
  const std::atomic<uint64_t>* words = seg.cap_words(env);
  std::vector<uint8_t> counts;
  counts.reserve(static_cast<std::size_t>(head - first_step));
  for (uint64_t s = first_step; s < head; ++s) {
    // relaxed: read after the env's records were copied; a step's count only grows, so this is at least its count
    // at the instant the window describes. A slot a writer gave to a newer step since (the window is an earlier instant)
    // says nothing of step s: it is saved as capped, the one count that never lets the load deliver it too often.
    uint64_t word = words[s % cap].load(std::memory_order_relaxed);
    if (seg.consuming_queue() && layout::cap_word_for(word, s) && layout::queue_is_pending(word)) {
      word = settled_claim(seg, words[s % cap], s);
    }
    counts.push_back(static_cast<uint8_t>(layout::cap_word_for(word, s) ? layout::cap_word_count(word) : most));
  }
  return counts;
}

void load_cap_words(Buffer& target, const CheckpointEnv& e, const std::vector<uint8_t>& counts) {
  Segment& seg = segment_of(target);
  const uint64_t most = seg.max_times_sampled();
  if (most == 0) return;
  const uint64_t cap = target.capacity();
  std::atomic<uint64_t>* words = seg.cap_words(e.env);
  const uint64_t head = load_head(seg.env_control(e.env));
  // relaxed: the load holds every lease; a learner's snapshot of the heads (acquire) comes after the leases'
  // release. Each loaded step starts with the deliveries the file counted (none in a file older than 2.3, or one
  // saved without a cap), at most the target's cap.
  for (uint64_t s = head > cap ? head - cap : 0; s < head; ++s) {
    const uint64_t k = s - e.first_step;
    const uint64_t count = s >= e.first_step && k < counts.size() ? std::min<uint64_t>(counts[k], most) : 0;
    words[s % cap].store(layout::cap_word(s, count), std::memory_order_relaxed);
  }
}

void load_policy_state(Buffer& target, const CheckpointInfo& info) {
  Segment& seg = segment_of(target);
  const std::optional<std::size_t> field = target.episode_fields().policy_version;
  if (field) {
    const uint64_t bytes = target.schema()[*field].bytes();
    for (uint64_t e = 0; e < target.num_envs(); ++e) {
      const uint64_t head = load_head(seg.env_control(e));
      uint64_t newest = layout::kNoPolicyVersion;
      if (head > 0) {
        const std::byte* at = seg.field_data(*field) + (e * target.capacity() + (head - 1) % target.capacity()) * bytes;
        newest = read_policy_version(at, target.schema()[*field].dtype).value_or(layout::kNoPolicyVersion);
      }
      // relaxed: the load holds the env's lease; the lease's release publishes it to the next writer.
      seg.policy_env(e).newest.store(newest, std::memory_order_relaxed);
    }
  }
  if (info.policy_version != 0 || info.policy_max_staleness) {
    publish_policy(seg.policy_control(), info.policy_version,
                   field ? info.policy_max_staleness.value_or(layout::kNoPolicyWindow) : layout::kNoPolicyWindow);
  }
}

}  // namespace shmreplay::detail
