// lib/sampler_caps.cpp: the learner's half of sample caps (sampler_caps.hpp; docs/design/sample_caps.md).
#include "sampler_caps.hpp"

#include <atomic>
#include <cstdint>

#include <fmt/format.h>

#include "detail/protocol/seqlock.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay::sampler_parts {

Caps::Caps(Segment& seg, uint64_t rank) noexcept {
  if (seg.max_times_sampled() == 0) return;
  words_ = seg.cap_words(0);
  mine_ = &seg.cap_learner(rank);
  cap_ = seg.max_times_sampled();
  capacity_ = seg.capacity();
}

bool Caps::note_rejections(const Segment& seg, std::span<const detail::EnvView> views, uint64_t n) {
  rejected_ += n;
  rejections_ += n;
  if (rejections_ < next_check_) return false;
  // Every start of the snapshot's views, and whether one is still uncapped. O(stored steps), once per doubling.
  uint64_t uncapped = 0;
  uint64_t stored = 0;
  for (std::size_t e = 0; e < views.size(); ++e) {
    for (uint64_t s = views[e].lo; s < views[e].hi; ++s) {
      uncapped += refused(e * capacity_ + s % capacity_, s) ? 0u : 1u;
    }
    stored += views[e].hi - views[e].lo;
  }
  if (uncapped == 0) {
    for (std::size_t e = 0; e < views.size(); ++e) {
      if (detail::load_head(seg.env_control(e)) != views[e].hi) {  // new steps since the snapshot: look at them
        next_check_ = rejections_ + kCapCheckBase;
        return true;
      }
    }
    flush();
    throw Error(Errc::empty_view,
                fmt::format("cannot sample the {} view of '{}': every stored step was sampled max_times_sampled = {} "
                            "times ({} steps, all capped)",
                            to_string(view_), seg.name(), cap_, stored));
  }
  if (rejections_ >= kCapMaxRejections) {
    flush();
    throw Error(Errc::empty_view,
                fmt::format("cannot sample the {} view of '{}': {} draws in one call found only starts sampled "
                            "max_times_sampled = {} times; the {} of {} stored steps not yet capped weigh too little "
                            "under the call's distribution, or cannot start a row under its options",
                            to_string(view_), seg.name(), rejections_, cap_, uncapped, stored));
  }
  next_check_ = rejections_ * 2;
  return false;
}

std::size_t Caps::claim(std::span<const detail::GatherRow> rows, std::vector<uint32_t>& failed,
                        std::size_t failed_before) noexcept {
  std::size_t j = failed_before;
  const std::size_t failed_end = failed.size();
  std::size_t refused_rows = 0;
  for (const detail::GatherRow& r : rows) {
    if (j < failed_end && failed[j] == r.row) {  // failed its validation: redrawn anyway, nothing to claim
      ++j;
      continue;
    }
    // relaxed: the CAS alone bounds the deliveries (one modification order per word); the copy's validity was
    // settled by the seqlock validation before it.
    std::atomic<uint64_t>& word = words_[r.index];
    uint64_t w = word.load(std::memory_order_relaxed);
    bool got = false;
    while (layout::cap_word_for(w, r.start) && layout::cap_word_count(w) < cap_) {
      if (word.compare_exchange_weak(w, w + 1, std::memory_order_relaxed)) {
        got = true;
        break;
      }
    }
    if (got) {
      held_.push_back({r.index, r.start});  // within the reserve of begin_call: a batch row claims once
      ++claimed_;
      if (layout::cap_word_count(w) + 1 == cap_) ++retired_;
    } else {
      failed.push_back(static_cast<uint32_t>(r.row));
      ++refused_rows;
    }
  }
  return refused_rows;
}

void Caps::release() noexcept {
  for (const Held& h : held_) {
    std::atomic<uint64_t>& word = words_[h.index];
    uint64_t w = word.load(std::memory_order_relaxed);
    while (layout::cap_word_for(w, h.start) && layout::cap_word_count(w) > 0) {
      if (word.compare_exchange_weak(w, w - 1, std::memory_order_relaxed)) {
        --claimed_;  // may wrap below 0 within a flush: the slot's counter adds it back modulo 2^64
        if (layout::cap_word_count(w) == cap_) --retired_;
        break;
      }
    }
  }
  held_.clear();
  flush();
}

void Caps::flush() noexcept {
  if (mine_ == nullptr) return;
  if (rejected_ != 0) mine_->rejected.fetch_add(rejected_, std::memory_order_relaxed);
  if (claimed_ != 0) mine_->claimed.fetch_add(claimed_, std::memory_order_relaxed);
  if (retired_ != 0) mine_->retired.fetch_add(retired_, std::memory_order_relaxed);
  rejected_ = claimed_ = retired_ = 0;
}

}  // namespace shmreplay::sampler_parts
