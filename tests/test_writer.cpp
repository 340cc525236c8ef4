// The env worker's view: leases (with pid + start-time takeover), batched and single pushes, reserve/commit,
// publishing, and every error a bad call gets. Also the learner lease, which works the same way.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shmreplay/internal/segment.hpp"
#include "detail/os/process.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "support.hpp"

using namespace shmreplay;
using test::error_of;

namespace {

const Schema kSchema = Schema::parse("obs:f32[3] action:i32 done:bool");

// A buffer with its cleanup guard.
struct Fixture {
  explicit Fixture(uint64_t envs = 4, uint64_t capacity = 8)
      : guard(test::unique_name("writer")), buf(Buffer::create(guard.name(), envs, capacity, kSchema)) {}
  test::SegmentGuard guard;
  Buffer buf;
};

// One step's values for env e, step s.
struct Step {
  float obs[3];
  int32_t action;
  uint8_t done;
};
Step make_step(uint64_t e, uint64_t s) {
  return {{static_cast<float>(e), static_cast<float>(s), 0.5f}, static_cast<int32_t>(e * 1000 + s),
          static_cast<uint8_t>(s % 2)};
}
std::vector<FieldBytes> step_fields(const Step& st) {
  return {{st.obs, sizeof st.obs}, value_bytes(st.action), value_bytes(st.done)};
}

// The stored bytes of step s of env e, read straight from the ring.
Step stored(const Buffer& b, uint64_t e, uint64_t s) {
  Step st{};
  const uint64_t slot = e * b.capacity() + s % b.capacity();
  std::memcpy(st.obs, segment_of(b).field_data(0) + slot * 12, 12);
  std::memcpy(&st.action, segment_of(b).field_data(1) + slot * 4, 4);
  std::memcpy(&st.done, segment_of(b).field_data(2) + slot, 1);
  return st;
}

bool same(const Step& a, const Step& b) {
  return std::memcmp(a.obs, b.obs, sizeof a.obs) == 0 && a.action == b.action && a.done == b.done;
}

// A child process that leases `envs`, tells the parent through a pipe, then waits to be killed.
struct LeaseHolder {
  pid_t pid = -1;
  LeaseHolder(const std::string& name, std::vector<uint64_t> envs, bool learner = false) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    std::fflush(nullptr);
    pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      Buffer b = Buffer::open(name);
      if (learner) {
        Sampler s(b);
        (void)!::write(fds[1], "k", 1);
        for (;;) ::pause();
      }
      Writer w(b, envs);
      (void)!::write(fds[1], "k", 1);
      for (;;) ::pause();
    }
    ::close(fds[1]);
    char c = 0;
    REQUIRE(::read(fds[0], &c, 1) == 1);
    ::close(fds[0]);
  }
  void kill() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~LeaseHolder() { kill(); }
};

}  // namespace

TEST_CASE("a batched push writes one step per listed env, in any order, and publishes each head") {
  Fixture f;
  Writer w(f.buf, {0, 1, 2, 3});
  // envpool's recv: envs 2 and 0 finished, in that order; arrays are [2][shape].
  const std::vector<int32_t> ids = {2, 0};
  const Step a = make_step(2, 0), b = make_step(0, 0);
  std::vector<float> obs(std::begin(a.obs), std::end(a.obs));
  obs.insert(obs.end(), std::begin(b.obs), std::end(b.obs));
  const std::vector<int32_t> act = {a.action, b.action};
  const std::vector<uint8_t> done = {a.done, b.done};
  w.push(ids, {field_bytes(obs), field_bytes(act), field_bytes(done)});
  CHECK(w.head(0) == 1);
  CHECK(w.head(1) == 0);
  CHECK(w.head(2) == 1);
  CHECK(same(stored(f.buf, 2, 0), a));
  CHECK(same(stored(f.buf, 0, 0), b));
  // Uneven rates and uint64 ids: env 2 gets two more steps.
  for (uint64_t s = 1; s <= 2; ++s) {
    const Step st = make_step(2, s);
    const std::vector<uint64_t> one = {2};
    w.push(one, step_fields(st));
  }
  CHECK(w.head(2) == 3);
  CHECK(same(stored(f.buf, 2, 2), make_step(2, 2)));
  CHECK(segment_of(f.buf).env_control(2).claimed.load() == 3);
  CHECK(segment_of(f.buf).env_control(2).last_push_ns.load() > 0);
}

