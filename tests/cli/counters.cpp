// tests/cli/counters.cpp: the counter table (shmreplay/counters.hpp) as the CLI shows it: a row is in `info`,
// `info --json`, `watch` and `metrics` without a line of its own there (stored_bytes, the bytes an env's replay
// view occupies, is the example), and docs/cli.md's metric table lists exactly the families the exporter writes.
// Part of test_cli (tests/CMakeLists.txt); its helpers are in cli_helpers.hpp.
#include "cli_helpers.hpp"

#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "detail/os/file.hpp"  // human_bytes, as the CLI prints bytes
#include "shmreplay/counters.hpp"
#include "shmreplay/journal.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace {

// name -> (type, labels) of every family of a `metrics --once` text: TYPE lines, and each family's label names
// (a histogram's `le` left out).
std::map<std::string, std::pair<std::string, std::set<std::string>>> exported_families(const std::string& text) {
  std::map<std::string, std::pair<std::string, std::set<std::string>>> out;
  std::istringstream in(text);
  std::string family;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("# TYPE ")) {
      const std::vector<std::string> w = words(line);
      family = w.at(2);
      out[family].first = w.at(3);
      continue;
    }
    if (line.empty() || line[0] == '#' || !line.starts_with(family)) continue;
    const std::size_t open = line.find('{');
    if (open == std::string::npos) continue;
    const std::string labels = line.substr(open + 1, line.find('}') - open - 1);
    for (std::size_t at = 0; at < labels.size();) {
      const std::size_t eq = labels.find('=', at);
      const std::string label = labels.substr(at, eq - at);
      if (label != "le") out[family].second.insert(label);
      const std::size_t end = labels.find('"', labels.find('"', eq) + 1);  // the value's closing quote
      at = end + 2;                                                        // past `",`
    }
  }
  return out;
}

// The same from docs/cli.md's metric table (| metric | type | labels | meaning |).
std::map<std::string, std::pair<std::string, std::set<std::string>>> documented_families() {
  std::ifstream in(SHMREPLAY_CLI_DOC);
  REQUIRE(in.good());
  std::map<std::string, std::pair<std::string, std::set<std::string>>> out;
  bool in_table = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("| metric | type | labels | meaning |")) {
      in_table = true;
      continue;
    }
    if (!in_table || line.starts_with("|---")) continue;
    if (!line.starts_with("| `")) break;
    std::vector<std::string> cells;
    std::istringstream parts(line.substr(1));
    for (std::string c; std::getline(parts, c, '|');) cells.push_back(c);
    REQUIRE(cells.size() >= 4);
    const std::string name = cells[0].substr(cells[0].find('`') + 1, cells[0].rfind('`') - cells[0].find('`') - 1);
    std::set<std::string> labels;
    std::string label_cell = cells[2];
    for (char& ch : label_cell) ch = (ch == ',' || ch == '(' || ch == ')') ? ' ' : ch;
    for (const std::string& l : words(label_cell)) {
      if (l != "none") labels.insert(l);
    }
    out[name] = {words(cells[1]).at(0), labels};
  }
  return out;
}

}  // namespace

TEST_CASE("info, info --json, watch and metrics show each env's stored bytes, a row of the counter table") {
  const std::string name = unique_name("cli-counters");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 2, 16).exit_code == 0);
  {
    Buffer b = Buffer::open(name);
    Writer w(b, {0});
    test::PayloadPusher pusher;
    for (int i = 0; i < 20; ++i) pusher.push(w, {0});  // a full ring of 16
  }
  const uint64_t bytes = 16 * test::kPayloadSchema.step_bytes();  // a step is its bytes in a plain ring
  const json info = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(info["envs"][0]["stored_bytes"] == bytes);
  CHECK(info["envs"][1]["stored_bytes"] == 0);
  const CliResult text = run_cli({"info", name});
  CHECK(words(line_starting(text.out, "  ENV")).back() == "STORED");
  CHECK(contains(line_starting(text.out, "    0"), detail::human_bytes(bytes)));
  const json frame = parse_json(run_cli({"watch", name, "--json", "--once", "--interval", "0.01"}).out);
  CHECK(frame["envs"][0]["stored_bytes"] == bytes);
  const CliResult plain = run_cli({"watch", name, "--once", "--interval", "0.01"});
  CHECK(words(line_starting(plain.out, "  ENV")).back() == "STORED");
  const CliResult metrics = run_cli({"metrics", name, "--once"});
  CHECK(contains(metrics.out, "# TYPE shmreplay_env_stored_bytes gauge\n"));
  CHECK(contains(metrics.out, fmt::format("shmreplay_env_stored_bytes{{buffer=\"{}\",env=\"0\"}} {}\n", name, bytes)));
}

