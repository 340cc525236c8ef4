// tools/cli/info_forms.hpp: the JSON forms and text tables of `info` and `ls` (info_forms.cpp), used by their
// commands (commands.cpp). The one-line forms `watch` shares are declared in commands.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "shmreplay/inspector.hpp"
#include "shmreplay/schema.hpp"

namespace shmreplay::cli {

using Json = nlohmann::ordered_json;  // keeps keys in the order written, so the output reads like the text form

/// "1 env", "3 envs".
std::string counted(uint64_t n, std::string_view singular, std::string_view plural);
/// ", N rows written back, M refused (overwritten since sampled)" for learners that called write_back; "" otherwise
/// (`info`'s sampled line, `watch`'s samples line).
std::string write_backs_text(const LearnerInfo& l);
/// The rows of the counter table's `scope` that `info --json` shows (Counter::in_json), as keys of `j` with their
/// values (EnvInfo::counters, LearnerInfo::counters), in row order.
void add_counter_keys(Json& j, CounterScope scope, const std::vector<uint64_t>& values);
/// `info --json`'s "compressed": each compressed field's codec, budget and counters, the bytes per stored step and
/// the steps lost to the budget; null without compressed fields (compression.cpp).
Json compressed_json(const SegmentInfo& i);
/// `info --json`'s "policy" and `limit --json`'s: the version and window in force, the field, the holds; null in a
/// buffer without a policy-version field where nothing was published.
Json policy_json(const PolicyInfo& p);
/// The policy line of `info` and `limit`: the version and window in force, the field, the holds (layout 1.11).
std::string policy_text(const PolicyInfo& p);
/// `info --json`'s priorities' "initial_priority": null (the running maximum), "inf" (never-sampled steps first;
/// JSON has no infinity), or the value (sampling_forms.cpp).
Json initial_priority_json(const std::optional<double>& p);
/// The journal line of `info` and `watch` (journal.cpp): the holder, the bound, the newest durable link, the lag in
/// seconds and steps; "" for a buffer never journaled.
std::string journal_text(const JournalInfo& j, uint64_t now_ns);
/// `info --json`'s "journal" (journal.cpp): JournalInfo with the lag at `now_ns`; null for a buffer never journaled.
Json journal_json(const JournalInfo& j, uint64_t now_ns);
/// One `info` summary line: the key in a column of 14, then the value.
void print_pair(std::string_view key, std::string_view value);
/// `info`'s lines of the sampling policies: the policy window, the sample cap, the consuming queue.
void print_sampling_policies(const SegmentInfo& i);
/// `info --json`: everything SegmentInfo holds.
Json info_json(const SegmentInfo& i);
/// One buffer of `ls --json`.
Json listed_json(const ListedSegment& s);
/// The OWNER cell of `ls`.
std::string owner_cell(const SegmentInfo& i);
/// `info`'s text: the summary lines, the schema table, the env table.
void print_info_summary(const SegmentInfo& i);
void print_schema_table(const Schema& schema);
void print_env_table(const SegmentInfo& i);

}  // namespace shmreplay::cli
