// lib/journal.cpp: the journal role (shmreplay/journal.hpp): its lease, the loop that writes a link whenever the
// schedule (journal_schedule.hpp) says the bound needs one, the link itself (save_link, then the publication in the
// journal section: detail/protocol/journal.hpp), and its thread.
#include "shmreplay/journal.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "detail/os/process.hpp"
#include "detail/protocol/journal.hpp"
#include "detail/storage/cold_files.hpp"
#include "journal_schedule.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay {

struct Journal::State {
  explicit State(Buffer b) : buffer(std::move(b)) {}
  Buffer buffer;
  std::string dir;
  JournalOptions options;
  bool leased = false;
  std::thread thread;
  std::atomic<bool> stop_flag{false};
  std::exception_ptr thread_error;
  mutable std::mutex stats_mutex;
  JournalStats stats;
  std::unique_ptr<detail::JournalSchedule> schedule;

  Segment& seg() { return segment_of(buffer); }
  double now_s() const { return static_cast<double>(detail::monotonic_ns()) * 1e-9; }
  bool pending();
  JournalLink link(bool last);
  void loop(const std::atomic<bool>& stop_flag);
};

namespace {

void check_options(const JournalOptions& o, const std::string& dir) {
  if (!(o.bound_s >= kJournalMinBoundS && o.bound_s <= kJournalMaxBoundS)) {
    throw Error(Errc::invalid_argument, fmt::format("journal of '{}': the bound is {} s, expected {} to {} s", dir,
                                                    o.bound_s, kJournalMinBoundS, kJournalMaxBoundS));
  }
  if (o.keep == 0) throw Error(Errc::invalid_argument, fmt::format("journal of '{}': keep is 0, expected 1 or more", dir));
  if (!(o.compact_ratio >= 1.0)) {
    throw Error(Errc::invalid_argument,
                fmt::format("journal of '{}': compact_ratio is {}, expected at least 1", dir, o.compact_ratio));
  }
  if (dir.empty()) throw Error(Errc::invalid_argument, "journal: the chain directory is empty");
}

// An error of the directory itself, which every later link would meet again (save --every's rule).
bool ends_the_journal(const Error& e) {
  for (const Errc c : {Errc::already_exists, Errc::lease_held, Errc::permission_denied, Errc::invalid_argument}) {
    if (e.code() == make_error_code(c)) return true;
  }
  return false;
}

}  // namespace

// Whether some env has published a step the newest durable link lacks.
bool Journal::State::pending() {
  const Segment& s = seg();
  for (uint64_t e = 0; e < s.num_envs(); ++e) {
    // acquire: pairs with the writer's release of head; only a count is compared, no step is read here.
    if (s.env_control(e).head.load(std::memory_order_acquire) > detail::journal_durable_head(s, e)) return true;
  }
  return false;
}

JournalLink Journal::State::link(bool last) {
  ChainOptions chain;
  chain.keep = options.keep;
  chain.compact_ratio = options.compact_ratio;
  chain.allow_other_owner = options.allow_other_owner;
  JournalLink out;
  out.last = last;
  const double started = now_s();
  const uint64_t started_ns = detail::realtime_ns();
  try {
    const LinkResult r = save_link(buffer, dir, chain);
    out.seconds = now_s() - started;
    out.link_seq = r.info.link_seq;
    out.steps = r.info.total_steps;
    out.file_bytes = r.info.file_bytes;
    out.whole = r.whole;
    out.lag_s = schedule->link_done(started, out.seconds, out.whole);
    out.late = out.lag_s > options.bound_s;
    detail::DurableLink d{out.link_seq, started_ns, detail::realtime_ns(),
                          static_cast<uint64_t>(std::llround(out.seconds * 1e9)),
                          static_cast<uint64_t>(std::llround(std::max(0.0, out.lag_s) * 1e9)), out.late, {}};
    for (const CheckpointEnv& e : r.info.envs) d.heads.push_back(e.head);
    detail::publish_durable_link(seg(), d);
    const std::lock_guard lock(stats_mutex);
    ++stats.links;
    stats.late += out.late ? 1 : 0;
    stats.link_seq = out.link_seq;
    stats.max_lag_s = std::max(stats.max_lag_s, out.lag_s);
    stats.max_link_s = std::max(stats.max_link_s, out.seconds);
    stats.estimate_s = schedule->estimate_s();
  } catch (const Error& e) {
    out.seconds = now_s() - started;
    out.error = e.what();
    detail::count_journal_failure(seg());
    {
      const std::lock_guard lock(stats_mutex);
      ++stats.failures;
    }
    if (ends_the_journal(e)) throw;
  }
  if (options.on_link) options.on_link(out);
  return out;
}

