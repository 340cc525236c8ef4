// tests/cli/limit.cpp: `shmreplay limit` and create --samples-per-insert: a rate limit shown, changed and removed.
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include "cli_helpers.hpp"

TEST_CASE("create --samples-per-insert makes a rate-limited buffer; limit shows, changes and removes it; info shows "
          "its counts") {
  const std::string name = unique_name("clilimit");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "64", "--schema", "x:u8", "--samples-per-insert", "2",
                   "--error-buffer", "16", "--min-size-to-sample", "4"}).exit_code == 0);
  {
    Buffer b = Buffer::open(name);
    REQUIRE(b.rate_limit().has_value());
    CHECK(*b.rate_limit() == RateLimit::ratio(2.0, 4, 16.0));
    Writer w(b, std::vector<uint64_t>{0, 1});
    const uint8_t x[2] = {1, 2};
    const uint64_t ids[2] = {0, 1};
    const FieldBytes fields[1] = {field_bytes(std::span<const uint8_t>(x, 2))};
    for (int i = 0; i < 5; ++i) w.push(std::span<const uint64_t>(ids, 2), fields);
  }
  const CliResult info = run_cli({"info", name});
  REQUIRE(info.exit_code == 0);
  CHECK(contains(info.out, "rate limit    samples_per_insert 2, min_size_to_sample 4, error buffer 16"));
  CHECK(contains(info.out, "10 inserts, 0 samples (0 per insert), error 20"));
  const json j = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(j["rate_limit"]["inserts"] == 10);
  CHECK(j["rate_limit"]["error"] == 20.0);
  CHECK(j["rate_limit"]["max_diff"] == 24.0);
  // Shown without a change (read-only), then changed, then removed.
  const CliResult shown = run_cli({"limit", name});
  REQUIRE(shown.exit_code == 0);
  CHECK(contains(shown.out, "rate limit samples_per_insert 2"));
  CHECK(Buffer::open(name).rate_limit_state().changes == 0);
  const CliResult changed = run_cli({"limit", name, "--min-size-to-sample", "8"});  // the ratio is kept
  REQUIRE(changed.exit_code == 0);
  CHECK(contains(changed.out, "new rate limit samples_per_insert 2, min_size_to_sample 8"));
  CHECK(*Buffer::open(name).rate_limit() == RateLimit::ratio(2.0, 8, 16.0));
  CHECK(run_cli({"limit", name, "--off"}).exit_code == 0);
  CHECK_FALSE(Buffer::open(name).rate_limit().has_value());
  CHECK(parse_json(run_cli({"limit", name, "--json"}).out)["rate_limit"].is_null());
  // Incomplete or impossible settings are refused with the reason.
  const CliResult half = run_cli({"limit", name, "--samples-per-insert", "2"});
  CHECK(half.exit_code == 1);
  CHECK(contains(half.err, "--samples-per-insert needs --error-buffer"));
  const CliResult tight = run_cli({"limit", name, "--samples-per-insert", "4", "--error-buffer", "1"});
  CHECK(tight.exit_code == 1);
  CHECK(contains(tight.err, "expected at least 4"));
  const CliResult both = run_cli({"limit", name, "--off", "--min-size-to-sample", "3"});
  CHECK(both.exit_code == 1);
  CHECK(contains(both.err, "--off removes the rate limiter"));
}

TEST_CASE("limit changes only the settings it is given, and non-finite numbers are usage errors") {
  const std::string name = unique_name("cli-limitkeep");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "64", "--schema", "x:u8", "--samples-per-insert", "2",
                   "--error-buffer", "16", "--min-size-to-sample", "4"}).exit_code == 0);
  const auto limit_now = [&] { return Buffer::open(name, {.read_only = true}).rate_limit(); };
  const CliResult min_size = run_cli({"limit", name, "--min-size-to-sample", "8"});
  REQUIRE(min_size.exit_code == 0);
  CHECK(contains(min_size.out, "new rate limit samples_per_insert 2, min_size_to_sample 8, error buffer 16"));
  CHECK(limit_now() == RateLimit::ratio(2.0, 8, 16.0));
  CHECK(run_cli({"limit", name, "--samples-per-insert", "3"}).exit_code == 0);
  CHECK(limit_now() == RateLimit::ratio(3.0, 8, 16.0));
  CHECK(run_cli({"limit", name, "--error-buffer", "24"}).exit_code == 0);
  CHECK(limit_now() == RateLimit::ratio(3.0, 8, 24.0));
  // From a minimum size alone, a ratio keeps the minimum size.
  REQUIRE(run_cli({"limit", name, "--off"}).exit_code == 0);
  REQUIRE(run_cli({"limit", name, "--min-size-to-sample", "5"}).exit_code == 0);
  CHECK(limit_now() == RateLimit::min_size(5));
  const CliResult half = run_cli({"limit", name, "--samples-per-insert", "2"});
  CHECK(half.exit_code == 1);
  CHECK(contains(half.err, "--samples-per-insert needs --error-buffer"));
  CHECK(run_cli({"limit", name, "--samples-per-insert", "2", "--error-buffer", "16"}).exit_code == 0);
  CHECK(limit_now() == RateLimit::ratio(2.0, 5, 16.0));

  for (const std::string& value : {std::string("inf"), std::string("-inf"), std::string("nan"), std::string("1e400")}) {
    for (const bool bad_ratio : {false, true}) {
      CAPTURE(value);
      CAPTURE(bad_ratio);
      const std::vector<std::string> pair = {"--samples-per-insert", bad_ratio ? value : "2", "--error-buffer",
                                             bad_ratio ? "16" : value};
      std::vector<std::string> args = {"limit", name};
      args.insert(args.end(), pair.begin(), pair.end());
      const CliResult r = run_cli(args);
      CHECK(r.exit_code == 2);
      CHECK(one_error_line(r.err));
      CHECK(contains(r.err, fmt::format("{}: '{}' is not a finite number", bad_ratio ? "--samples-per-insert"
                                                                                      : "--error-buffer",
                                        value)));
      const std::string other = unique_name("cli-limitinf");
      SegmentGuard other_guard(other);
      args = {"create", other, "--envs", "1", "--capacity", "8", "--schema", "x:u8"};
      args.insert(args.end(), pair.begin(), pair.end());
      const CliResult c = run_cli(args);
      CHECK(c.exit_code == 2);
      CHECK(contains(c.err, fmt::format("'{}' is not a finite number", value)));
      CHECK_FALSE(Buffer::exists(other));
    }
  }
  CHECK(limit_now() == RateLimit::ratio(2.0, 5, 16.0));
}

