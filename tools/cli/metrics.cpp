// `shmreplay metrics`: a Prometheus exporter. Serves the text exposition format at /metrics for the named buffers
// (every shmreplay segment of the caller's when none is named; every user's with --all-users), read at each scrape
// from read-only mappings (Inspector: PROT_READ, one atomic load per counter), so a scrape can never make a writer or
// a learner wait. The HTTP server is http_server.hpp's (which says why not cpp-httplib's); the format is
// exposition.hpp's. The per-env and per-learner families are the counter table's rows (shmreplay/counters.hpp);
// docs/cli.md lists every metric with its type, labels and unit (a test holds it to the exporter), and the server's
// limits.
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "detail/os/process.hpp"
#include "exposition.hpp"
#include "http_server.hpp"
#include "shmreplay/counters.hpp"
#include "shmreplay/error.hpp"
#include "shmreplay/inspector.hpp"
#include "shmreplay/sample_age.hpp"
#include "shmreplay/internal/segment.hpp"

namespace shmreplay::cli {
namespace {

using Type = Exposition::Type;

// One buffer of a scrape: its name and what was read (nullopt: it did not open).
struct Scraped {
  std::string name;
  std::optional<SegmentInfo> info;
};

// The uid that owns segment `name`'s file; nullopt when it cannot be read.
std::optional<uid_t> file_owner(const std::string& name) {
  struct stat st {};
  if (::stat((shm_directory() + "/" + name).c_str(), &st) != 0) return std::nullopt;
  return st.st_uid;
}

std::vector<Scraped> read_buffers(const std::vector<std::string>& names, bool all_users) {
  std::vector<Scraped> out;
  if (names.empty()) {
    for (ListedSegment& s : list_segments()) {
      // Another user's segment is left out unless asked: the exporter serves to whoever can connect.
      const std::optional<uid_t> owner = s.info ? std::optional<uid_t>(s.info->owner_uid) : file_owner(s.name);
      if (!all_users && owner != ::geteuid()) continue;
      out.push_back({std::move(s.name), std::move(s.info)});
    }
    return out;
  }
  for (const std::string& name : names) {
    Scraped s{name, std::nullopt};
    try {
      s.info = Inspector(name, {.allow_other_owner = all_users}).snapshot();  // display only, as `info`
    } catch (const std::exception&) {
      // reported as shmreplay_buffer_up 0 (another user's too, unless all_users); the exporter serves the others
    }
    out.push_back(std::move(s));
  }
  return out;
}

double seconds_since(uint64_t since_ns, uint64_t now_ns) {
  return since_ns == 0 || now_ns <= since_ns ? 0.0 : static_cast<double>(now_ns - since_ns) / 1e9;
}

class Writer {
 public:
  Writer(Exposition& x, const std::vector<Scraped>& buffers, uint64_t now_ns) : x_(x), buffers_(buffers), now_(now_ns) {}

  // A family with one sample per buffer that opened (and for which `value` gives one).
  template <class F>
  void per_buffer(std::string_view name, Type type, std::string_view help, F value) {
    x_.family(name, type, help);
    for (const Scraped& b : buffers_) {
      if (!b.info) continue;
      if (const auto v = value(*b.info)) x_.sample({{"buffer", b.name}}, *v);
    }
  }
  // Every row of the counter table's `scope` that has a family (counters.hpp): one sample per env or learner slot
  // of each buffer, labelled `env` or `learner` (the slot, which is the learner's rank).
  void rows(CounterScope scope);

  void all();

 private:
  void buffer_families();
  void tier_families();
  void age_histograms();
  void priority_families();
  void limiter_families();
  void journal_families();
  // The sample of row `c` with value `v`: a since_ns row as the seconds since then, left out while 0.
  void row_sample(const Counter& c, const std::vector<Label>& labels, uint64_t v) {
    if (c.form != CounterForm::since_ns) return x_.sample(labels, v);
    if (v != 0) x_.sample(labels, seconds_since(v, now_));
  }

