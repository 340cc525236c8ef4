// tests/processes/kills.cpp: processes killed at chosen instructions: a writer inside a half-filled reservation
// and inside the copy of a batched push, a learner mid-sample; what survives and who takes over.
// Part of test_processes (tests/CMakeLists.txt); its helpers are in processes_helpers.hpp.
#include "shmreplay/internal/segment.hpp"
#include "processes_helpers.hpp"

namespace {

// Where a child stopped inside a push reports to the parent (see the batched-push kill test).
int g_stopped_fd = -1;

// SIGSEGV handler of that child: tell the parent where we are, then wait to be killed, inside the faulting copy.
void stop_inside_copy(int) {
  const char c = 's';
  [[maybe_unused]] const ssize_t n = ::write(g_stopped_fd, &c, 1);
  for (;;) ::pause();
}

// After the writer of `env` was killed inside a reservation of step `pushed`: a replacement takes its lease over
// and rewrites step `pushed` in full, and the learner then samples it (and only whole steps).
void check_replacement_rewrites(Buffer& buf, Sampler& learner, Rng& rng, uint64_t env, uint64_t pushed) {
  const uint64_t capacity = buf.capacity();
  const layout::EnvControl& ctl = segment_of(buf).env_control(env);
  std::set<std::pair<uint64_t, uint64_t>> seen;
  // A replacement takes the dead writer's lease over and rewrites step `pushed` in full.
  Writer replacement(buf, {env});
  CHECK(replacement.takeovers() == 1);
  CHECK(layout::owner_pid(ctl.lease.load()) == static_cast<uint64_t>(::getpid()));
  CHECK(replacement.head(env) == pushed);
  PayloadPusher pusher;
  pusher.push(replacement, {static_cast<int32_t>(env)});
  CHECK(ctl.head.load() == pushed + 1);
  CHECK((ctl.claimed.load() & layout::kClaimMask) == pushed + 1);
  CHECK(stored_step(buf, env, pushed) == payload_bytes(env, pushed));
  CHECK(learner.sizes(env).replay == capacity);
  for (uint64_t i = 0; i < capacity / 2; ++i) pusher.push(replacement, {static_cast<int32_t>(env)});
  CHECK(ctl.head.load() == pushed + 1 + capacity / 2);
  CHECK(check_env_payloads(buf, env) == "");
  CHECK(sample_quietly(learner, rng, 200, &seen) == "");
  CHECK(seen == replay_view(learner));
  CHECK(seen.count({env, pushed}) == 1);
}

// The batched push of the kill test below, by a child whose envs 0, 1, 2 have `before` steps: the batch [2, 0], whose
// tail array ends 8 bytes into env 0's row, in front of a page with no access: the push publishes env 2, claims
// env 0, copies its hdr and body, and faults inside the copy of its tail. The SIGSEGV handler writes to `stopped_fd`
// and waits to be killed right there.
void push_stopping_inside_copy(Writer& w, const uint64_t (&before)[3], int stopped_fd) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  auto* pages = static_cast<uint8_t*>(::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (pages == MAP_FAILED || ::mprotect(pages + page, page, PROT_NONE) != 0) ::_exit(6);
  uint8_t* tail = pages + page - kTail - 8;
  const Payload p2 = make_payload(2, before[2], 0);
  const Payload p0 = make_payload(0, before[0], 0);
  std::vector<uint64_t> hdr(p2.hdr, p2.hdr + 4);
  hdr.insert(hdr.end(), p0.hdr, p0.hdr + 4);
  std::vector<float> body(p2.body, p2.body + kBody);
  body.insert(body.end(), p0.body, p0.body + kBody);
  std::memcpy(tail, p2.tail, kTail);
  std::memcpy(tail + kTail, p0.tail, 8);
  g_stopped_fd = stopped_fd;
  struct sigaction sa {};
  sa.sa_handler = stop_inside_copy;
  ::sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGSEGV, &sa, nullptr) != 0 || ::sigaction(SIGBUS, &sa, nullptr) != 0) ::_exit(7);
  const std::vector<int32_t> ids = {2, 0};
  w.push(ids, {field_bytes(hdr), field_bytes(body), FieldBytes{tail, 2 * kTail}});
}

}  // namespace

