// tests/cli/save_load.cpp: `shmreplay save` and `shmreplay load`: under a writer that keeps pushing, progress,
// refused checkpoints and segments, file modes, and replacing a file; `shmreplay journal` and the load of its chain.
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include <chrono>
#include <thread>

#include "shmreplay/internal/checkpoint_format.hpp"
#include "cli_helpers.hpp"

TEST_CASE("save while a writer process keeps pushing, then load: every restored step is the one its writer published") {
  const std::string name = unique_name("cli-save");
  const std::string copy = unique_name("cli-load");
  SegmentGuard guard(name);
  SegmentGuard copy_guard(copy);
  FileGuard file{temp_file("cli-save")};
  REQUIRE(create_payload(name, 4, 128).exit_code == 0);
  const Buffer source = Buffer::open(name, {.read_only = true});
  WriterProcess writer(name, all_envs(4), /*flat_out=*/true);
  writer.wait_for_heads(source, 3 * 128);  // every ring lapped: the save must follow a moving window

  const CliResult saved = run_cli({"save", name, file.path, "--json"});
  REQUIRE(saved.exit_code == 0);
  CHECK(saved.err.empty());  // stderr is not a terminal and --progress was not given: no progress bar
  const json s = parse_json(saved.out);
  CHECK(s["source"] == name);
  CHECK(s["file"] == file.path);
  CHECK(s["num_envs"] == 4);
  CHECK(s["capacity"] == 128);
  CHECK(s["schema_spec"] == kPayloadSpec);
  CHECK(s["format"] == "2.4");
  REQUIRE(s["envs"].size() == 4);
  uint64_t total = 0;
  for (const json& e : s["envs"]) {
    CAPTURE(e.dump());
    // A full window: claimed = head holds the last 128 steps; claimed = head + 1 (a write in progress), 127.
    CHECK(e["steps"].get<uint64_t>() == (e["claimed"] == e["head"] ? 128u : 127u));
    CHECK(e["first_step"].get<uint64_t>() + e["steps"].get<uint64_t>() == e["head"].get<uint64_t>());
    CHECK(e["head"].get<uint64_t>() <= segment_of(source).env_control(e["env"].get<uint64_t>()).head.load());
    total += e["steps"].get<uint64_t>();
  }
  CHECK(s["total_steps"] == total);
  CHECK(s["file_bytes"] == whole_file(file.path).size());
  CHECK(writer.stop() == 0);

  const CliResult loaded = run_cli({"load", file.path, copy, "--json"});
  REQUIRE(loaded.exit_code == 0);
  const json l = parse_json(loaded.out);
  CHECK(l["name"] == copy);
  CHECK(l["created"] == true);
  CHECK(l["checkpoint"]["total_steps"] == total);

  const Buffer restored = Buffer::open(copy, {.read_only = true});
  CHECK(restored.schema() == test::kPayloadSchema);
  for (uint64_t e = 0; e < 4; ++e) {
    CAPTURE(e);
    const json& saved_env = s["envs"][e];
    CHECK(segment_of(restored).env_control(e).head.load() == saved_env["head"].get<uint64_t>());
    CHECK(segment_of(restored).env_control(e).claimed.load() == saved_env["claimed"].get<uint64_t>());
    CHECK(check_env_payloads(restored, e) == "");
  }

  // dump --json --full of the copy reads the same steps back: each header is {env, step, version 0, checksum}.
  const CliResult dumped = run_cli({"dump", copy, "--json", "--full", "--field", "hdr"});
  REQUIRE(dumped.exit_code == 0);
  const std::vector<json> rows = json_lines(dumped.out);
  CHECK(rows.size() == total);
  for (const json& row : rows) {
    const uint64_t env = row["env"];
    const uint64_t step = row["step"];
    const test::Payload p = test::make_payload(env, step, 0);
    CHECK(row["fields"]["hdr"] == json{p.hdr[0], p.hdr[1], p.hdr[2], p.hdr[3]});
  }
}

