// test_cli_metrics: `shmreplay metrics`, the Prometheus exporter. Its text passes `promtool check metrics`
// (Prometheus's own parser and naming lint), and a real Prometheus server (Debian's `prometheus`, which
// tools/setup.sh installs) scrapes it every second while a writer process pushes and a learner process samples:
// the counters Prometheus returns lie between the buffer's own counts read before the scrape and after it, and
// rate() over them is positive while the run goes on; the learners' sample-age histogram (layout 1.8) counts every
// row sampled and histogram_quantile() reads it. Without the binaries the cases say so and pass (skipped). Only the
// caller's buffers are served unless --all-users. Hostile HTTP clients are metrics_clients.cpp's.
#include "cli/cli_helpers.hpp"
#include "cli/metrics_helpers.hpp"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace {

using metrics_test::serving_port;

// The path of `program` on PATH, or "" when it is not installed.
std::string find_program(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs a shell command (our own fixed text and URLs), returning its stdout.
std::string shell_output(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  char chunk[4096];
  std::size_t got = 0;
  while ((got = std::fread(chunk, 1, sizeof chunk, p)) > 0) out.append(chunk, got);
  ::pclose(p);
  return out;
}

// A port free on 127.0.0.1 now (bound to port 0, read back, closed).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Prometheus's instant query `promql`: the result vector (empty when the query failed or matched nothing).
json prom_query(int port, const std::string& promql) {
  const std::string out = shell_output(fmt::format(
      "curl -s --max-time 5 -G --data-urlencode 'query={}' http://127.0.0.1:{}/api/v1/query", promql, port));
  const json j = json::parse(out, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return json::array();
  return j["data"]["result"];
}

// The first result's value and its timestamp (seconds); nullopt when there is none.
std::optional<std::pair<double, double>> first_value(const json& result) {
  if (!result.is_array() || result.empty()) return std::nullopt;
  const json& v = result[0]["value"];
  return std::make_pair(std::stod(v[1].get<std::string>()), v[0].get<double>());
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A learner process sampling 32 rows of 2 steps every 300 us until the file `stop` exists (then it idles), or until
// killed.
pid_t spawn_learner(const std::string& name, const std::string& stop) {
  return test::spawn([name, stop] {
    try {
      Buffer b = Buffer::open(name);
      Sampler learner(b);
      Rng rng(11);
      SampleBatch batch;
      for (;;) {
        ::usleep(300);
        if (::access(stop.c_str(), F_OK) == 0) continue;
        if (learner.size(View::replay) < 64) continue;
        learner.sample(View::replay, 32, 2, 0.0, rng, batch);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "learner process: %s\n", e.what());
      ::_exit(3);
    }
  });
}

// The process running `argv` with stdout and stderr to `log`, killed with this process if this one dies.
pid_t spawn_program(const std::vector<std::string>& argv, const std::string& log) {
  return test::spawn([argv, log] {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  });
}

// A Prometheus server scraping the exporter of buffer `name` (its port `port`), and the counts the test compares its
// series with.
struct PromScrapes {
  int port;
  std::string name;
  std::string dir;  // its configuration, data and log
  const Inspector& inspector;
  std::string sel = fmt::format("{{buffer=\"{}\"}}", name);

  std::pair<uint64_t, uint64_t> counts() const {  // (steps pushed, rows sampled) now
    const SegmentInfo i = inspector.snapshot();
    return std::make_pair(i.total_pushed, i.learner.rows_sampled);
  }
};

// Starts Prometheus (`prometheus`) on `prom_port`, scraping 127.0.0.1:`exporter_port` every second; its files in dir.
pid_t start_prometheus(const std::string& prometheus, const std::string& dir, int exporter_port, int prom_port) {
  std::filesystem::create_directories(dir);
  replace_file(dir + "/prometheus.yml",
               fmt::format("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                           "  - job_name: shmreplay\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
                           exporter_port));
  return spawn_program({prometheus, "--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/data",
                        fmt::format("--web.listen-address=127.0.0.1:{}", prom_port)},
                       dir + "/log");
}

// While the writer pushes and the learner samples: Prometheus's counters lie between the counts before and after its
// scrape, the per-env and per-learner series add up, up is 1 and the rates are positive. The median sample age over
// the last 5 s.
double check_live_series(const PromScrapes& p, pid_t prom, std::chrono::steady_clock::time_point deadline) {
  const int prom_port = p.port;
  const std::string& sel = p.sel;
  const std::string& name = p.name;
  const std::string& dir = p.dir;
  const Inspector& inspector = p.inspector;
  const auto [inserts_before, samples_before] = p.counts();
  const double before_s = now_s();

  // Until Prometheus holds a scrape taken after the counts above, and five scrapes over all (60 s at most).
  std::optional<std::pair<double, double>> inserts;
  std::optional<std::pair<double, double>> samples;
  for (;;) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, whole_file(dir + "/log"));
    REQUIRE(::waitpid(prom, nullptr, WNOHANG) == 0);
    ::usleep(500'000);
    const auto scrapes = first_value(prom_query(prom_port, "count_over_time(up{job=\"shmreplay\"}[1m])"));
    inserts = first_value(prom_query(prom_port, "shmreplay_inserts_total" + sel));
    samples = first_value(prom_query(prom_port, "shmreplay_samples_total" + sel));
    if (scrapes && scrapes->first >= 5 && inserts && inserts->second > before_s && samples &&
        samples->second > before_s) {
      break;
    }
  }
  const auto [inserts_after, samples_after] = p.counts();
  INFO("inserts ", inserts_before, " <= ", inserts->first, " <= ", inserts_after);
  INFO("samples ", samples_before, " <= ", samples->first, " <= ", samples_after);
  CHECK(static_cast<double>(inserts_before) <= inserts->first);
  CHECK(inserts->first <= static_cast<double>(inserts_after));
  CHECK(static_cast<double>(samples_before) <= samples->first);
  CHECK(samples->first <= static_cast<double>(samples_after));
  CHECK(samples->first > 0);

  // The per-env and per-learner series add up the same way; up is 1; rates over the last 5 s are positive.
  const auto env_sum = first_value(prom_query(prom_port, "sum(shmreplay_steps_published_total" + sel + ")"));
  REQUIRE(env_sum);
  CHECK(env_sum->first <= static_cast<double>(inspector.snapshot().total_pushed));
  CHECK(env_sum->first >= static_cast<double>(inserts_before));
  const auto learner0 = first_value(prom_query(
      prom_port, fmt::format("shmreplay_learner_rows_sampled_total{{buffer=\"{}\",learner=\"0\"}}", name)));
  REQUIRE(learner0);
  CHECK(learner0->first >= static_cast<double>(samples_before));
  const auto up = first_value(prom_query(prom_port, "up{job=\"shmreplay\"}"));
  REQUIRE(up);
  CHECK(up->first == 1.0);
  const auto insert_rate = first_value(prom_query(prom_port, "rate(shmreplay_inserts_total" + sel + "[5s])"));
  const auto sample_rate = first_value(prom_query(prom_port, "rate(shmreplay_samples_total" + sel + "[5s])"));
  REQUIRE(insert_rate);
  REQUIRE(sample_rate);
  MESSAGE("Prometheus: ", inserts->first, " inserts, ", samples->first, " sampled rows; rate over 5 s ",
          insert_rate->first, " steps/s, ", sample_rate->first, " rows/s");
  CHECK(insert_rate->first > 0);
  CHECK(sample_rate->first > 0);
  // The median age of the rows sampled over the last 5 s, from the per-slot histograms (layout 1.8).
  const auto median_rate = first_value(prom_query(
      prom_port, "histogram_quantile(0.5, sum by (le) (rate(shmreplay_learner_sample_age_steps_bucket" + sel +
                     "[5s])))"));
  REQUIRE(median_rate);
  CHECK(std::isfinite(median_rate->first));
  CHECK(median_rate->first >= 0);

  return median_rate->first;
}

// After the learner stopped sampling (its rows now `stopped_rows`), once Prometheus holds a scrape taken after that:
// the histograms' counts add up to the rows sampled, exactly, and their median is a number.
void check_stopped_series(const PromScrapes& p, uint64_t stopped_rows, double median_rate,
                          std::chrono::steady_clock::time_point deadline) {
  const int prom_port = p.port;
  const std::string& sel = p.sel;
  const std::string& name = p.name;
  const std::string& dir = p.dir;
  const Inspector& inspector = p.inspector;
  const double stopped_s = now_s();
  std::optional<std::pair<double, double>> scraped;
  for (;;) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline + std::chrono::seconds(30), whole_file(dir + "/log"));
    ::usleep(300'000);
    scraped = first_value(prom_query(prom_port, "timestamp(shmreplay_samples_total" + sel + ")"));
    if (scraped && scraped->first > stopped_s) break;
  }
  const auto sampled = first_value(prom_query(prom_port, "shmreplay_samples_total" + sel));
  const auto age_count = first_value(prom_query(prom_port, "sum(shmreplay_learner_sample_age_steps_count" + sel + ")"));
  const auto inf_bucket = first_value(prom_query(
      prom_port, fmt::format("sum(shmreplay_learner_sample_age_steps_bucket{{buffer=\"{}\",le=\"+Inf\"}})", name)));
  const auto median = first_value(prom_query(
      prom_port, "histogram_quantile(0.5, sum by (le) (shmreplay_learner_sample_age_steps_bucket" + sel + "))"));
  REQUIRE(sampled);
  REQUIRE(age_count);
  REQUIRE(inf_bucket);
  REQUIRE(median);
  MESSAGE("Prometheus: ", sampled->first, " rows sampled, ", age_count->first, " ages counted; median age ",
          median->first, " steps (", median_rate, " over the last 5 s of sampling)");
  CHECK(sampled->first == static_cast<double>(stopped_rows));
  CHECK(age_count->first == sampled->first);
  CHECK(inf_bucket->first == sampled->first);
  CHECK(static_cast<double>(inspector.snapshot().learner.age_rows) == age_count->first);
  CHECK(std::isfinite(median->first));
  CHECK(median->first >= 0);

}

}  // namespace

