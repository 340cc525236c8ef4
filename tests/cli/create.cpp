// tests/cli/create.cpp: `shmreplay create` (schema text and files, an existing name and --replace, --mode,
// --populate, bad specs and counts) and the command line as a whole: usage errors, --help, --version.
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include "cli_helpers.hpp"

TEST_CASE("create prints the segment's shape and info shows the schema and sizes") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const CliResult c = create(name, 3, 100);
  REQUIRE(c.exit_code == 0);
  CHECK(c.err.empty());
  CHECK(c.out.starts_with(fmt::format("created '{}': 3 envs x 100 steps, 25 bytes per step, ", name)));
  CHECK(contains(c.out, fmt::format("({})", guard.path())));
  CHECK(Buffer::exists(name));

  const CliResult i = run_cli({"info", name});
  REQUIRE(i.exit_code == 0);
  CHECK(i.err.empty());
  CHECK(words(line_starting(i.out, "name")) == std::vector<std::string>{"name", name});
  CHECK(words(line_starting(i.out, "path")) == std::vector<std::string>{"path", guard.path()});
  CHECK(words(line_starting(i.out, "layout")) ==
        std::vector<std::string>{"layout", fmt::format("{}.{}", layout::kLayoutMajor, layout::kLayoutMinor)});
  CHECK(words(line_starting(i.out, "envs")) == std::vector<std::string>{"envs", "3"});
  CHECK(contains(line_starting(i.out, "capacity"), "100 steps"));
  CHECK(contains(line_starting(i.out, "step"), "25 bytes"));
  CHECK(contains(line_starting(i.out, "creator"), "(exited)"));  // the creator was the CLI process, now exited
  CHECK(contains(i.out, kSpec));
  CHECK(words(line_starting(i.out, "  0  obs")) == std::vector<std::string>{"0", "obs", "f32", "[4]", "16"});
  CHECK(words(line_starting(i.out, "  3  done")) == std::vector<std::string>{"3", "done", "bool", "scalar", "1"});
  // The env table: env 2 has published nothing, has no owner and stores no bytes (the STORED column, last).
  bool saw_env_2 = false;
  std::istringstream lines(i.out);
  for (std::string line; std::getline(lines, line);) {
    const auto w = words(line);
    if (w.size() == 11 && w[0] == "2" && w[6] == "none") {
      CHECK(w == std::vector<std::string>{"2", "0", "0", "0", "0", "-", "none", "-", "never", "0", "bytes"});
      saw_env_2 = true;
    }
  }
  CHECK(saw_env_2);
}

TEST_CASE("create reads the schema from --schema-file, with newlines and comments") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const std::string file = fmt::format("/tmp/{}.schema", unique_name("cli-schema"));
  write_file(file, "# observation first\nobs:u8[2,3]   # image\naction:i64\n\ndone:bool\n");
  const CliResult c = run_cli({"create", name, "--envs", "2", "--capacity", "8", "--schema-file", file});
  std::remove(file.c_str());
  REQUIRE(c.exit_code == 0);
  CHECK(contains(c.out, "2 envs x 8 steps, 15 bytes per step"));

  const json j = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(j["schema_spec"] == "obs:u8[2,3] action:i64 done:bool");
  CHECK(j["schema"][0]["shape"] == json{2, 3});
}

TEST_CASE("create of a missing schema file fails with exit code 1 and names the file") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const CliResult c = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema-file", "/nonexistent/x"});
  CHECK(c.exit_code == 1);
  CHECK(one_error_line(c.err));
  CHECK(contains(c.err, "/nonexistent/x"));
  CHECK_FALSE(Buffer::exists(name));
}

TEST_CASE("create of an existing name fails with one error line, and --replace replaces it") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(create(name, 3, 100).exit_code == 0);

  const CliResult again = create(name, 5, 7);
  CHECK(again.exit_code == 1);
  CHECK(again.out.empty());
  CHECK(one_error_line(again.err));
  CHECK(contains(again.err, "already exists"));
  CHECK(contains(again.err, "shmreplay create --replace"));
  CHECK(Buffer::open(name, {.read_only = true}).num_envs() == 3);

  const CliResult replaced =
      run_cli({"create", name, "--envs", "5", "--capacity", "7", "--schema", "x:u8", "--replace"});
  CHECK(replaced.exit_code == 0);
  const Buffer b = Buffer::open(name, {.read_only = true});
  CHECK(b.num_envs() == 5);
  CHECK(b.capacity() == 7);
  CHECK(b.schema() == Schema::parse("x:u8"));
}