TEST_CASE("save and load of a stacked buffer: the checkpoint holds whole stacks, the loaded buffer stores them as "
          "frames and gives back every stack byte for byte, and a writer goes on after the loaded frames") {
  const std::string name = unique_name("cli-save-stack");
  const std::string copy = unique_name("cli-load-stack");
  SegmentGuard guard(name);
  SegmentGuard copy_guard(copy);
  FileGuard file{temp_file("cli-save-stack")};
  Buffer::create(name, 2, 16, Schema::parse(kStackedSpec));
  push_stacks(name, {16, 4});  // env 0 holds steps 4-15 (its restarts cost steps 0-3), env 1 steps 0-3

  const CliResult saved = run_cli({"save", name, file.path, "--json"});
  INFO(saved.err);
  REQUIRE(saved.exit_code == 0);
  const json s = parse_json(saved.out);
  CHECK(s["schema_spec"] == kStackedSpec);
  CHECK(s["envs"][0]["first_step"] == 4);
  CHECK(s["envs"][0]["steps"] == 12);
  CHECK(s["envs"][1]["first_step"] == 0);
  CHECK(s["envs"][1]["steps"] == 4);
  CHECK(s["total_steps"] == 16);
  CHECK(s["file_bytes"].get<uint64_t>() > 16 * 52);  // whole stacks: 52 bytes a record, as pushed

  const CliResult loaded = run_cli({"load", file.path, copy, "--json"});
  REQUIRE(loaded.exit_code == 0);
  CHECK(parse_json(loaded.out)["created"] == true);
  {
    const Buffer restored = Buffer::open(copy, {.read_only = true});
    CHECK(restored.schema() == Schema::parse(kStackedSpec));
    REQUIRE(segment_of(restored).stacks().size() == 1);
    CHECK(segment_of(restored).stacks()[0].frames == 20);  // the default reserve, as the source's
    CHECK(segment_of(restored).env_control(0).stacks_intact_from.load() == 4);
    for (uint64_t e = 0; e < 2; ++e) {
      CAPTURE(e);
      const StepRecords r = read_steps(restored, e, 0, 100);
      CHECK(r.first_step == (e == 0 ? 4u : 0u));
      REQUIRE(r.count == (e == 0 ? 12u : 4u));
      for (uint64_t i = 0; i < r.count; ++i) {
        const uint64_t step = r.first_step + i;
        CAPTURE(step);
        const std::vector<uint8_t> stack = expected_stack(e, step);
        const auto obs = r.field(i, 0);
        CHECK(std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(obs.data()),
                                   reinterpret_cast<const uint8_t*>(obs.data()) + obs.size()) == stack);
      }
    }
  }
  // dump reads the same steps from both.
  const CliResult a = run_cli({"dump", name, "--json", "--full"});
  const CliResult b = run_cli({"dump", copy, "--json", "--full"});
  REQUIRE(a.exit_code == 0);
  CHECK(a.out == b.out);

  // A writer of the loaded buffer resumes after the loaded frames: env 1's step 4 starts an episode, its step 5
  // continues it (one new frame against the loaded step 4's), and both read back as pushed.
  {
    Buffer target = Buffer::open(copy);
    Writer w(target, std::vector<uint64_t>{1});
    for (uint64_t step = 4; step < 8; ++step) {
      const std::vector<uint8_t> stack = expected_stack(1, step);
      const std::vector<uint32_t> t{static_cast<uint32_t>(step)};
      w.push_one(1, {field_bytes(stack), field_bytes(t)});
    }
  }
  const std::vector<json> rows = json_lines(run_cli({"dump", copy, "--env", "1", "--json", "--full"}).out);
  REQUIRE(rows.size() == 8);
  for (uint64_t step = 0; step < 8; ++step) {
    CAPTURE(step);
    const std::vector<uint8_t> stack = expected_stack(1, step);
    CHECK(flat_elements(rows[step]["fields"]["obs"]) == std::vector<uint64_t>(stack.begin(), stack.end()));
  }
}

TEST_CASE("save and load show progress on stderr with --progress") {
  const std::string name = unique_name("cli-progress");
  SegmentGuard guard(name);
  FileGuard file{temp_file("cli-progress")};
  REQUIRE(create_payload(name, 2, 64).exit_code == 0);
  push_payloads(name, {100, 10});
  const CliResult saved = run_cli({"save", name, file.path, "--progress"});
  REQUIRE(saved.exit_code == 0);
  CHECK(contains(saved.out, fmt::format("saved '{}' to '{}'", name, file.path)));
  CHECK(contains(saved.out, "74 steps stored"));
  CHECK(contains(saved.err, "saving"));
  CHECK(contains(saved.err, "100%"));
  const CliResult loaded = run_cli({"load", file.path, "--progress"});  // into the segment it came from
  REQUIRE(loaded.exit_code == 0);
  CHECK(contains(loaded.out, fmt::format("into existing segment '{}'", name)));
  CHECK(contains(loaded.err, "verifying"));
  CHECK(contains(loaded.err, "loading"));
}

