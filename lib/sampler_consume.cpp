// lib/sampler_consume.cpp: a consuming call, top to bottom (SampleOptions::consume on a consuming queue;
// docs/design/consuming_queue.md). The call marks its learner slot's call word "claiming", claims each row's start
// by CAS (free -> pending for the slot: detail/protocol/consume.hpp) in insertion order (fifo: a heap of each env's
// first free step by insertion ticket) or uniformly at random (random: uniform proposals over every env's ring
// slots or windows of undelivered steps, refused unless free: rejection, so exact over the free starts). With fewer
// free starts than rows it delivers those it claimed when a writer waits on the queue (a partial batch: the writer
// may wait for one of them), and otherwise gives its claims back and waits for writers. Then it copies the rows
// (the gather stage: writers cannot overwrite a claimed step, so a copy fails only where a try_update could run,
// which a queue refuses), and commits: one store of the call word delivers every row, after which the claimed
// words become "delivered", each env's frontier moves past its delivered steps and the writers blocked on them are
// woken.
//
// Who calls it: Sampler::sample (sampler_sample.cpp), on the Sampler's thread.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/consume.hpp"
#include "detail/protocol/wake.hpp"
#include "detail/sampling/planner.hpp"
#include "sampler_parts.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/wait.hpp"

namespace shmreplay {

using sampler_parts::ConsumeState;

namespace {

constexpr uint64_t kShortWaitMs = 1;  // a shortfall while other learners' claims are pending: retry this soon
constexpr uint64_t kRefused = ~uint64_t{0};  // a random proposal refused when drawn

// Each env's window of steps a claim may find free: [max(frontier, oldest stored), head). Returns the heads' sum.
uint64_t load_windows(Segment& seg, ConsumeState& c) noexcept {
  const uint64_t cap = seg.capacity();
  uint64_t heads = 0;
  uint64_t total = 0;
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    const uint64_t head = detail::load_head(seg.env_control(e));
    const uint64_t frontier = seg.queue_env(e).frontier.load(std::memory_order_relaxed);
    c.hi[e] = head;
    c.lo[e] = std::min(head, std::max(frontier, head > cap ? head - cap : 0));
    c.lo_slot[e] = c.lo[e] % cap;
    c.words[e] = seg.cap_words(e);
    heads += head;
    total += c.hi[e] - c.lo[e];
    c.cumulative[e] = total;
  }
  return heads;
}

// The ring slot of `step`, inside env `e`'s window (at most capacity steps from its lo): no division.
uint64_t slot_of(const ConsumeState& c, uint64_t cap, uint64_t e, uint64_t step) noexcept {
  const uint64_t i = c.lo_slot[e] + (step - c.lo[e]);
  return i >= cap ? i - cap : i;
}

// The env whose part of the windows' cumulative sizes holds u < total: the first e with cumulative[e] > u. Without
// branches (a conditional move per halving): a search whose branches a uniform u mispredicts costs more.
uint64_t env_holding(const std::vector<uint64_t>& cumulative, uint64_t u) noexcept {
  const uint64_t* b = cumulative.data();
  for (std::size_t n = cumulative.size(); n > 1;) {
    const std::size_t half = n / 2;
    b += static_cast<std::size_t>(b[half - 1] <= u) * half;  // a product, not a branch the compiler may keep
    n -= half;
  }
  return static_cast<uint64_t>(b - cumulative.data());
}

// Claims `step` of env `e` for `slot` if it is free, as the call's next row; notes a pending claim of another slot.
bool claim_row(Segment& seg, ConsumeState& c, uint64_t e, uint64_t step, uint64_t slot, std::size_t length) {
  const uint64_t ring_slot = slot_of(c, seg.capacity(), e, step);
  std::atomic<uint64_t>& word = c.words[e][ring_slot];
  const uint64_t w = word.load(std::memory_order_relaxed);
  if (w != layout::cap_word(step, 0)) {
    if (layout::cap_word_for(w, step) && layout::queue_is_pending(w)) {
      c.pending_slots |= uint64_t{1} << layout::queue_pending_slot(w);
    }
    return false;
  }
  if (!detail::try_claim(word, step, slot)) {
    ++c.refused;
    return false;
  }
  const uint64_t steps = std::min<uint64_t>(c.hi[e] - step, length);
  c.rows.push_back({e, step, steps, c.hi[e] - (step + steps), ring_slot, &word});
  return true;
}

// fifo: the free steps of the oldest push calls first, up to `rows` claims.
void claim_fifo(Segment& seg, ConsumeState& c, uint64_t slot, std::size_t rows, std::size_t length) {
  const auto later = [](const ConsumeState::Candidate& a, const ConsumeState::Candidate& b) {
    return a.ticket != b.ticket ? a.ticket > b.ticket : a.env > b.env;
  };
  const uint64_t cap = seg.capacity();
  auto push_next = [&](uint64_t e, uint64_t from) {
    if (from >= c.hi[e]) return;
    // relaxed: the ticket was stored before the step's head store, which the window's head load acquired.
    c.heap.push_back({seg.queue_tickets(e)[from % cap].load(std::memory_order_relaxed), e, from});
    std::push_heap(c.heap.begin(), c.heap.end(), later);
  };
  for (uint64_t e = 0; e < seg.num_envs(); ++e) push_next(e, c.lo[e]);
  while (c.rows.size() < rows && !c.heap.empty()) {
    std::pop_heap(c.heap.begin(), c.heap.end(), later);
    const ConsumeState::Candidate next = c.heap.back();
    c.heap.pop_back();
    claim_row(seg, c, next.env, next.step, slot, length);
    push_next(next.env, next.step + 1);
  }
}

// random: uniform proposals, claimed when free (rejection: exact over the free starts, for proposals uniform over
// any set that holds every free start), up to `rows` claims; stops early when a count of the windows finds too few
// free starts. The proposals: while the windows fill at least half the rings, every env's ring slots (an env and a
// slot from one 64-bit draw, two products: no search), refused at once outside the env's window; otherwise the
// windows (a search of their cumulative sizes). They are drawn up to kProposalsAhead before their claims, each count
// word prefetched when drawn: the claims' cache misses overlap instead of each waiting on the last. Proposals do not
// depend on the claims, so drawing them early changes nothing in the distribution; no more are drawn than rows
// remain to claim, so none is wasted but refusals.
void claim_random(Segment& seg, ConsumeState& c, uint64_t slot, std::size_t rows, std::size_t length, Rng& rng) {
  __extension__ using U128 = unsigned __int128;
  const uint64_t total = c.cumulative.empty() ? 0 : c.cumulative.back();
  if (total == 0) return;
  const uint64_t cap = seg.capacity();
  const uint64_t envs = seg.num_envs();
  const bool rings = total >= envs * cap / 2;
  uint64_t refusals = 0;
  uint64_t next_check = sampler_parts::kConsumeCheckBase + sampler_parts::kConsumeCheckPerRow * rows;
  using Proposal = ConsumeState::Proposal;
  std::array<Proposal, sampler_parts::kProposalsAhead>& ahead = c.ahead;
  std::size_t first = 0;  // the oldest proposal in the ring `ahead`
  std::size_t drawn = 0;  // proposals in it
  const auto draw = [&] {
    uint64_t e = 0;
    uint64_t step = 0;
    uint64_t i = 0;
    if (rings) {
      const U128 x = static_cast<U128>(rng()) * envs;  // high word: the env; low word: a fraction for the slot
      e = static_cast<uint64_t>(x >> 64);
      i = static_cast<uint64_t>((static_cast<U128>(static_cast<uint64_t>(x)) * cap) >> 64);
      step = c.lo[e] + (i >= c.lo_slot[e] ? i - c.lo_slot[e] : i + cap - c.lo_slot[e]);
    } else {
      const uint64_t u = detail::uniform_below(rng, total);
      e = env_holding(c.cumulative, u);
      step = c.lo[e] + (u - (e == 0 ? 0 : c.cumulative[e - 1]));
      i = slot_of(c, cap, e, step);
    }
    if (step >= c.hi[e]) {
      step = kRefused;  // outside the window: refused without a look at the word
    } else {
      __builtin_prefetch(&c.words[e][i], 1, 3);  // for the claim's load and CAS
    }
    ahead[(first + drawn++) % ahead.size()] = {e, step};
  };
  while (c.rows.size() < rows) {
    while (drawn < std::min(ahead.size(), rows - c.rows.size())) draw();
    const Proposal p = ahead[first];
    first = (first + 1) % ahead.size();
    --drawn;
    if (p.step != kRefused && claim_row(seg, c, p.env, p.step, slot, length)) continue;
    if (++refusals < next_check) continue;
    uint64_t free = 0;  // the windows' free steps now: enough for the rows still to claim?
    for (uint64_t k = 0; k < seg.num_envs(); ++k) {
      for (uint64_t s = c.lo[k], i = c.lo_slot[k]; s < c.hi[k]; ++s, i = i + 1 == cap ? 0 : i + 1) {
        free += c.words[k][i].load(std::memory_order_relaxed) == layout::cap_word(s, 0) ? 1u : 0u;
      }
    }
    if (free < rows - c.rows.size()) return;
    next_check = refusals * 2;
  }
}

// Whether a writer waits on the queue now: an env whose writer marked its wait and whose next step's ring slot still
// holds an undelivered step (a writer killed in its wait leaves the mark: the slot check keeps it from counting
// once the step is delivered). Then fewer free steps than a call asks for may be all that will come.
bool writer_held(Segment& seg) noexcept {
  for (uint64_t e = 0; e < seg.num_envs(); ++e) {
    if (seg.queue_env(e).blocked_since_ns.load(std::memory_order_relaxed) == 0) continue;
    if (!detail::slot_consumed(seg.cap_words(e), seg.capacity(), detail::load_head(seg.env_control(e)))) return true;
  }
  return false;
}

}  // namespace