TEST_CASE("heads count steps since creation and the ring slot is the count modulo capacity") {
  Fixture f(1, 3);
  Writer w(f.buf, {0});
  for (uint64_t s = 0; s < 10; ++s) w.push_one(0, step_fields(make_step(0, s)));
  CHECK(w.head(0) == 10);
  for (uint64_t s = 7; s < 10; ++s) CHECK(same(stored(f.buf, 0, s), make_step(0, s)));
}

TEST_CASE("a reserved step is written in place and becomes visible only at commit") {
  Fixture f(2, 4);
  Writer w(f.buf, {1});
  Sampler learner(f.buf);
  {
    StepSlot slot = w.reserve(1);
    CHECK(slot.env() == 1);
    CHECK(slot.step() == 0);
    CHECK(slot.field(0).size() == 12);
    const Step st = make_step(1, 0);
    std::memcpy(slot.field(0).data(), st.obs, 12);
    slot.as<int32_t>(1)[0] = st.action;
    slot.as<uint8_t>(2)[0] = st.done;
    CHECK(learner.sizes(1).head == 0);  // not published yet
    CHECK(segment_of(f.buf).env_control(1).claimed.load() == 1);
    slot.commit();
    CHECK(slot.committed());
    std::string msg;
    CHECK(error_of([&] { slot.commit(); }, &msg) == static_cast<int>(Errc::invalid_argument));
  }
  CHECK(learner.sizes(1).head == 1);
  CHECK(same(stored(f.buf, 1, 0), make_step(1, 0)));
}

TEST_CASE("an abandoned reservation publishes nothing and the next push reuses its slot") {
  Fixture f(1, 4);
  Writer w(f.buf, {0});
  {
    StepSlot slot = w.reserve(0);
    std::memset(slot.field(0).data(), 0xff, 12);
  }  // destroyed without commit
  CHECK(w.head(0) == 0);
  CHECK(segment_of(f.buf).env_control(0).claimed.load() == 1);  // the claim stays raised: head <= claimed <= head + 1
  w.push_one(0, step_fields(make_step(0, 0)));
  CHECK(w.head(0) == 1);
  CHECK(segment_of(f.buf).env_control(0).claimed.load() == 1);
  CHECK(same(stored(f.buf, 0, 0), make_step(0, 0)));
}

TEST_CASE("a push is validated before anything is written, and each error says what and where") {
  Fixture f(4, 8);
  Writer w(f.buf, {0, 1});
  const Step st = make_step(0, 0);
  std::string msg;

  const std::vector<int32_t> out_of_range = {0, 4};
  std::vector<float> obs2(6);
  std::vector<int32_t> act2(2);
  std::vector<uint8_t> done2(2);
  const std::vector<FieldBytes> two = {field_bytes(obs2), field_bytes(act2), field_bytes(done2)};
  CHECK(error_of([&] { w.push(out_of_range, two); }, &msg) == static_cast<int>(Errc::env_out_of_range));
  CHECK(msg.find("env 4") != std::string::npos);
  CHECK(msg.find("0 to 3") != std::string::npos);

  const std::vector<int32_t> negative = {-1, 0};
  CHECK(error_of([&] { w.push(negative, two); }, &msg) == static_cast<int>(Errc::env_out_of_range));
  CHECK(msg.find("env -1") != std::string::npos);

  const std::vector<int32_t> not_mine = {0, 3};
  CHECK(error_of([&] { w.push(not_mine, two); }, &msg) == static_cast<int>(Errc::not_leased));
  CHECK(msg.find("env 3") != std::string::npos);
  CHECK(msg.find("leases 2 envs: 0,1") != std::string::npos);

  const std::vector<int32_t> twice = {1, 1};
  CHECK(error_of([&] { w.push(twice, two); }, &msg) == static_cast<int>(Errc::invalid_argument));
  CHECK(msg.find("env 1 is listed twice") != std::string::npos);

  const std::vector<int32_t> ok = {0, 1};
  std::vector<float> obs_short(5);
  CHECK(error_of([&] { w.push(ok, {field_bytes(obs_short), field_bytes(act2), field_bytes(done2)}); }, &msg) ==
        static_cast<int>(Errc::size_mismatch));
  CHECK(msg.find("field 'obs'") != std::string::npos);
  CHECK(msg.find("20 bytes") != std::string::npos);
  CHECK(msg.find("expected 24") != std::string::npos);

  CHECK(error_of([&] { w.push(ok, {field_bytes(obs2), field_bytes(act2)}); }, &msg) ==
        static_cast<int>(Errc::size_mismatch));
  CHECK(msg.find("2 field arrays given, the schema has 3") != std::string::npos);

  CHECK(error_of([&] { w.push_one(0, {FieldBytes{nullptr, 12}, value_bytes(st.action), value_bytes(st.done)}); },
                 &msg) == static_cast<int>(Errc::size_mismatch));
  CHECK(msg.find("null pointer") != std::string::npos);

  // push_one's direct path hands every odd case to the general checks, with the same errors.
  CHECK(error_of([&] { w.push_one(4, step_fields(st)); }, &msg) == static_cast<int>(Errc::env_out_of_range));
  CHECK(msg.find("env 4") != std::string::npos);
  CHECK(error_of([&] { w.push_one(3, step_fields(st)); }, &msg) == static_cast<int>(Errc::not_leased));
  CHECK(error_of([&] { w.push_one(0, {field_bytes(obs_short), value_bytes(st.action), value_bytes(st.done)}); },
                 &msg) == static_cast<int>(Errc::size_mismatch));
  CHECK(msg.find("field 'obs'") != std::string::npos);
  CHECK(error_of([&] { w.push_one(0, {value_bytes(st.action), value_bytes(st.done)}); }, &msg) ==
        static_cast<int>(Errc::size_mismatch));

  // Nothing above was written: every head and claim is still 0.
  for (uint64_t e = 0; e < 4; ++e) {
    CHECK(segment_of(f.buf).env_control(e).head.load() == 0);
    CHECK(segment_of(f.buf).env_control(e).claimed.load() == 0);
  }

  // A pending reservation blocks pushes and a second reservation of the same env.
  StepSlot slot = w.reserve(0);
  CHECK(error_of([&] { w.push_one(0, step_fields(st)); }, &msg) == static_cast<int>(Errc::invalid_argument));
  CHECK(msg.find("reserved step") != std::string::npos);
  CHECK(error_of([&] { (void)w.reserve(0); }, &msg) == static_cast<int>(Errc::invalid_argument));
  CHECK(error_of([&] { (void)w.reserve(2); }, &msg) == static_cast<int>(Errc::not_leased));
  w.push_one(1, step_fields(make_step(1, 0)));  // other envs are unaffected
  CHECK(w.head(1) == 1);
}