TEST_CASE("create with --mode sets the file's permission bits") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", "640"}).exit_code ==
          0);
  struct stat st {};
  REQUIRE(::stat(guard.path().c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);

  const CliResult bad = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", "9"});
  CHECK(bad.exit_code == 2);
  CHECK(one_error_line(bad.err));
}

TEST_CASE("create --populate always with --progress reports populating to 100%; never reports nothing; a bad "
          "value is a usage error") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const CliResult always = run_cli({"create", name, "--envs", "2", "--capacity", "64", "--schema", "obs:u8[4096]",
                                    "--populate", "always", "--progress"});
  REQUIRE(always.exit_code == 0);
  CHECK(contains(always.out, fmt::format("created '{}'", name)));
  CHECK(contains(line_starting(always.err, fmt::format("populating '{}': 100%", name)), "of"));

  const CliResult never = run_cli({"create", name, "--envs", "2", "--capacity", "64", "--schema", "obs:u8[4096]",
                                   "--replace", "--populate", "never", "--progress"});
  REQUIRE(never.exit_code == 0);
  CHECK(never.err.empty());

  const CliResult bad = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--replace",
                                 "--populate", "sometimes"});
  CHECK(bad.exit_code == 2);
  CHECK(one_error_line(bad.err));
}

TEST_CASE("a bad schema spec fails with exit code 1 and a message that names the field") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const CliResult r =
      run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "obs:f32[4] action:q7 done:bool"});
  CHECK(r.exit_code == 1);
  CHECK(one_error_line(r.err));
  CHECK(contains(r.err, "'action'"));
  CHECK(contains(r.err, "q7"));
  CHECK_FALSE(Buffer::exists(name));
}

TEST_CASE("an invalid count is refused by the library with exit code 1") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);
  const CliResult r = create(name, 0, 10);
  CHECK(r.exit_code == 1);
  CHECK(one_error_line(r.err));
  CHECK_FALSE(Buffer::exists(name));
}

TEST_CASE("--mode with execute, set-id or sticky bits is a usage error naming the mode; 0666 is created with a warning") {
  const std::string name = unique_name("cli-mode");
  SegmentGuard guard(name);
  for (const std::string mode : {"4777", "0755", "2660", "1666"}) {
    CAPTURE(mode);
    const CliResult r = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", mode});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, fmt::format("mode {} is not allowed", mode)));
    CHECK(contains(r.err, "expected a subset of 0666"));
    CHECK(r.out.empty());
    CHECK_FALSE(Buffer::exists(name));
  }
  const CliResult setuid = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", "4777"});
  CHECK(contains(setuid.err, "set-uid and execute bits (4111)"));

  const CliResult shared = run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", "0660"});
  REQUIRE(shared.exit_code == 0);
  CHECK(shared.err.empty());
  CHECK(file_mode(guard.path()) == 0660);
  const CliResult open_to_all =
      run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", "x:u8", "--mode", "0666", "--replace"});
  REQUIRE(open_to_all.exit_code == 0);
  CHECK(file_mode(guard.path()) == 0666);
  CHECK(open_to_all.err.starts_with(fmt::format("shmreplay: warning: mode 0666 makes segment '{}' world-writable", name)));
  CHECK(std::count(open_to_all.err.begin(), open_to_all.err.end(), '\n') == 1);

  // load --mode: the same rule for a new segment, and the same warning.
  FileGuard file{temp_file("cli-mode")};
  REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);
  const std::string copy = unique_name("cli-mode-load");
  SegmentGuard copy_guard(copy);
  const CliResult bad_load = run_cli({"load", file.path, copy, "--mode", "0700"});
  CHECK(bad_load.exit_code == 2);
  CHECK(contains(bad_load.err, "mode 0700 is not allowed"));
  CHECK_FALSE(Buffer::exists(copy));
  const CliResult loaded = run_cli({"load", file.path, copy, "--mode", "666"});
  REQUIRE(loaded.exit_code == 0);
  CHECK(file_mode(copy_guard.path()) == 0666);
  CHECK(contains(loaded.err, fmt::format("shmreplay: warning: mode 0666 makes segment '{}' world-writable", copy)));
}

