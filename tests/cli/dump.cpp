// tests/cli/dump.cpp: `shmreplay dump`: selections, summaries, bounded memory on large envs, damaged counters.
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include "cli_helpers.hpp"

TEST_CASE("dump selects envs, the last steps, a step range and fields, and summarises large arrays") {
  const std::string name = unique_name("cli-dump");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 3, 8).exit_code == 0);
  push_payloads(name, {12, 3, 0});  // env 0 wrapped: steps 4..11 stored

  // The whole view as a table, arrays summarised.
  const CliResult all = run_cli({"dump", name});
  REQUIRE(all.exit_code == 0);
  CHECK(words(line_starting(all.out, "ENV")) == std::vector<std::string>{"ENV", "STEP", "hdr", "body", "tail"});
  CHECK(std::count(all.out.begin(), all.out.end(), '\n') == 1 + 8 + 3);
  const std::string row = line_starting(all.out, "  0     4  ");
  CHECK(contains(row, "[0, 4, 0, "));    // hdr has 4 elements: printed whole
  CHECK(contains(row, "f32[13] min="));  // body has 13: summarised
  CHECK(contains(row, "u8[29] min="));
  CHECK(contains(row, "first=["));
  CHECK(line_starting(all.out, "  0     3  ").empty());  // overwritten
  CHECK_FALSE(line_starting(all.out, "  1     2  ").empty());

  // --env and --last, as JSON lines with summaries.
  const std::vector<json> last = json_lines(run_cli({"dump", name, "--env", "0,1", "--last", "2", "--json"}).out);
  REQUIRE(last.size() == 4);
  CHECK(last[0]["env"] == 0);
  CHECK(last[0]["step"] == 10);
  CHECK(last[1]["step"] == 11);
  CHECK(last[2]["env"] == 1);
  CHECK(last[2]["step"] == 1);
  const json& body = last[0]["fields"]["body"];
  const test::Payload p = test::make_payload(0, 10, 0);
  CHECK(body["dtype"] == "f32");
  CHECK(body["shape"] == json{13});
  CHECK(body["first"][0] == p.body[0]);
  double lo = p.body[0], hi = p.body[0], sum = 0;
  for (const float v : p.body) {
    lo = std::min<double>(lo, v);
    hi = std::max<double>(hi, v);
    sum += v;
  }
  CHECK(body["min"] == lo);
  CHECK(body["max"] == hi);
  CHECK(body["mean"].get<double>() == doctest::Approx(sum / 13));

  // --steps, --field and --full.
  const std::vector<json> range =
      json_lines(run_cli({"dump", name, "--env", "0", "--steps", "6:9", "--field", "tail", "--full", "--json"}).out);
  REQUIRE(range.size() == 3);
  for (std::size_t i = 0; i < range.size(); ++i) {
    const uint64_t step = 6 + i;
    CHECK(range[i]["step"] == step);
    CHECK(range[i]["fields"].size() == 1);
    const test::Payload q = test::make_payload(0, step, 0);
    CHECK(range[i]["fields"]["tail"] == std::vector<uint64_t>(q.tail, q.tail + test::kTail));
  }
  const CliResult none = run_cli({"dump", name, "--env", "2"});
  CHECK(none.exit_code == 0);
  CHECK(contains(none.out, "no stored steps match"));

  // Errors: an unknown field or env (exit 1), conflicting or malformed selections (usage, exit 2).
  const CliResult field = run_cli({"dump", name, "--field", "nope"});
  CHECK(field.exit_code == 1);
  CHECK(one_error_line(field.err));
  CHECK(contains(field.err, "'nope'"));
  CHECK(contains(field.err, "hdr, body, tail"));
  const CliResult env = run_cli({"dump", name, "--env", "3"});
  CHECK(env.exit_code == 1);
  CHECK(contains(env.err, "env ids run from 0 to 2"));
  CHECK(run_cli({"dump", name, "--last", "2", "--steps", "1:3"}).exit_code == 2);
  CHECK(run_cli({"dump", name, "--steps", "5:3"}).exit_code == 2);
}

