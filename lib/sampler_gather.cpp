// lib/sampler_gather.cpp: peek, one gather (sampler_gather.hpp) of each listed env's newest step, and the repair of
// rows that keep failing their validation, which the sample rounds (sampler_sample.cpp) run too.
//
// Who calls it: the learner (peek), one thread per Sampler at a time; the sample rounds.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "detail/protocol/env_ids.hpp"
#include "detail/protocol/learner_takeover.hpp"
#include "detail/protocol/seqlock.hpp"
#include "sampler_gather.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"

namespace shmreplay {

void sampler_parts::repair_dead_updaters(Segment& seg, std::span<const uint32_t> rows, const uint64_t* env_ids,
                                         std::vector<uint64_t>& envs) {
  envs.clear();
  for (const uint32_t row : rows) {
    const uint64_t e = env_ids[row];
    if ((seg.env_control(e).update_seq.load(std::memory_order_relaxed) & 1) != 0) envs.push_back(e);
  }
  std::sort(envs.begin(), envs.end());
  envs.erase(std::unique(envs.begin(), envs.end()), envs.end());
  for (const uint64_t e : envs) (void)detail::repair_dead_updater(seg, seg.env_control(e));
}

std::string sampler_parts::updater_note(const Segment& seg, std::span<const uint32_t> rows, const uint64_t* env_ids) {
  for (const uint32_t row : rows) {
    const detail::UpdateLockHolder h = detail::update_lock_holder(seg, seg.env_control(env_ids[row]));
    if (h.held) {
      return fmt::format(" (or env {}'s update lock is held by learner slot {}, {}, which keeps rewriting it)",
                         env_ids[row], h.slot, h.dead ? "a dead learner this process could not repair" : "alive");
    }
  }
  return {};
}

// The newest step of each listed env: one gather of every row (its slot from a fresh head per row); the rows whose
// newest step was overwritten during it are read again, up to max_retry_rounds times.
void Sampler::peek(std::span<const uint64_t> env_ids, SampleBatch& out) {
  lease_.check_process("peek into");
  if (env_ids.empty()) {
    throw Error(Errc::invalid_argument, fmt::format("cannot peek into '{}': the list of env ids is empty",
                                                    buffer_->name()));
  }
  out.prepare(buffer_->schema(), env_ids.size(), 1, loads_seen());
  out.episode_fields_ = buffer_->episode_fields();
  Scratch& z = *scratch_;
  sampler_parts::Rounds& r = z.rounds;
  Segment& seg = segment_of(*buffer_);
  const uint64_t cap = buffer_->capacity();
  r.redraw.clear();
  for (std::size_t row = 0; row < env_ids.size(); ++row) {
    // each id read once into the batch, checked as read, and used from there: another thread may change the
    // caller's array meanwhile
    const uint64_t e = env_ids[row];
    detail::check_env_id(seg, e, "peek at");
    out.env_ids_[row] = e;
    r.redraw.push_back(static_cast<uint32_t>(row));
  }
  z.gather.reserve(r.redraw.size());
  for (uint32_t round = 0;; ++round) {
    z.gather.begin(1);
    for (const uint32_t row : r.redraw) {
      const uint64_t e = out.env_ids_[row];
      const uint64_t head = detail::load_head(seg.env_control(e));
      const uint64_t start = head == 0 ? 0 : head - 1;
      out.starts_[row] = start;
      z.gather.add(e, start, start % cap, head == 0 ? 0 : 1, row);
    }
    r.failed.clear();
    if (z.gather.run(out.field_ptr_.data(), out.mask_, r.failed, z.stats) == 0) break;
    if (round >= options_.max_retry_rounds) {
      throw Error(Errc::contended, fmt::format("cannot peek at env {} of '{}': its newest step was overwritten "
                                               "during the copy {} times in a row{}",
                                               env_ids[r.failed.front()], buffer_->name(), round + 1,
                                               sampler_parts::updater_note(seg, r.failed, out.env_ids_)));
    }
    retries_ += r.failed.size();
    z.slot.retries.fetch_add(r.failed.size(), std::memory_order_relaxed);
    if (round + 1 >= sampler_parts::kRepairAfterRounds) {
      sampler_parts::repair_dead_updaters(seg, r.failed, out.env_ids_, r.repair_envs);
    }
    std::swap(r.redraw, r.failed);
  }
  r.ages.assign(env_ids.size(), 0);  // each row is its env's newest step: age 0 (grows to the largest call only)
  sampler_parts::count_call(seg, z.slot, {r.ages.data(), env_ids.size()}, /*sample=*/false);
}

}  // namespace shmreplay
