// tests/cli/watch.cpp: `shmreplay watch`: plain frames with rates and liveness, and JSON frames.
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include "cli_helpers.hpp"

TEST_CASE("watch --count prints plain frames with rates, fill bars and writer liveness") {
  const std::string name = unique_name("cli-watch");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 3, 64).exit_code == 0);
  const Buffer b = Buffer::open(name, {.read_only = true});
  WriterProcess writer(name, {0, 2});
  writer.wait_for_env(b, 0, 64);
  writer.wait_for_env(b, 2, 64);

  const CliResult r = run_cli({"watch", name, "--count", "2", "--interval", "0.05"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') > 10);
  const std::string frame2 = r.out.substr(r.out.find("\n\nshmreplay watch") + 2);  // frames are blank-line separated
  CHECK(frame2.starts_with(fmt::format("shmreplay watch '{}'", name)));
  CHECK(contains(r.out.substr(0, r.out.find("\n\n")), "shmreplay watch"));
  const std::vector<std::string> pushes = words(line_starting(frame2, "pushes/s"));
  REQUIRE(pushes.size() >= 2);
  CHECK(std::stod(pushes[1]) >= 0.0);
  CHECK(contains(line_starting(frame2, "writers"), "1 alive, 0 dead, 1 env without a writer"));
  CHECK(contains(line_starting(frame2, "learner"), "none attached"));
  const std::vector<std::string> env0 = words(line_starting(frame2, "    0  ["));
  REQUIRE(env0.size() >= 10);
  // A full ring: 64 steps, or 63 while a write is in progress (its slot is not part of the view).
  CHECK(env0[1] == "[####################]");
  CHECK((env0[2] == "100.0%" || env0[2] == "98.4%"));
  CHECK(env0[7] == std::to_string(writer.pid()));
  CHECK(env0[8] == "alive");
  const std::vector<std::string> env1 = words(line_starting(frame2, "    1  ["));
  REQUIRE(env1.size() >= 10);
  CHECK(env1[1] == "[--------------------]");
  CHECK(env1[8] == "none");

  const CliResult once = run_cli({"watch", name, "--once", "--interval", "0.02"});
  CHECK(once.exit_code == 0);
  CHECK(std::count(once.out.begin(), once.out.end(), '\n') == 13);  // a title, 7 summary lines, a blank, a table of 3
  CHECK(writer.stop() == 0);
}

TEST_CASE("watch --json prints one parseable frame per line") {
  const std::string name = unique_name("cli-watch-json");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 2, 64).exit_code == 0);
  const Buffer b = Buffer::open(name, {.read_only = true});
  WriterProcess writer(name, {0, 1});
  writer.wait_for_heads(b, 64);
  const CliResult r = run_cli({"watch", name, "--json", "--count", "3", "--interval", "0.03"});
  REQUIRE(r.exit_code == 0);
  const std::vector<json> frames = json_lines(r.out);
  REQUIRE(frames.size() == 3);
  uint64_t pushed = 0;
  for (const json& f : frames) {
    CHECK(f["name"] == name);
    CHECK(f["num_envs"] == 2);
    CHECK(f["live_writers"] == 1);
    CHECK(f["dead_writers"] == 0);
    CHECK(f["interval_s"].get<double>() > 0.0);
    CHECK(f["pushes_per_s"].get<double>() >= 0.0);
    CHECK(f["total_pushed"].get<uint64_t>() >= pushed);
    pushed = f["total_pushed"].get<uint64_t>();
    CHECK(f["fill"].get<double>() >= 127.0 / 128);  // full, or one slot being rewritten
    CHECK(f["learner"]["state"] == "none");
    REQUIRE(f["envs"].size() == 2);
    CHECK(f["envs"][1]["owner_pid"] == writer.pid());
    CHECK(f["envs"][1]["state"] == "alive");
    CHECK(f["envs"][1]["length"].get<uint64_t>() >= 63);
    CHECK(f["envs"][1]["last_push_age_s"].is_number());
  }
  CHECK(writer.stop() == 0);

  CHECK(run_cli({"watch", name, "--once", "--count", "2"}).exit_code == 2);
  CHECK(run_cli({"watch", name, "--interval", "0"}).exit_code == 2);
}

TEST_CASE("create --learners N makes N learner slots, and info and watch show each rank") {
  const std::string name = unique_name("cli-learners");
  SegmentGuard guard(name);
  const CliResult made = run_cli({"create", name, "--envs", "2", "--capacity", "32", "--schema", kPayloadSpec,
                                  "--learners", "3"});
  REQUIRE(made.exit_code == 0);
  Buffer b = Buffer::open(name);
  CHECK(b.max_learners() == 3);
  Sampler rank2(b, {.rank = 2});
  const CliResult info = run_cli({"info", name});
  REQUIRE(info.exit_code == 0);
  CHECK(contains(line_starting(info.out, "learners"), "1 of 3 slots held by live learners"));
  CHECK(contains(line_starting(info.out, "  rank 0"), "free"));
  CHECK(contains(line_starting(info.out, "  rank 2"), fmt::format("pid {} (alive", ::getpid())));
  const json j = json::parse(run_cli({"info", name, "--json"}).out);
  CHECK(j["max_learners"] == 3);
  CHECK(j["live_learners"] == 1);
  REQUIRE(j["learners"].size() == 3);
  CHECK(j["learners"][2]["rank"] == 2);
  CHECK(j["learners"][2]["state"] == "alive");
  CHECK(j["learners"][0]["state"] == "none");
  const CliResult w = run_cli({"watch", name, "--once", "--interval", "0.02"});
  REQUIRE(w.exit_code == 0);
  CHECK(contains(line_starting(w.out, "learners"), "1 of 3 slots live; rank 0 free; rank 1 free; rank 2 pid"));
  const std::vector<json> frames = json_lines(run_cli({"watch", name, "--json", "--count", "2", "--interval", "0.02"}).out);
  REQUIRE(frames.size() == 2);
  REQUIRE(frames[1]["learners"].size() == 3);
  CHECK(frames[1]["learners"][2]["pid"] == static_cast<uint64_t>(::getpid()));
  CHECK(frames[1]["learners"][2]["samples_per_s"].is_number());
  CHECK(run_cli({"create", name + "-x", "--envs", "1", "--capacity", "4", "--schema", kPayloadSpec, "--learners",
                 "65"}).exit_code != 0);
}