TEST_CASE("leasing checks env ids and takes all or none") {
  Fixture f(4, 8);
  std::string msg;
  CHECK(error_of([&] { Writer w(f.buf, {1, 9}); }, &msg) == static_cast<int>(Errc::env_out_of_range));
  CHECK(msg.find("env 9") != std::string::npos);
  CHECK(error_of([&] { Writer w(f.buf, {1, 2, 1}); }, &msg) == static_cast<int>(Errc::invalid_argument));
  CHECK(msg.find("listed twice") != std::string::npos);
  CHECK(error_of([&] { Writer w(f.buf, std::vector<uint64_t>{}); }, &msg) == static_cast<int>(Errc::invalid_argument));

  Writer first(f.buf, {2});
  // Env 2 is held by `first` (this process): the whole lease of {0, 1, 2} fails and 0, 1 stay free.
  CHECK(error_of([&] { Writer w(f.buf, {0, 1, 2}); }, &msg) == static_cast<int>(Errc::lease_held));
  CHECK(msg.find("env 2") != std::string::npos);
  CHECK(msg.find("this process") != std::string::npos);
  CHECK(segment_of(f.buf).env_control(0).lease.load() == 0);
  CHECK(segment_of(f.buf).env_control(1).lease.load() == 0);
  Writer second(f.buf, {0, 1});  // disjoint envs: fine
  CHECK(second.takeovers() == 0);
}

TEST_CASE("a second writer for an env leased by a live process gets an error naming the owner's pid") {
  Fixture f(4, 8);
  LeaseHolder holder(f.guard.name(), {1, 2});
  std::string msg;
  CHECK(error_of([&] { Writer w(f.buf, {0, 2}); }, &msg) == static_cast<int>(Errc::lease_held));
  CHECK(msg.find("env 2") != std::string::npos);
  CHECK(msg.find(fmt::format("pid {}", holder.pid)) != std::string::npos);
  CHECK(msg.find("alive") != std::string::npos);
  CHECK(segment_of(f.buf).env_control(0).lease.load() == 0);  // all or nothing
}

