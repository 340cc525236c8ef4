// tests/cli/rm.cpp: `shmreplay rm`: segments removed, foreign files refused, and a symlink at a buffer's name.
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include "cli_helpers.hpp"

TEST_CASE("rm removes segments and refuses a foreign file") {
  const std::string a = unique_name("cli");
  const std::string b = unique_name("cli");
  SegmentGuard guard_a(a);
  SegmentGuard guard_b(b);
  REQUIRE(create(a).exit_code == 0);
  REQUIRE(create(b).exit_code == 0);

  const CliResult r = run_cli({"rm", a, b});
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(r.out == fmt::format("removed '{}'\nremoved '{}'\n", a, b));
  CHECK_FALSE(Buffer::exists(a));
  CHECK_FALSE(Buffer::exists(b));

  SegmentGuard foreign(unique_name("cli-foreign"));
  write_file(foreign.path(), random_bytes());
  const CliResult refused = run_cli({"rm", foreign.name()});
  CHECK(refused.exit_code == 1);
  CHECK(one_error_line(refused.err));
  CHECK(contains(refused.err, "not a shmreplay segment"));
  CHECK(Buffer::exists(foreign.name()));

  const CliResult missing = run_cli({"rm", a});
  CHECK(missing.exit_code == 1);
  CHECK(one_error_line(missing.err));
  CHECK(contains(missing.err, "does not exist"));
}

namespace {

// The part of `text` from `from` to the end of its line; "" when `from` does not occur.
std::string rest_of_line(const std::string& text, const std::string& from) {
  const std::size_t at = text.find(from);
  if (at == std::string::npos) return {};
  return text.substr(at, text.find('\n', at) - at);
}

}  // namespace

TEST_CASE("a symlink at a buffer's name: info and rm word it alike, and create's advice is what rm accepts") {
  const std::string name = unique_name("cli-link");
  SegmentGuard guard(name);
  const std::string target = "/nonexistent/target";
  REQUIRE(::symlink(target.c_str(), guard.path().c_str()) == 0);
  const std::string sentence_start = fmt::format("'{}' is a symbolic link", guard.path());
  const CliResult info = run_cli({"info", name});
  const CliResult rm = run_cli({"rm", name});
  CHECK(info.exit_code == 1);
  CHECK(rm.exit_code == 1);
  const std::string info_says = rest_of_line(info.err, sentence_start);
  CHECK_FALSE(info_says.empty());
  CHECK(info_says == rest_of_line(rm.err, sentence_start));
  CHECK(contains(info_says, target));

  const CliResult c = create(name);
  CHECK(c.exit_code == 1);
  CHECK(one_error_line(c.err));
  CHECK(contains(c.err, sentence_start));
  CHECK_FALSE(contains(c.err, fmt::format("shmreplay rm {}", name)));
  CHECK(contains(c.err, fmt::format("rm '{}'", guard.path())));
  // The same for a file that is not a segment: rm refuses it, so create does not send the user there.
  std::remove(guard.path().c_str());
  write_file(guard.path(), random_bytes());
  const CliResult foreign = create(name);
  CHECK(foreign.exit_code == 1);
  CHECK(contains(foreign.err, "not a shmreplay segment"));
  CHECK_FALSE(contains(foreign.err, fmt::format("shmreplay rm {}", name)));
  CHECK(run_cli({"rm", name}).exit_code == 1);
  // A segment: create sends the user to `shmreplay rm`, which removes it.
  std::remove(guard.path().c_str());
  REQUIRE(create(name).exit_code == 0);
  const CliResult again = create(name);
  CHECK(again.exit_code == 1);
  CHECK(contains(again.err, fmt::format("`shmreplay rm {}`", name)));
  CHECK(run_cli({"rm", name}).exit_code == 0);
}

TEST_CASE("create --cold-capacity makes a cold tier that info shows, and rm removes its files with the segment") {
  const std::string name = unique_name("cli-cold");
  SegmentGuard guard(name);
  const shmreplay::test::DirGuard dir("/tmp/" + unique_name("cli-cold-dir"));
  std::filesystem::create_directories(dir.path());
  const CliResult made = run_cli({"create", name, "--envs", "2", "--capacity", "8", "--schema", "x:f32[3]",
                                  "--cold-capacity", "100", "--cold-dir", dir.path()});
  REQUIRE(made.exit_code == 0);
  CHECK(std::filesystem::exists(dir.path() + "/" + name + ".cold/env-1"));
  const CliResult info = run_cli({"info", name});
  CHECK(contains(info.out, "cold steps    0 on disk"));
  CHECK(contains(info.out, "100 per env"));
  const CliResult r = run_cli({"rm", name});
  CHECK(r.exit_code == 0);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/" + name + ".cold"));
  const CliResult bad = run_cli({"create", name, "--envs", "2", "--capacity", "8", "--schema", "x:f32[3]",
                                 "--cold-capacity", "100", "--cold-dir", "relative"});
  CHECK(bad.exit_code != 0);
  CHECK(contains(bad.err, "expected the absolute path"));
}
