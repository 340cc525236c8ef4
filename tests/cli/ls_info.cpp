// tests/cli/ls_info.cpp: `shmreplay ls` and `shmreplay info`, text and --json: geometry, schema, priorities,
// episodes, lease holders alive, idle or dead, and buffers in use.
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include "cli_helpers.hpp"

TEST_CASE("info --json reports the geometry, the schema and empty envs") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 3, 100).exit_code == 0);
  const Buffer b = Buffer::open(name, {.read_only = true});

  const CliResult r = run_cli({"info", name, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  const json j = parse_json(r.out);
  CHECK(j["name"] == name);
  CHECK(j["path"] == guard.path());
  CHECK(j["layout"] == fmt::format("{}.{}", layout::kLayoutMajor, layout::kLayoutMinor));
  CHECK(j["num_envs"] == 3);
  CHECK(j["capacity"] == 100);
  CHECK(j["step_bytes"] == 25);
  CHECK(j["priorities"].is_null());  // created without priorities
  CHECK(j["total_bytes"] == b.total_bytes());
  CHECK(j["data_bytes"] == 3 * 100 * 25);
  CHECK(j["stored_step_bytes"] == 25.0);  // no stacked field: stored as pushed
  CHECK(j["stacks"] == json::array());
  CHECK(j["creator_pid"].get<uint64_t>() > 0);
  CHECK(j["creator_alive"] == false);  // the creator was the CLI process, which has exited
  CHECK(j["total_pushed"] == 0);
  CHECK(j["replay_steps"] == 0);
  CHECK(j["live_writers"] == 0);
  CHECK(j["schema_spec"] == kSpec);
  CHECK(Schema::parse(j["schema_spec"].get<std::string>()) == b.schema());

  const json& schema = j["schema"];
  REQUIRE(schema.size() == 4);
  CHECK(schema[0] == json{{"name", "obs"}, {"dtype", "f32"}, {"shape", {4}}, {"bytes", 16}, {"stack_axis", nullptr},
                          {"codec", nullptr}, {"derived", false}});
  CHECK(schema[1] == json{{"name", "action"}, {"dtype", "i32"}, {"shape", json::array()}, {"bytes", 4},
                          {"stack_axis", nullptr}, {"codec", nullptr}, {"derived", false}});
  CHECK(schema[3]["dtype"] == "bool");

  const json& envs = j["envs"];
  REQUIRE(envs.size() == 3);
  for (std::size_t e = 0; e < envs.size(); ++e) {
    CAPTURE(e);
    CHECK(envs[e]["env"] == e);
    CHECK(envs[e]["head"] == 0);
    CHECK(envs[e]["length"] == 0);
    CHECK(envs[e]["owner"] == "none");
    CHECK(envs[e]["last_push_ns"] == 0);
  }
}

TEST_CASE("info of a stacked buffer: each stacked field's K, axis, frames and frame bytes, the bytes per step as "
          "pushed and as stored, and the steps whose frames a ring of too few restarts lost") {
  const std::string name = unique_name("cli-stack");
  SegmentGuard guard(name);
  Buffer::create(name, 2, 16, Schema::parse(kStackedSpec));  // default reserve: 1 + 16 / 128 = 1 restart
  // Env 0: 16 steps, its episodes starting at steps 0, 5, 10 and 15 (each of those stores 3 frames). The ring of
  // 16 + 2 x (1 + 1) = 20 frames holds one restart past the first step: the two more cost 2 steps each, steps 0-3.
  // Env 1: 4 steps, nothing lost.
  push_stacks(name, {16, 4});

  const CliResult r = run_cli({"info", name, "--json"});
  REQUIRE(r.exit_code == 0);
  const json j = parse_json(r.out);
  CHECK(j["step_bytes"] == 52);
  CHECK(j["data_bytes"] == 2 * 20 * 16 + 2 * 16 * 8 + 2 * 16 * 4);  // rings, index words, t
  CHECK(j["stored_step_bytes"] == 32.0);                              // 1024 bytes / 32 step slots
  CHECK(j["schema_spec"] == kStackedSpec);
  CHECK(j["schema"][0] == json{{"name", "obs"}, {"dtype", "u8"}, {"shape", {3, 4, 4}}, {"bytes", 48},
                               {"stack_axis", 0}, {"codec", nullptr}, {"derived", false}});
  CHECK(j["schema"][1]["stack_axis"].is_null());
  REQUIRE(j["stacks"].size() == 1);
  CHECK(j["stacks"][0] == json{{"field", "obs"},
                               {"index", 0},
                               {"axis", 0},
                               {"depth", 3},
                               {"frames_per_env", 20},
                               {"frame_bytes", 16},
                               {"restarts_held", 1},
                               {"ring_bytes", 2 * 20 * 16},
                               {"index_bytes", 2 * 16 * 8}});
  CHECK(j["envs"][0]["head"] == 16);
  CHECK(j["envs"][0]["stacks_intact_from"] == 4);
  CHECK(j["envs"][0]["length"] == 12);
  CHECK(j["envs"][1]["stacks_intact_from"] == 0);
  CHECK(j["envs"][1]["length"] == 4);
  CHECK(j["replay_steps"] == 16);

  const CliResult t = run_cli({"info", name});
  REQUIRE(t.exit_code == 0);
  CHECK(words(line_starting(t.out, "step")) ==
        std::vector<std::string>{"step", "52", "bytes", "as", "pushed,", "32.0", "stored"});
  CHECK(contains(line_starting(t.out, "stacked"), "obs: 3 frames on axis 0; 20 frames per env of 16 bytes"));
  CHECK(contains(line_starting(t.out, "replay steps"), "16 (50.0% full)"));

  const CliResult l = run_cli({"ls", "--json"});
  REQUIRE(l.exit_code == 0);
  const json all = parse_json(l.out);
  const json* listed = find_named(all, name);
  REQUIRE(listed != nullptr);
  CHECK((*listed)["step_bytes"] == 52);
  CHECK((*listed)["stored_step_bytes"] == 32.0);
}

TEST_CASE("info fails with exit code 1 on a missing name and on a foreign file") {
  SUBCASE("missing") {
    const CliResult r = run_cli({"info", unique_name("cli-missing")});
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, "does not exist"));
  }
  SUBCASE("foreign") {
    SegmentGuard foreign(unique_name("cli-foreign"));
    write_file(foreign.path(), random_bytes());
    const CliResult r = run_cli({"info", foreign.name()});
    CHECK(r.exit_code == 1);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, "not a shmreplay segment"));
  }
}