TEST_CASE("the lease of a dead process is taken over and the env stream continues") {
  Fixture f(4, 8);
  {
    Writer w(f.buf, {3});
    for (uint64_t s = 0; s < 3; ++s) w.push_one(3, step_fields(make_step(3, s)));
  }
  LeaseHolder holder(f.guard.name(), {3});
  CHECK(error_of([&] { Writer w(f.buf, {3}); }) == static_cast<int>(Errc::lease_held));
  holder.kill();  // SIGKILL: it never releases its lease
  CHECK(layout::owner_pid(segment_of(f.buf).env_control(3).lease.load()) != 0);
  Writer w(f.buf, {3});
  CHECK(w.takeovers() == 1);
  CHECK(segment_of(f.buf).env_control(3).lease_takeovers.load() == 1);
  CHECK(w.head(3) == 3);
  w.push_one(3, step_fields(make_step(3, 3)));
  CHECK(w.head(3) == 4);
  CHECK(same(stored(f.buf, 3, 3), make_step(3, 3)));
}

TEST_CASE("a pid reused by another process does not keep a dead owner's lease") {
  Fixture f(2, 8);
  // Forge a lease held by this process's pid but with a different start time: the pid is alive, the owner
  // (that pid at that start time) is not.
  const uint64_t me = static_cast<uint64_t>(::getpid());
  segment_of(f.buf).env_control(0).lease.store(layout::pack_owner(me, 12345));
  Writer w(f.buf, {0});
  CHECK(w.takeovers() == 1);
}

TEST_CASE("a Writer or Sampler copied into a forked child refuses to act and leaves the parent's leases alone") {
  Fixture f(2, 8);
  const uint64_t me = layout::pack_owner(static_cast<uint64_t>(::getpid()), detail::self_start_ticks());
  {
    auto writer = std::make_unique<Writer>(f.buf, std::initializer_list<uint64_t>{0});
    auto learner = std::make_unique<Sampler>(f.buf);
    writer->push_one(0, step_fields(make_step(0, 0)));
    const int code = test::run_in_child([&] {
      std::string msg;
      bool ok = error_of([&] { writer->push_one(0, step_fields(make_step(0, 1))); }, &msg) ==
                static_cast<int>(Errc::not_leased);
      ok = ok && msg.find("through fork()") != std::string::npos &&
           msg.find(std::to_string(::getppid())) != std::string::npos;
      const std::vector<uint64_t> ids = {0};
      ok = ok && error_of([&] { writer->push(ids, step_fields(make_step(0, 1))); }) ==
                     static_cast<int>(Errc::not_leased);
      ok = ok && error_of([&] { (void)writer->reserve(0); }) == static_cast<int>(Errc::not_leased);
      Rng rng(1);
      SampleBatch batch;
      ok = ok && error_of([&] { learner->sample(View::replay, 1, 1, 0.0, rng, batch); }) ==
                     static_cast<int>(Errc::not_leased);
      ok = ok && error_of([&] { learner->reset_online_queue(); }) == static_cast<int>(Errc::not_leased);
      ok = ok && error_of([&] { (void)learner->wait(View::replay, 1, 0); }) == static_cast<int>(Errc::not_leased);
      writer.reset();  // destroyed here: must not release the parent's leases
      learner.reset();
      // A Writer made in the child is refused (the parent holds env 0) and one for a free env works.
      ok = ok && error_of([&] { Writer again(f.buf, {0}); }) == static_cast<int>(Errc::lease_held);
      Writer own(f.buf, {1});
      own.push_one(1, step_fields(make_step(1, 0)));
      return ok;
    });
    CHECK(code == 0);
    CHECK(segment_of(f.buf).env_control(0).lease.load() == me);  // still the parent's
    CHECK(segment_of(f.buf).global_control().learner_lease.load() == me);
    CHECK(segment_of(f.buf).env_control(1).head.load() == 1);
    writer->push_one(0, step_fields(make_step(0, 1)));  // the parent goes on
    CHECK(writer->head(0) == 2);
  }
  CHECK(segment_of(f.buf).env_control(0).lease.load() == 0);  // released by the parent's own destructor
}

TEST_CASE("a writer releases its leases when destroyed, and a moved-from writer releases nothing") {
  Fixture f(2, 8);
  {
    Writer a(f.buf, {0, 1});
    Writer b(std::move(a));
    CHECK(b.env_ids().size() == 2);
    CHECK(segment_of(f.buf).env_control(0).lease.load() != 0);
  }
  CHECK(segment_of(f.buf).env_control(0).lease.load() == 0);
  CHECK(segment_of(f.buf).env_control(1).lease.load() == 0);
  Writer again(f.buf, {0, 1});
  CHECK(again.takeovers() == 0);
}

TEST_CASE("a read-only mapping refuses the writer and learner roles") {
  Fixture f(2, 8);
  Buffer ro = Buffer::open(f.guard.name(), {.read_only = true});
  CHECK(error_of([&] { Writer w(ro, {0}); }) == static_cast<int>(Errc::read_only));
  CHECK(error_of([&] { Sampler s(ro); }) == static_cast<int>(Errc::read_only));
}