TEST_CASE("docs/cli.md's metric table lists every family the exporter writes, with its type and labels, and every "
          "counter-table row with a family is one of them") {
  const std::string name = unique_name("cli-counters-doc");
  SegmentGuard guard(name);
  // Every family has a sample: episodes, priorities, a rate limiter, two learner slots, a compressed field, a policy
  // version, a reanalyse walk, a pushed step, a journal with a link, and a writer and a learner holding their leases
  // while the exporter reads.
  Buffer b = Buffer::create(name, 2, 16, Schema::parse("obs:f32[2] reward:f32 done:bool pix:u8[8,8]:lz4 version:u32"),
                            {.episodes = {.done = "done", .reward = "reward"}, .policy_version = "version",
                             .priority_exponent = 0.5,
                             .rate_limit = RateLimit::ratio(1.0, 4, 100), .max_learners = 2, .max_times_sampled = 3,
                             .reanalyse_chunk = 1});
  Writer w(b, {0});
  const float obs[2] = {1, 2};
  const float reward = 1;
  const bool done = true;
  const std::array<uint8_t, 64> pix{};
  const uint32_t version = 0;
  w.push_one(0, {FieldBytes{obs, sizeof obs}, FieldBytes{&reward, 4}, FieldBytes{&done, 1}, FieldBytes{pix.data(), 64},
                 FieldBytes{&version, 4}});
  const Sampler learner(b);
  test::DirGuard journal_dir(fmt::format("/tmp/{}.chain", name));
  Journal journal(name, journal_dir.path());
  (void)journal.write_link();
  auto exported = exported_families(run_cli({"metrics", name, "--once"}).out);
  // A consuming queue's families (it refuses a rate limiter, a cap above 1 and compressed fields): from a second
  // buffer, a queue with a pushed step and a learner.
  const std::string queue_name = unique_name("cli-counters-queue");
  SegmentGuard queue_guard(queue_name);
  Buffer q = Buffer::create(queue_name, 1, 4, Schema::parse("x:u8"), {.consuming_queue = true});
  Writer qw(q, {0});
  const uint8_t x = 1;
  qw.push_one(0, {FieldBytes{&x, 1}});
  const Sampler queue_learner(q);
  for (const auto& [family, described] : exported_families(run_cli({"metrics", queue_name, "--once"}).out)) {
    if (exported.count(family) == 0 || exported.at(family).second.empty()) exported[family] = described;
  }
  // A cold tier's families (layout 1.11; it refuses priorities, episodes, caps): from a third, tiered buffer.
  const std::string cold_name = unique_name("cli-counters-cold");
  SegmentGuard cold_guard(cold_name);
  const shmreplay::test::DirGuard cold_dir("/tmp/" + unique_name("cli-counters-cold-dir"));
  std::filesystem::create_directories(cold_dir.path());
  const Buffer c =
      Buffer::create(cold_name, 1, 4, Schema::parse("x:u8"), {.cold_capacity = 4, .cold_dir = cold_dir.path()});
  for (const auto& [family, described] : exported_families(run_cli({"metrics", cold_name, "--once"}).out)) {
    if (exported.count(family) == 0 || exported.at(family).second.empty()) exported[family] = described;
  }
  const auto documented = documented_families();
  REQUIRE(exported.size() > 40);
  for (const auto& [family, described] : exported) {
    INFO(family);
    REQUIRE(documented.count(family) == 1);
    CHECK(documented.at(family) == described);
  }
  for (const auto& [family, described] : documented) {
    INFO(family);
    CHECK(exported.count(family) == 1);
  }
  for (const CounterScope scope : {CounterScope::env, CounterScope::learner}) {
    for (const Counter& counter : counters(scope)) {
      INFO(counter.name);
      if (!counter.metric.empty()) CHECK(exported.count(std::string(counter.metric)) == 1);
    }
  }
}

TEST_CASE("info, watch and metrics show a journal's lag: the steps not yet durable per env and in all, and the "
          "newest durable link") {
  const std::string name = unique_name("cli-journal");
  SegmentGuard guard(name);
  REQUIRE(create_payload(name, 2, 16).exit_code == 0);
  CHECK_FALSE(contains(run_cli({"info", name}).out, "\njournal "));  // never journaled: no journal line
  CHECK(parse_json(run_cli({"info", name, "--json"}).out)["journal"].is_null());
  test::DirGuard dir(fmt::format("/tmp/{}.chain", name));
  Buffer b = Buffer::open(name);
  Writer w(b, {0});
  test::PayloadPusher pusher;
  for (int i = 0; i < 5; ++i) pusher.push(w, {0});
  Journal journal(name, dir.path(), {.bound_s = 3.0});
  (void)journal.write_link();
  for (int i = 0; i < 2; ++i) pusher.push(w, {0});
  const json info = parse_json(run_cli({"info", name, "--json"}).out);
  CHECK(info["journal"]["state"] == "alive");
  CHECK(info["journal"]["link"] == 1);
  CHECK(info["journal"]["bound_seconds"] == 3.0);
  CHECK(info["journal"]["pending_steps"] == 2);
  CHECK(info["journal"]["lag_seconds"].get<double>() > 0.0);
  CHECK(info["envs"][0]["journal_durable_head"] == 5);
  CHECK(info["envs"][0]["journal_pending_steps"] == 2);
  const CliResult text = run_cli({"info", name});
  CHECK(contains(line_starting(text.out, "journal"), "2 steps not yet durable"));
  CHECK(words(line_starting(text.out, "  ENV")).back() == "DURABLE");  // the column NOT DURABLE
  const json frame = parse_json(run_cli({"watch", name, "--json", "--once", "--interval", "0.01"}).out);
  CHECK(frame["journal"]["pending_steps"] == 2);
  CHECK(frame["envs"][0]["journal_pending_steps"] == 2);
  const CliResult metrics = run_cli({"metrics", name, "--once"});
  CHECK(contains(metrics.out, fmt::format("shmreplay_journal_pending_steps{{buffer=\"{}\"}} 2\n", name)));
  CHECK(contains(metrics.out, fmt::format("shmreplay_env_journal_pending_steps{{buffer=\"{}\",env=\"0\"}} 2\n", name)));
  CHECK(contains(metrics.out, fmt::format("shmreplay_journal_up{{buffer=\"{}\"}} 1\n", name)));
}