TEST_CASE("ls shows a created segment and not a foreign file in the shared-memory directory") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 3, 100).exit_code == 0);
  SegmentGuard foreign(unique_name("cli-foreign"));
  write_file(foreign.path(), random_bytes());

  const CliResult r = run_cli({"ls"});
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(words(line_starting(r.out, "NAME")) ==
        std::vector<std::string>{"NAME", "ENVS", "CAPACITY", "FILL", "STEPS", "BYTES", "WRITERS", "OWNER", "AGE"});
  const std::vector<std::string> row = words(line_starting(r.out, name + " "));
  REQUIRE(row.size() == 10);  // BYTES is two words, e.g. "1.0 MiB"
  CHECK(row[1] == "3");
  CHECK(row[2] == "100");
  CHECK(row[3] == "0.0%");
  CHECK(row[4] == "0");
  CHECK(row[7] == "0");
  const std::string me = user_name(::geteuid());
  CHECK(row[8] == (me.empty() ? std::to_string(::geteuid()) : me));
  CHECK_FALSE(contains(r.out, foreign.name()));
}

TEST_CASE("ls --json lists a created segment with its geometry") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 4, 64).exit_code == 0);
  SegmentGuard foreign(unique_name("cli-foreign"));
  write_file(foreign.path(), random_bytes());

  const CliResult r = run_cli({"ls", "--json"});
  REQUIRE(r.exit_code == 0);
  const json j = parse_json(r.out);
  REQUIRE(j.is_array());
  const json* mine = find_named(j, name);
  REQUIRE(mine != nullptr);
  CHECK((*mine)["envs"] == 4);
  CHECK((*mine)["capacity"] == 64);
  CHECK((*mine)["step_bytes"] == 25);
  CHECK((*mine)["total_pushed"] == 0);
  CHECK((*mine)["live_writers"] == 0);
  CHECK((*mine)["layout"] == fmt::format("{}.{}", layout::kLayoutMajor, layout::kLayoutMinor));
  CHECK((*mine)["age_s"].get<double>() >= 0.0);
  CHECK((*mine)["owner_uid"] == ::geteuid());
  CHECK_FALSE(mine->contains("error"));
  CHECK(find_named(j, foreign.name()) == nullptr);
}

