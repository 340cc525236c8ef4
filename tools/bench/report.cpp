// tools/bench/report.cpp: the benchmark's markdown tables and JSON (report.hpp). Called by main.cpp.
#include "report.hpp"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "shmreplay/buffer.hpp"
#include "shmreplay/schema.hpp"
#include "shmreplay/version.hpp"

namespace shmreplay::bench {

std::string pct(double x) { return fmt::format("{:.0f}%", x * 100); }

// -- Formatting ---------------------------------------------------------------------------------------------------

std::string num(double x) {
  if (!std::isfinite(x)) return "inf";
  const double a = std::fabs(x);
  if (a >= 1e9) return fmt::format("{:.2f}G", x / 1e9);
  if (a >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (a >= 1e4) return fmt::format("{:.1f}k", x / 1e3);
  if (a >= 100) return fmt::format("{:.0f}", x);
  if (a >= 10) return fmt::format("{:.1f}", x);
  return fmt::format("{:.2f}", x);
}

std::string with_spread(const Stat& s, bool late) {
  if (late) return num(s.median) + " (starved)";
  return fmt::format("{} ±{:.0f}%", num(s.median), spread_pct(s));
}

std::string ratio(double ours, double other, bool times) {
  if (!(other > 0)) return ours > 0 ? "inf" : "n/a";
  const double x = ours / other;
  if (!std::isfinite(x)) return "inf";
  return times ? fmt::format("{:.1f}x", x) : fmt::format("{:.0f}%", x * 100);
}

namespace {

// The run's header: the command, the machine, the method and the geometries.
void print_header(const std::string& command, const MachineInfo& m, const Config& cfg) {
  fmt::print("## shmreplay_bench\n\n");
  fmt::print("- command: `{}`\n", command);
  fmt::print("- cpu: {}; {} cores online ({} configured); {}; {}\n", m.cpu, m.cores_online, m.cores_configured,
             m.caches.empty() ? "caches unknown" : m.caches, m.virtualization);
  fmt::print("- memory: {:.1f} GiB; {} free: {:.1f} GiB\n", m.memory_gib, shmreplay::shm_directory(), m.shm_free_gib);
  fmt::print("- kernel: {}; load average at start: {}\n", m.kernel, m.load_average);
  fmt::print("- compiler: {}; build type {}; sanitizers: {}; shmreplay {}\n", m.compiler, m.build_type,
             m.sanitizers, shmreplay::kVersion);
  fmt::print("- method: every writer and sampler is a forked process that opens its segment by name; {:.2f} s "
             "warm-up, then {} trial{} of >= {:.2f} s; figures are the median over trials ± half the min-max "
             "range; GB = 1e9 bytes\n",
             cfg.warmup_s, cfg.trials, cfg.trials == 1 ? "" : "s", cfg.trial_s);
  for (const Geometry& g : cfg.geometries) {
    fmt::print("- {} step: `{}` = {} B; {} envs x {} steps = {:.1f} MB per store; {} envs per writer (a batched "
               "push writes all of them in one call)\n",
               g.label, g.schema.to_string(), g.schema.step_bytes(), g.num_envs, g.capacity,
               static_cast<double>(g.data_bytes()) * 1e-6, g.envs_per_writer);
  }
  fmt::print("- sampling: batch {} rows, replay view, distribution power 1; the memcpy reference copies rows of the "
             "same length from fresh uniform random positions (splitmix64); the mutex baseline holds its lock for "
             "each whole push or sample call\n\n",
             cfg.batch);
}

// The push table (writers alone), when the run has push results.
void print_push_table(const std::vector<Result>& results) {
  bool any_push = false;
  for (const Result& r : results) any_push = any_push || r.section == "push";
  if (any_push) {
    fmt::print("### Push (writers alone)\n\n");
    fmt::print("| step | push | writers | ours ns/step/writer | ours CPU ns/step | ours GB/s | memcpy ns/step/writer | "
               "memcpy GB/s | ours/memcpy | mutex ns/step/writer | mutex GB/s | ours/mutex | on-CPU ours/memcpy/mutex "
               "|\n");
    fmt::print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Result& o : results) {
      if (o.section != "push" || o.impl != Impl::ours) continue;
      const Result* c = find(results, "push", o.step, o.mode, o.writers, 0, Impl::memcpy);
      const Result* x = find(results, "push", o.step, o.mode, o.writers, 0, Impl::mutex);
      if (!c || !x) continue;
      fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{}/{} |\n", o.step, o.mode,
                 o.writers, with_spread(o.ns_per_step), num(o.cpu_ns_per_step.median), num(o.push_gbs.median),
                 with_spread(c->ns_per_step), num(c->push_gbs.median),
                 ratio(o.steps_per_s.median, c->steps_per_s.median, false), with_spread(x->ns_per_step),
                 num(x->push_gbs.median), ratio(o.steps_per_s.median, x->steps_per_s.median, true),
                 pct(o.writer_on_cpu.median), pct(c->writer_on_cpu.median), pct(x->writer_on_cpu.median));
    }
    fmt::print("\n");
  }
}

// The contention table: 2 writer processes and 1 sampler at once, both sides.
void print_contention_table(const std::vector<Result>& results) {
  fmt::print("### Contention: 2 writer processes (batched) and 1 sampler at once, both sides\n\n");
  fmt::print("Progress: each side's rate as a fraction of its rate alone (the 2-writer push without a sampler, "
             "the sampler without writers), summed; 2 would mean that neither side slowed the other.\n\n");
  fmt::print("| step | seq len | ours sampler GB/s | mutex sampler GB/s | ours/mutex | ours writer ns/step | "
             "mutex writer ns/step | ours/mutex | ours progress | mutex progress | ours/mutex |\n");
  fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Result& o : results) {
    if (o.section != "sample" || o.impl != Impl::ours || o.writers != 2) continue;
    const Result* x = find(results, "sample", o.step, o.mode, o.writers, o.length, Impl::mutex);
    if (!x) continue;
    const auto po = progress(results, o);
    const auto px = progress(results, *x);
    fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", o.step, o.length,
               with_spread(o.sample_gbs, o.sampler_late), with_spread(x->sample_gbs, x->sampler_late),
               ratio(o.sample_gbs.median, x->sample_gbs.median, true),
               with_spread(o.ns_per_step, o.writers_late), with_spread(x->ns_per_step, x->writers_late),
               ratio(o.steps_per_s.median, x->steps_per_s.median, true),
               po ? fmt::format("{:.2f}", *po) : "n/a", px ? fmt::format("{:.2f}", *px) : "n/a",
               po && px ? ratio(*po, *px, true) : "n/a");
  }
  fmt::print("\n");
}