TEST_CASE("load refuses truncated and corrupt checkpoints with one error line and leaves the target untouched") {
  const std::string name = unique_name("cli-bad");
  const std::string fresh = unique_name("cli-fresh");
  SegmentGuard guard(name);
  SegmentGuard fresh_guard(fresh);
  FileGuard good{temp_file("cli-good")};
  FileGuard bad{temp_file("cli-bad")};
  REQUIRE(create_payload(name, 3, 16).exit_code == 0);
  push_payloads(name, {20, 5, 0});
  REQUIRE(run_cli({"save", name, good.path}).exit_code == 0);
  push_payloads(name, {3, 3, 3});  // the target now differs from the checkpoint
  const std::string target_before = whole_file(guard.path());
  const std::string whole = whole_file(good.path);
  const CheckpointInfo info = verify_checkpoint(good.path);
  const uint64_t records = info.envs[0].offset + sizeof(checkpoint_format::EnvSection);

  const auto refused = [&](const std::string& what, Errc code, bool also_new) {
    CAPTURE(what);
    for (const std::string& target : also_new ? std::vector<std::string>{name, fresh} : std::vector<std::string>{name}) {
      const CliResult r = run_cli({"load", bad.path, target});
      CHECK(r.exit_code == 1);
      CHECK(r.out.empty());
      CHECK(one_error_line(r.err));
      CHECK(contains(r.err, bad.path));
      CHECK(contains(r.err, code == Errc::truncated ? "truncated" : "corrupt"));
    }
    CHECK(whole_file(guard.path()) == target_before);
    CHECK_FALSE(Buffer::exists(fresh));
  };
  // A few cuts and flips against the existing target, the first of each also against a new name
  // (test_checkpoint tries every byte of the headers against the library).
  for (const uint64_t length : {records + 100, uint64_t{100}, uint64_t{whole.size() - 1}}) {
    replace_file(bad.path, std::string_view(whole).substr(0, length));
    refused(fmt::format("truncated to {} bytes", length), Errc::truncated, length == records + 100);
  }
  for (const uint64_t at : {records + 50, uint64_t{130}, info.envs[1].offset + 16}) {
    std::string flipped = whole;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x40);
    replace_file(bad.path, flipped);
    refused(fmt::format("byte {} flipped", at), Errc::corrupt, at == records + 50);
  }
  const CliResult good_load = run_cli({"load", good.path, name});
  CHECK(good_load.exit_code == 0);
  CHECK(whole_file(guard.path()) != target_before);
}

TEST_CASE("load into an existing segment with a different schema is refused and names the difference") {
  const std::string name = unique_name("cli-schema");
  const std::string other = unique_name("cli-schema-other");
  SegmentGuard guard(name);
  SegmentGuard other_guard(other);
  FileGuard file{temp_file("cli-schema")};
  REQUIRE(create_payload(name, 2, 8).exit_code == 0);
  push_payloads(name, {3, 3});
  REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);
  Buffer::create(other, 2, 8, Schema::parse("hdr:u64[4] body:f32[12] tail:u8[29]"));
  const std::string before = whole_file(other_guard.path());
  const CliResult r = run_cli({"load", file.path, other});
  CHECK(r.exit_code == 1);
  CHECK(one_error_line(r.err));
  CHECK(contains(r.err, "field 'body'"));
  CHECK(contains(r.err, "schema"));
  CHECK(whole_file(other_guard.path()) == before);

  const CliResult not_a_checkpoint = run_cli({"load", guard.path(), other});
  CHECK(not_a_checkpoint.exit_code == 1);
  CHECK(one_error_line(not_a_checkpoint.err));
  CHECK(contains(not_a_checkpoint.err, "not a shmreplay checkpoint"));
}

TEST_CASE("load refuses a segment with a live writer, and rm refuses it unless --force") {
  const std::string name = unique_name("cli-busy");
  SegmentGuard guard(name);
  FileGuard file{temp_file("cli-busy")};
  REQUIRE(create_payload(name, 2, 32).exit_code == 0);
  push_payloads(name, {5, 5});
  REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);
  const Buffer b = Buffer::open(name, {.read_only = true});
  {
    WriterProcess writer(name, {1});
    writer.wait_for_env(b, 1, 40);

    const CliResult load = run_cli({"load", file.path, name});
    CHECK(load.exit_code == 1);
    CHECK(one_error_line(load.err));
    CHECK(contains(load.err, fmt::format("pid {}", writer.pid())));

    const CliResult rm = run_cli({"rm", name});
    CHECK(rm.exit_code == 1);
    CHECK(one_error_line(rm.err));
    CHECK(contains(rm.err, fmt::format("1 live writer (pid {})", writer.pid())));
    CHECK(contains(rm.err, "--force"));
    CHECK(Buffer::exists(name));
    writer.kill();  // dies holding env 1's lease
  }
  // A dead writer does not hold the segment: load and rm proceed (the load takes the dead lease over).
  CHECK(run_cli({"load", file.path, name}).exit_code == 0);
  CHECK(segment_of(b).env_control(1).head.load() == 5);  // the checkpoint's head, taken over from the dead writer
  const CliResult rm = run_cli({"rm", name});
  CHECK(rm.exit_code == 0);
  CHECK_FALSE(Buffer::exists(name));

  // --force removes a segment in use; its writer keeps working on its mapping.
  REQUIRE(create_payload(name, 2, 32).exit_code == 0);
  WriterProcess writer(name, {0, 1});
  writer.wait_for_heads(Buffer::open(name, {.read_only = true}), 1);
  CHECK(run_cli({"rm", name}).exit_code == 1);
  const CliResult forced = run_cli({"rm", "--force", name});
  CHECK(forced.exit_code == 0);
  CHECK(forced.out == fmt::format("removed '{}'\n", name));
  CHECK_FALSE(Buffer::exists(name));
  CHECK(writer.stop() == 0);
}