  Exposition& x_;
  const std::vector<Scraped>& buffers_;
  uint64_t now_;
};

using U = std::optional<uint64_t>;
using D = std::optional<double>;

void Writer::rows(CounterScope scope) {
  const std::span<const Counter> table = counters(scope);
  const std::string label = scope == CounterScope::env ? "env" : "learner";
  for (std::size_t k = 0; k < table.size(); ++k) {
    const Counter& c = table[k];
    if (c.metric.empty()) continue;
    x_.family(c.metric, c.type == CounterType::counter ? Type::counter : Type::gauge, c.help);
    for (const Scraped& b : buffers_) {
      if (!b.info || !counter_applies(c, *b.info)) continue;
      if (scope == CounterScope::env) {
        for (const EnvInfo& e : b.info->envs) {
          row_sample(c, {{"buffer", b.name}, {label, std::to_string(e.env)}}, e.counters[k]);
        }
      } else {
        for (const LearnerInfo& l : b.info->learners) {
          row_sample(c, {{"buffer", b.name}, {label, std::to_string(l.slot)}}, l.counters[k]);
        }
      }
    }
  }
}

void Writer::all() {
  buffer_families();
  rows(CounterScope::env);      // per env: steps, episodes, leases, bytes
  rows(CounterScope::learner);  // per learner slot
  age_histograms();
  priority_families();
  limiter_families();
  journal_families();
}

// Steps and bytes per tier (layout 1.11): "ram", the rings' part of the replay views, and "disk", a cold tier's part
// (a buffer without one has no disk sample), and the cold files' size.
void Writer::tier_families() {
  x_.family("shmreplay_tier_steps", Type::gauge,
            "Stored steps of the replay views per tier (ram: the rings, disk: the cold tier)");
  for (const Scraped& b : buffers_) {
    if (!b.info) continue;
    x_.sample({{"buffer", b.name}, {"tier", "ram"}}, b.info->replay_steps);
    if (b.info->cold.capacity != 0) x_.sample({{"buffer", b.name}, {"tier", "disk"}}, b.info->cold.steps);
  }
  x_.family("shmreplay_tier_bytes", Type::gauge,
            "Bytes the stored steps of each tier occupy (ram: the rings, disk: the cold tier)");
  for (const Scraped& b : buffers_) {
    if (!b.info) continue;
    x_.sample({{"buffer", b.name}, {"tier", "ram"}}, b.info->stored_bytes);
    if (b.info->cold.capacity != 0) {
      x_.sample({{"buffer", b.name}, {"tier", "disk"}}, b.info->cold.steps * b.info->step_bytes);
    }
  }
  per_buffer("shmreplay_cold_file_bytes", Type::gauge, "Bytes of the cold tier's files on disk, headers included",
             [](const SegmentInfo& i) { return i.cold.capacity == 0 ? U() : U(i.cold.file_bytes); });
}

void Writer::buffer_families() {
  x_.family("shmreplay_buffer_up", Type::gauge, "1 when the buffer's segment opened and was read, 0 when not");
  for (const Scraped& b : buffers_) x_.sample({{"buffer", b.name}}, uint64_t{b.info ? 1u : 0u});

  // geometry and bytes
  per_buffer("shmreplay_envs", Type::gauge, "Envs (rings) of the buffer", [](const SegmentInfo& i) { return U(i.num_envs); });
  per_buffer("shmreplay_capacity_steps", Type::gauge, "Steps the buffer holds when full, every env together",
             [](const SegmentInfo& i) { return U(i.num_envs * i.capacity); });
  per_buffer("shmreplay_segment_bytes", Type::gauge, "Size of the segment file in bytes",
             [](const SegmentInfo& i) { return U(i.total_bytes); });
  per_buffer("shmreplay_data_bytes", Type::gauge, "Bytes of step storage in the segment",
             [](const SegmentInfo& i) { return U(i.data_bytes); });
  per_buffer("shmreplay_step_bytes", Type::gauge, "Bytes of one step as pushed and sampled",
             [](const SegmentInfo& i) { return U(i.step_bytes); });
  per_buffer("shmreplay_max_learners", Type::gauge, "Learner slots of the buffer",
             [](const SegmentInfo& i) { return U(i.learners.size()); });
  tier_families();

  // inserts and samples
  per_buffer("shmreplay_inserts_total", Type::counter, "Steps published since creation, every env together",
             [](const SegmentInfo& i) { return U(i.total_pushed); });
  per_buffer("shmreplay_samples_total", Type::counter, "Rows returned by sample calls since creation, every learner",
             [](const SegmentInfo& i) { return U(i.learner.rows_sampled); });
  per_buffer("shmreplay_sample_calls_total", Type::counter, "Sample calls and peeks since creation, every learner",
             [](const SegmentInfo& i) { return U(i.learner.sample_calls); });
  per_buffer("shmreplay_sample_retries_total", Type::counter,
             "Rows redrawn because a writer overwrote them during the copy (torn reads), every learner",
             [](const SegmentInfo& i) { return U(i.learner.retries); });
  per_buffer("shmreplay_sample_insert_ratio", Type::gauge, "Sampled rows per published step since creation",
             [](const SegmentInfo& i) {
               return i.total_pushed == 0 ? D() : D(static_cast<double>(i.learner.rows_sampled) / static_cast<double>(i.total_pushed));
             });
  per_buffer("shmreplay_live_writers", Type::gauge, "Distinct live processes holding env leases",
             [](const SegmentInfo& i) { return U(i.live_writers); });
  per_buffer("shmreplay_live_learners", Type::gauge, "Learner slots held by a live learner",
             [](const SegmentInfo& i) { return U(i.live_learners); });
}

void Writer::age_histograms() {
  // Layout 1.8: the age of the sampled rows, one histogram per learner slot with the segment's own bucket bounds.
  x_.family("shmreplay_learner_sample_age_steps", Type::histogram,
            "Age of the rows the learner slot sampled: steps from a row's end to its env's head when it was drawn (0: "
            "it ends at the newest step); since creation or the last checkpoint load");
  std::array<double, layout::kAgeBuckets> bounds{};
  for (uint32_t k = 0; k < layout::kAgeBuckets; ++k) bounds[k] = static_cast<double>(layout::age_bucket_le(k));
  for (const Scraped& b : buffers_) {
    if (!b.info) continue;
    for (const LearnerInfo& l : b.info->learners) {
      x_.histogram({{"buffer", b.name}, {"learner", std::to_string(l.slot)}}, bounds, l.age_buckets, l.age_sum_steps,
                   l.age_rows);
    }
  }
}

void Writer::priority_families() {  // buffers with priorities only
  per_buffer("shmreplay_priority_weight", Type::gauge, "Sum of priority^alpha over the replay view (what sampling draws from)",
             [](const SegmentInfo& i) { return i.priority_exponent ? D(i.priority_total) : D(); });
  per_buffer("shmreplay_priority_max", Type::gauge, "The largest priority ever given (new steps enter at it)",
             [](const SegmentInfo& i) { return i.priority_exponent ? D(i.max_priority) : D(); });
  per_buffer("shmreplay_priority_exponent", Type::gauge, "alpha: steps are drawn by priority^alpha",
             [](const SegmentInfo& i) { return i.priority_exponent; });
  per_buffer("shmreplay_priority_updates_total", Type::counter, "Priorities set by the learners",
             [](const SegmentInfo& i) { return i.priority_exponent ? U(i.priority_updates) : U(); });
  per_buffer("shmreplay_priority_updates_dropped_total", Type::counter,
             "Priority updates refused because the step had been overwritten",
             [](const SegmentInfo& i) { return i.priority_exponent ? U(i.priority_updates_dropped) : U(); });
}

void Writer::limiter_families() {
  per_buffer("shmreplay_rate_limit_enabled", Type::gauge, "1 when the buffer has a rate limiter, 0 when not",
             [](const SegmentInfo& i) { return U(i.rate_limit.limit ? 1u : 0u); });
  const auto ratio = [](const SegmentInfo& i) { return i.rate_limit.limit && i.rate_limit.limit->has_ratio(); };
  per_buffer("shmreplay_rate_limit_samples_per_insert", Type::gauge, "The limiter's target sampled rows per step",
             [ratio](const SegmentInfo& i) { return ratio(i) ? D(i.rate_limit.limit->samples_per_insert) : D(); });
  per_buffer("shmreplay_rate_limit_min_size_to_sample", Type::gauge, "Steps stored before the limiter admits a sample",
             [](const SegmentInfo& i) { return i.rate_limit.limit ? U(i.rate_limit.limit->min_size_to_sample) : U(); });
  per_buffer("shmreplay_rate_limit_error", Type::gauge,
             "The limiter's error: inserts * samples_per_insert - samples (rows), kept within min_diff and max_diff",
             [ratio](const SegmentInfo& i) { return ratio(i) ? D(i.rate_limit.error) : D(); });
  per_buffer("shmreplay_rate_limit_min_diff", Type::gauge, "Sample calls may not take the error below this (rows)",
             [ratio](const SegmentInfo& i) { return ratio(i) ? D(i.rate_limit.limit->min_diff) : D(); });
  per_buffer("shmreplay_rate_limit_max_diff", Type::gauge, "Waiting writers may not take the error above this (rows)",
             [ratio](const SegmentInfo& i) { return ratio(i) ? D(i.rate_limit.limit->max_diff) : D(); });
  x_.family("shmreplay_rate_limit_held_calls_total", Type::counter,
            "Calls the rate limiter held back (waited or refused), by side: learner sample calls, writer push calls");
  for (const Scraped& b : buffers_) {
    if (!b.info || !b.info->rate_limit.limit) continue;
    x_.sample({{"buffer", b.name}, {"side", "learner"}}, b.info->rate_limit.learner_limited);
    x_.sample({{"buffer", b.name}, {"side", "writer"}}, b.info->rate_limit.writers_limited);
  }
  x_.family("shmreplay_rate_limit_timed_out_calls_total", Type::counter,
            "Held-back calls that gave up at their timeout (a timeout of 0 refuses at once, and counts), by side: "
            "learner sample calls, writer push calls");
  for (const Scraped& b : buffers_) {
    if (!b.info || !b.info->rate_limit.limit) continue;
    x_.sample({{"buffer", b.name}, {"side", "learner"}}, b.info->rate_limit.learner_timeouts);
    x_.sample({{"buffer", b.name}, {"side", "writer"}}, b.info->rate_limit.writer_timeouts);
  }
  x_.family("shmreplay_rate_limit_waiting", Type::gauge, "Processes waiting for the rate limiter now, by side");
  for (const Scraped& b : buffers_) {
    if (!b.info || !b.info->rate_limit.limit) continue;
    x_.sample({{"buffer", b.name}, {"side", "learner"}}, b.info->rate_limit.learners_waiting);
    x_.sample({{"buffer", b.name}, {"side", "writer"}}, b.info->rate_limit.writer_waiters);
  }
  x_.family("shmreplay_rate_limit_wait_age_seconds", Type::gauge,
            "Seconds since the earliest wait now in progress began, by side (0 when none waits)");
  for (const Scraped& b : buffers_) {
    if (!b.info || !b.info->rate_limit.limit) continue;
    const RateLimitState& r = b.info->rate_limit;
    x_.sample({{"buffer", b.name}, {"side", "learner"}},
              r.learners_waiting ? seconds_since(r.learner_waiting_since_ns, now_) : 0.0);
    x_.sample({{"buffer", b.name}, {"side", "writer"}},
              r.writer_waiters ? seconds_since(r.writer_waiting_since_ns, now_) : 0.0);
  }
  per_buffer("shmreplay_rate_limit_waiting_learner_rows", Type::gauge, "Rows of the sample calls waiting now",
             [](const SegmentInfo& i) { return i.rate_limit.limit ? U(i.rate_limit.learner_waiting_rows) : U(); });
  per_buffer("shmreplay_rate_limit_setting_changes_total", Type::counter, "Changes of the limiter's settings",
             [](const SegmentInfo& i) { return i.rate_limit.limit ? U(i.rate_limit.changes) : U(); });
}

void Writer::journal_families() {  // buffers that have been journaled only (JournalInfo::present)
  const auto on = [](const SegmentInfo& i) { return i.journal.present(); };
  per_buffer("shmreplay_journal_up", Type::gauge, "1 while a live journal keeps the buffer durable, 0 when none runs",
             [on](const SegmentInfo& i) { return on(i) ? U(i.journal.state == OwnerState::alive ? 1u : 0u) : U(); });
  per_buffer("shmreplay_journal_bound_seconds", Type::gauge, "The journal's bound: steps are durable within it",
             [on](const SegmentInfo& i) { return on(i) ? D(i.journal.bound_s) : D(); });
  const uint64_t now = now_;
  per_buffer("shmreplay_journal_lag_seconds", Type::gauge,
             "Seconds since the instant up to which every published step is durable, while some step is not yet "
             "durable (0 when all are)",
             [on, now](const SegmentInfo& i) { return on(i) ? D(i.journal.lag_s(now)) : D(); });
  per_buffer("shmreplay_journal_pending_steps", Type::gauge,
             "Steps published that no durable link holds yet, every env together",
             [on](const SegmentInfo& i) { return on(i) ? U(i.journal.pending_steps) : U(); });
  per_buffer("shmreplay_journal_last_link_age_seconds", Type::gauge, "Seconds since the newest durable link was synced",
             [now](const SegmentInfo& i) {
               return i.journal.done_ns != 0 ? D(seconds_since(i.journal.done_ns, now)) : D();
             });
  per_buffer("shmreplay_journal_link_seconds", Type::gauge, "How long the newest durable link's save took",
             [](const SegmentInfo& i) { return i.journal.link_seq != 0 ? D(static_cast<double>(i.journal.link_ns) * 1e-9) : D(); });
  per_buffer("shmreplay_journal_max_lag_seconds", Type::gauge, "The largest lag a link of the journal ended",
             [on](const SegmentInfo& i) { return on(i) ? D(static_cast<double>(i.journal.max_lag_ns) * 1e-9) : D(); });
  per_buffer("shmreplay_journal_links_total", Type::counter, "Links the buffer's journals wrote",
             [on](const SegmentInfo& i) { return on(i) ? U(i.journal.links) : U(); });
  per_buffer("shmreplay_journal_late_links_total", Type::counter, "Links whose lag passed the journal's bound",
             [on](const SegmentInfo& i) { return on(i) ? U(i.journal.late_links) : U(); });
  per_buffer("shmreplay_journal_link_failures_total", Type::counter,
             "Links that failed (the chain stayed as it was, and the journal tried again)",
             [on](const SegmentInfo& i) { return on(i) ? U(i.journal.failures) : U(); });
}

}  // namespace

std::string metrics_text(const std::vector<std::string>& names, bool all_users) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Scraped> buffers = read_buffers(names, all_users);
  Exposition x;
  Writer(x, buffers, detail::realtime_ns()).all();
  x.family("shmreplay_metrics_read_seconds", Type::gauge, "Seconds this scrape took to read the buffers");
  x.sample({}, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return x.text();
}

namespace {

// HOST:PORT, [IPV6]:PORT; nullopt when it is not one.
std::optional<std::pair<std::string, int>> parse_listen(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port_text = text.substr(colon + 1);
  if (port_text.empty() || port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const int port = std::stoi(port_text);
  if (port > 65535 || host.empty()) return std::nullopt;
  return std::make_pair(host, port);
}

// One stderr line per named buffer that belongs to another user, which is served as shmreplay_buffer_up 0 unless
// --all-users.
void note_other_owners(const MetricsArgs& args) {
  if (args.all_users) return;
  for (const std::string& name : args.names) {
    const std::optional<uid_t> owner = file_owner(name);
    if (!owner || *owner == ::geteuid()) continue;
    std::fprintf(stderr,
                 "shmreplay metrics: %s belongs to uid %u, not to uid %u that runs this: it reads "
                 "shmreplay_buffer_up 0 (--all-users serves other users' buffers)\n",
                 name.c_str(), static_cast<unsigned>(*owner), static_cast<unsigned>(::geteuid()));
  }
}

std::string served(const MetricsArgs& args) {
  if (!args.names.empty()) return fmt::format("{} buffer{}", args.names.size(), args.names.size() == 1 ? "" : "s");
  return args.all_users ? "every user's buffers" : fmt::format("every buffer of uid {}", ::geteuid());
}

HttpResponse answer(std::string_view path, const MetricsArgs& args) {
  if (path == "/metrics") return {200, Exposition::kContentType, metrics_text(args.names, args.all_users)};
  if (path == "/") return {200, "text/html; charset=utf-8", "<html><body><a href=\"/metrics\">/metrics</a></body></html>\n"};
  return {404, "text/plain; charset=utf-8", "shmreplay metrics: not found; the metrics are at /metrics\n"};
}

}  // namespace

int run_metrics(const MetricsArgs& args) {
  note_other_owners(args);
  if (args.once) {
    std::fputs(metrics_text(args.names, args.all_users).c_str(), stdout);
    return kExitOk;
  }
  if (args.listen.empty()) {
    print_error("metrics needs --listen HOST:PORT (or --once); run 'shmreplay metrics --help'");
    return kExitUsage;
  }
  const auto listen = parse_listen(args.listen);
  if (!listen) {
    print_error(fmt::format("--listen '{}' is not HOST:PORT (e.g. 127.0.0.1:9464, or port 0 for any free port); run "
                            "'shmreplay metrics --help'",
                            args.listen));
    return kExitUsage;
  }
  // The stop signals are read from a signalfd that the server polls beside its sockets: SIGINT, SIGTERM or SIGHUP
  // ends serve(), and the process exits 0.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (const int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, s);
  ::sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  const int stop_fd = ::signalfd(-1, &stop_signals, SFD_CLOEXEC);
  if (stop_fd < 0) throw_errno(errno, "signalfd for the exporter's stop signals");

  const auto& [host, port] = *listen;
  HttpServer server(host, port);
  const std::string shown = host.find(':') != std::string::npos ? fmt::format("[{}]", host) : host;
  std::fprintf(stderr, "shmreplay metrics: serving http://%s:%d/metrics (%s)\n", shown.c_str(), server.port(),
               served(args).c_str());
  std::fflush(stderr);
  server.serve([&args](std::string_view path) { return answer(path, args); }, stop_fd);
  ::close(stop_fd);
  return kExitOk;
}

}  // namespace shmreplay::cli