// The sample table (with 0 or 2 writers pushing), then the contention table, when the run has sample results.
void print_sample_tables(const std::vector<Result>& results, const Config& cfg) {
  bool any_sample = false;
  for (const Result& r : results) any_sample = any_sample || r.section == "sample";
  if (any_sample) {
    fmt::print("### Sample (batch {}; with 0 or 2 writer processes pushing batched at full speed)\n\n", cfg.batch);
    fmt::print("gather: the prefetching gather of the same rows from the memcpy store (the limit of a copy).\n\n");
    fmt::print("| step | seq len | writers | ours rows/s | ours GB/s | memcpy GB/s | ours/memcpy | gather rows/s | "
               "gather GB/s | ours/gather | mutex rows/s | mutex GB/s | ours/mutex | ours retries/row | sampler "
               "on-CPU ours/memcpy/gather/mutex | ours/memcpy per sampler CPU-s |\n");
    fmt::print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Result& o : results) {
      if (o.section != "sample" || o.impl != Impl::ours) continue;
      const Result* c = find(results, "sample", o.step, o.mode, o.writers, o.length, Impl::memcpy);
      const Result* p = find(results, "sample", o.step, o.mode, o.writers, o.length, Impl::gather);
      const Result* x = find(results, "sample", o.step, o.mode, o.writers, o.length, Impl::mutex);
      if (!c || !p || !x) continue;
      fmt::print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2g} | {}/{}/{}/{} | {} |\n",
                 o.step, o.length, o.writers, with_spread(o.rows_per_s, o.sampler_late), num(o.sample_gbs.median),
                 with_spread(c->sample_gbs, c->sampler_late), ratio(o.sample_gbs.median, c->sample_gbs.median, false),
                 with_spread(p->rows_per_s, p->sampler_late), num(p->sample_gbs.median),
                 ratio(o.sample_gbs.median, p->sample_gbs.median, false),
                 with_spread(x->rows_per_s, x->sampler_late), num(x->sample_gbs.median),
                 ratio(o.sample_gbs.median, x->sample_gbs.median, true), o.retries_per_row,
                 pct(o.sampler_on_cpu.median), pct(c->sampler_on_cpu.median), pct(p->sampler_on_cpu.median),
                 pct(x->sampler_on_cpu.median), ratio(o.rows_per_cpu_s.median, c->rows_per_cpu_s.median, false));
    }
    fmt::print("\n");
    print_contention_table(results);
  }
}

}  // namespace