TEST_CASE("save of a private segment writes a private file even with umask 0") {
  const std::string name = unique_name("cli-private");
  SegmentGuard guard(name);
  FileGuard file{temp_file("cli-private")};
  Buffer::create(name, 2, 16, test::kPayloadSchema, {.mode = 0600});
  push_payloads(name, {5, 20});
  {
    const UmaskGuard open_umask(0);
    REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);
  }
  CHECK(file_mode(file.path) == 0600);  // not 0666: the buffer's steps stay private
}

TEST_CASE("save lowers its own CPU priority by --nice, 10 unless told, so that writers and the learner keep theirs") {
  const std::string name = unique_name("cli-nice");
  SegmentGuard guard(name);
  Buffer::create(name, 2, 16, test::kPayloadSchema);
  push_payloads(name, {5, 20});
  errno = 0;
  const int base = ::getpriority(PRIO_PROCESS, 0);
  REQUIRE(errno == 0);
  for (const auto& [nice, expected] : {std::pair{std::string(), std::min(base + 10, 19)},
                                       std::pair{std::string("3"), std::min(base + 3, 19)},
                                       std::pair{std::string("0"), base}}) {
    CAPTURE(nice);
    test::DirGuard dir(fmt::format("/tmp/{}.chain", unique_name("cli-nice")));
    std::vector<std::string> args = {"save", name, dir.path(), "--every", "3600"};
    if (!nice.empty()) args.insert(args.end(), {"--nice", nice});
    RunningCli saver(args);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!std::filesystem::exists(dir.path() + "/link-0000000001.shmrckpt")) {  // the first link is saved at once
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      ::usleep(2000);
    }
    CHECK(std::stoi(stat_field(std::to_string(saver.pid()), 19)) == expected);  // field 19: the nice value
    CHECK(saver.finish(SIGTERM) == 128 + SIGTERM);
  }
  CHECK(::getpriority(PRIO_PROCESS, 0) == base);  // the test's own priority is untouched
  CHECK(run_cli({"save", name, "/tmp/unused", "--nice", "20"}).exit_code == 2);  // 0 to 19
}

TEST_CASE("save refuses to replace a file that is not a checkpoint unless --force, and replaces a checkpoint") {
  const std::string name = unique_name("cli-saveover");
  SegmentGuard guard(name);
  REQUIRE(create(name, 2, 8).exit_code == 0);
  FileGuard file{temp_file("cli-saveover")};
  const std::string base = file.path.substr(file.path.rfind('/') + 1);
  const std::string precious = random_bytes();
  for (const std::string& bytes : {precious, std::string()}) {
    CAPTURE(bytes.size());
    replace_file(file.path, bytes);
    const CliResult r = run_cli({"save", name, file.path});
    CHECK(r.exit_code == 1);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, fmt::format("'{}'", file.path)));
    CHECK(contains(r.err, "not a shmreplay checkpoint"));
    CHECK(contains(r.err, "--force"));
    CHECK(whole_file(file.path) == bytes);
    CHECK(test::entries_containing("/tmp", base + ".tmp-").empty());
  }
  // A symbolic link there is not a checkpoint either (a save would replace the link, not write through it).
  FileGuard target{temp_file("cli-saveover-target")};
  replace_file(target.path, precious);
  std::remove(file.path.c_str());
  REQUIRE(::symlink(target.path.c_str(), file.path.c_str()) == 0);
  const CliResult link = run_cli({"save", name, file.path});
  CHECK(link.exit_code == 1);
  CHECK(contains(link.err, "symbolic link"));
  CHECK(whole_file(target.path) == precious);

  // --force replaces it; a checkpoint is then replaced without it.
  REQUIRE(run_cli({"save", name, file.path, "--force"}).exit_code == 0);
  CHECK(verify_checkpoint(file.path).num_envs == 2);
  CHECK(whole_file(target.path) == precious);
  REQUIRE(run_cli({"save", name, file.path}).exit_code == 0);
  CHECK(verify_checkpoint(file.path).num_envs == 2);
}

