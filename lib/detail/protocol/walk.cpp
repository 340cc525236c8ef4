// detail/protocol/walk.cpp: the reanalyse walk's claim, completion and repair (walk.hpp; docs/design/reanalyse.md).
#include "detail/protocol/walk.hpp"

#include <array>
#include <tuple>

#include "detail/elements.hpp"
#include "detail/os/process.hpp"
#include "detail/protocol/lease.hpp"

namespace shmreplay::detail {
namespace {

using layout::walk_claim;
using layout::walk_claim_chunk;
using layout::walk_claim_holder;
using layout::walk_done;
using layout::walk_done_lap;
using layout::walk_done_pass;
using layout::WalkChunk;

constexpr auto kRelaxed = std::memory_order_relaxed;

LeaseWords worker_lease_words(layout::WalkWorker& w) noexcept {
  return {w.lease, w.start_ticks, w.since_ns, w.takeovers};
}

uint64_t stored_from(uint64_t head, uint64_t capacity) noexcept { return head > capacity ? head - capacity : 0; }

// A due chunk found by the scan, with what the orders compare.
struct Candidate {
  uint64_t env = 0;
  uint64_t chunk = 0;
  uint64_t word = 0;     // the claim word the scan read: the CAS's expected value
  uint64_t version = 0;  // WalkChunk::version as read (0: never reanalysed)
  double ret = 0.0;      // the reward sum (largest_return only)
};

bool better(ReanalyseOrder order, const Candidate& a, const Candidate& b) noexcept {
  switch (order) {
    case ReanalyseOrder::oldest_version:
      return std::tie(a.version, a.chunk, a.env) < std::tie(b.version, b.chunk, b.env);
    case ReanalyseOrder::largest_return:
      if (a.ret != b.ret) return a.ret > b.ret;
      return std::tie(a.chunk, a.env) < std::tie(b.chunk, b.env);
    default: return std::tie(a.chunk, a.env) < std::tie(b.chunk, b.env);
  }
}

// The reward field's sum over steps [first, end) of `env`: unsynchronised reads (a writer may be overwriting the
// oldest of them), good enough for an order, never a guarantee.
double chunk_return(const Segment& seg, uint64_t env, uint64_t first, uint64_t end) noexcept {
  const std::optional<std::size_t> f = seg.episode_fields().reward;
  if (!f) return 0.0;
  const Field& field = seg.schema()[*f];
  const uint64_t bytes = field.bytes();
  const std::byte* data = seg.field_data(*f) + env * seg.capacity() * bytes;
  double sum = 0.0;
  for (uint64_t s = first; s < end; ++s) sum += element_as_double(field.dtype, data + (s % seg.capacity()) * bytes);
  return sum;
}

// What one scan over every env's stored full chunks found.
struct Scan {
  std::optional<Candidate> best;
  bool any_full = false;  // some full chunk is stored
  bool any_held = false;  // some is held by a live worker
};

// Whether worker slot `holder` (a claim word's holder - 1) is held by a live process. When its process is dead (or
// the slot is free while a claim names it), takes the slot's lease, repairs it and lets the lease go: false then.
bool holder_alive(const Segment& seg, uint64_t holder, uint64_t me) noexcept {
  layout::WalkWorker& w = seg.walk_worker(holder);
  const LeaseResult r = try_take_lease_word(w.lease, me);
  if (r.outcome == LeaseOutcome::held_alive || r.outcome == LeaseOutcome::held_by_us) return true;
  walk_repair_slot(seg, holder);
  if (r.outcome == LeaseOutcome::taken_over) w.takeovers.fetch_add(1, kRelaxed);
  release_lease_word(w.lease, me);
  return false;
}

Scan scan(const Segment& seg, uint64_t me, uint64_t pass, ReanalyseOrder order) noexcept {
  Scan out;
  const uint64_t c = seg.reanalyse_chunk();
  const uint64_t slots = seg.walk_slots();
  for (uint64_t env = 0; env < seg.num_envs(); ++env) {
    // acquire: pairs with the writer's release store of head (the steps below it are published).
    const uint64_t head = seg.env_control(env).head.load(std::memory_order_acquire);
    const uint64_t tail = stored_from(head, seg.capacity());
    WalkChunk* chunks = seg.walk_chunks(env);
    for (uint64_t k = tail / c; k < head / c; ++k) {  // the full chunks with a stored step
      out.any_full = true;
      WalkChunk& slot = chunks[k % slots];
      // acquire: pairs with the release CAS of walk_complete / walk_give_back / the repair that last let the
      // claim go, so that done and version below are that holder's.
      uint64_t w = slot.claim.load(std::memory_order_acquire);
      if (walk_claim_chunk(w) > k) continue;  // a newer chunk took the slot: k was overwritten meanwhile
      if (walk_claim_holder(w) != 0) {  // held: by a live worker (this chunk or an overwritten one), or repaired
        if (holder_alive(seg, walk_claim_holder(w) - 1, me)) {
          out.any_held = true;
          continue;
        }
        w = slot.claim.load(std::memory_order_acquire);  // after the repair (the same acquire pairing)
        if (walk_claim_chunk(w) > k || walk_claim_holder(w) != 0) continue;
      }
      Candidate cand{env, k, w, 0, 0.0};
      const uint64_t done = slot.done.load(kRelaxed);
      if (walk_claim_chunk(w) == k && done != 0 && walk_done_lap(done) == k / slots) {
        if (walk_done_pass(done) == (pass & 0xffffffffu)) continue;  // done in this pass
        cand.version = slot.version.load(kRelaxed);
      }
      if (order == ReanalyseOrder::largest_return) {
        cand.ret = chunk_return(seg, env, std::max(k * c, tail), (k + 1) * c);
      }
      if (!out.best || better(order, cand, *out.best)) out.best = cand;
    }
  }
  return out;
}

// Lets a claim we hold go, unchanged otherwise. release: pairs with the acquire of the next claimer's load or CAS.
bool let_go(WalkChunk& slot, uint64_t chunk, uint64_t holder) noexcept {
  uint64_t held = walk_claim(chunk, holder);
  return slot.claim.compare_exchange_strong(held, walk_claim(chunk, 0), std::memory_order_release, kRelaxed);
}

}  // namespace

std::optional<uint64_t> walk_attach(const Segment& seg, uint64_t me) noexcept {
  for (uint64_t s = 0; s < layout::kMaxWalkers; ++s) {
    layout::WalkWorker& w = seg.walk_worker(s);
    const LeaseResult r = try_take_lease(worker_lease_words(w), me);  // counts a takeover itself
    if (r.outcome == LeaseOutcome::taken) return s;
    if (r.outcome == LeaseOutcome::taken_over) {
      walk_repair_slot(seg, s);  // the dead worker's claims go before ours can be made under the same slot
      return s;
    }
  }
  return std::nullopt;
}

void walk_detach(const Segment& seg, uint64_t slot, uint64_t me) noexcept {
  // Our own claims (counted as given back): the Reanalyser gave back what it held; this is the safety net.
  walk_repair_slot(seg, slot, /*own=*/true);
  release_lease_word(seg.walk_worker(slot).lease, me);
}

std::optional<WalkHeld> walk_claim_next(const Segment& seg, uint64_t slot, uint64_t me, ReanalyseOrder order) {
  layout::WalkControl& control = seg.walk_control();
  const uint64_t c = seg.reanalyse_chunk();
  for (int rounds = 0; rounds < 64; ++rounds) {
    // acquire: pairs with the acq_rel CAS that opened the pass.
    const uint64_t pass = control.pass.load(std::memory_order_acquire);
    const Scan found = scan(seg, me, pass, order);
    if (!found.best) {
      if (!found.any_full || found.any_held) return std::nullopt;
      uint64_t expected = pass;  // every stored full chunk is done in this pass: open the next one
      control.pass.compare_exchange_strong(expected, pass + 1, std::memory_order_acq_rel, std::memory_order_acquire);
      continue;
    }
    const Candidate& cand = *found.best;
    WalkChunk& chunk_slot = seg.walk_chunks(cand.env)[cand.chunk % seg.walk_slots()];
    uint64_t expected = cand.word;
    // acq_rel: acquire pairs with the release that let the claim go (its holder's done_* words are visible);
    // release pairs with the acquire of a claimer or repairer that reads our claim.
    if (!chunk_slot.claim.compare_exchange_strong(expected, walk_claim(cand.chunk, slot + 1),
                                                  std::memory_order_acq_rel, kRelaxed)) {
      continue;  // another worker took it (or a newer chunk the slot): scan again
    }
    // The pass after the claim: a chunk due in the pass the scan read is due in any later one, and its completion
    // must count in the pass it is handed in (docs/design/reanalyse.md, "Exactly once per pass").
    const uint64_t now = control.pass.load(std::memory_order_acquire);
    const uint64_t done_word = chunk_slot.done.load(kRelaxed);
    const bool done = done_word == walk_done(cand.chunk / seg.walk_slots(), now) &&
                      layout::walk_claim_chunk(cand.word) == cand.chunk;
    const uint64_t head = seg.env_control(cand.env).head.load(std::memory_order_acquire);
    const uint64_t tail = stored_from(head, seg.capacity());
    if (done || (cand.chunk + 1) * c <= tail) {  // done meanwhile, or overwritten since the scan
      let_go(chunk_slot, cand.chunk, slot + 1);
      continue;
    }
    seg.walk_env(cand.env).handed.fetch_add(1, kRelaxed);
    seg.walk_worker(slot).handed.fetch_add(1, kRelaxed);
    return WalkHeld{cand.env, std::max(cand.chunk * c, tail), (cand.chunk + 1) * c, cand.chunk, now};
  }
  return std::nullopt;  // lost every race of 64 scans: the caller asks again
}

bool walk_complete(const Segment& seg, uint64_t slot, const WalkHeld& held, uint64_t target_version) noexcept {
  WalkChunk& chunk_slot = seg.walk_chunks(held.env)[held.chunk % seg.walk_slots()];
  // Nobody but a repair of our (dead) slot moves a held claim, so a live holder still holds it.
  if (chunk_slot.claim.load(kRelaxed) != walk_claim(held.chunk, slot + 1)) return false;
  const uint64_t head = seg.env_control(held.env).head.load(std::memory_order_acquire);
  const bool gone = held.end_step <= stored_from(head, seg.capacity());
  if (!gone) {
    chunk_slot.version.store(target_version + 1, kRelaxed);
    chunk_slot.done.store(walk_done(held.chunk / seg.walk_slots(), held.pass), kRelaxed);  // the completion
  }
  let_go(chunk_slot, held.chunk, slot + 1);  // its release publishes version and done to the next claimer
  if (gone) {  // every step of the chunk was overwritten: nothing to record
    seg.walk_env(held.env).stale.fetch_add(1, kRelaxed);
    walk_notify(seg);  // nothing held may now mean the pass can end
    return false;
  }
  layout::WalkControl& control = seg.walk_control();
  uint64_t newest = control.newest_version.load(kRelaxed);
  while (newest < target_version + 1 &&
         !control.newest_version.compare_exchange_weak(newest, target_version + 1, kRelaxed, kRelaxed)) {
  }
  seg.walk_env(held.env).completed.fetch_add(1, kRelaxed);
  seg.walk_worker(slot).completed.fetch_add(1, kRelaxed);
  walk_notify(seg);  // nothing held may now mean the pass can end: the next pass's chunks are due
  return true;
}

bool walk_give_back(const Segment& seg, uint64_t slot, const WalkHeld& held) noexcept {
  if (!let_go(seg.walk_chunks(held.env)[held.chunk % seg.walk_slots()], held.chunk, slot + 1)) return false;
  seg.walk_env(held.env).given_back.fetch_add(1, kRelaxed);
  walk_notify(seg);  // the chunk is due again
  return true;
}

uint64_t walk_repair_slot(const Segment& seg, uint64_t slot, bool own) noexcept {
  // A worker killed while it slept in next() left its sleeper counted: take it back, or every push call of every
  // writer would make a futex system call for nobody (the learners' repair, wake.hpp's forget_waiters).
  forget_waiters(seg.walk_control().waiters, seg.walk_worker(slot).waiters);
  uint64_t let = 0;
  for (uint64_t env = 0; env < seg.num_envs(); ++env) {
    WalkChunk* chunks = seg.walk_chunks(env);
    uint64_t env_let = 0;
    for (uint64_t i = 0; i < seg.walk_slots(); ++i) {
      const uint64_t w = chunks[i].claim.load(kRelaxed);
      // A dead holder's completion is its done store: made or not, the claim only has to go.
      if (walk_claim_holder(w) == slot + 1 && let_go(chunks[i], walk_claim_chunk(w), slot + 1)) ++env_let;
    }
    if (env_let != 0) (own ? seg.walk_env(env).given_back : seg.walk_env(env).rehanded).fetch_add(env_let, kRelaxed);
    let += env_let;
  }
  if (let != 0 && !own) seg.walk_control().repairs.fetch_add(1, kRelaxed);
  if (let != 0) walk_notify(seg);
  return let;
}

void walk_reset(const Segment& seg) noexcept {
  for (uint64_t env = 0; env < seg.num_envs(); ++env) {
    WalkChunk* chunks = seg.walk_chunks(env);
    for (uint64_t i = 0; i < seg.walk_slots(); ++i) {
      chunks[i].done.store(0, kRelaxed);
      chunks[i].version.store(0, kRelaxed);
      // release: pairs with the acquire of the next scan's load, which then reads the zeros above.
      chunks[i].claim.store(0, std::memory_order_release);
    }
  }
  seg.walk_control().newest_version.store(0, kRelaxed);
  walk_notify(seg);  // the loaded steps' chunks are due
}

void walk_save_versions(const Segment& seg, uint64_t env, uint64_t first_step, uint64_t head,
                        std::vector<uint64_t>& out) {
  out.clear();
  const uint64_t c = seg.reanalyse_chunk();
  const WalkChunk* chunks = seg.walk_chunks(env);
  for (uint64_t k = std::min(first_step / c, head / c); k < head / c; ++k) {
    const WalkChunk& slot = chunks[k % seg.walk_slots()];
    const uint64_t done = slot.done.load(kRelaxed);
    const bool mine = walk_claim_chunk(slot.claim.load(kRelaxed)) == k;  // not a newer chunk's slot now
    out.push_back(mine && done != 0 && walk_done_lap(done) == k / seg.walk_slots() ? slot.version.load(kRelaxed) : 0);
  }
}

void walk_restore_versions(const Segment& seg, uint64_t env, uint64_t first_step, uint64_t head,
                           const std::vector<uint64_t>& versions) noexcept {
  const uint64_t c = seg.reanalyse_chunk();
  const uint64_t pass = seg.walk_control().pass.load(kRelaxed);
  WalkChunk* chunks = seg.walk_chunks(env);
  const uint64_t first = std::min(first_step / c, head / c);
  for (uint64_t k = first; k < head / c && k - first < versions.size(); ++k) {
    const uint64_t v = versions[k - first];
    if (v == 0) continue;
    WalkChunk& slot = chunks[k % seg.walk_slots()];
    slot.version.store(v, kRelaxed);
    slot.done.store(walk_done(k / seg.walk_slots(), pass), kRelaxed);
    // release: pairs with the acquire of the next scan's load, which then reads the words above.
    slot.claim.store(walk_claim(k, 0), std::memory_order_release);
  }
}

void walk_restored(const Segment& seg) noexcept {
  uint64_t newest = 0;
  for (uint64_t env = 0; env < seg.num_envs(); ++env) {
    const WalkChunk* chunks = seg.walk_chunks(env);
    for (uint64_t i = 0; i < seg.walk_slots(); ++i) {
      if (chunks[i].done.load(kRelaxed) != 0) newest = std::max(newest, chunks[i].version.load(kRelaxed));
    }
  }
  layout::WalkControl& control = seg.walk_control();
  control.newest_version.store(newest, kRelaxed);
  // acq_rel: as the scan's CAS that opens a pass: the restored completions (in the pass before) are due in it.
  control.pass.fetch_add(1, std::memory_order_acq_rel);
  walk_notify(seg);
}

void walk_fresh_ranges(const Segment& seg, std::vector<WalkRange>& out) {
  out.clear();
  if (seg.reanalyse_chunk() == 0) return;
  const uint64_t newest = seg.walk_control().newest_version.load(kRelaxed);
  if (newest == 0) return;
  const uint64_t c = seg.reanalyse_chunk();
  for (uint64_t env = 0; env < seg.num_envs(); ++env) {
    const uint64_t head = seg.env_control(env).head.load(kRelaxed);
    const uint64_t tail = stored_from(head, seg.capacity());
    const WalkChunk* chunks = seg.walk_chunks(env);
    for (uint64_t k = tail / c; k < head / c; ++k) {
      const WalkChunk& slot = chunks[k % seg.walk_slots()];
      const uint64_t done = slot.done.load(kRelaxed);
      if (done == 0 || walk_done_lap(done) != k / seg.walk_slots() || slot.version.load(kRelaxed) != newest) continue;
      out.push_back({env, std::max(k * c, tail), (k + 1) * c});
    }
  }
}

std::array<uint64_t, kWalkAgeBuckets> walk_age_steps(const Segment& seg, uint64_t env) noexcept {
  std::array<uint64_t, kWalkAgeBuckets> out{};
  const uint64_t c = seg.reanalyse_chunk();
  const uint64_t newest = seg.walk_control().newest_version.load(kRelaxed);
  const uint64_t head = seg.env_control(env).head.load(kRelaxed);
  const uint64_t tail = stored_from(head, seg.capacity());
  const WalkChunk* chunks = seg.walk_chunks(env);
  for (uint64_t k = tail / c; k < head / c; ++k) {
    const WalkChunk& slot = chunks[k % seg.walk_slots()];
    const uint64_t steps = (k + 1) * c - std::max(k * c, tail);
    const uint64_t done = slot.done.load(kRelaxed);
    const uint64_t v = done != 0 && walk_done_lap(done) == k / seg.walk_slots() ? slot.version.load(kRelaxed) : 0;
    if (v == 0) {
      out[0] += steps;
      continue;
    }
    const uint64_t age = newest > v ? newest - v : 0;
    out[age == 0 ? 1 : age == 1 ? 2 : age < 4 ? 3 : age < 8 ? 4 : 5] += steps;
  }
  return out;
}

}  // namespace shmreplay::detail
