// detail/protocol/journal.cpp: the journal section's lease, publication and reading (journal.hpp).
#include "detail/protocol/journal.hpp"

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/lease.hpp"

namespace shmreplay::detail {
namespace {

LeaseWords journal_lease_words(layout::JournalControl& c) noexcept {
  return {c.lease, c.start_ticks, c.since_ns, c.takeovers};
}

uint64_t relaxed(const std::atomic<uint64_t>& w) noexcept { return w.load(std::memory_order_relaxed); }

}  // namespace

std::string take_journal_lease(Segment& seg, const std::string& name, uint64_t bound_ns) {
  layout::JournalControl& c = seg.journal_control();
  const LeaseResult r = try_take_lease(journal_lease_words(c), self_lease_word());
  switch (r.outcome) {
    case LeaseOutcome::taken:
    case LeaseOutcome::taken_over:
      // The newest link is this journal's to name: a predecessor's may be of another directory. Until the first
      // link nothing counts as durable (a reader sees link 0 and heads of 0).
      c.link_seq.store(0, std::memory_order_relaxed);
      for (uint64_t e = 0; e < seg.num_envs(); ++e) seg.journal_head(e).store(0, std::memory_order_relaxed);
      c.durable_ns.store(0, std::memory_order_relaxed);
      c.done_ns.store(0, std::memory_order_relaxed);
      c.link_ns.store(0, std::memory_order_relaxed);
      c.bound_ns.store(bound_ns, std::memory_order_relaxed);
      return {};
    case LeaseOutcome::held_by_us:
      return fmt::format("cannot journal '{}': this process ({}) runs a journal of it already; a buffer has one "
                         "journal at a time",
                         name, holder_text(r.holder_lease, r.holder_start_ticks));
    case LeaseOutcome::held_alive: break;
  }
  const uint64_t since = relaxed(c.since_ns);
  const uint64_t now = realtime_ns();
  return fmt::format("cannot journal '{}': its journal runs in {}, for {:.1f} s; a buffer has one journal at a time "
                     "(stop that one first)",
                     name, holder_text(r.holder_lease, r.holder_start_ticks),
                     now > since ? static_cast<double>(now - since) * 1e-9 : 0.0);
}

void release_journal_lease(Segment& seg) noexcept {
  release_lease(journal_lease_words(seg.journal_control()), self_lease_word());
}

void publish_durable_link(Segment& seg, const DurableLink& link) noexcept {
  layout::JournalControl& c = seg.journal_control();
  for (uint64_t e = 0; e < link.heads.size() && e < seg.num_envs(); ++e) {
    seg.journal_head(e).store(link.heads[e], std::memory_order_relaxed);
  }
  c.durable_ns.store(link.durable_ns, std::memory_order_relaxed);
  c.done_ns.store(link.done_ns, std::memory_order_relaxed);
  c.link_ns.store(link.link_ns, std::memory_order_relaxed);
  if (link.lag_ns > relaxed(c.max_lag_ns)) c.max_lag_ns.store(link.lag_ns, std::memory_order_relaxed);
  c.links.fetch_add(1, std::memory_order_relaxed);
  if (link.late) c.bound_misses.fetch_add(1, std::memory_order_relaxed);
  // release: pairs with read_journal's acquire, so a reader of this number reads the heads and times above.
  c.link_seq.store(link.link_seq, std::memory_order_release);
}

void count_journal_failure(Segment& seg) noexcept {
  seg.journal_control().failures.fetch_add(1, std::memory_order_relaxed);
}

JournalReading read_journal(const Segment& seg) noexcept {
  const layout::JournalControl& c = seg.journal_control();
  JournalReading r;
  r.link_seq = c.link_seq.load(std::memory_order_acquire);  // pairs with publish_durable_link's release
  r.lease = relaxed(c.lease);
  r.start_ticks = relaxed(c.start_ticks);
  r.since_ns = relaxed(c.since_ns);
  r.takeovers = relaxed(c.takeovers);
  r.bound_ns = relaxed(c.bound_ns);
  r.links = relaxed(c.links);
  r.failures = relaxed(c.failures);
  r.bound_misses = relaxed(c.bound_misses);
  r.durable_ns = relaxed(c.durable_ns);
  r.done_ns = relaxed(c.done_ns);
  r.link_ns = relaxed(c.link_ns);
  r.max_lag_ns = relaxed(c.max_lag_ns);
  return r;
}

uint64_t journal_durable_head(const Segment& seg, uint64_t env) noexcept { return relaxed(seg.journal_head(env)); }

}  // namespace shmreplay::detail