TEST_CASE("ls lists a truncated segment with its error instead of failing") {
  const std::string source = unique_name("cli");
  SegmentGuard source_guard(source);
  REQUIRE(create(source, 2, 10).exit_code == 0);
  SegmentGuard truncated(unique_name("cli-trunc"));
  write_file(truncated.path(), read_file(source_guard.path(), 100));

  const CliResult text = run_cli({"ls"});
  REQUIRE(text.exit_code == 0);
  const std::string row = line_starting(text.out, truncated.name() + " ");
  CHECK(contains(row, "error:"));
  CHECK(contains(row, "100 bytes"));
  CHECK(words(line_starting(text.out, source + " ")).size() == 10);

  const CliResult js = run_cli({"ls", "--json"});
  REQUIRE(js.exit_code == 0);
  const json j = parse_json(js.out);
  const json* entry = find_named(j, truncated.name());
  REQUIRE(entry != nullptr);
  CHECK(entry->size() == 2);
  CHECK(contains((*entry)["error"].get<std::string>(), "100 bytes"));
}

TEST_CASE("create --priority-exponent makes a buffer with priorities, and info shows their totals and maximum") {
  const std::string name = unique_name("cliprio");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "8", "--schema", "x:u8", "--priority-exponent",
                   "0.5"}).exit_code == 0);
  {
    Buffer b = Buffer::open(name);
    CHECK(b.priority_exponent() == 0.5);
    Writer w(b, std::vector<uint64_t>{0, 1});
    const uint8_t x[2] = {1, 2};
    const uint64_t ids[2] = {0, 1};
    const float prio[2] = {4.0f, 9.0f};
    const FieldBytes fields[1] = {field_bytes(std::span<const uint8_t>(x, 2))};
    w.push(std::span<const uint64_t>(ids, 2), fields, std::span<const float>(prio, 2));
  }
  const CliResult text = run_cli({"info", name});
  REQUIRE(text.exit_code == 0);
  CHECK(contains(text.out, "alpha 0.5; total priority^alpha 5 over the replay view, max priority 9"));
  const CliResult r = run_cli({"info", name, "--json"});
  REQUIRE(r.exit_code == 0);
  const json j = parse_json(r.out);
  CHECK(j["priorities"]["exponent"] == 0.5);
  CHECK(j["priorities"]["total"] == 5.0);  // 4^0.5 + 9^0.5
  CHECK(j["priorities"]["max_priority"] == 9.0);
  CHECK(j["envs"][1]["priority_total"] == 3.0);
}

// The STATE column of env 0's row in `info`'s text, when its OWNER column is `owner`; "" when there is no row.
std::string env0_state_text(const std::string& name, uint64_t owner) {
  std::istringstream lines(run_cli({"info", name}).out);
  for (std::string line; std::getline(lines, line);) {
    const auto w = words(line);
    if (w.size() >= 7 && w[0] == "0" && w[5] == std::to_string(owner)) return w[6];
  }
  return "";
}