TEST_CASE("a writer killed inside a half-filled reservation: its step is never sampled, and a replacement takes the "
          "lease over and continues the stream at the old head") {
  const uint64_t capacity = 16;
  const uint64_t env = 1;
  const uint64_t pushed = capacity + 5;  // wrapped: the reserved slot still holds step pushed - capacity
  SegmentGuard guard(unique_name("killreserve"));
  Buffer buf = Buffer::create(guard.name(), 2, capacity, kPayloadSchema);
  {
    Writer other(buf, {0});  // env 0 has a few steps of its own, untouched by the kill
    PayloadPusher pusher;
    for (int i = 0; i < 3; ++i) pusher.push(other, {0});
  }
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = spawn([&] {
    child_body([&] {
      ::close(ready[0]);
      Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
      Writer w(b, {env});
      PayloadPusher pusher;
      for (uint64_t i = 0; i < pushed; ++i) pusher.push(w, {static_cast<int32_t>(env)});
      StepSlot slot = w.reserve(env);
      fill_slot(slot, 1);  // the header of step `pushed`; its body and tail are still step pushed - capacity's
      const char c = 'r';
      if (::write(ready[1], &c, 1) != 1) ::_exit(5);
      for (;;) ::pause();
    });
  });
  ::close(ready[1]);
  char c = 0;
  const ssize_t got = ::read(ready[0], &c, 1);
  ::close(ready[0]);
  if (got != 1) {
    FAIL("the writer process failed before its reservation (see its stderr); exit " << reap(child));
  }
  REQUIRE(kill_and_reap(child));

  // Killed between the claim and the head store: the slot is half-written and out of every view.
  const layout::EnvControl& ctl = segment_of(buf).env_control(env);
  CHECK(ctl.head.load() == pushed);
  CHECK((ctl.claimed.load() & layout::kClaimMask) == pushed + 1);
  const std::string slot_bytes = stored_step(buf, env, pushed);
  CHECK(slot_bytes.substr(0, 32) == payload_bytes(env, pushed).substr(0, 32));
  CHECK(slot_bytes.substr(32) == payload_bytes(env, pushed - capacity).substr(32));
  CHECK(check_env_payloads(buf, env) == "");
  CHECK(check_env_payloads(buf, 0) == "");

  Sampler learner(buf);
  CHECK(learner.sizes(env).head == pushed);
  CHECK(learner.sizes(env).replay == capacity - 1);  // step pushed - capacity's slot is being reclaimed
  CHECK(learner.sizes(0).replay == 3);
  SampleBatch newest;
  const uint64_t ids[1] = {env};
  learner.peek(ids, newest);
  CHECK(newest.start_steps()[0] == pushed - 1);
  CHECK(check_row(newest, 0, pushed, pushed) == "");
  // Every committed step in the view is sampled, intact, and nothing else ever is (the half-written step included).
  Rng rng(17);
  std::set<std::pair<uint64_t, uint64_t>> seen;
  CHECK(sample_quietly(learner, rng, 200, &seen) == "");
  CHECK(seen == replay_view(learner));
  CHECK(seen.count({env, pushed}) == 0);

  check_replacement_rewrites(buf, learner, rng, env, pushed);
}