TEST_CASE("usage errors exit with code 2 and one error line") {
  const std::string name = unique_name("cli");
  SegmentGuard guard(name);

  SUBCASE("missing --envs") {
    const CliResult r = run_cli({"create", name, "--capacity", "10", "--schema", kSpec});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, "--envs"));
    CHECK_FALSE(Buffer::exists(name));
  }
  SUBCASE("a count that is not a decimal number") {
    for (const char* count : {"-1", "0x10", "ten", "99999999999999999999999"}) {
      CAPTURE(count);
      const CliResult r = run_cli({"create", name, "--envs", count, "--capacity", "10", "--schema", kSpec});
      CHECK(r.exit_code == 2);
      CHECK(one_error_line(r.err));
    }
    CHECK_FALSE(Buffer::exists(name));
  }
  SUBCASE("both --schema and --schema-file, or neither") {
    CHECK(run_cli({"create", name, "--envs", "1", "--capacity", "1", "--schema", kSpec, "--schema-file", "/x"})
              .exit_code == 2);
    const CliResult r = run_cli({"create", name, "--envs", "1", "--capacity", "1"});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
  }
  SUBCASE("an unknown subcommand") {
    const CliResult r = run_cli({"frobnicate", name});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, "frobnicate"));
  }
  SUBCASE("no subcommand") {
    const CliResult r = run_cli({});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
  }
  SUBCASE("an unknown option") {
    const CliResult r = run_cli({"ls", "--bogus"});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, "--bogus"));
  }
}

TEST_CASE("--help prints the usage and exits with code 0") {
  const CliResult top = run_cli({"--help"});
  CHECK(top.exit_code == 0);
  CHECK(top.err.empty());
  for (const char* sub : {"create", "ls", "info", "rm"}) CHECK(contains(top.out, sub));

  const CliResult sub = run_cli({"create", "--help"});
  CHECK(sub.exit_code == 0);
  CHECK(contains(sub.out, "--schema-file"));
  CHECK(contains(sub.out, "--replace"));
}

TEST_CASE("--version prints the library and the layout versions") {
  const CliResult r = run_cli({"--version"});
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(contains(r.out, kVersion));
  CHECK(contains(r.out, fmt::format("layout {}.{}", layout::kLayoutMajor, layout::kLayoutMinor)));
}

TEST_CASE("create of a stacked schema with --stack-restarts prints the bytes per step as pushed and as stored, and "
          "info shows the stacking; without a stacked field --stack-restarts is refused") {
  const std::string name = unique_name("cli-stack");
  SegmentGuard guard(name);
  const CliResult c = run_cli({"create", name, "--envs", "2", "--capacity", "16", "--schema", kStackedSpec,
                               "--stack-restarts", "3"});
  REQUIRE(c.exit_code == 0);
  CHECK(c.err.empty());
  // 16 + 2 x (1 + 3) = 24 frames of 16 bytes per env, 16 index words of 8 bytes, and t's 4 bytes per step:
  // (24 x 16 + 16 x 8 + 16 x 4) / 16 = 36 bytes stored per step, against 48 + 4 = 52 as pushed.
  CHECK(c.out.starts_with(
      fmt::format("created '{}': 2 envs x 16 steps, 52 bytes as pushed, 36.0 stored per step, ", name)));
  {
    const Buffer b = Buffer::open(name, {.read_only = true});
    REQUIRE(segment_of(b).stacks().size() == 1);
    CHECK(segment_of(b).stacks()[0].frames == 24);
    CHECK(b.schema() == Schema::parse(kStackedSpec));
  }

  const CliResult i = run_cli({"info", name});
  REQUIRE(i.exit_code == 0);
  CHECK(words(line_starting(i.out, "step")) ==
        std::vector<std::string>{"step", "52", "bytes", "as", "pushed,", "36.0", "stored"});
  CHECK(line_starting(i.out, "stacked") == "stacked       obs: 3 frames on axis 0; 24 frames per env of 16 bytes "
                                            "(room for 3 restarts per env at no loss)");
  CHECK(contains(i.out, "obs:u8[3,4,4]:stack=0 t:u32"));
  CHECK(words(line_starting(i.out, "  0  obs")) ==
        std::vector<std::string>{"0", "obs", "u8", "[3,4,4]", "48", "axis", "0,", "3", "frames", "of", "16", "bytes"});
  CHECK(words(line_starting(i.out, "  1  t")) == std::vector<std::string>{"1", "t", "u32", "scalar", "4", "-"});

  const std::string plain = unique_name("cli-stack");
  SegmentGuard plain_guard(plain);
  const CliResult p = run_cli({"create", plain, "--envs", "2", "--capacity", "16", "--schema", kSpec,
                               "--stack-restarts", "3"});
  CHECK(p.exit_code == 1);
  CHECK(one_error_line(p.err));
  CHECK(contains(p.err, "stack_restarts is 3, but the schema has no stacked field"));
  CHECK_FALSE(Buffer::exists(plain));
}