TEST_CASE("info reports an env's lease holder as alive, idle when it stopped pushing, and dead when it vanished") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 3, 10).exit_code == 0);
  Buffer b = Buffer::open(name);
  const uint64_t me = static_cast<uint64_t>(::getpid());
  const uint64_t ticks = own_start_ticks();
  layout::EnvControl& env0 = segment_of(b).env_control(0);
  const auto now_ns = [] {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  };
  env0.owner_start_ticks.store(ticks);
  env0.lease_since_ns.store(now_ns());
  env0.lease.store(layout::pack_owner(me, ticks), std::memory_order_release);

  {
    const json j = parse_json(run_cli({"info", name, "--json"}).out);
    CHECK(j["envs"][0]["owner"] == "alive");
    CHECK(j["envs"][0]["owner_pid"] == me);
    CHECK(j["envs"][0]["owner_start_ticks"] == ticks);
    CHECK(j["envs"][1]["owner"] == "none");
    CHECK(j["live_writers"] == 1);
    CHECK(env0_state_text(name, me) == "alive");
  }
  {
    // Alive, but its last push was a minute ago: idle.
    env0.last_push_ns.store(now_ns() - 60'000'000'000ull);
    const json j = parse_json(run_cli({"info", name, "--json"}).out);
    CHECK(j["envs"][0]["owner"] == "alive");
    CHECK(j["envs"][0]["state"] == "idle");
    CHECK(env0_state_text(name, me) == "idle");
  }

  // A child that has exited and been reaped: its pid names no process (or, if reused, one with another start).
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  const uint64_t gone = static_cast<uint64_t>(child);
  env0.owner_start_ticks.store(1);
  env0.lease.store(layout::pack_owner(gone, 1), std::memory_order_release);
  {
    const json j = parse_json(run_cli({"info", name, "--json"}).out);
    CHECK(j["envs"][0]["owner"] == "dead");
    CHECK(j["envs"][0]["owner_pid"] == gone);
    CHECK(j["live_writers"] == 0);
  }
}

TEST_CASE("info shows the first 64 envs as text and says how many it omits, while --json has them all") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 100, 1).exit_code == 0);
  const CliResult text = run_cli({"info", name});
  REQUIRE(text.exit_code == 0);
  CHECK(contains(text.out, "36 more envs omitted"));
  CHECK(parse_json(run_cli({"info", name, "--json"}).out)["envs"].size() == 100);
}

