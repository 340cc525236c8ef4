// tests/cli/compressed.cpp: a buffer with a compressed field (":lz4", ":zstd=LEVEL"; docs/design/compression.md) as
// the CLI makes and shows it: `create --compressed-bytes` / `--expected-compression` size the byte budget, and
// `info`, `info --json`, `watch`, `ls --json` and `metrics` show the bytes per stored step, the ratio the codec
// achieved, the steps each env holds and the steps lost to the budget. Part of test_cli; helpers in cli_helpers.hpp.
#include "cli_helpers.hpp"

#include <cstring>
#include <random>

#include "shmreplay/writer.hpp"

namespace {

constexpr uint64_t kSide = 16;
constexpr uint64_t kFrame = kSide * kSide;
constexpr uint64_t kDepth = 4;
constexpr const char* kCompressedSpec = "obs:u8[4,16,16]:stack=0:lz4 n:u32";

// Frame `id` (0: the zero padding frame): `noisy`, every byte from a hash (the codec cannot shrink it); else a flat
// picture with a moving block (a few dozen bytes compressed).
void make_frame(uint64_t id, bool noisy, uint8_t* out) {
  if (id == 0) {
    std::memset(out, 0, kFrame);
    return;
  }
  if (noisy) {
    std::mt19937_64 g(id * 7919);
    for (uint64_t i = 0; i < kFrame; i += 8) {
      const uint64_t v = g();
      std::memcpy(out + i, &v, 8);
    }
    return;
  }
  std::memset(out, 40, kFrame);
  for (uint64_t r = 0; r < 4; ++r) std::memset(out + (id % 12 + r) * kSide + id % 12, static_cast<int>(id), 4);
}

// Pushes `steps` steps of one episode into env `env`: the stack of step s is frames s-2 .. s+1 (0 before the start).
void push_steps(Buffer& b, uint64_t env, uint64_t steps, bool noisy) {
  Writer w(b, {env});
  std::vector<uint8_t> obs(kDepth * kFrame);
  for (uint64_t s = 0; s < steps; ++s) {
    for (uint64_t k = 0; k < kDepth; ++k) {
      const uint64_t id = s + 1 + k >= kDepth ? s + 1 + k - (kDepth - 1) : 0;
      make_frame(id, noisy, obs.data() + k * kFrame);
    }
    const auto n = static_cast<uint32_t>(s);
    w.push_one(env, {{obs.data(), obs.size()}, {&n, 4}});
  }
}

}  // namespace

TEST_CASE("create --compressed-bytes sizes the byte budget, and info, watch, ls and metrics show the bytes per "
          "stored step, the ratio achieved and the steps lost to the budget") {
  const std::string name = unique_name("cli-compressed");
  SegmentGuard guard(name);
  const CliResult made = run_cli({"create", name, "--envs", "2", "--capacity", "64", "--schema", kCompressedSpec,
                                  "--compressed-bytes", "16KiB"});
  REQUIRE(made.exit_code == 0);
  CHECK(contains(made.out, "obs (lz4): 8.0 KiB per env for its records, 16.0 KiB in all"));
  {
    Buffer b = Buffer::open(name);
    push_steps(b, 0, 200, true);   // incompressible: 32 frames fit env 0's ring, fewer than its 64 slots
    push_steps(b, 1, 200, false);  // compressible: the ring holds every step of the view
  }
  const json info = parse_json(run_cli({"info", name, "--json"}).out);
  const json& c = info["compressed"];
  REQUIRE(c.is_object());
  const json& f = c["fields"][0];
  CHECK(f["field"] == "obs");
  CHECK(f["codec"] == "lz4");
  CHECK(f["ring_bytes_per_env"] == 8192);
  CHECK(f["budget_bytes"] == 16384);
  CHECK(info["schema"][0]["codec"] == "lz4");
  CHECK(info["schema"][1]["codec"].is_null());
  const json& e0 = info["envs"][0];
  const json& e1 = info["envs"][1];
  // Every stack continues: 3 + 200 frames per env, env 0's stored as pushed, env 1's shrunk.
  CHECK(e0["compressed_frames"] == 203);
  CHECK(e0["compressed_raw_frames"] == 200);  // the three zero padding frames shrink
  CHECK(e0["compressed_frame_bytes"] == 203 * kFrame);
  CHECK(e1["compressed_raw_frames"] == 0);
  CHECK(e1["compressed_record_bytes"].get<uint64_t>() * 4 < e1["compressed_frame_bytes"].get<uint64_t>());
  // Env 0 holds fewer steps than its slots, the others counted lost to the budget; env 1 holds all 64.
  CHECK(e0["length"].get<uint64_t>() < 32);
  CHECK(e0["steps_lost_to_budget"].get<uint64_t>() > 0);
  CHECK(e0["stacks_intact_from"].get<uint64_t>() == 200 - e0["length"].get<uint64_t>());
  CHECK(e1["length"] == 64);
  CHECK(e1["steps_lost_to_budget"] == 0);
  CHECK(c["steps_lost_to_budget"] == e0["steps_lost_to_budget"]);
  CHECK(f["steps_lost_to_budget"] == e0["steps_lost_to_budget"]);
  CHECK(f["frames"] == 406);
  CHECK(f["ratio"].get<double>() == doctest::Approx(406.0 * kFrame / f["record_bytes"].get<double>()));
  const uint64_t stored = e0["stored_bytes"].get<uint64_t>() + e1["stored_bytes"].get<uint64_t>();
  CHECK(c["stored_bytes"] == stored);
  CHECK(c["bytes_per_stored_step"].get<double>() ==
        doctest::Approx(static_cast<double>(stored) / info["replay_steps"].get<double>()));

  const CliResult text = run_cli({"info", name});
  CHECK(contains(line_starting(text.out, "compressed"), "obs: lz4, 4 frames a step of 256 bytes; 8.0 KiB ring"));
  CHECK(contains(line_starting(text.out, "stored"), "bytes per stored step (1028 as pushed)"));
  CHECK(contains(line_starting(text.out, "  ENV"), "STORED  LOST TO BUDGET"));
  CHECK(words(line_starting(text.out, "    0")).back() == e0["steps_lost_to_budget"].dump());
  const CliResult watch = run_cli({"watch", name, "--once", "--interval", "0.01"});
  CHECK(contains(line_starting(watch.out, "compressed"), "obs: lz4"));
  CHECK(contains(line_starting(watch.out, "  ENV"), "LOST TO BUDGET"));
  const json frame = parse_json(run_cli({"watch", name, "--json", "--once", "--interval", "0.01"}).out);
  CHECK(frame["envs"][0]["steps_lost_to_budget"] == e0["steps_lost_to_budget"]);
  const json listed = parse_json(run_cli({"ls", "--json"}).out);
  const json* mine = find_named(listed, name);
  REQUIRE(mine != nullptr);
  CHECK((*mine)["compression_ratio"].get<double>() == doctest::Approx(f["ratio"].get<double>()));
  CHECK((*mine)["steps_lost_to_budget"] == e0["steps_lost_to_budget"]);
  const CliResult metrics = run_cli({"metrics", name, "--once"});
  CHECK(contains(metrics.out, fmt::format("shmreplay_env_steps_lost_to_budget_total{{buffer=\"{}\",env=\"0\"}} {}\n",
                                          name, e0["steps_lost_to_budget"].get<uint64_t>())));
  CHECK(contains(metrics.out, fmt::format("shmreplay_env_compressed_frames_total{{buffer=\"{}\",env=\"1\"}} 203\n",
                                          name)));
}