void Sampler::check_consume(const char* op, const SampleOptions& o) const {
  const std::string& name = buffer_->name();
  if (!buffer_->consuming_queue()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}' with consume = {}: it is not a consuming queue (create it with "
                            "consuming_queue)",
                            op, name, to_string(o.consume)));
  }
  if (o.consume == Consume::off) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} '{}': it is a consuming queue, whose steps are taken by sample calls with "
                            "consume = fifo or random, each delivered once",
                            op, name));
  }
  throw Error(Errc::invalid_argument,
              fmt::format("cannot {} '{}' with consume = {}: only sample and sample_transitions consume, with the "
                          "replay view, power 0 and no other sampling option",
                          op, name, to_string(o.consume)));
}

void Sampler::sample_consume(View view, std::size_t batch_size, std::size_t length, double power, Rng& rng,
                             SampleBatch& out, const SampleOptions& o) {
  lease_.check_process("sample");
  const SampleOptions plain{.consume = o.consume, .consume_timeout_ms = o.consume_timeout_ms};
  const bool others = o.episodes != plain.episodes || o.period != 1 || o.min_steps != 0 || o.prioritized ||
                      o.recency_half_life != 0.0 || !o.mixture.empty() || o.max_staleness.has_value();
  if (!buffer_->consuming_queue() || view != View::replay || power != 0.0 || others) check_consume("sample", o);
  check_batch_shape(*buffer_, "sample", batch_size, length);
  Segment& seg = segment_of(*buffer_);
  if (batch_size > seg.num_envs() * seg.capacity()) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot consume {} rows of '{}': it holds at most {} steps ({} envs x {})", batch_size,
                            buffer_->name(), seg.num_envs() * seg.capacity(), seg.num_envs(), seg.capacity()));
  }
  out.prepare(buffer_->schema(), batch_size, length, loads_seen());
  out.episode_fields_ = buffer_->episode_fields();
  claim_consumed(batch_size, length, o, rng);
  ConsumeState& c = scratch_->consume;
  layout::QueueLearner& q = seg.queue_learner(rank_);
  try {
    copy_consumed(out, length);
  } catch (...) {  // nothing is returned: the claims go back
    for (const ConsumeState::Row& r : c.rows) detail::give_back(*r.word, r.start);
    detail::end_claims(q);
    q.returned.fetch_add(c.rows.size(), std::memory_order_relaxed);
    throw;
  }
  const std::size_t n = c.rows.size();  // batch_size, or fewer (a partial batch: claim_consumed)
  out.rows_ = n;
  // Delivered: the call word's store; then the words, the frontiers, and the writers blocked on them.
  detail::commit(q, n);
  for (const ConsumeState::Row& r : c.rows) detail::deliver(*r.word, r.start);
  for (const ConsumeState::Row& r : c.rows) {
    if (seg.queue_env(r.env).frontier.load(std::memory_order_relaxed) == r.start) {
      detail::raise_frontier(seg, r.env, c.hi[r.env]);
    }
  }
  detail::notify(detail::queue_writer_wake(seg.queue_control()), detail::coarse_monotonic_ns());
  if (c.refused != 0) q.refused.fetch_add(std::exchange(c.refused, 0), std::memory_order_relaxed);
  out.selector_rows_ = {};
  out.policy_version_ = 0;
  out.policy_floor_ = std::nullopt;
  std::vector<uint64_t>& ages = scratch_->rounds.ages;
  if (ages.size() < n) ages.resize(n);
  for (std::size_t i = 0; i < n; ++i) ages[i] = c.rows[i].age;
  sampler_parts::count_call(seg, scratch_->slot, {ages.data(), n}, /*sample=*/true);
}