TEST_CASE("ls and info report fill, live writers, totals and the learner of a buffer in use") {
  const std::string name = unique_name("cli-busy-info");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 2, 16).exit_code == 0);
  Buffer b = Buffer::open(name);
  WriterProcess writer(name, {0});
  writer.wait_for_env(b, 0, 16);
  Sampler learner(b);
  Rng rng(3);
  SampleBatch batch;
  learner.sample(View::replay, 5, 2, 1.0, rng, batch);

  const json listed = parse_json(run_cli({"ls", "--json"}).out);
  const json* mine = find_named(listed, name);
  REQUIRE(mine != nullptr);
  // env 0 full (or with one slot being rewritten by its writer), env 1 empty
  CHECK(((*mine)["fill"] == 0.5 || (*mine)["fill"] == 15.0 / 32));
  CHECK((*mine)["live_writers"] == 1);
  CHECK((*mine)["learner"] == "alive");
  CHECK((*mine)["age_s"].get<double>() >= 0.0);
  const std::vector<std::string> row = words(line_starting(run_cli({"ls"}).out, name + " "));
  REQUIRE(row.size() == 10);
  CHECK((row[3] == "50.0%" || row[3] == "46.9%"));
  CHECK(row[7] == "1");

  const json info = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(info["live_writers"] == 1);
  CHECK(info["replay_steps"].get<uint64_t>() >= 15);
  CHECK(info["total_pushed"].get<uint64_t>() >= 16);
  CHECK(info["learner"]["state"] == "alive");
  CHECK(info["learner"]["pid"] == ::getpid());
  CHECK(info["learner"]["rows_sampled"] == 5);
  CHECK(info["learner"]["sample_calls"] == 1);
  CHECK(info["learner"]["age_rows"] == 5);  // layout 1.8: the rows' ages
  CHECK(info["learner"]["mean_age_steps"].is_number());
  CHECK(info["learners"][0]["limiter_timeouts"] == 0);
  CHECK(info["envs"][0]["owner"] == "alive");
  CHECK(info["envs"][0]["owner_pid"] == writer.pid());
  CHECK(info["envs"][0]["last_push_ns"].get<uint64_t>() > 0);
  const std::string text = run_cli({"info", name}).out;
  CHECK(contains(line_starting(text, "sampled"), "5 rows in 1 call"));
  CHECK(contains(line_starting(text, "sample age"), "steps behind the head on average (5 rows counted)"));
  CHECK(contains(line_starting(text, "learner"), fmt::format("pid {} (alive", ::getpid())));
  CHECK(contains(line_starting(text, "online steps"), "full)"));
  CHECK(writer.stop() == 0);
}

TEST_CASE("create names episode fields and info shows completed episodes, per env and in JSON") {
  const std::string name = unique_name("cli-episodes");
  SegmentGuard guard(name);
  const CliResult c = run_cli({"create", name, "--envs", "2", "--capacity", "16", "--schema",
                               "obs:f32 reward:f32 terminated:bool truncated:bool", "--terminated", "terminated",
                               "--truncated", "truncated", "--reward", "reward", "--episode-queue", "4"});
  INFO(c.err);
  REQUIRE(c.exit_code == 0);
  {
    Buffer buf = Buffer::open(name);
    REQUIRE(buf.has_episodes());
    Writer writer(buf, {0, 1});
    // env 0: an episode of 3 steps (returns 1+2+3), then one cut by truncation after 2 steps; env 1: one step.
    const float rewards[] = {1, 2, 3, 4, 5};
    const uint8_t term[] = {0, 0, 1, 0, 0}, trunc[] = {0, 0, 0, 0, 1};
    for (int k = 0; k < 5; ++k) {
      const float obs = 0;
      writer.push_one(0, {value_bytes(obs), value_bytes(rewards[k]), value_bytes(term[k]), value_bytes(trunc[k])});
    }
    const float obs = 0, reward = 7;
    const uint8_t no = 0;
    writer.push_one(1, {value_bytes(obs), value_bytes(reward), value_bytes(no), value_bytes(no)});
  }
  const CliResult text = run_cli({"info", name});
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("2 completed, 2 waiting for the learner, 0 dropped (queue 4 per env)") != std::string::npos);
  CHECK(text.out.find("terminated=terminated truncated=truncated reward=reward") != std::string::npos);
  CHECK(text.out.find("2 steps, return 9, truncated") != std::string::npos);
  const json j = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(j["episodes"]["completed"] == 2);
  CHECK(j["episodes"]["queue_depth"] == 2);
  CHECK(j["episodes"]["queue_capacity"] == 4);
  CHECK(j["envs"][0]["episodes_completed"] == 2);
  CHECK(j["envs"][0]["last_episode"]["length"] == 2);
  CHECK(j["envs"][0]["last_episode"]["return"] == 9.0);
  CHECK(j["envs"][0]["last_episode"]["end"] == "truncated");
  CHECK(j["envs"][1]["episodes_completed"] == 0);
  CHECK(j["envs"][1]["episode_start"] == 0);

  const CliResult bad = run_cli({"create", unique_name("cli-episodes-bad"), "--envs", "1", "--capacity", "4",
                                 "--schema", "obs:f32 done:f32", "--done", "done"});
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("done") != std::string::npos);
}

