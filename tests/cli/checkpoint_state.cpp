// tests/cli/checkpoint_state.cpp: what `shmreplay load` says about a checkpoint's state (format 2.0, issue 33): a
// `note:` line on stderr for each part a format 1.0 file lacks or a mismatch changed, the same notes in --json's
// "notes", and --allow-mismatch required to load into a buffer whose rate limiter differs from the file's, or whose
// stack restart reserve is smaller (then the steps restored are those the buffer keeps).
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include "cli_helpers.hpp"

#ifndef SHMREPLAY_TEST_DATA_DIR
#error "tests/CMakeLists.txt defines SHMREPLAY_TEST_DATA_DIR, the folder of tests/checkpoint/data"
#endif

namespace cli_state {

const std::string kFixture = std::string(SHMREPLAY_TEST_DATA_DIR) + "/format-1.0.shmrckpt";

// The lines of `text`.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Whether every line of `err` is a note and one of them contains `part`.
bool notes_name(const std::string& err, const std::string& part) {
  const std::vector<std::string> lines = lines_of(err);
  return !lines.empty() && std::all_of(lines.begin(), lines.end(), [](const std::string& l) {
    return l.starts_with("note: ");
  }) && std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return contains(l, part); });
}

TEST_CASE("load of a format 1.0 checkpoint prints a note line on stderr naming what the file lacks, and --json lists "
          "the notes") {
  const std::string fresh = unique_name("cli-v1");
  const std::string json_name = unique_name("cli-v1-json");
  SegmentGuard fresh_guard(fresh);
  SegmentGuard json_guard(json_name);

  const CliResult r = run_cli({"load", kFixture, fresh});
  REQUIRE(r.exit_code == 0);
  CHECK_MESSAGE(notes_name(r.err, "format 1.0"), r.err);
  CHECK(contains(r.err, "priorities, rate limiter, learner counters, waiting episode records or stack settings"));
  CHECK(contains(r.err, "the new segment has none of them"));
  CHECK(contains(r.out, fmt::format("into new segment '{}'", fresh)));
  const Buffer loaded = Buffer::open(fresh, {.read_only = true});  // const: the read-only accessors
  CHECK(segment_of(loaded).env_control(0).head.load() == 11);

  const CliResult j = run_cli({"load", kFixture, json_name, "--json"});
  REQUIRE(j.exit_code == 0);
  CHECK_MESSAGE(notes_name(j.err, "format 1.0"), j.err);  // the notes go to stderr with --json too
  const json out = parse_json(j.out);
  CHECK(out["created"] == true);
  CHECK(out["checkpoint"]["format"] == "1.0");
  REQUIRE(out["notes"].is_array());
  REQUIRE(out["notes"].size() == lines_of(j.err).size());
  for (std::size_t k = 0; k < out["notes"].size(); ++k) {
    CHECK("note: " + out["notes"][k].get<std::string>() == lines_of(j.err)[k]);
  }

  // Into the existing segment: it keeps its own counters; no --allow-mismatch needed (the file holds no settings).
  const CliResult again = run_cli({"load", kFixture, fresh, "--json"});
  REQUIRE(again.exit_code == 0);
  CHECK_MESSAGE(notes_name(again.err, "the segment keeps its own counters"), again.err);
  CHECK(parse_json(again.out)["created"] == false);
}