void Sampler::claim_consumed(std::size_t rows, std::size_t length, const SampleOptions& o, Rng& rng) {
  Segment& seg = segment_of(*buffer_);
  ConsumeState& c = scratch_->consume;
  layout::QueueLearner& q = seg.queue_learner(rank_);
  const auto deadline = deadline_after_ms(o.consume_timeout_ms);
  bool waited = false;
  std::atomic<uint64_t>& blocks = seg.queue_control().writers_blocked;
  for (;;) {
    c.reset(static_cast<std::size_t>(seg.num_envs()), rows);
    // acquire: pairs with a blocked writer's release increment, after it marked its env (writer_held sees the mark).
    const uint64_t blocks_before = blocks.load(std::memory_order_acquire);
    detail::begin_claims(q);
    c.heads_sum = load_windows(seg, c);
    if (o.consume == Consume::fifo) {
      claim_fifo(seg, c, rank_, rows, length);
    } else {
      claim_random(seg, c, rank_, rows, length, rng);
    }
    if (c.rows.size() == rows) return;
    // A partial batch: a writer waits for a step no call has delivered, and the steps still free may be all that
    // come before a delivery (the writer may wait for one of them); the call delivers what it claimed.
    if (!c.rows.empty() && writer_held(seg)) return;
    // Too few free starts: give the claims back (holding them while waiting could keep the writers they block from
    // bringing more), then wait for writers, or for the other learners' calls to end.
    for (const ConsumeState::Row& r : c.rows) detail::give_back(*r.word, r.start);
    detail::end_claims(q);
    if (!c.rows.empty()) q.returned.fetch_add(c.rows.size(), std::memory_order_relaxed);
    bool repaired = false;  // a killed learner's claims, given back (or delivered): claim again at once
    for (uint64_t dead = c.pending_slots & ~(uint64_t{1} << rank_); dead != 0; dead &= dead - 1) {
      repaired |= detail::repair_dead_claimer(seg, static_cast<uint64_t>(std::countr_zero(dead)));
    }
    if (repaired) continue;
    if (!waited) q.waits.fetch_add(1, std::memory_order_relaxed);
    waited = true;
    const uint64_t free_seen = c.rows.size();
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      throw Error(Errc::empty_view,
                  fmt::format("cannot consume {} rows of '{}': {} undelivered steps were free to claim{} after {} ms; "
                              "nothing was delivered",
                              rows, buffer_->name(), free_seen,
                              c.pending_slots != 0 ? " (others were claimed by calls in progress)" : "",
                              o.consume_timeout_ms));
    }
    const auto until = c.pending_slots != 0 ? std::min(deadline, now + std::chrono::milliseconds(kShortWaitMs)) : deadline;
    const uint64_t before = c.heads_sum;
    detail::sleep_until(detail::learner_wake(seg.global_control(), scratch_->slot.waiters), until, [&] {
      uint64_t heads = 0;
      for (uint64_t e = 0; e < seg.num_envs(); ++e) heads += detail::load_head(seg.env_control(e));
      return heads != before || blocks.load(std::memory_order_acquire) != blocks_before;
    });
  }
}

