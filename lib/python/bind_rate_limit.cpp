// lib/python/bind_rate_limit.cpp: the Python RateLimit (the limiter's settings) and RateLimitState (its counts and
// waits), and the Buffer's methods for them.
#include "bindings.hpp"
#include "objects.hpp"

#include <limits>

namespace shmreplay::python {

using namespace py::literals;

namespace {

std::string reason_text(RateLimitReason r) {
  switch (r) {
    case RateLimitReason::none: return "none";
    case RateLimitReason::min_size: return "min_size";
    case RateLimitReason::learner_ahead: return "learner_ahead";
    case RateLimitReason::writers_ahead: return "writers_ahead";
  }
  return "?";
}

}  // namespace

std::string rate_limit_reason(RateLimitReason r) { return reason_text(r); }

void bind_rate_limit(py::module_& m) {
  constexpr double kMax = std::numeric_limits<double>::max();
  py::class_<RateLimit>(m, "RateLimit",
                        "A rate limiter's settings, with Reverb's meaning: error = inserts * samples_per_insert - "
                        "samples; a sample is held back below min_diff (or before min_size_to_sample steps are "
                        "stored), a waiting writer's insert above max_diff.")
      .def(py::init([](Int<"RateLimit(): min_size_to_sample"> min_size_to_sample, double samples_per_insert, double min_diff, double max_diff) {
             return RateLimit{min_size_to_sample, samples_per_insert, min_diff, max_diff};
           }),
           py::kw_only(), "min_size_to_sample"_a = 1, "samples_per_insert"_a = 1.0, "min_diff"_a = -kMax,
           "max_diff"_a = kMax)
      .def_static("ratio", &RateLimit::ratio, "samples_per_insert"_a, "min_size_to_sample"_a, "error_buffer"_a,
                  "Reverb's SampleToInsertRatio: samples_per_insert rows per step, within +/- error_buffer, after "
                  "min_size_to_sample steps.")
      .def_static("min_size", &RateLimit::min_size, "min_size_to_sample"_a,
                  "Reverb's MinSize: no sample before that many steps are stored, and no ratio.")
      .def_readonly("min_size_to_sample", &RateLimit::min_size_to_sample,
                    "no sample before this many steps are stored (all envs together)")
      .def_readonly("samples_per_insert", &RateLimit::samples_per_insert,
                    "the target number of sampled rows per published step")
      .def_readonly("min_diff", &RateLimit::min_diff, "samples may not take the error below this")
      .def_readonly("max_diff", &RateLimit::max_diff, "waiting writers may not take the error above this")
      .def_property_readonly("has_ratio", &RateLimit::has_ratio,
                             "whether min_diff and max_diff bound the ratio (False: min_size alone)")
      .def_property_readonly("error_buffer", &RateLimit::error_buffer, "(max_diff - min_diff) / 2")
      // as an operator: another type (None: "a RateLimit or None") compares unequal instead of raising TypeError
      .def(py::self == py::self)
      .def("__repr__", [](const RateLimit& r) { return fmt::format("<shmreplay.RateLimit: {}>", r.to_string()); });

  py::class_<RateLimitState>(m, "RateLimitState", "The rate limiter's settings, counts and waits, read at one moment.")
      .def_readonly("limit", &RateLimitState::limit, "the settings; None without a limiter")
      .def_readonly("inserts", &RateLimitState::inserts, "published steps since creation, all envs")
      .def_readonly("samples", &RateLimitState::samples, "rows admitted to sample calls since creation")
      .def_readonly("stored", &RateLimitState::stored, "steps stored now")
      .def_readonly("error", &RateLimitState::error, "inserts * samples_per_insert - samples")
      .def_readonly("learner_waiting_rows", &RateLimitState::learner_waiting_rows,
                    "rows of a sample call waiting now; 0 when none")
      .def_property_readonly("learner_waiting_since",
                             [](const RateLimitState& s) -> std::optional<double> {
                               if (s.learner_waiting_rows == 0) return std::nullopt;
                               return static_cast<double>(s.learner_waiting_since_ns) / 1e9;
                             },
                             "time.time() when the waiting sample call began, None when none waits")
      .def_readonly("writer_waiters", &RateLimitState::writer_waiters,
                    "writers waiting now (one that died while it waited is not counted)")
      .def_property_readonly("writer_waiting_since",
                             [](const RateLimitState& s) -> std::optional<double> {
                               if (s.writer_waiters == 0) return std::nullopt;
                               return static_cast<double>(s.writer_waiting_since_ns) / 1e9;
                             },
                             "time.time() when the first waiting writer began, None when none waits")
      .def_readonly("learner_limited", &RateLimitState::learner_limited, "sample calls held back since creation")
      .def_readonly("learner_timeouts", &RateLimitState::learner_timeouts,
                    "sample calls held back that gave up at their timeout, every learner's (since creation or the "
                    "last checkpoint load)")
      .def_readonly("writers_limited", &RateLimitState::writers_limited, "push calls held back since creation")
      .def_readonly("writer_timeouts", &RateLimitState::writer_timeouts,
                    "push calls held back that gave up at their timeout")
      .def_readonly("changes", &RateLimitState::changes, "times the settings were changed after creation")
      .def("__repr__", [](const RateLimitState& s) {
        if (!s.limit) return std::string("<shmreplay.RateLimitState: no limiter>");
        return fmt::format("<shmreplay.RateLimitState: {}; {} inserts, {} samples, error {:g}; {} writer(s) and {} "
                           "learner row(s) waiting>",
                           s.limit->to_string(), s.inserts, s.samples, s.error, s.writer_waiters,
                           s.learner_waiting_rows);
      });
}

}  // namespace shmreplay::python
