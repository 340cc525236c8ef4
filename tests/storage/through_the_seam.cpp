// tests/storage/through_the_seam.cpp: a storage kind registered by a test (xor_ring.hpp: its stored bytes are the
// pushed bytes XOR a key) is stored and read through the seam on every path: push, push_one, reserve and commit,
// sample, peek, read_steps, save and load; in-place updates of it are refused with the kind's reason, the other
// fields' go on. A path that bypassed the seam would return XORed bytes. docs/design/storage.md.
#include <unistd.h>

#include <filesystem>
#include <system_error>

#include <doctest/doctest.h>

#include "shmreplay/checkpoint.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/internal/segment.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"
#include "support.hpp"
#include "xor_ring.hpp"

using namespace shmreplay;

namespace {

constexpr uint64_t kEnvs = 3;
constexpr uint64_t kCap = 16;

// Step s of env e: x = {e, s}, xor_obs = 7 bytes of (e * 1000 + s) * 7 + k.
struct Step {
  float x[2];
  uint8_t obs[7];
};
Step step_of(uint64_t e, uint64_t s) {
  Step st{};
  st.x[0] = static_cast<float>(e);
  st.x[1] = static_cast<float>(s);
  for (int k = 0; k < 7; ++k) st.obs[k] = static_cast<uint8_t>((e * 1000 + s) * 7 + k);
  return st;
}

std::string check_records(const Buffer& b, uint64_t env, uint64_t head) {
  const StepRecords r = read_steps(b, env, 0, head);
  if (r.count != std::min(head, kCap)) return fmt::format("env {}: {} records, expected {}", env, r.count, head);
  for (uint64_t i = 0; i < r.count; ++i) {
    const Step want = step_of(env, r.first_step + i);
    if (std::memcmp(r.field(i, 1).data(), want.obs, 7) != 0 || std::memcmp(r.field(i, 0).data(), want.x, 8) != 0) {
      return fmt::format("env {} step {}: its record is not the pushed step", env, r.first_step + i);
    }
  }
  return "";
}

}  // namespace

TEST_CASE("a storage kind added by one row stores and returns every pushed byte through the seam") {
  test::register_xor_ring();
  const std::string name = test::unique_name("xor-kind");
  test::SegmentGuard guard(name);
  Buffer b = Buffer::create(name, kEnvs, kCap, Schema::parse("x:f32[2] xor_obs:u8[7]"));
  REQUIRE(segment_of(b).field_kind(0) == layout::kStoragePlainRing);
  REQUIRE(segment_of(b).field_kind(1) == test::kXorRing);
  Writer w(b, {0, 1, 2});
  uint64_t heads[kEnvs] = {};
  // Every push path: push (envs 0 and 1 at once), push_one (env 2), reserve and commit (env 1).
  for (int round = 0; round < 7; ++round) {
    const Step a = step_of(0, heads[0]), c = step_of(1, heads[1]);
    const float xs[4] = {a.x[0], a.x[1], c.x[0], c.x[1]};
    uint8_t obs[14];
    std::memcpy(obs, a.obs, 7);
    std::memcpy(obs + 7, c.obs, 7);
    const uint64_t ids[2] = {0, 1};
    w.push(std::span<const uint64_t>(ids, 2), {{xs, 16}, {obs, 14}});
    ++heads[0], ++heads[1];
    const Step d = step_of(2, heads[2]++);
    w.push_one(2, {{d.x, 8}, {d.obs, 7}});
    const Step e = step_of(1, heads[1]++);
    StepSlot slot = w.reserve(1);
    std::memcpy(slot.field(0).data(), e.x, 8);
    std::memcpy(slot.field(1).data(), e.obs, 7);
    slot.commit();
  }
  // The ring holds the kind's bytes, not the pushed ones.
  const std::byte* stored = segment_of(b).field_data(1);  // env 0, step 0
  CHECK(std::to_integer<uint8_t>(stored[0]) == (step_of(0, 0).obs[0] ^ 0xa5));
  for (uint64_t e = 0; e < kEnvs; ++e) CHECK(check_records(b, e, heads[e]) == "");

  Sampler s(b);
  SampleBatch batch;
  Rng rng(7);
  s.sample(View::replay, 64, 3, 0.0, rng, batch);
  for (std::size_t r = 0; r < batch.rows(); ++r) {
    for (std::size_t t = 0; t < 3; ++t) {
      if (!batch.valid(r, t)) continue;
      const Step want = step_of(batch.env_ids()[r], batch.start_steps()[r] + t);
      REQUIRE(std::memcmp(batch.step(1, r, t), want.obs, 7) == 0);
      REQUIRE(std::memcmp(batch.step(0, r, t), want.x, 8) == 0);
    }
  }
  const uint64_t all[kEnvs] = {0, 1, 2};
  s.peek(all, batch);
  for (uint64_t e = 0; e < kEnvs; ++e) CHECK(std::memcmp(batch.step(1, e, 0), step_of(e, heads[e] - 1).obs, 7) == 0);

  // An update of the kind's field is refused with its reason; the plain field is rewritten.
  const float nx[2] = {-1, -2};
  const uint8_t nobs[7] = {};
  std::string m;
  CHECK(test::error_of([&] { (void)s.try_update(0, 1, {{nx, 8}, {nobs, 7}}); }, &m) ==
        static_cast<int>(Errc::invalid_argument));
  CHECK(test::contains(m, "field 'xor_obs' is stored by the test kind xor_ring, which keeps no pushed bytes"));

  // Save and load: the load stores every field through its kind again.
  const std::string path = fmt::format("{}/{}.ckpt", std::filesystem::temp_directory_path().string(), name);
  struct Remove {
    std::string p;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove(p, ec);
    }
  } remove{path};
  (void)save_checkpoint(b, path);
  const std::string copy = test::unique_name("xor-kind-load");
  test::SegmentGuard copy_guard(copy);
  (void)load_checkpoint(path, copy);
  const Buffer loaded = Buffer::open(copy);
  CHECK(segment_of(loaded).field_kind(1) == test::kXorRing);
  for (uint64_t e = 0; e < kEnvs; ++e) CHECK(check_records(loaded, e, heads[e]) == "");
}