TEST_CASE("metrics --once: Prometheus's parser accepts the text, with every learner slot and env") {
  const std::string name = unique_name("metrics_once");
  SegmentGuard guard(name);
  Buffer buf = Buffer::create(name, 3, 64, test::kPayloadSchema,
                              {.priority_exponent = 0.6, .rate_limit = RateLimit::ratio(1.0, 10, 100), .max_learners = 3});
  {
    // Learner slot 1 samples 20 rows and peeks 3 (ages counted), then a call the limiter refuses (error 20 - 20 -
    // 200 is below min_diff -90) gives up at its timeout of 0.
    Writer w(buf, {0, 1, 2});
    test::PayloadPusher pusher;
    for (int i = 0; i < 10; ++i) pusher.push(w, {0, 1});
    Sampler learner(buf, {.rank = 1});
    Rng rng(4);
    SampleBatch batch;
    learner.sample(View::replay, 20, 3, 0.0, rng, batch);
    const uint64_t ids[] = {0, 1, 2};
    learner.peek(ids, batch);
    SampleOptions now;
    now.rate_limit_timeout_ms = 0;
    CHECK(test::error_of([&] { learner.sample(View::replay, 200, 1, 0.0, rng, batch, now); }) ==
          static_cast<int>(Errc::rate_limited));
  }
  const CliResult r = run_cli({"metrics", name, "--once"});
  REQUIRE(r.exit_code == 0);
  CHECK(contains(r.out, fmt::format("shmreplay_buffer_up{{buffer=\"{}\"}} 1", name)));
  for (int l = 0; l < 3; ++l) {
    CHECK(contains(r.out, fmt::format("shmreplay_learner_rows_sampled_total{{buffer=\"{}\",learner=\"{}\"}} {}\n", name,
                                      l, l == 1 ? 23 : 0)));
  }
  CHECK(contains(r.out, fmt::format("shmreplay_steps_published_total{{buffer=\"{}\",env=\"2\"}} 0", name)));
  CHECK(contains(r.out, fmt::format("shmreplay_rate_limit_samples_per_insert{{buffer=\"{}\"}} 1", name)));
  CHECK(contains(r.out, "# TYPE shmreplay_inserts_total counter"));
  // The sample-age histogram (layout 1.8): cumulative buckets at 0, 1, 4, ..., 4^11 steps, +Inf, _sum and _count per
  // learner slot; slot 1's count is its 23 rows (3 of them peeks, age 0).
  CHECK(contains(r.out, "# TYPE shmreplay_learner_sample_age_steps histogram"));
  const std::string slot1 = fmt::format("buffer=\"{}\",learner=\"1\"", name);
  CHECK(contains(r.out, fmt::format("shmreplay_learner_sample_age_steps_count{{{}}} 23\n", slot1)));
  CHECK(contains(r.out, fmt::format("shmreplay_learner_sample_age_steps_bucket{{{},le=\"+Inf\"}} 23\n", slot1)));
  CHECK(contains(r.out, fmt::format("shmreplay_learner_sample_age_steps_bucket{{{},le=\"4194304\"}} 23\n", slot1)));
  CHECK(contains(r.out, fmt::format("shmreplay_learner_sample_age_steps_bucket{{{},le=\"16\"}} 23\n", slot1)));
  CHECK(contains(r.out, fmt::format("shmreplay_learner_sample_age_steps_count{{buffer=\"{}\",learner=\"0\"}} 0\n", name)));
  const SegmentInfo info = Inspector(name).snapshot();
  CHECK(info.learners[1].age_rows == 23);
  CHECK(info.learners[1].age_buckets[0] >= 3);
  CHECK(contains(r.out, fmt::format("shmreplay_learner_sample_age_steps_bucket{{{},le=\"0\"}} {}\n", slot1,
                                    info.learners[1].age_buckets[0])));
  CHECK(contains(r.out, fmt::format("shmreplay_learner_sample_age_steps_sum{{{}}} {}\n", slot1,
                                    info.learners[1].age_sum_steps)));
  // Both sides' timed-out calls.
  CHECK(contains(r.out, fmt::format("shmreplay_rate_limit_timed_out_calls_total{{buffer=\"{}\",side=\"learner\"}} 1\n",
                                    name)));
  CHECK(contains(r.out, fmt::format("shmreplay_rate_limit_timed_out_calls_total{{buffer=\"{}\",side=\"writer\"}} 0\n",
                                    name)));
  const CliResult missing = run_cli({"metrics", name + "_absent", "--once"});
  CHECK(contains(missing.out, fmt::format("shmreplay_buffer_up{{buffer=\"{}_absent\"}} 0", name)));
  CHECK(run_cli({"metrics"}).exit_code == 2);  // neither --listen nor --once

  const std::string promtool = find_program("promtool");
  if (promtool.empty()) {
    MESSAGE("skipped the promtool check: promtool is not installed (Debian's prometheus; tools/setup.sh installs it)");
    return;
  }
  const std::string file = fmt::format("/tmp/{}.prom", name);
  replace_file(file, r.out);
  const std::string lint = shell_output(fmt::format("{} check metrics < {} 2>&1; echo rc=$?", promtool, file));
  std::filesystem::remove(file);
  CHECK_MESSAGE(contains(lint, "rc=0"), lint);
}

