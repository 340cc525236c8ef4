// shmreplay_bench_metrics: what `shmreplay metrics` costs the writers and the learner (issue 35), in one run.
//
// A writer process pushes every env flat out and a learner process samples flat out; in each round the two
// configurations alternate: no exporter, then `shmreplay metrics NAME --listen 127.0.0.1:0` scraped once a
// second (a GET /metrics over a socket, what Prometheus does at scrape_interval 1s). Push and sample rates come
// from the buffer's own counters over each trial; each ratio is taken within its round, then the median over
// rounds. docs/benchmarks/metrics.md has the method and the figures.
//
//   shmreplay_bench_metrics               3 rounds of 2 x 5 s
//   shmreplay_bench_metrics --quick       one round of 2 x 1.2 s: a smoke run for CI
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench_cli.hpp"
#include "shmreplay/buffer.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sampler.hpp"
#include "shmreplay/writer.hpp"

namespace {

using namespace shmreplay;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kEnvs = 16;
constexpr uint64_t kCapacity = 1 << 15;
const char* const kSchema = "obs:f32[17] action:f32[6] reward:f32 done:bool";  // MuJoCo-like, 101 bytes
constexpr std::size_t kBatch = 256;

// A child running `body` until killed (and killed with this process).
pid_t fork_child(const std::function<void()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    ::_exit(1);
  }
  return pid;
}

void kill_child(pid_t pid) {
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
}

// The exporter: the CLI with stderr on a pipe, to read the port it serves.
pid_t start_exporter(const std::string& name, int& port) {
  int p[2];
  if (::pipe(p) != 0) throw std::runtime_error("pipe");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(p[1], STDERR_FILENO);
    ::execl(SHMREPLAY_CLI_PATH, "shmreplay", "metrics", name.c_str(), "--listen", "127.0.0.1:0", nullptr);
    ::_exit(127);
  }
  ::close(p[1]);
  std::string line;
  char c = 0;
  while (::read(p[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(p[0]);
  const std::size_t at = line.find("127.0.0.1:");
  if (at == std::string::npos) throw std::runtime_error("the exporter did not start: " + line);
  port = std::stoi(line.substr(at + 10));
  return pid;
}

// One scrape: GET /metrics, the whole answer read; its bytes.
std::size_t scrape(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::size_t bytes = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n = 0;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) bytes += static_cast<std::size_t>(n);
    }
  }
  ::close(fd);
  return bytes;
}

struct Rates {
  double push = 0;    // steps/s
  double sample = 0;  // rows/s
};

Rates measure(const Inspector& insp, double seconds) {
  const SegmentInfo a = insp.snapshot();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const SegmentInfo b = insp.snapshot();
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  return {static_cast<double>(b.total_pushed - a.total_pushed) / dt,
          static_cast<double>(b.learner.rows_sampled - a.learner.rows_sampled) / dt};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int run(unsigned rounds, double seconds) {
  const std::string name = fmt::format("bench_metrics_{}", ::getpid());
  Buffer::create(name, kEnvs, kCapacity, Schema::parse(kSchema));
  const bench::RemoveBuffer remove{name};

  const pid_t writer = fork_child([&] {
    Buffer b = Buffer::open(name);
    std::vector<uint64_t> envs(kEnvs);
    for (uint64_t e = 0; e < kEnvs; ++e) envs[e] = e;
    Writer w(b, envs);
    std::vector<std::byte> obs(kEnvs * 17 * 4), act(kEnvs * 6 * 4), rew(kEnvs * 4), done(kEnvs);
    for (;;) w.push(envs, {field_bytes(obs), field_bytes(act), field_bytes(rew), field_bytes(done)});
  });
  const pid_t learner = fork_child([&] {
    Buffer b = Buffer::open(name);
    Sampler s(b);
    Rng rng(3);
    SampleBatch batch;
    for (;;) {
      if (s.size(View::replay) < kBatch) continue;
      s.sample(View::replay, kBatch, 1, 0.0, rng, batch);
    }
  });
  const Inspector insp(name);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the writer fills the first rows

  std::vector<double> push_base, sample_base, push_with, sample_with, push_ratio, sample_ratio;
  std::size_t scrape_bytes = 0;
  for (unsigned r = 0; r < rounds; ++r) {
    const Rates base = measure(insp, seconds);
    int port = 0;
    const pid_t exporter = start_exporter(name, port);
    std::atomic<bool> stop{false};
    std::thread scraper([&] {
      while (!stop.load()) {
        scrape_bytes = scrape(port);
        for (int i = 0; i < 10 && !stop.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    const Rates with = measure(insp, seconds);
    stop = true;
    scraper.join();
    kill_child(exporter);
    push_base.push_back(base.push);
    sample_base.push_back(base.sample);
    push_with.push_back(with.push);
    sample_with.push_back(with.sample);
    push_ratio.push_back(with.push / base.push);
    sample_ratio.push_back(with.sample / base.sample);
  }
  kill_child(learner);
  kill_child(writer);

  fmt::print("shmreplay_bench_metrics: {} envs x {} steps of {} ({} bytes); a writer process pushing every env flat "
             "out, a learner process sampling {} rows per call flat out; {} rounds of {:g} s without the exporter, "
             "then {:g} s with `shmreplay metrics` scraped every second ({} bytes per scrape); {} cores. Medians over "
             "rounds; ratios within each round.\n\n",
             kEnvs, kCapacity, kSchema, Schema::parse(kSchema).step_bytes(), kBatch, rounds, seconds, seconds,
             scrape_bytes, std::thread::hardware_concurrency());
  fmt::print("| exporter | push, M steps/s | sample, M rows/s | push / without | sample / without |\n");
  fmt::print("|---|---|---|---|---|\n");
  fmt::print("| none | {:.3f} | {:.3f} | 1 | 1 |\n", median(push_base) * 1e-6, median(sample_base) * 1e-6);
  fmt::print("| scraped every 1 s | {:.3f} | {:.3f} | {:.3f} | {:.3f} |\n", median(push_with) * 1e-6,
             median(sample_with) * 1e-6, median(push_ratio), median(sample_ratio));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("shmreplay_bench_metrics: push and sample rates with `shmreplay metrics` scraped every second "
               "against without, in one run");
  bool quick = false;
  unsigned rounds = 3;
  double seconds = 5.0;
  app.add_flag("--quick", quick, "One round of 2 x 1.2 s: a smoke run");
  app.add_option("--rounds", rounds, "Rounds (default 3)")->check(CLI::Range(1u, 100u));
  app.add_option("--seconds", seconds, "Seconds per configuration and round (default 5)")->check(CLI::Range(0.5, 600.0));
  return shmreplay::bench::bench_main(
      app, argc, argv,
      [&](const shmreplay::bench::QuickDefaults& q) {
        q("--rounds", rounds, 1);
        q("--seconds", seconds, 1.2);
      },
      [&](const std::string&) { return run(rounds, seconds); });
}