TEST_CASE("save --every takes 0.001 to 86400 seconds and --count at least 1: anything else is a usage error that "
          "says so, before anything is written") {
  const std::string name = unique_name("cli-every");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 1, 8).exit_code == 0);
  FileGuard path{temp_file("cli-every")};  // nothing may appear there
  const std::vector<std::vector<std::string>> bad = {
      {"--every", "nan"}, {"--every", "inf"},   {"--every", "0"},   {"--every", "-1"},
      {"--every", "1e300"}, {"--every", "1e-9"}, {"--every", "1", "--count", "0"},
      {"--every", "1", "--count", "-1"}};
  for (const std::vector<std::string>& extra : bad) {
    std::vector<std::string> args{"save", name, path.path};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string given = extra.size() == 2 ? extra[1] : extra[1] + " --count " + extra[3];
    CAPTURE(given);
    const CliResult r = run_cli(args);
    CHECK(r.exit_code == 2);
    CHECK(one_error_line(r.err));
    CHECK(r.err.size() < 200);  // no bound printed with hundreds of digits
    CHECK(contains(r.err, extra.size() == 2 ? "from 0.001 to 86400" : "at least 1"));
    CHECK(::access(path.path.c_str(), F_OK) != 0);
  }
}

TEST_CASE("save --every notes a link-like name it does not read, and ends at a link number that would not read "
          "back, naming the file") {
  const std::string name = unique_name("cli-seq");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 1, 8).exit_code == 0);
  push_payloads(name, {5});
  test::DirGuard dir{fmt::format("/tmp/{}.chain", unique_name("cli-seq"))};
  REQUIRE(run_cli({"save", name, dir.path(), "--every", "0.01", "--count", "1"}).exit_code == 0);

  const std::string twenty_digits = dir.path() + "/link-10000000000000000000.shmrckpt";
  replace_file(twenty_digits, "");
  const CliResult noted = run_cli({"save", name, dir.path(), "--every", "0.01", "--count", "2"});
  CHECK(noted.exit_code == 0);
  CHECK(contains(noted.err, "note: skipped '" + twenty_digits + "'"));
  CHECK(noted.err.find("note:") == noted.err.rfind("note:"));  // once, not once per link

  const std::string last = dir.path() + "/link-9999999999999999999.shmrckpt";
  replace_file(last, "");
  const CliResult ended = run_cli({"save", name, dir.path(), "--every", "0.01", "--count", "3"});
  CHECK(ended.exit_code == 1);
  CHECK(contains(ended.err, "error: cannot save a link into"));
  CHECK(ended.err.find("error:") == ended.err.rfind("error:"));  // the first link ends the command
  CHECK(contains(ended.err, last));
  CHECK(test::entries_containing(dir.path(), "link-").size() == 5);  // links 1 to 3 and the two planted names
}

TEST_CASE("journal runs until SIGTERM, refuses a second journal of the buffer meanwhile, and its last link holds "
          "every step pushed before the signal") {
  const std::string name = unique_name("cli-journal-run");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 2, 256).exit_code == 0);
  test::DirGuard dir(fmt::format("/tmp/{}.chain", name));
  RunningCli journal({"journal", name, dir.path(), "--bound", "0.2"});
  Buffer b = Buffer::open(name);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (segment_of(b).journal_control().lease.load() == 0) {
    REQUIRE(std::chrono::steady_clock::now() < give_up);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const CliResult second = run_cli({"journal", name, dir.path() + "-other"});
  CHECK(second.exit_code == 1);
  CHECK(contains(second.err, "a buffer has one journal at a time"));
  {
    Writer w(b, {0, 1});
    test::PayloadPusher pusher;
    for (int i = 0; i < 40; ++i) pusher.push(w, {0, 1});
  }
  CHECK(journal.finish(SIGTERM) == 0);
  const std::string restored = unique_name("cli-journal-restored");
  SegmentGuard restored_guard(restored);
  REQUIRE(run_cli({"load", dir.path(), restored}).exit_code == 0);
  const Buffer r = Buffer::open(restored, {.read_only = true});
  CHECK(segment_of(r).env_control(0).head.load() == 40);
  CHECK(segment_of(r).env_control(1).head.load() == 40);
}