TEST_CASE("metrics and watch give a tiered buffer's steps and bytes per tier: the rings' in RAM, the cold tier's on "
          "disk") {
  const std::string name = unique_name("metrics_tiers");
  SegmentGuard guard(name);
  const test::DirGuard dir("/tmp/" + unique_name("metrics-tiers-dir"));
  std::filesystem::create_directories(dir.path());
  Buffer buf = Buffer::create(name, 2, 8, test::kPayloadSchema, {.cold_capacity = 100, .cold_dir = dir.path()});
  {
    Writer w(buf, {0, 1});
    test::PayloadPusher pusher;
    for (int i = 0; i < 20; ++i) pusher.push(w, {0, 1});  // per env: 8 steps in the ring, 12 sealed on disk
  }
  const uint64_t step = test::kPayloadSchema.step_bytes();
  const CliResult r = run_cli({"metrics", name, "--once"});
  REQUIRE(r.exit_code == 0);
  const auto tier = [&](std::string_view family, std::string_view t, uint64_t v) {
    return fmt::format("shmreplay_tier_{}{{buffer=\"{}\",tier=\"{}\"}} {}\n", family, name, t, v);
  };
  CHECK(contains(r.out, tier("steps", "ram", 16)));
  CHECK(contains(r.out, tier("steps", "disk", 24)));
  CHECK(contains(r.out, tier("bytes", "ram", 16 * step)));
  CHECK(contains(r.out, tier("bytes", "disk", 24 * step)));
  CHECK(contains(r.out, fmt::format("shmreplay_cold_file_bytes{{buffer=\"{}\"}} {}\n", name,
                                    2 * (4096 + 100 * step))));
  const CliResult watch = run_cli({"watch", name, "--once", "--interval", "0.02"});
  REQUIRE(watch.exit_code == 0);
  CHECK(contains(watch.out, "on disk     24 steps (12.0% full)"));
  Buffer::remove(name);
}