TEST_CASE("a writer killed in the middle of a batched push: earlier envs of the batch are published, the env being "
          "copied is never sampled half-written, and a replacement continues every stream") {
  const uint64_t capacity = 8;
  const uint64_t num_envs = 3;
  SegmentGuard guard(unique_name("killpush"));
  Buffer buf = Buffer::create(guard.name(), num_envs, capacity, kPayloadSchema);
  // Pre-kill heads: env 0 has wrapped, env 1 has not, env 2 has exactly filled its ring.
  const uint64_t before[num_envs] = {capacity + 3, 5, capacity};
  int stopped[2];
  REQUIRE(::pipe(stopped) == 0);
  const pid_t child = spawn([&] {
    child_body([&] {
      ::close(stopped[0]);
      Buffer b = Buffer::open(guard.name(), {.expected_schema = kPayloadSchema});
      Writer w(b, {0, 1, 2});
      PayloadPusher pusher;
      for (uint64_t e = 0; e < num_envs; ++e) {
        for (uint64_t i = 0; i < before[e]; ++i) pusher.push(w, {static_cast<int32_t>(e)});
      }
      push_stopping_inside_copy(w, before, stopped[1]);
      ::_exit(8);  // the copy did not fault: the parent reports it
    });
  });
  ::close(stopped[1]);
  char c = 0;
  const ssize_t got = ::read(stopped[0], &c, 1);
  ::close(stopped[0]);
  if (got != 1) {
    FAIL("the writer process never stopped inside the push; exit " << reap(child));
  }
  REQUIRE(kill_and_reap(child));

  const auto head_of = [&](uint64_t e) { return segment_of(buf).env_control(e).head.load(); };
  const auto claimed_of = [&](uint64_t e) { return segment_of(buf).env_control(e).claimed.load() & layout::kClaimMask; };
  // Env 2 (first in the batch) was published whole; env 0 was claimed and half-copied; env 1 was not in it.
  CHECK(head_of(2) == before[2] + 1);
  CHECK(claimed_of(2) == before[2] + 1);
  CHECK(stored_step(buf, 2, before[2]) == payload_bytes(2, before[2]));
  CHECK(head_of(0) == before[0]);
  CHECK(claimed_of(0) == before[0] + 1);
  const std::string half = stored_step(buf, 0, before[0]);
  const std::string whole = payload_bytes(0, before[0]);
  CHECK(half.substr(0, 32 + 4 * kBody) == whole.substr(0, 32 + 4 * kBody));  // hdr and body: the new step
  CHECK(half != whole);                                                       // tail: not (all) copied
  CHECK(head_of(1) == before[1]);
  CHECK(claimed_of(1) == before[1]);
  for (uint64_t e = 0; e < num_envs; ++e) CHECK(check_env_payloads(buf, e) == "");

  Sampler learner(buf);
  CHECK(learner.sizes(0).replay == capacity - 1);  // env 0's slot being reclaimed held step before[0] - capacity
  CHECK(learner.sizes(1).replay == before[1]);
  CHECK(learner.sizes(2).replay == capacity);
  Rng rng(23);
  std::set<std::pair<uint64_t, uint64_t>> seen;
  CHECK(sample_quietly(learner, rng, 200, &seen) == "");
  CHECK(seen == replay_view(learner));
  CHECK(seen.count({0, before[0]}) == 0);

  // The replacement takes all three leases over and continues each env at its head.
  Writer replacement(buf, {0, 1, 2});
  CHECK(replacement.takeovers() == 3);
  for (uint64_t e = 0; e < num_envs; ++e) CHECK(replacement.head(e) == head_of(e));
  PayloadPusher pusher;
  pusher.push(replacement, {0, 1, 2});
  CHECK(head_of(0) == before[0] + 1);
  CHECK(stored_step(buf, 0, before[0]) == whole);
  CHECK(head_of(1) == before[1] + 1);
  CHECK(head_of(2) == before[2] + 2);
  for (uint64_t e = 0; e < num_envs; ++e) {
    CHECK(claimed_of(e) == head_of(e));
    CHECK(check_env_payloads(buf, e) == "");
  }
  seen.clear();
  CHECK(sample_quietly(learner, rng, 200, &seen) == "");
  CHECK(seen == replay_view(learner));
  CHECK(seen.count({0, before[0]}) == 1);
}

TEST_CASE("a learner killed mid-sample leaves the writers untouched, and a new learner takes over") {
  SegmentGuard guard(unique_name("learnerkill"));
  Buffer buf = Buffer::create(guard.name(), 4, 32, kPayloadSchema);
  const pid_t writer = spawn([&] { writer_main(guard.name(), {0, 1, 2, 3}, 11, false); });
  const pid_t doomed = spawn([&] {
    Buffer b = Buffer::open(guard.name());
    Sampler s(b);
    Rng rng(3);
    SampleBatch batch;
    s.wait(View::replay, 4, 10'000);
    for (;;) s.sample(View::replay, 256, 16, 1.0, rng, batch);
  });
  // Let it sample for a while, then kill it wherever it is.
  const auto until = Clock::now() + std::chrono::milliseconds(300);
  while (Clock::now() < until && segment_of(buf).global_control().sample_calls.load() < 50) std::this_thread::yield();
  CHECK(segment_of(buf).global_control().sample_calls.load() > 0);
  CHECK(kill_and_reap(doomed));
  // The writer keeps pushing.
  const uint64_t before = total_heads(buf);
  const auto limit = Clock::now() + std::chrono::seconds(10);
  while (total_heads(buf) < before + 1000 && Clock::now() < limit) std::this_thread::yield();
  CHECK(total_heads(buf) >= before + 1000);
  // A new learner takes the dead one's lease and samples sound rows.
  Sampler learner(buf);
  CHECK(segment_of(buf).global_control().learner_takeovers.load() == 1);
  CHECK(layout::owner_pid(segment_of(buf).global_control().learner_lease.load()) == static_cast<uint64_t>(::getpid()));
  Rng rng(5);
  SampleBatch batch;
  uint64_t rows = 0;
  std::string first;
  uint64_t violations = 0;
  for (uint64_t call = 0; call < 200; ++call) violations += sample_and_check(learner, rng, batch, call, &rows, &first);
  CHECK_MESSAGE(violations == 0, first);
  CHECK(kill_and_reap(writer));
}