TEST_CASE("create --policy-version and --max-times-sampled make such a buffer; limit --max-staleness sets and removes "
          "its window, keeping the version and the rate limiter") {
  const std::string name = unique_name("cli-window");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "64", "--schema", "v:u32 x:u8", "--policy-version", "v",
                   "--max-times-sampled", "3", "--min-size-to-sample", "4"}).exit_code == 0);
  {
    Buffer b = Buffer::open(name);
    CHECK(b.episode_fields().policy_version == 0u);
    CHECK(b.max_times_sampled() == 3);
    Sampler s(b);
    s.publish_policy(7, std::nullopt);
  }
  const CliResult set = run_cli({"limit", name, "--max-staleness", "2"});
  REQUIRE(set.exit_code == 0);
  CHECK(contains(set.out, "'" + name + "': new policy version 7, max_staleness 2 (versions >= 5); field 'v'"));
  CHECK_FALSE(contains(set.out, "rate limit"));  // only what changed
  const PolicyState st = Buffer::open(name, {.read_only = true}).policy();
  CHECK(st.version == 7);
  CHECK(st.max_staleness == 2);
  CHECK(Buffer::open(name, {.read_only = true}).rate_limit() == RateLimit::min_size(4));
  const json j = parse_json(run_cli({"limit", name, "--json"}).out);
  CHECK(j["policy"]["version"] == 7);
  CHECK(j["policy"]["max_staleness"] == 2);
  CHECK(j["policy"]["field"] == "v");
  CHECK(j["rate_limit"]["min_size_to_sample"] == 4);
  const CliResult shown = run_cli({"limit", name});
  CHECK(contains(shown.out, "rate limit min size 4"));
  CHECK(contains(shown.out, "policy version 7, max_staleness 2"));
  {  // a checkpoint keeps the version and the window, and save --json says which
    const std::string file = temp_file("cli-window");
    FileGuard file_guard{file};
    const json saved = parse_json(run_cli({"save", name, file, "--json"}).out);
    CHECK(saved["policy_version"] == 7);
    CHECK(saved["policy_max_staleness"] == 2);
  }
  REQUIRE(run_cli({"limit", name, "--max-staleness", "off"}).exit_code == 0);
  CHECK_FALSE(Buffer::open(name, {.read_only = true}).policy().max_staleness.has_value());
  CHECK(parse_json(run_cli({"limit", name, "--json"}).out)["policy"]["max_staleness"].is_null());
  for (const std::string& bad : {std::string("-1"), std::string("x"), std::string("18446744073709551615"), std::string("")}) {
    CAPTURE(bad);
    const CliResult r = run_cli({"limit", name, "--max-staleness", bad});
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, "is not a staleness window: a number of versions"));
  }
  // A window on a buffer without a policy-version field is refused, and nothing else it was given is changed.
  const std::string plain = unique_name("cli-window-plain");
  SegmentGuard plain_guard(plain);
  REQUIRE(run_cli({"create", plain, "--envs", "1", "--capacity", "8", "--schema", "x:u8"}).exit_code == 0);
  const CliResult refused = run_cli({"limit", plain, "--max-staleness", "2", "--min-size-to-sample", "3"});
  CHECK(refused.exit_code == 1);
  CHECK(contains(refused.err, "cannot set the policy window of '" + plain + "': it has no policy-version field"));
  CHECK_FALSE(Buffer::open(plain, {.read_only = true}).rate_limit().has_value());
  SegmentGuard cap_guard(unique_name("cli-cap-bad"));
  const CliResult cap = run_cli({"create", cap_guard.name(), "--envs", "1", "--capacity", "8", "--schema",
                                 "x:u8", "--max-times-sampled", "300"});
  CHECK(cap.exit_code == 1);
  CHECK(contains(cap.err, "max_times_sampled"));
}
