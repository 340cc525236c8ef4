// tests/cli/other_user.cpp: a segment of another user: info and ls show its owner; save, limit and load refuse
// it.
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include "cli_helpers.hpp"

TEST_CASE("a segment of another user: info and ls show its owner; save, limit and load refuse it unless "
          "--allow-other-owner") {
  const std::string name = unique_name("cli-squat");
  SegmentGuard guard(name);
  REQUIRE(run_cli({"create", name, "--envs", "2", "--capacity", "8", "--schema", "x:u8", "--mode", "0666"}).exit_code ==
          0);
  {
    Buffer b = Buffer::open(name);
    Writer w(b, std::vector<uint64_t>{0, 1});
    for (uint8_t x = 0; x < 5; ++x) {
      for (uint64_t e = 0; e < 2; ++e) w.push_one(e, {FieldBytes{&x, 1}});
    }
  }
  if (::chown(guard.path().c_str(), 65534, static_cast<gid_t>(-1)) != 0) {
    MESSAGE("skipped: chown needs root");
    return;
  }
  const std::string nobody = user_name(65534);
  // The display commands show it, with its owner.
  const CliResult info = run_cli({"info", name});
  REQUIRE(info.exit_code == 0);
  const std::string owner = line_starting(info.out, "owner ");
  CHECK(contains(owner, "uid 65534"));
  CHECK(contains(owner, "another user"));
  CHECK(contains(owner, fmt::format("uid {}", ::geteuid())));
  const json j = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(j["owner_uid"] == 65534);
  const CliResult ls = run_cli({"ls"});
  REQUIRE(ls.exit_code == 0);
  CHECK(contains(line_starting(ls.out, "NAME"), "OWNER"));
  const std::vector<std::string> row = words(line_starting(ls.out, name + " "));
  CHECK(std::find(row.begin(), row.end(), nobody.empty() ? std::string("65534") : nobody) != row.end());
  const json all = parse_json(run_cli({"ls", "--json"}).out);
  const json* listed = find_named(all, name);
  REQUIRE(listed != nullptr);
  CHECK((*listed)["owner_uid"] == 65534);
  CHECK(run_cli({"dump", name}).exit_code == 0);
  CHECK(run_cli({"limit", name}).exit_code == 0);

  // The commands that take its data or write to it refuse it, naming both users, unless told otherwise.
  FileGuard file{temp_file("cli-squat")};
  const CliResult save = run_cli({"save", name, file.path});
  CHECK(save.exit_code == 1);
  CHECK(one_error_line(save.err));
  CHECK(contains(save.err, "uid 65534"));
  CHECK(contains(save.err, fmt::format("uid {}", ::geteuid())));
  CHECK(contains(save.err, "--allow-other-owner"));
  CHECK(::access(file.path.c_str(), F_OK) != 0);
  REQUIRE(run_cli({"save", name, file.path, "--allow-other-owner"}).exit_code == 0);

  const CliResult limit = run_cli({"limit", name, "--min-size-to-sample", "3"});
  CHECK(limit.exit_code == 1);
  CHECK(contains(limit.err, "--allow-other-owner"));
  CHECK(run_cli({"limit", name, "--min-size-to-sample", "3", "--allow-other-owner"}).exit_code == 0);

  const CliResult load = run_cli({"load", file.path, name});
  CHECK(load.exit_code == 1);
  CHECK(contains(load.err, "--allow-other-owner"));
  // The limit set above differs from the checkpoint's (none): refused unless --allow-mismatch too.
  const CliResult mismatch = run_cli({"load", file.path, name, "--allow-other-owner"});
  CHECK(mismatch.exit_code == 1);
  CHECK(contains(mismatch.err, "rate limiter"));
  CHECK(run_cli({"load", file.path, name, "--allow-other-owner", "--allow-mismatch"}).exit_code == 0);
}

TEST_CASE("a chain directory of another user: save --every refuses it and ends, load refuses it, both name the "
          "users and the flag; with --allow-other-owner both run") {
  const std::string name = unique_name("cli-chain-owner");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 1, 8).exit_code == 0);
  push_payloads(name, {5});
  test::DirGuard dir{fmt::format("/tmp/{}.chain", unique_name("cli-chain-owner"))};
  REQUIRE(::mkdir(dir.path().c_str(), 0777) == 0);
  if (::chown(dir.path().c_str(), 65534, static_cast<gid_t>(-1)) != 0) {
    MESSAGE("skipped: chown needs root");
    return;
  }
  const CliResult save = run_cli({"save", name, dir.path(), "--every", "0.01", "--count", "3"});
  CHECK(save.exit_code == 1);
  CHECK(one_error_line(save.err));  // the first link ends the command
  CHECK(contains(save.err, "uid 65534"));
  CHECK(contains(save.err, fmt::format("uid {}", ::geteuid())));
  CHECK(contains(save.err, "--allow-other-owner"));
  CHECK(test::entries_containing(dir.path(), "").empty());
  REQUIRE(run_cli({"save", name, dir.path(), "--every", "0.01", "--count", "1", "--allow-other-owner"}).exit_code ==
          0);

  const std::string copy = unique_name("cli-chain-owner-copy");
  SegmentGuard copy_guard(copy);
  const CliResult load = run_cli({"load", dir.path(), copy});
  CHECK(load.exit_code == 1);
  CHECK(one_error_line(load.err));
  CHECK(contains(load.err, "--allow-other-owner"));
  CHECK_FALSE(Buffer::exists(copy));
  CHECK(run_cli({"load", dir.path(), copy, "--allow-other-owner"}).exit_code == 0);
}