void Sampler::copy_consumed(SampleBatch& out, std::size_t length) {
  Scratch& z = *scratch_;
  ConsumeState& c = z.consume;
  sampler_parts::ChunkGather& g = z.gather;
  uint32_t round = 0;
  c.failed.clear();
  for (std::size_t i = 0; i < c.rows.size(); ++i) c.failed.push_back(static_cast<uint32_t>(i));
  std::vector<uint32_t>& to_copy = c.to_copy;
  while (!c.failed.empty()) {
    if (round++ > options_.max_retry_rounds) {
      throw Error(Errc::contended, fmt::format("cannot consume from '{}': {} claimed row(s) failed their copy {} times",
                                               buffer_->name(), c.failed.size(), options_.max_retry_rounds));
    }
    to_copy.swap(c.failed);
    c.failed.clear();
    for (std::size_t k = 0; k < to_copy.size();) {
      g.begin(length);
      for (std::size_t n = 0; n < sampler_parts::kGatherRows && k < to_copy.size(); ++n, ++k) {
        const uint32_t row = to_copy[k];
        const ConsumeState::Row& r = c.rows[row];
        out.env_ids_[row] = r.env;
        out.starts_[row] = r.start;
        out.weights_[row] = 1.0f;
        g.add(r.env, r.start, r.slot, r.steps, row);
      }
      g.run(out.field_ptr_.data(), out.mask_, c.failed, z.stats);
    }
  }
}

}  // namespace shmreplay
