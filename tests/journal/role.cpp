// The journal role (shmreplay/journal.hpp): its lease (one journal per buffer, a dead one's taken over), its options,
// its schedule (lib/journal_schedule.hpp), and what a link publishes in the journal section and the Inspector shows.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "journal/journal_helpers.hpp"
#include "journal_schedule.hpp"
#include "shmreplay/checkpoint.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using shmreplay::test::DirGuard;
using shmreplay::test::SegmentGuard;
using shmreplay::test::unique_name;

namespace {

std::string chain_dir(const std::string& tag) { return fmt::format("/tmp/{}.chain", unique_name(tag)); }

}  // namespace

TEST_CASE("the schedule starts a link by the last clean instant plus the bound less the estimated link time") {
  detail::JournalSchedule s(2.0, 100.0);
  CHECK(s.poll_s() == doctest::Approx(0.05));
  CHECK(s.estimate_s() == doctest::Approx(0.5));  // before any link: a quarter of the bound
  CHECK(s.deadline() == doctest::Approx(100.0 + 2.0 - 0.5 - 0.05));
  s.nothing_pending(101.0);  // every step durable at 101: the pending ones came later
  CHECK(s.deadline() == doctest::Approx(101.0 + 2.0 - 0.5 - 0.05));
  s.nothing_pending(100.5);  // an older look never moves the instant back
  CHECK(s.deadline() == doctest::Approx(101.0 + 2.0 - 0.5 - 0.05));
  // A link that began at 102.9 and took 0.2 s ended a lag of 103.1 - 101.
  CHECK(s.link_done(102.9, 0.2) == doctest::Approx(2.1));
  CHECK(s.estimate_s() == doctest::Approx(0.2 * detail::JournalSchedule::kMargin + 0.05));
  CHECK(s.deadline() == doctest::Approx(102.9 + 2.0 - s.estimate_s() - 0.05));
  // The estimate is the longest of the recent links: one slow link counts until kWindow faster ones followed it.
  for (std::size_t k = 0; k + 1 < detail::JournalSchedule::kWindow; ++k) (void)s.link_done(110.0 + static_cast<double>(k), 0.01);
  CHECK(s.estimate_s() == doctest::Approx(0.2 * detail::JournalSchedule::kMargin + 0.05));
  (void)s.link_done(120.0, 0.01);
  CHECK(s.estimate_s() == doctest::Approx(0.01 * detail::JournalSchedule::kMargin + 0.05));
  // A whole link counts however many faster ones followed it: the chain writes one whenever it compacts.
  (void)s.link_done(121.0, 0.3, /*whole=*/true);
  for (std::size_t k = 0; k < 2 * detail::JournalSchedule::kWindow; ++k) {
    (void)s.link_done(122.0 + static_cast<double>(k), 0.01);
  }
  CHECK(s.estimate_s() == doctest::Approx(0.3 * detail::JournalSchedule::kMargin + 0.05));
  // A link longer than the bound: the next one is due a quarter of the bound after it began, not back to back.
  (void)s.link_done(140.0, 3.0);
  CHECK(s.deadline() == doctest::Approx(140.0 + 2.0 * detail::JournalSchedule::kMinGap));
}

