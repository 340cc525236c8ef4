// lib/reanalyse.cpp: the Reanalyser (shmreplay/reanalyse.hpp): argument checks and the worker slot's life; the walk
// itself is detail/protocol/walk.cpp.
#include "shmreplay/reanalyse.hpp"

#include <unistd.h>

#include <chrono>
#include <utility>

#include <fmt/format.h>

#include "detail/protocol/lease.hpp"
#include "detail/protocol/walk.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/wait.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay {

namespace {

detail::WalkHeld held_of(const ReanalyseChunk& c) noexcept {
  return {c.env, c.first_step, c.end_step, c.chunk, c.pass};
}

}  // namespace

Reanalyser::Reanalyser(Buffer& buffer) : buffer_(&buffer), pid_(static_cast<uint64_t>(::getpid())) {
  const Segment& seg = segment_of(buffer);
  if (seg.reanalyse_chunk() == 0) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot attach a reanalyse worker to '{}': it has no walk (create it with "
                            "reanalyse_chunk, steps per chunk)",
                            buffer.name()));
  }
  if (buffer.read_only()) {
    throw Error(Errc::read_only, fmt::format("cannot attach a reanalyse worker to '{}': it is opened read-only",
                                             buffer.name()));
  }
  lease_ = detail::self_lease_word();
  const std::optional<uint64_t> slot = detail::walk_attach(seg, lease_);
  if (!slot) {
    throw Error(Errc::lease_held,
                fmt::format("cannot attach a reanalyse worker to '{}': all {} worker slots are held by live processes",
                            buffer.name(), layout::kMaxWalkers));
  }
  slot_ = *slot;
}

Reanalyser::Reanalyser(Reanalyser&& other) noexcept
    : buffer_(std::exchange(other.buffer_, nullptr)), slot_(other.slot_), lease_(other.lease_), pid_(other.pid_) {}

Reanalyser& Reanalyser::operator=(Reanalyser&& other) noexcept {
  if (this != &other) {
    release();
    buffer_ = std::exchange(other.buffer_, nullptr);
    slot_ = other.slot_;
    lease_ = other.lease_;
    pid_ = other.pid_;
  }
  return *this;
}

Reanalyser::~Reanalyser() { release(); }

void Reanalyser::release() noexcept {
  // A forked child's copy leaves the slot to the parent; so does a moved-from object.
  if (buffer_ == nullptr || static_cast<uint64_t>(::getpid()) != pid_) return;
  detail::walk_detach(segment_of(*buffer_), slot_, lease_);
  buffer_ = nullptr;
}

void Reanalyser::check_process(const char* op) const {
  if (buffer_ == nullptr) {
    throw Error(Errc::invalid_argument, fmt::format("cannot {}: the Reanalyser was moved from", op));
  }
  if (static_cast<uint64_t>(::getpid()) != pid_) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot {} on '{}' from pid {}: this Reanalyser's worker slot {} belongs to pid {} (make "
                            "a Reanalyser in each process)",
                            op, buffer_->name(), ::getpid(), slot_, pid_));
  }
}

std::optional<ReanalyseChunk> Reanalyser::try_next(ReanalyseOrder order) {
  check_process("take the next reanalyse chunk");
  const Segment& seg = segment_of(*buffer_);
  if (order == ReanalyseOrder::largest_return && !seg.episode_fields().reward) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot take the next reanalyse chunk of '{}' in order largest_return: it has no reward "
                            "field (create it with episodes naming one)",
                            buffer_->name()));
  }
  // Read before the claim: a load after it gives a newer generation, and the chunk's write-backs are refused.
  // acquire: pairs with the load's release increment, after its rewrite and walk_reset: a claim made after reading
  // a load's generation is of the loaded steps.
  const uint64_t loads = seg.global_control().load_generation.load(std::memory_order_acquire);
  const std::optional<detail::WalkHeld> h = detail::walk_claim_next(seg, slot_, lease_, order);
  if (!h) return std::nullopt;
  return ReanalyseChunk{h->env, h->first_step, h->end_step, h->chunk, h->pass, loads};
}

std::optional<ReanalyseChunk> Reanalyser::next(ReanalyseOrder order, int64_t timeout_ms) {
  if (std::optional<ReanalyseChunk> c = try_next(order)) return c;  // checks the process and the order first
  const auto deadline = timeout_ms < 0 ? std::chrono::steady_clock::time_point::max()
                                       : deadline_after_ms(static_cast<uint64_t>(timeout_ms));
  std::optional<ReanalyseChunk> got;
  // Sleeps on the walk's futex word between scans; woken by a writer that filled a chunk, a completion, a
  // give-back or a repair, and re-scans by itself every re-check period (50 ms), which is also when it meets (and
  // repairs) a dead worker's claims. The scan is the condition: it claims what it finds.
  detail::sleep_until(detail::walk_wake(segment_of(*buffer_), slot_), deadline, [&] {
    got = try_next(order);
    return got.has_value();
  });
  return got;
}

bool Reanalyser::complete(const ReanalyseChunk& chunk, uint64_t target_version) {
  check_process("complete a reanalyse chunk");
  if (target_version == UINT64_MAX) {
    throw Error(Errc::invalid_argument, fmt::format("cannot complete a reanalyse chunk of '{}': target_version is "
                                                    "2^64 - 1, expected below it",
                                                    buffer_->name()));
  }
  if (chunk.env >= buffer_->num_envs()) return false;
  return detail::walk_complete(segment_of(*buffer_), slot_, held_of(chunk), target_version);
}

bool Reanalyser::give_back(const ReanalyseChunk& chunk) {
  check_process("give back a reanalyse chunk");
  if (chunk.env >= buffer_->num_envs()) return false;
  return detail::walk_give_back(segment_of(*buffer_), slot_, held_of(chunk));
}

uint64_t Reanalyser::pass() const noexcept {
  return buffer_ == nullptr ? 0 : segment_of(*buffer_).walk_control().pass.load(std::memory_order_relaxed);
}

std::optional<uint64_t> Reanalyser::newest_version() const noexcept {
  if (buffer_ == nullptr) return std::nullopt;
  const uint64_t v = segment_of(*buffer_).walk_control().newest_version.load(std::memory_order_relaxed);
  if (v == 0) return std::nullopt;
  return v - 1;
}

}  // namespace shmreplay