TEST_CASE("metrics serves only the buffers of the user running it unless --all-users: another user's segment is left "
          "out of an every-buffer scrape, and a named one reads buffer_up 0 with a note on stderr") {
  const std::string mine = unique_name("metrics_mine");
  const std::string theirs = unique_name("metrics_theirs");
  SegmentGuard mine_guard(mine);
  SegmentGuard theirs_guard(theirs);
  create_payload(mine, 1, 8);
  create_payload(theirs, 1, 8);
  if (::chown(theirs_guard.path().c_str(), 65534, static_cast<gid_t>(-1)) != 0) {
    MESSAGE("skipped: chown needs root");
    return;
  }
  const auto up = [](const std::string& name, int value) {
    return fmt::format("shmreplay_buffer_up{{buffer=\"{}\"}} {}\n", name, value);
  };
  const CliResult every = run_cli({"metrics", "--once"});
  REQUIRE(every.exit_code == 0);
  CHECK(contains(every.out, up(mine, 1)));
  CHECK(!contains(every.out, theirs));
  const CliResult all = run_cli({"metrics", "--once", "--all-users"});
  REQUIRE(all.exit_code == 0);
  CHECK(contains(all.out, up(mine, 1)));
  CHECK(contains(all.out, up(theirs, 1)));

  const CliResult named = run_cli({"metrics", theirs, mine, "--once"});
  REQUIRE(named.exit_code == 0);
  CHECK(contains(named.out, up(theirs, 0)));
  CHECK(contains(named.out, up(mine, 1)));
  CHECK(!contains(named.out, fmt::format("shmreplay_envs{{buffer=\"{}\"}}", theirs)));
  INFO(named.err);
  CHECK(contains(named.err, theirs + " belongs to uid 65534"));
  CHECK(contains(named.err, "--all-users"));
  const CliResult named_all = run_cli({"metrics", theirs, "--once", "--all-users"});
  CHECK(contains(named_all.out, up(theirs, 1)));
  CHECK(named_all.err.empty());
  CHECK(contains(run_cli({"metrics", "--help"}).out, "--all-users"));
}