TEST_CASE("dump prints a stacked field's whole stacks as they were pushed, across episode starts, and only the steps "
          "whose frames are intact") {
  const std::string name = unique_name("cli-dump-stack");
  SegmentGuard guard(name);
  Buffer::create(name, 2, 16, Schema::parse(kStackedSpec));
  push_stacks(name, {16, 4});  // env 0 lost steps 0-3 to its restarts (ls_info.cpp says why); env 1 holds 0-3

  const std::vector<json> rows = json_lines(run_cli({"dump", name, "--json", "--full"}).out);
  REQUIRE(rows.size() == 12 + 4);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const uint64_t env = i < 12 ? 0 : 1;
    const uint64_t step = i < 12 ? 4 + i : i - 12;
    CAPTURE(env);
    CAPTURE(step);
    CHECK(rows[i]["env"] == env);
    CHECK(rows[i]["step"] == step);
    const std::vector<uint8_t> stack = expected_stack(env, step);
    CHECK(flat_elements(rows[i]["fields"]["obs"]) == std::vector<uint64_t>(stack.begin(), stack.end()));
    CHECK(rows[i]["fields"]["t"] == step);
  }

  // As a table: the stack nested by its shape, frame by frame ([[[...], ...], [[...]...], [[...]...]]).
  const CliResult table = run_cli({"dump", name, "--env", "0", "--last", "1", "--full"});
  REQUIRE(table.exit_code == 0);
  CHECK(words(line_starting(table.out, "ENV")) == std::vector<std::string>{"ENV", "STEP", "obs", "t"});
  const std::string row = line_starting(table.out, "  0    15  ");  // an episode's first step: 3 x frame 15
  const std::vector<uint8_t> stack = expected_stack(0, 15);
  CHECK(contains(row, fmt::format("[[[{}, {}, {}, {}], ", stack[0], stack[1], stack[2], stack[3])));
  CHECK(contains(row, fmt::format("]], [[{}, {}, {}, {}], ", stack[16], stack[17], stack[18], stack[19])));
}

TEST_CASE("dump of a large env streams it in bounded memory, as a table and as JSON lines") {
  // One env of 8192 steps of 32 KiB: 256 MiB of steps. A dump reads every one of them, so its resident set holds
  // the segment's pages (a shared mapping); what it allocates on top must stay small, not another copy of the env.
  const std::string name = unique_name("cli-bigdump");
  SegmentGuard guard(name);
  const uint64_t steps = 8192;
  uint64_t segment_bytes = 0;
  {
    Buffer b = Buffer::create(name, 1, steps, Schema::parse("id:u64 blob:u8[32760]"));
    segment_bytes = b.total_bytes();
    Writer w(b, {0});
    std::vector<std::byte> blob(32760, std::byte{7});
    for (uint64_t s = 0; s < steps; ++s) w.push_one(0, {FieldBytes{&s, sizeof s}, FieldBytes{blob.data(), blob.size()}});
  }
  // In a sanitizer build freed chunks wait in ASan's quarantine (256 MiB by default); keep it small here.
  const std::vector<std::string> env = {"ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=16"};
  for (const bool as_json : {false, true}) {
    CAPTURE(as_json);
    std::vector<std::string> args{"dump", name, "--field", "id"};
    if (as_json) args.push_back("--json");
    RunningCli cli(args, env);
    uint64_t peak = 0;
    const std::string err = cli.drain_stderr(peak);
    REQUIRE(cli.finish(0) == 0);
    CHECK(err.empty());
    REQUIRE(peak > 0);
    const uint64_t beyond = peak > segment_bytes ? peak - segment_bytes : 0;
    MESSAGE(fmt::format("dump{}: peak resident {} MiB, {} MiB beyond the {} MiB segment", as_json ? " --json" : "",
                        peak >> 20, beyond >> 20, segment_bytes >> 20));
    CHECK(beyond < (128ull << 20));  // the whole env copied at once would be 256 MiB more
  }
  // What was streamed is every step, in order (checked on the JSON form, on a smaller selection).
  const CliResult part = run_cli({"dump", name, "--field", "id", "--json", "--steps", "8000:"});
  REQUIRE(part.exit_code == 0);
  const std::vector<json> rows = json_lines(part.out);
  REQUIRE(rows.size() == 192);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i]["step"] == 8000 + i);
    CHECK(rows[i]["fields"]["id"] == 8000 + i);
  }
}