TEST_CASE("create --expected-compression sizes each env's ring as the frames' bytes over the ratio, and a buffer "
          "without compressed fields shows none of their lines, columns or samples") {
  const std::string name = unique_name("cli-compressed-ratio");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "64", "--schema", kCompressedSpec}).exit_code == 0);
  const uint64_t by_default =
      parse_json(run_cli({"info", name, "--json"}).out)["compressed"]["fields"][0]["ring_bytes_per_env"];
  REQUIRE(run_cli({"create", name, "--replace", "--envs", "2", "--capacity", "64", "--schema", kCompressedSpec,
                   "--expected-compression", "2"})
              .exit_code == 0);
  const json info = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(info["compressed"]["fields"][0]["ring_bytes_per_env"] == 2 * by_default);  // the default ratio is 4
  const CliResult bad = run_cli({"create", name, "--replace", "--envs", "2", "--capacity", "64", "--schema",
                                 "obs:u8[4,16,16]:stack=0", "--expected-compression", "2"});
  CHECK(bad.exit_code == 1);
  CHECK(contains(bad.err, "expected_compression"));

  const std::string plain = unique_name("cli-compressed-none");
  SegmentGuard plain_guard(plain);
  REQUIRE(create_payload(plain, 1, 8).exit_code == 0);
  CHECK(parse_json(run_cli({"info", plain, "--json"}).out)["compressed"].is_null());
  const CliResult text = run_cli({"info", plain});
  CHECK(line_starting(text.out, "compressed").empty());
  CHECK(!contains(text.out, "LOST TO BUDGET"));
  const CliResult metrics = run_cli({"metrics", plain, "--once"});
  CHECK(contains(metrics.out, "# TYPE shmreplay_env_compressed_frames_total counter\n"));
  CHECK(!contains(metrics.out, fmt::format("shmreplay_env_compressed_frames_total{{buffer=\"{}\"", plain)));
}

TEST_CASE("save keeps a compressed field's records as they are, save --decode-compressed writes whole steps, and "
          "both files load back to the same steps") {
  const std::string name = unique_name("cli-compressed-save");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "1", "--capacity", "64", "--schema", kCompressedSpec}).exit_code == 0);
  {
    Buffer b = Buffer::open(name);
    push_steps(b, 0, 100, false);  // compressible frames: their records are a few dozen bytes
  }
  const std::string packed = temp_file("cli-packed");
  const std::string decoded = temp_file("cli-decoded");
  FileGuard packed_guard{packed};
  FileGuard decoded_guard{decoded};
  const json as_records = parse_json(run_cli({"save", name, packed, "--json"}).out);
  const json whole = parse_json(run_cli({"save", name, decoded, "--decode-compressed", "--json"}).out);
  const uint64_t stacks = 64 * kDepth * kFrame;  // the 64 stored steps' stacks, each whole
  CHECK(as_records["file_bytes"].get<uint64_t>() < stacks / 4);
  CHECK(whole["file_bytes"].get<uint64_t>() > stacks);
  for (const std::string& file : {packed, decoded}) {
    const std::string copy = unique_name("cli-compressed-copy");
    SegmentGuard copy_guard(copy);
    REQUIRE(run_cli({"load", file, copy}).exit_code == 0);
    CHECK(run_cli({"dump", copy, "--json"}).out == run_cli({"dump", name, "--json"}).out);
  }
  // A chain's links hold the records as they are: the flag is refused with --every, as a usage error.
  const CliResult chained = run_cli({"save", name, "/tmp/unused-chain-dir", "--every", "1", "--decode-compressed"});
  CHECK(chained.exit_code == 2);
  CHECK(contains(chained.err, "--decode-compressed excludes --every"));
}