TEST_CASE("create --stack-continuity episodes makes writers trust the episode flags, info and info --json say which "
          "rule, and the rule is refused without episode fields or with an unknown name") {
  const std::string name = unique_name("cli-stack-rule");
  SegmentGuard guard(name);
  const std::string spec = std::string(kStackedSpec) + " d:bool";
  const CliResult c = run_cli({"create", name, "--envs", "1", "--capacity", "16", "--schema", spec, "--done", "d",
                               "--stack-continuity", "Episodes"});
  REQUIRE(c.exit_code == 0);
  CHECK(Buffer::open(name, {.read_only = true}).stack_continuity() == StackContinuity::episodes);
  const CliResult i = run_cli({"info", name});
  REQUIRE(i.exit_code == 0);
  CHECK(contains(line_starting(i.out, "continuity"), "episodes (a stack continues unless the previous step ended"));
  const CliResult j = run_cli({"info", name, "--json"});
  REQUIRE(j.exit_code == 0);
  CHECK(contains(j.out, "\"stack_continuity\": \"episodes\""));

  const std::string other = unique_name("cli-stack-rule");
  SegmentGuard other_guard(other);
  const CliResult n = run_cli({"create", other, "--envs", "1", "--capacity", "16", "--schema", kStackedSpec,
                               "--stack-continuity", "episodes"});
  CHECK(n.exit_code == 1);
  CHECK(contains(n.err, "but the buffer has no episode fields"));
  const CliResult u = run_cli({"create", other, "--envs", "1", "--capacity", "16", "--schema", kStackedSpec,
                               "--stack-continuity", "sometimes"});
  CHECK(u.exit_code != 0);
  CHECK(contains(u.err, "--stack-continuity"));
  CHECK_FALSE(Buffer::exists(other));
}

TEST_CASE("--learners, --stack-restarts and --episode-queue take non-negative decimal integers: -1 is a usage error "
          "naming the option, never a wrapped 2^64 - 1") {
  const std::string name = unique_name("cli-neg");
  SegmentGuard guard(name);
  for (const std::string option : {"--learners", "--stack-restarts", "--episode-queue"}) {
    CAPTURE(option);
    const CliResult r = run_cli({"create", name, "--envs", "1", "--capacity", "8", "--schema",
                                 "obs:u8[2,4]:stack=0 done:bool", "--done", "done", option, "-1"});
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, option));
    CHECK(contains(r.err, "'-1' is not a non-negative decimal integer"));
    CHECK_FALSE(contains(r.err, "18446744073709551615"));
    CHECK_FALSE(Buffer::exists(name));
  }
}

TEST_CASE("create takes the sampling policies (initial priority, sequence priorities, consuming queue) and info "
          "shows them") {
  const std::string name = unique_name("cli-prio-policies");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "32", "--schema", "x:u8", "--priority-exponent",
                   "0.6", "--initial-priority", "inf", "--sequence-priority-length", "4"}).exit_code == 0);
  {
    const Buffer b = Buffer::open(name, {.read_only = true});
    REQUIRE(b.initial_priority().has_value());
    CHECK(std::isinf(*b.initial_priority()));
    CHECK(b.sequence_priority_length() == 4);
  }
  CHECK(contains(run_cli({"info", name}).out, "new steps at drawn first (inf); sequence priorities over 4 steps"));
  const json j = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(j["priorities"]["initial_priority"] == "inf");
  CHECK(j["priorities"]["sequence_priority_length"] == 4);

  const std::string fixed = unique_name("cli-prio-fixed");
  SegmentGuard fixed_guard(fixed);
  REQUIRE(run_cli({"create", fixed, "--envs", "1", "--capacity", "8", "--schema", "x:u8", "--priority-exponent", "1",
                   "--initial-priority", "2.5"}).exit_code == 0);
  CHECK(contains(run_cli({"info", fixed}).out, "new steps at 2.5;"));
  CHECK(parse_json(run_cli({"info", fixed, "--json"}).out)["priorities"]["initial_priority"] == 2.5);

  const std::string queue = unique_name("cli-queue");
  SegmentGuard queue_guard(queue);
  REQUIRE(run_cli({"create", queue, "--envs", "1", "--capacity", "8", "--schema", "x:u8", "--consuming-queue"})
              .exit_code == 0);
  CHECK(Buffer::open(queue, {.read_only = true}).consuming_queue());
  CHECK(contains(run_cli({"info", queue}).out, "consuming queue"));
  CHECK(parse_json(run_cli({"info", queue, "--json"}).out)["consuming_queue"] == true);
  // What the library refuses is refused with its message: an initial priority needs priorities.
  SegmentGuard bad_guard(unique_name("cli-prio-bad"));
  const CliResult bad = run_cli({"create", bad_guard.name(), "--envs", "1", "--capacity", "8", "--schema", "x:u8",
                                 "--initial-priority", "1"});
  CHECK(bad.exit_code == 1);
  CHECK(contains(bad.err, "initial_priority"));
}