void Journal::State::loop(const std::atomic<bool>& stop) {
  while (!stop.load(std::memory_order_acquire)) {
    const double now = now_s();
    if (!pending()) {
      schedule->nothing_pending(now);
      std::this_thread::sleep_for(std::chrono::duration<double>(schedule->poll_s()));
      continue;
    }
    if (now >= schedule->deadline()) {
      const JournalLink l = link(false);
      // A failed link (a full disk) is tried again after a pause, not in a hot loop.
      if (!l.error.empty()) std::this_thread::sleep_for(std::chrono::duration<double>(std::min(0.5, options.bound_s / 4)));
      continue;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(schedule->poll_s(), schedule->deadline() - now)));
  }
  (void)link(true);
}

Journal::Journal(std::string_view name, std::string dir, JournalOptions options)
    : Journal(Buffer::open(name, {.allow_other_owner = options.allow_other_owner}), std::move(dir),
              std::move(options)) {}

Journal::Journal(Buffer buffer, std::string dir, JournalOptions options) {
  check_options(options, dir);
  if (buffer.read_only()) {
    throw Error(Errc::permission_denied,
                fmt::format("cannot journal '{}': its mapping is read-only, and the journal writes its section (open "
                            "it writable)",
                            buffer.name()));
  }
  // (1.11) the cold tier's first slice: a link is a checkpoint link, which does not hold the cold steps yet.
  detail::refuse_cold(segment_of(buffer), "journal", "its links are checkpoint links, which do not hold it yet");
  state_ = std::make_unique<State>(std::move(buffer));
  State& s = *state_;
  s.dir = std::move(dir);
  s.options = std::move(options);
  const std::string problem = detail::take_journal_lease(
      s.seg(), s.buffer.name(), static_cast<uint64_t>(std::llround(s.options.bound_s * 1e9)));
  if (!problem.empty()) throw Error(Errc::lease_held, problem);
  s.leased = true;
  s.schedule = std::make_unique<detail::JournalSchedule>(s.options.bound_s, s.now_s());
}

Journal::~Journal() {
  if (!state_) return;
  try {
    stop();
  } catch (...) {  // a destructor drops the thread's error: stop() reports it
  }
  if (state_->leased) detail::release_journal_lease(state_->seg());
}

void Journal::start() {
  State& s = *state_;
  if (s.thread.joinable()) {
    throw Error(Errc::invalid_argument, fmt::format("the journal of '{}' into '{}' runs already", s.buffer.name(), s.dir));
  }
  s.stop_flag.store(false, std::memory_order_relaxed);
  s.thread_error = nullptr;
  s.thread = std::thread([&s] {
    try {
      s.loop(s.stop_flag);
    } catch (...) {
      s.thread_error = std::current_exception();  // read by stop() after the join
    }
  });
}

void Journal::stop() {
  State& s = *state_;
  if (!s.thread.joinable()) return;
  s.stop_flag.store(true, std::memory_order_release);  // pairs with the loop's acquire
  s.thread.join();
  if (s.thread_error) std::rethrow_exception(std::exchange(s.thread_error, nullptr));
}

bool Journal::running() const noexcept { return state_->thread.joinable(); }

void Journal::run(const std::atomic<bool>& stop_flag) {
  if (running()) {
    throw Error(Errc::invalid_argument,
                fmt::format("the journal of '{}' into '{}' runs on its thread already", state_->buffer.name(), state_->dir));
  }
  state_->loop(stop_flag);
}

JournalLink Journal::write_link() {
  if (running()) {
    throw Error(Errc::invalid_argument,
                fmt::format("the journal of '{}' into '{}' runs on its thread already", state_->buffer.name(), state_->dir));
  }
  return state_->link(false);
}

JournalStats Journal::stats() const {
  const std::lock_guard lock(state_->stats_mutex);
  return state_->stats;
}

const Buffer& Journal::buffer() const noexcept { return state_->buffer; }
const std::string& Journal::dir() const noexcept { return state_->dir; }
double Journal::bound_s() const noexcept { return state_->options.bound_s; }

}  // namespace shmreplay
