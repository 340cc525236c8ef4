// tools/cli/sampling_forms.cpp: what `info` and `limit` show of layout 1.11's sampling policies: the policy
// window, the sample cap, the consuming queue, the initial priority (declared in info_forms.hpp).
#include <cmath>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "info_forms.hpp"
#include "shmreplay/inspector.hpp"

namespace shmreplay::cli {

// null: the running maximum; "inf": never-sampled steps first (JSON has no infinity); else the value.
Json initial_priority_json(const std::optional<double>& p) {
  if (!p) return nullptr;
  return std::isinf(*p) ? Json("inf") : Json(*p);
}

Json policy_json(const PolicyInfo& p) {
  if (p.field.empty() && p.publishes == 0) return nullptr;
  return {
      {"field", p.field.empty() ? Json(nullptr) : Json(p.field)},
      {"version", p.version},
      {"max_staleness", p.max_staleness ? Json(*p.max_staleness) : Json(nullptr)},
      {"publishes", p.publishes},
      {"writers_held", p.writers_held},
      {"writer_timeouts", p.writer_timeouts},
      {"learner_paced", p.learner_paced},
      {"learner_pace_timeouts", p.learner_pace_timeouts},
  };
}

std::string policy_text(const PolicyInfo& p) {
  const std::string window =
      p.max_staleness ? fmt::format(", max_staleness {} (versions >= {})", *p.max_staleness,
                                    p.version > *p.max_staleness ? p.version - *p.max_staleness : 0)
                      : std::string(", no window");
  return fmt::format("version {}{}; field {}; {} writer pushes held back ({} gave up), {} paced publishes ({} gave "
                     "up)",
                     p.version, window, p.field.empty() ? "none" : "'" + p.field + "'", p.writers_held,
                     p.writer_timeouts, p.learner_paced, p.learner_pace_timeouts);
}

// The summary's lines of layout 1.11's sampling policies: the policy window, the sample cap, the consuming queue.
void print_sampling_policies(const SegmentInfo& i) {
  const LearnerInfo& l = i.learner;
  if (!i.policy.field.empty() || i.policy.publishes != 0) print_pair("policy", policy_text(i.policy));
  if (i.max_times_sampled != 0) {
    print_pair("sample cap",
               fmt::format("max_times_sampled {}; {} delivered, {} steps retired, {} rows redrawn (capped)",
                           i.max_times_sampled, l.cap_claimed, l.cap_retired, l.cap_rejected));
  }
  if (i.consuming_queue) {
    print_pair("consuming queue", fmt::format("{} delivered, {} claims refused, {} calls waited, {} claims given back",
                                              l.queue_delivered, l.queue_refused, l.queue_waits, l.queue_returned));
  }
  if (i.walk.chunk_steps != 0) {
    print_pair("reanalyse",
               fmt::format("a walk of {}-step chunks; pass {}; newest target version {}; {} live workers, {} dead "
                           "ones repaired",
                           i.walk.chunk_steps, i.walk.pass,
                           i.walk.newest_version ? fmt::format("{}", *i.walk.newest_version) : std::string("none"),
                           i.walk.workers, i.walk.repairs));
  }
}

}  // namespace shmreplay::cli