TEST_CASE("dump of an env whose counters are damaged fails with one error line naming the env and its counters") {
  const std::string name = unique_name("cli-damaged");
  SegmentGuard guard(name);
  {
    Buffer b = Buffer::create(name, 3, 8, Schema::parse("x:u32"));
    Writer w(b, {0, 1, 2});
    for (uint32_t s = 0; s < 5; ++s) {
      for (uint64_t e = 0; e < 3; ++e) w.push_one(e, {FieldBytes{&s, sizeof s}});
    }
  }
  {
    Buffer b = Buffer::open(name);  // a stray write: head far beyond claimed, which no writer leaves
    segment_of(b).env_control(1).head.store(uint64_t{1} << 62);
    segment_of(b).env_control(1).claimed.store(5);
  }
  for (const std::vector<std::string>& args : {std::vector<std::string>{"dump", name},
                                               std::vector<std::string>{"dump", name, "--json", "--env", "1"},
                                               std::vector<std::string>{"dump", name, "--env", "1", "--online"}}) {
    CAPTURE(args.size());
    const CliResult r = run_cli(args);
    CHECK(r.exit_code == 1);
    CHECK(one_error_line(r.err));
    CHECK(contains(r.err, fmt::format("cannot dump env 1 of '{}': its counters are damaged", name)));
    CHECK(contains(r.err, fmt::format("head {}, claimed 5", uint64_t{1} << 62)));
    CHECK(contains(r.err, "more than its capacity of 8"));
    CHECK_FALSE(contains(r.err, "bad_alloc"));
  }
  // The undamaged envs still dump.
  const CliResult ok = run_cli({"dump", name, "--env", "0,2", "--json"});
  CHECK(ok.exit_code == 0);
  CHECK(json_lines(ok.out).size() == 10);
}

TEST_CASE("dump --full of large steps as a table holds bounded text, not blocks of 1024 rows") {
  // 400 steps of f32[16384]: each row's text is about 200 KB, so 1024-row blocks would hold all 80 MB at once.
  const std::string name = unique_name("cli-fulldump");
  SegmentGuard guard(name);
  const uint64_t steps = 400;
  uint64_t segment_bytes = 0;
  {
    Buffer b = Buffer::create(name, 1, steps, Schema::parse("id:u64 v:f32[16384]"));
    segment_bytes = b.total_bytes();
    Writer w(b, {0});
    std::vector<float> v(16384);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.123456789f + static_cast<float>(i);
    for (uint64_t s = 0; s < steps; ++s) {
      w.push_one(0, {FieldBytes{&s, sizeof s}, FieldBytes{v.data(), v.size() * sizeof(float)}});
    }
  }
  const std::vector<std::string> env = {"ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=16"};
  // The CLI's own resident memory, printing one row (the runtime and its code: about 5 MiB here, about 90 MiB
  // under ASan, and growing with the binary), so that the bound below is on what the rows' text holds.
  RunningCli one({"dump", name, "--full", "--last", "1"}, env);
  uint64_t base = 0;
  one.drain_stderr(base);
  REQUIRE(one.finish(0) == 0);
  RunningCli cli({"dump", name, "--full"}, env);
  uint64_t peak = 0;
  const std::string err = cli.drain_stderr(peak);
  REQUIRE(cli.finish(0) == 0);
  CHECK(err.empty());
  REQUIRE(peak > 0);
  const uint64_t beyond = peak > segment_bytes + base ? peak - segment_bytes - base : 0;
  MESSAGE(fmt::format("dump --full: peak resident {} MiB, {} MiB beyond the {} MiB segment and the {} MiB of a "
                      "one-row dump",
                      peak >> 20, beyond >> 20, segment_bytes >> 20, base >> 20));
  // Bounded blocks: a few MiB beyond both, with or without ASan; 1024-row blocks held 168 MiB beyond the segment.
  CHECK(beyond < (64ull << 20));
  // The rows are whole: every element of the last step.
  const CliResult last = run_cli({"dump", name, "--full", "--last", "1"});
  REQUIRE(last.exit_code == 0);
  CHECK(contains(last.out, "16383.123"));
  CHECK(std::count(last.out.begin(), last.out.end(), ',') == 16383);
}