TEST_CASE("metrics --listen: a real Prometheus scrapes it while a writer pushes and a learner samples") {
  const std::string prometheus = find_program("prometheus");
  if (prometheus.empty() || find_program("curl").empty()) {
    MESSAGE("skipped: prometheus or curl is not installed (tools/setup.sh installs both)");
    return;
  }
  const std::string name = unique_name("metrics_prom");
  SegmentGuard guard(name);
  create_payload(name, 2, 4096);
  const Inspector inspector(name);
  WriterProcess writer(name, all_envs(2));
  const std::string stop = fmt::format("/tmp/{}.stop", name);
  const pid_t learner = spawn_learner(name, stop);

  RunningCli exporter({"metrics", name, "--listen", "127.0.0.1:0"});
  const PromScrapes p{free_port(), name, fmt::format("/tmp/{}.prometheus", name), inspector};
  const pid_t prom = start_prometheus(prometheus, p.dir, serving_port(exporter), p.port);
  // Until Prometheus holds a scrape taken after the counts above, and five scrapes over all (60 s at most).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const double median_rate = check_live_series(p, prom, deadline);

  // The learner stops sampling; once Prometheus holds a scrape taken after that, the histograms' counts add up to the
  // rows sampled, exactly, and their median is a number.
  replace_file(stop, "");
  uint64_t stopped_rows = p.counts().second;
  for (;;) {  // until the count stays put for 200 ms (the learner saw the file)
    ::usleep(200'000);
    const uint64_t now_rows = p.counts().second;
    if (now_rows == stopped_rows) break;
    stopped_rows = now_rows;
  }
  check_stopped_series(p, stopped_rows, median_rate, deadline);

  CHECK(test::kill_and_reap(learner));
  std::filesystem::remove(stop);
  CHECK(writer.stop() == 0);
  ::kill(prom, SIGTERM);
  ::waitpid(prom, nullptr, 0);
  CHECK(exporter.finish(SIGTERM) == 0);  // a stop signal ends the exporter cleanly
  std::filesystem::remove_all(p.dir);
}
