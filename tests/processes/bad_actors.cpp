// tests/processes/bad_actors.cpp: a matrix of bad actors: each gets a clear error and leaves the buffer intact.
// Part of test_processes (tests/CMakeLists.txt); its helpers are in processes_helpers.hpp.
#include "shmreplay/internal/segment.hpp"
#include "processes_helpers.hpp"

TEST_CASE("bad actors get clear errors and leave the buffer intact") {
  SegmentGuard guard(unique_name("badactors"));
  Buffer buf = Buffer::create(guard.name(), 4, 16, kPayloadSchema);
  const pid_t owner = spawn([&] { writer_main(guard.name(), {0, 1}, 41, true); });
  Sampler learner(buf);
  REQUIRE(learner.wait(View::replay, 2, 30'000));
  const std::string name = guard.name();

  SUBCASE("a second process leasing a leased env is refused, naming the owner") {
    CHECK(run_in_child([&] {
            Buffer b = Buffer::open(name);
            std::string msg;
            const int code = error_of([&] { Writer w(b, {2, 1}); }, &msg);
            return code == static_cast<int>(Errc::lease_held) &&
                   msg.find(fmt::format("pid {}", owner)) != std::string::npos &&
                   segment_of(b).env_control(2).lease.load() == 0;
          }) == 0);
  }
  SUBCASE("a process pushing to an env it does not own is refused and writes nothing") {
    CHECK(run_in_child([&] {
            Buffer b = Buffer::open(name);
            Writer w(b, {3});
            PayloadPusher p;
            const uint64_t head0 = segment_of(b).env_control(0).head.load();
            const int code = error_of([&] { p.push(w, {3, 0}); });
            return code == static_cast<int>(Errc::not_leased) && segment_of(b).env_control(3).head.load() == 0 &&
                   segment_of(b).env_control(0).head.load() >= head0;
          }) == 0);
  }
  SUBCASE("a process attaching with a different schema is refused with every difference") {
    CHECK(run_in_child([&] {
            std::string msg;
            const int code = error_of(
                [&] { Buffer::open(name, {.expected_schema = Schema::parse("hdr:u64[4] body:f32[12] tail:u8[29]")}); },
                &msg);
            return code == static_cast<int>(Errc::schema_mismatch) && msg.find("field 'body'") != std::string::npos;
          }) == 0);
  }
  SUBCASE("a segment removed while attached keeps working for its users; a new open fails clearly") {
    Buffer::remove(name);
    const uint64_t before = total_heads(buf);
    const auto limit = Clock::now() + std::chrono::seconds(10);
    while (total_heads(buf) < before + 10 && Clock::now() < limit) std::this_thread::yield();
    CHECK(total_heads(buf) >= before + 10);  // the writer keeps pushing into its mapping
    Rng rng(1);
    SampleBatch batch;
    uint64_t rows = 0;
    std::string first;
    CHECK(sample_and_check(learner, rng, batch, 0, &rows, &first) == 0);
    std::string msg;
    CHECK(error_of([&] { Buffer::open(name); }, &msg) == static_cast<int>(Errc::not_found));
    CHECK(msg.find(name) != std::string::npos);
  }
  CHECK(kill_and_reap(owner));
  std::string bad;
  CHECK_MESSAGE(verify_ring(buf, &bad) == 0, bad);
}