TEST_CASE("a journal refuses a bound out of range, keep 0, a compact ratio below 1 and a read-only mapping") {
  const std::string name = unique_name("journal-options");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 1, 8, test::kTaggedSchema);
  std::string m;
  CHECK(test::error_of([&] { Journal j(name, "/tmp/x", {.bound_s = 0.0}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(test::contains(m, "the bound is 0 s, expected 0.05 to 86400 s"));
  CHECK(test::error_of([&] { Journal j(name, "/tmp/x", {.keep = 0}); }) == static_cast<int>(Errc::invalid_argument));
  CHECK(test::error_of([&] { Journal j(name, "/tmp/x", {.compact_ratio = 0.5}); }) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(test::error_of([&] { Journal j(Buffer::open(name, {.read_only = true}), "/tmp/x"); }, &m) ==
        static_cast<int>(Errc::permission_denied));
  CHECK(test::contains(m, "read-only"));
}

TEST_CASE("a journal refuses a buffer with a cold tier, whose steps on disk a link does not hold yet") {
  const std::string name = unique_name("journal-cold");
  SegmentGuard guard(name);
  DirGuard cold(fmt::format("/tmp/{}.colddir", name));
  std::filesystem::create_directories(cold.path());
  Buffer b = Buffer::create(name, 1, 8, test::kTaggedSchema, {.cold_capacity = 64, .cold_dir = cold.path()});
  std::string m;
  CHECK(test::error_of([&] { Journal j(name, chain_dir("journal-cold")); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(test::contains(m, "cold"));
  CHECK(segment_of(b).journal_control().lease.load() == 0);  // refused before the lease
  Buffer::remove(name);  // its cold files too
}

TEST_CASE("a second journal of a buffer is refused while the first lives, and a dead one's lease is taken over") {
  const std::string name = unique_name("journal-lease");
  SegmentGuard guard(name);
  DirGuard dir(chain_dir("journal-lease"));
  Buffer b = Buffer::create(name, 2, 64, test::kTaggedSchema);
  {
    Journal first(name, dir.path());
    std::string m;
    CHECK(test::error_of([&] { Journal second(name, dir.path()); }, &m) == static_cast<int>(Errc::lease_held));
    CHECK(test::contains(m, "runs a journal of it already"));
    CHECK(test::run_in_child([&] {
            std::string mc;
            const int code = test::error_of([&] { Journal other(name, dir.path()); }, &mc);
            return code == static_cast<int>(Errc::lease_held) && test::contains(mc, "its journal runs in pid");
          }) == 0);
  }
  // Released by the destructor: taken again without a takeover.
  { Journal again(name, dir.path()); }
  CHECK(segment_of(b).journal_control().takeovers.load() == 0);
  // A journal killed holding the lease: the next one takes it over.
  const pid_t victim = test::spawn([&] {
    Journal j(name, dir.path());
    ::pause();
  });
  while (segment_of(b).journal_control().lease.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(test::kill_and_reap(victim));
  Journal successor(name, dir.path());
  CHECK(segment_of(b).journal_control().takeovers.load() == 1);
  const SegmentInfo info = Inspector(Buffer::open(name, {.read_only = true})).snapshot();
  CHECK(info.journal.state == OwnerState::alive);
  CHECK(info.journal.pid == static_cast<uint64_t>(::getpid()));
}

TEST_CASE("a link publishes its number, its times and each env's durable head; the steps after it are pending") {
  const std::string name = unique_name("journal-publish");
  SegmentGuard guard(name);
  DirGuard dir(chain_dir("journal-publish"));
  Buffer b = Buffer::create(name, 2, 64, test::kTaggedSchema);
  Writer w(b, {0, 1});
  for (uint64_t s = 0; s < 10; ++s) test::push_tagged(w, 0, s);
  for (uint64_t s = 0; s < 4; ++s) test::push_tagged(w, 1, s);
  Journal j(name, dir.path(), {.bound_s = 1.0});
  SegmentInfo info = Inspector(Buffer::open(name, {.read_only = true})).snapshot();
  CHECK(info.journal.present());
  CHECK(info.journal.bound_s == doctest::Approx(1.0));
  CHECK(info.journal.link_seq == 0);
  CHECK(info.journal.pending_steps == 14);
  const uint64_t before = test::realtime_now_ns();
  const JournalLink l = j.write_link();
  CHECK(l.error.empty());
  CHECK(l.link_seq == 1);
  CHECK(l.steps == 14);
  for (uint64_t s = 10; s < 13; ++s) test::push_tagged(w, 0, s);
  info = Inspector(Buffer::open(name, {.read_only = true})).snapshot();
  CHECK(info.journal.link_seq == 1);
  CHECK(info.journal.durable_ns >= before);
  CHECK(info.journal.done_ns >= info.journal.durable_ns);
  CHECK(info.journal.links == 1);
  CHECK(info.journal.pending_steps == 3);
  const std::size_t durable = *counter_index(CounterScope::env, "journal_durable_head");
  const std::size_t pending = *counter_index(CounterScope::env, "journal_pending_steps");
  CHECK(info.envs[0].counters[durable] == 10);
  CHECK(info.envs[0].counters[pending] == 3);
  CHECK(info.envs[1].counters[durable] == 4);
  CHECK(info.envs[1].counters[pending] == 0);
  CHECK(info.journal.lag_s(test::realtime_now_ns()) > 0.0);
  CHECK(j.stats().links == 1);
  CHECK(verify_chain(dir.path()).link_seq == 1);
}

TEST_CASE("a journal's thread writes links while a writer pushes, and its stop writes a last link holding every "
          "step published before it") {
  const std::string name = unique_name("journal-thread");
  SegmentGuard guard(name);
  DirGuard dir(chain_dir("journal-thread"));
  Buffer b = Buffer::create(name, 1, 1 << 14, test::kTaggedSchema);
  Writer w(b, {0});
  Journal j(name, dir.path(), {.bound_s = 0.2});
  j.start();
  CHECK(j.running());
  CHECK(test::error_of([&] { j.start(); }) == static_cast<int>(Errc::invalid_argument));
  uint64_t step = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(700);
  while (std::chrono::steady_clock::now() < end) {
    test::push_tagged(w, 0, step++);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  j.stop();
  CHECK_FALSE(j.running());
  const JournalStats s = j.stats();
  MESSAGE(fmt::format("{} links in 0.7 s with a bound of 0.2 s; largest lag {:.3f} s, longest link {:.4f} s, {} late",
                      s.links, s.max_lag_s, s.max_link_s, s.late));
  CHECK(s.links >= 3);  // 0.7 s at a bound of 0.2 s, and the last
  CHECK(s.failures == 0);
  const SegmentInfo info = Inspector(Buffer::open(name, {.read_only = true})).snapshot();
  CHECK(info.journal.pending_steps == 0);
  CHECK(info.journal.state == OwnerState::alive);  // this process still holds the lease
  const std::string restored = unique_name("journal-thread-restored");
  SegmentGuard restored_guard(restored);
  const LoadResult r = load_chain(dir.path(), restored);
  CHECK(r.info.envs[0].head == step);
}