TEST_CASE("one learner at a time: a live learner's lease is refused, a dead one's is taken over") {
  Fixture f(2, 8);
  std::string msg;
  {
    Sampler s(f.buf);
    CHECK(error_of([&] { Sampler t(f.buf); }, &msg) == static_cast<int>(Errc::lease_held));
    CHECK(msg.find("this process already holds its learner through another Sampler") != std::string::npos);
  }
  LeaseHolder holder(f.guard.name(), {}, /*learner=*/true);
  CHECK(error_of([&] { Sampler t(f.buf); }, &msg) == static_cast<int>(Errc::lease_held));
  CHECK(msg.find(fmt::format("pid {}", holder.pid)) != std::string::npos);
  holder.kill();
  Sampler s(f.buf);
  CHECK(segment_of(f.buf).global_control().learner_takeovers.load() == 1);
}

TEST_CASE("a learner that died holding an env's update lock does not block the writer or the next learner") {
  Fixture f(1, 4);
  Writer w(f.buf, {0});
  w.push_one(0, step_fields(make_step(0, 0)));
  // Simulate a learner killed inside try_update(): its lease names a dead process, the lock bit is set and the
  // update sequence is odd.
  LeaseHolder dead(f.guard.name(), {}, /*learner=*/true);
  dead.kill();
  layout::EnvControl& c = segment_of(f.buf).env_control(0);
  c.claimed.store(c.claimed.load() | layout::kUpdateLockBit);
  c.update_seq.store(1);
  w.push_one(0, step_fields(make_step(0, 1)));  // breaks the dead learner's lock after ~1 ms
  CHECK(w.head(0) == 2);
  CHECK((c.claimed.load() & layout::kUpdateLockBit) == 0);
  CHECK(c.update_seq.load() % 2 == 0);
  // The same state, repaired by a new learner taking over the dead one's lease.
  LeaseHolder dead2(f.guard.name(), {}, /*learner=*/true);
  dead2.kill();
  c.claimed.store(c.claimed.load() | layout::kUpdateLockBit);
  c.update_seq.store(3);
  Sampler s(f.buf);
  CHECK((c.claimed.load() & layout::kUpdateLockBit) == 0);
  CHECK(c.update_seq.load() == 4);
  SampleBatch out;
  const std::vector<uint64_t> env0 = {0};
  s.peek(env0, out);
  CHECK(out.start_steps()[0] == 1);
}

TEST_CASE("a push uses the env ids and priorities it validated, whatever the caller's arrays hold later") {
  // Another thread changes the caller's arrays while the push waits for the rate limiter: the push re-read them
  // after that wait, and wrote env 1's slot while publishing env 0's step (an id of 10^9: outside the mapping),
  // and put the NaN priority into the tree.
  test::SegmentGuard guard(test::unique_name("writer-reread"));
  Buffer b = Buffer::create(guard.name(), 2, 8, kSchema,
                            {.priority_exponent = 0.5, .rate_limit = RateLimit::ratio(1.0, 2, 4.0)});
  Writer w(b, {0, 1}, {.wait_for_rate_limit = true, .rate_limit_timeout_ms = 60'000});
  for (uint64_t s = 0; s < 3; ++s) {  // 6 inserts: the error is at max_diff, the next push waits
    for (uint64_t e = 0; e < 2; ++e) w.push_one(e, step_fields(make_step(e, s)));
  }
  std::vector<uint64_t> ids = {0};
  std::vector<float> priorities = {4.0f};
  const Step marker = make_step(7, 7);
  std::thread pusher([&] { w.push(ids, step_fields(marker), priorities); });
  while (b.rate_limit_state().writer_waiters == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ids[0] = 1;
  priorities[0] = std::numeric_limits<float>::quiet_NaN();
  Sampler learner(b);
  Rng rng(1);
  SampleBatch batch;
  learner.sample_transitions(View::replay, 4, rng, batch, {.rate_limit_timeout_ms = 0});  // lets the push in
  pusher.join();
  CHECK(segment_of(b).env_control(0).head.load() == 4);
  CHECK(segment_of(b).env_control(1).head.load() == 3);
  CHECK(same(stored(b, 0, 3), marker));
  CHECK(same(stored(b, 1, 3), Step{}));  // env 1's next slot, never written
  double weight[1] = {0};
  learner.priority_weights(std::vector<uint64_t>{0}, std::vector<uint64_t>{3}, weight);
  CHECK(weight[0] == doctest::Approx(2.0));  // 4^0.5
}