TEST_CASE("load into a buffer with another rate limiter is refused without --allow-mismatch, and with it keeps the "
          "target's limiter and says so in notes") {
  const std::string name = unique_name("cli-lim-src");
  const std::string other = unique_name("cli-lim-dst");
  SegmentGuard guard(name);
  SegmentGuard other_guard(other);
  FileGuard file{temp_file("cli-lim")};
  const std::vector<std::string> geometry = {"--envs", "2", "--capacity", "8", "--schema", "x:u8"};
  const auto create_with = [&](const std::string& n, const std::string& spi, const std::string& buffer) {
    std::vector<std::string> args = {"create", n};
    args.insert(args.end(), geometry.begin(), geometry.end());
    args.insert(args.end(), {"--samples-per-insert", spi, "--error-buffer", buffer, "--min-size-to-sample", "2"});
    return run_cli(args);
  };
  REQUIRE(create_with(name, "1", "100").exit_code == 0);
  REQUIRE(create_with(other, "2", "50").exit_code == 0);
  {
    Buffer b = Buffer::open(name);
    Writer w(b, std::vector<uint64_t>{0, 1});
    const uint8_t x = 7;
    for (int i = 0; i < 5; ++i) {
      w.push_one(0, {value_bytes(x)});
      w.push_one(1, {value_bytes(x)});
    }
  }
  REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);

  const std::string before = whole_file(other_guard.path());
  const CliResult refused = run_cli({"load", file.path, other});
  CHECK(refused.exit_code == 1);
  CHECK(one_error_line(refused.err));
  CHECK(contains(refused.err, "rate limiter: the segment has samples_per_insert 2"));
  CHECK(contains(refused.err, "the checkpoint samples_per_insert 1"));
  CHECK(contains(refused.err, "--allow-mismatch"));
  CHECK(whole_file(other_guard.path()) == before);

  const CliResult allowed = run_cli({"load", file.path, other, "--allow-mismatch", "--json"});
  REQUIRE(allowed.exit_code == 0);
  CHECK_MESSAGE(notes_name(allowed.err, "the segment keeps its settings"), allowed.err);
  const json out = parse_json(allowed.out);
  CHECK(out["created"] == false);
  REQUIRE(out["notes"].size() == 2);
  CHECK(contains(out["notes"][0].get<std::string>(), "loaded despite differences"));
  CHECK(contains(out["notes"][1].get<std::string>(), "the segment keeps its settings"));
  const Buffer loaded = Buffer::open(other, {.read_only = true});
  CHECK(loaded.rate_limit() == std::optional<RateLimit>(RateLimit::ratio(2.0, 2, 50.0)));
  CHECK(loaded.rate_limit_state().inserts == 10);
  CHECK(loaded.rate_limit_state().error == doctest::Approx(4.0));  // the middle of 4 - 50 .. 4 + 50
}

TEST_CASE("load of a stacked checkpoint into a buffer with a smaller restart reserve is refused without "
          "--allow-mismatch, and with it counts only the steps the buffer keeps and notes those left out") {
  const std::string name = unique_name("cli-rsv-src");
  const std::string other = unique_name("cli-rsv-dst");
  SegmentGuard guard(name);
  SegmentGuard other_guard(other);
  FileGuard file{temp_file("cli-rsv")};
  const std::vector<std::string> geometry = {"--envs", "1", "--capacity", "16", "--schema", "obs:u8[4,3]:stack=0"};
  std::vector<std::string> args = {"create", name, "--stack-restarts", "15"};
  args.insert(args.end(), geometry.begin(), geometry.end());
  REQUIRE(run_cli(args).exit_code == 0);
  args = {"create", other};  // the default reserve: 1 restart per env, the stacks of 5 steps that never continue
  args.insert(args.end(), geometry.begin(), geometry.end());
  REQUIRE(run_cli(args).exit_code == 0);
  {
    Buffer b = Buffer::open(name);
    Writer w(b, std::vector<uint64_t>{0});
    std::array<uint8_t, 12> obs{};
    for (uint8_t s = 0; s < 16; ++s) {  // 16 steps, no stack continuing the one before
      for (uint8_t i = 0; i < obs.size(); ++i) obs[i] = static_cast<uint8_t>(s * 12 + i);
      w.push_one(0, {FieldBytes{obs.data(), obs.size()}});
    }
  }
  REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);

  const std::string before = whole_file(other_guard.path());
  const CliResult refused = run_cli({"load", file.path, other});
  CHECK(refused.exit_code == 1);
  CHECK(one_error_line(refused.err));
  CHECK_MESSAGE(contains(refused.err, "stack restart reserve: the segment holds 1 restart per env, the checkpoint 15"),
                refused.err);
  CHECK(contains(refused.err, "--allow-mismatch"));
  CHECK(whole_file(other_guard.path()) == before);

  const CliResult allowed = run_cli({"load", file.path, other, "--allow-mismatch"});
  REQUIRE(allowed.exit_code == 0);
  CHECK_MESSAGE(contains(allowed.out, "5 steps restored of 16 saved"), allowed.out);
  CHECK_MESSAGE(notes_name(allowed.err, "11 of the checkpoint's 16 steps were left out"), allowed.err);
  CHECK(contains(allowed.err, "env 0 keeps steps 11 .. 15 of 0 .. 15"));
  const CliResult json_load = run_cli({"load", file.path, other, "--allow-mismatch", "--json"});
  REQUIRE(json_load.exit_code == 0);
  CHECK(parse_json(json_load.out)["steps_restored"] == 5);
}

}  // namespace cli_state
