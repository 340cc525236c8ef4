// shmreplay/counters.hpp: the counter table, the one list of the numbers a segment keeps per env and per learner
// slot (Aeron keeps its counters as data: a value plus its metadata, so that a tool prints every counter without
// knowing it). Each row says its name (the key of `shmreplay info --json`), its Prometheus family, type, unit and
// help, its scope, and in which of the text forms it shows; lib/counters.cpp holds the rows and where each one's
// word is. The Inspector fills one value per row (EnvInfo::counters, LearnerInfo::counters, in row order);
// `shmreplay metrics`, `info`, `info --json` and `watch` iterate the rows, and a checkpoint copies the learner rows
// it holds through them. A new counter is a row of lib/counters.cpp (plus its line in docs/cli.md's metric table,
// which a test holds to the rows, and its test).
//
// Who calls it: the Inspector, the CLI, checkpoints. Immutable data: safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace shmreplay {

/// Whose counter a row is: the buffer's, one env's (a label `env`), one learner slot's (`learner`), one writer's.
/// Rows exist for env and learner today; the buffer's numbers are SegmentInfo's fields and a Writer's its own.
enum class CounterScope : uint8_t { buffer, env, learner, writer };

/// The Prometheus type of a row's family: a counter only grows over the segment's life, a gauge goes up and down.
enum class CounterType : uint8_t { counter, gauge };

/// When a row's family is exported (and its column shown): always, only for a buffer with episode fields, only for
/// one with compressed fields (":lz4", ":zstd=LEVEL"), only for one with a policy-version field (layout 1.11), or
/// only for one with a sample cap (CreateOptions::max_times_sampled, layout 1.11), or only for a consuming queue
/// (CreateOptions::consuming_queue, layout 1.11), or only for a buffer with a reanalyse walk
/// (CreateOptions::reanalyse_chunk, layout 1.11), or only for a buffer that has been journaled (a journal holds its
/// lease or wrote a link: JournalInfo::present, layout 1.11).
enum class CounterPresence : uint8_t { always, episodes, compressed, policy, caps, queue, walk, journal };

/// What the value is: a number, or a CLOCK_REALTIME time in ns (0: never) that the exporter turns into the seconds
/// since then (absent while 0).
enum class CounterForm : uint8_t { number, since_ns };

/// One row of the counter table.
struct Counter {
  std::string_view name;    ///< the key in `info --json` (and `watch --json` when it has a column), snake_case
  std::string_view metric;  ///< the Prometheus family (`shmreplay_...`), "" when not exported
  CounterType type = CounterType::gauge;  ///< its family's Prometheus type
  std::string_view unit;    ///< what it counts: "steps", "rows", "calls", "bytes", "ns", "0 or 1", ...
  std::string_view help;    ///< the family's HELP text
  CounterScope scope = CounterScope::env;              ///< whose value it is: the buffer's, an env's, a slot's
  CounterPresence presence = CounterPresence::always;  ///< when its family is exported
  CounterForm form = CounterForm::number;              ///< a number, or a time the exporter turns into an age
  bool in_json = true;      ///< a key of `info --json` (false: a 0/1 gauge the JSON says as a state string)
  std::string_view column;  ///< the header of its column in `info`'s and `watch`'s env tables, and a key of `watch
                            ///< --json`'s envs; "" when it has none (the tables' usual columns are written by hand)
};

/// The rows of `scope`, in table order (the order of EnvInfo::counters or LearnerInfo::counters); empty for a scope
/// without rows. O(1).
std::span<const Counter> counters(CounterScope scope);

/// The index of row `name` among counters(scope); nullopt when there is none. O(rows).
std::optional<std::size_t> counter_index(CounterScope scope, std::string_view name);

}  // namespace shmreplay