TEST_CASE("info, info --json and metrics count the episode records of a learner killed inside pop_episodes") {
  const std::string name = unique_name("cli-lost-records");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "16", "--schema", "obs:f32 done:bool", "--done",
                   "done", "--learners", "2"})
              .exit_code == 0);
  {
    Buffer buf = Buffer::open(name);
    Writer writer(buf, {0, 1});
    const float obs = 0;
    const uint8_t done = 1;
    for (int k = 0; k < 6; ++k) writer.push_one(static_cast<uint64_t>(k % 2), {value_bytes(obs), value_bytes(done)});
  }
  // Of the 6 one-step episodes' records, a learner takes 4 (of both envs) and is killed before it hands them over.
  const pid_t child = test::spawn([&] {
    Buffer b = Buffer::open(name);
    Sampler learner(b);
    std::vector<EpisodeRecord> out(4);
    learner.pop_episodes(out, [](std::span<const EpisodeRecord>) { ::raise(SIGKILL); });
    ::_exit(1);
  });
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  const std::string text = run_cli({"info", name}).out;
  CHECK(contains(line_starting(text, "episodes"), "waiting for the learner, 0 dropped (queue 128 per env), 4 lost to "
                                                  "learners killed while popping"));
  const json j = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(j["episodes"]["records_lost"] == 4);
  CHECK(j["envs"][0]["episode_records_lost"].get<uint64_t>() + j["envs"][1]["episode_records_lost"].get<uint64_t>() ==
        4);
  const CliResult m = run_cli({"metrics", name, "--once"});
  REQUIRE(m.exit_code == 0);
  CHECK(contains(m.out, "# TYPE shmreplay_episode_records_lost_total counter"));
  CHECK(contains(m.out, fmt::format("shmreplay_episode_records_lost_total{{buffer=\"{}\",env=\"0\"}} {}", name,
                                    j["envs"][0]["episode_records_lost"].get<uint64_t>())));
}

TEST_CASE("info, info --json and watch show the rows a learner wrote back and the rows refused") {
  const std::string name = unique_name("cli-wb");
  SegmentGuard guard(name);
  Buffer b = Buffer::create(name, 1, 4, Schema::parse("obs:f32 value:f32:derived"));
  Writer w = Writer::range(b, 0, 1);
  const float x = 1.0f;
  for (int s = 0; s < 6; ++s) w.push_one(0, {value_bytes(x), value_bytes(x)});  // steps 2..5 stored
  Sampler s(b);
  const std::vector<uint64_t> envs{0, 0, 0}, steps{1, 4, 5};
  const std::vector<float> values{2.0f, 2.0f, 2.0f};
  const WriteBackResult r = s.write_back(envs, steps, {FieldBytes{}, field_bytes(values)});
  REQUIRE(r.applied == 2);
  const CliResult info = run_cli({"info", name});
  REQUIRE(info.exit_code == 0);
  CHECK(contains(info.out, "2 rows written back, 1 refused (overwritten since sampled)"));
  const json j = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(j["learner"]["write_backs_applied"] == 2);
  CHECK(j["learner"]["write_backs_refused"] == 1);
  CHECK(j["schema"][1]["derived"] == true);
  CHECK(j["schema"][0]["derived"] == false);
  const CliResult watch = run_cli({"watch", name, "--once"});
  REQUIRE(watch.exit_code == 0);
  CHECK(contains(watch.out, "2 rows written back, 1 refused"));
  // A buffer nobody wrote back into says nothing of write-backs.
  const std::string other = unique_name("cli-wb0");
  SegmentGuard other_guard(other);
  REQUIRE(create(other, 1, 4).exit_code == 0);
  CHECK(!contains(run_cli({"info", other}).out, "written back"));
}