void print_markdown(const std::string& command, const MachineInfo& m, const Config& cfg,
                    const std::vector<Result>& results, const std::vector<Target>& targets) {
  print_header(command, m, cfg);
  print_push_table(results);
  print_sample_tables(results, cfg);
  if (!targets.empty()) {
    fmt::print("### Targets\n\n| target | case | measured | verdict |\n|---|---|---:|---|\n");
    for (const Target& t : targets) {
      fmt::print("| {} | {} | {} | {} |\n", t.target, t.case_, t.measured, t.met ? "met" : "**missed**");
    }
    fmt::print("\n");
  }
  fmt::print("(starved): a worker missed a trial boundary (it waited for the lock for longer than {:.2f} s); its "
             "figure is over the whole run.\n",
             cfg.patience_s);
}

namespace {

nlohmann::json stat_json(const Stat& s) {
  auto finite = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  return {{"median", finite(s.median)}, {"min", finite(s.lo)}, {"max", finite(s.hi)}};
}

}  // namespace

void print_json(const std::string& command, const MachineInfo& m, const Config& cfg,
                const std::vector<Result>& results, const std::vector<Target>& targets, const nlohmann::json& pixels) {
  nlohmann::json j;
  j["command"] = command;
  j["machine"] = {{"cpu", m.cpu},
                  {"cores_online", m.cores_online},
                  {"cores_configured", m.cores_configured},
                  {"caches", m.caches},
                  {"virtualization", m.virtualization},
                  {"memory_gib", m.memory_gib},
                  {"shm_free_gib", m.shm_free_gib},
                  {"kernel", m.kernel},
                  {"compiler", m.compiler},
                  {"build_type", m.build_type},
                  {"sanitizers", m.sanitizers},
                  {"load_average", m.load_average},
                  {"shmreplay", shmreplay::kVersion}};
  nlohmann::json geos = nlohmann::json::array();
  for (const Geometry& g : cfg.geometries) {
    geos.push_back({{"label", g.label},
                    {"schema", g.schema.to_string()},
                    {"step_bytes", g.schema.step_bytes()},
                    {"num_envs", g.num_envs},
                    {"capacity", g.capacity},
                    {"envs_per_writer", g.envs_per_writer}});
  }
  j["config"] = {{"batch", cfg.batch},           {"warmup_s", cfg.warmup_s}, {"trial_s", cfg.trial_s},
                 {"trials", cfg.trials},         {"patience_s", cfg.patience_s},
                 {"distribution_power", 1.0},    {"steps", geos}};
  nlohmann::json rs = nlohmann::json::array();
  for (const Result& r : results) {
    nlohmann::json x = {{"section", r.section}, {"step", r.step},        {"impl", to_string(r.impl)},
                        {"writers", r.writers}, {"writer_mode", r.mode}, {"step_bytes", r.step_bytes}};
    if (r.writers > 0) {
      x["writer_ns_per_step"] = stat_json(r.ns_per_step);
      x["writer_cpu_ns_per_step"] = stat_json(r.cpu_ns_per_step);
      x["writer_on_cpu"] = stat_json(r.writer_on_cpu);
      x["steps_per_s"] = stat_json(r.steps_per_s);
      x["push_gb_per_s"] = stat_json(r.push_gbs);
      x["writers_starved"] = r.writers_late;
    }
    if (r.section == "sample") {
      x["sequence_length"] = r.length;
      x["batch"] = cfg.batch;
      x["rows_per_s"] = stat_json(r.rows_per_s);
      x["rows_per_cpu_s"] = stat_json(r.rows_per_cpu_s);
      x["sample_gb_per_s"] = stat_json(r.sample_gbs);
      x["retries_per_row"] = r.retries_per_row;
      x["sampler_on_cpu"] = stat_json(r.sampler_on_cpu);
      if (r.writers > 0) {
        const auto p = progress(results, r);
        x["progress"] = p ? nlohmann::json(*p) : nlohmann::json(nullptr);
      }
      x["sampler_starved"] = r.sampler_late;
    }
    rs.push_back(x);
  }
  j["results"] = rs;
  nlohmann::json ts = nlohmann::json::array();
  for (const Target& t : targets) {
    ts.push_back({{"target", t.target}, {"case", t.case_}, {"measured", t.measured}, {"met", t.met}});
  }
  j["targets"] = ts;
  if (!pixels.is_null()) j["pixels"] = pixels;
  fmt::print("{}\n", j.dump(2));
}

}  // namespace shmreplay::bench
