// lib/python/sample_options.hpp: the sample options of the Python binding, one row each (kSampleOptions): the
// keyword, which sampling calls take it, how its value converts into SampleOptions (and so its default: the
// field's value in SampleOptions{}), one sentence for the docstrings, and the other interfaces' names for it that
// the module rejects with a message naming the keyword (aliases.hpp). Everything else is driven from the rows:
// the calls' argument names, their parsing and their text signatures and docstrings (sample_call.cpp), the
// aliases (aliases.cpp), and the checks of the stubs (tests/python/test_stubs.py, test_sample_call.py).
//
// A new sample option: its field in SampleOptions (include/shmreplay/vocabulary.hpp), its row here, its keyword
// in the stubs (shmreplay/_shmreplay.pyi) and its row in docs/naming.md's table (test_naming.py asks for both).
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "aliases.hpp"
#include "convert.hpp"
#include "vectorcall.hpp"

namespace shmreplay::python {

/// The sampling calls, as bits: a row's `calls` says which take the option (keyword-only, in table order,
/// between the call's own arguments and out=).
enum SampleCall : unsigned {
  kSample = 1,              ///< Sampler.sample
  kSampleMixed = 2,         ///< Sampler.sample_mixed
  kSampleTransitions = 4,   ///< Sampler.sample_transitions (single steps: no sequence options)
  kTotalWeight = 8,         ///< Sampler.total_weight (what changes the weights only)
};
inline constexpr std::array<SampleCall, 4> kSampleCalls = {kSample, kSampleMixed, kSampleTransitions, kTotalWeight};
inline constexpr std::array<const char*, 4> kSampleCallNames = {"Sampler.sample", "Sampler.sample_mixed",
                                                                "Sampler.sample_transitions", "Sampler.total_weight"};

/// Another interface's name for an option (null `alias`: none), rejected with a message naming the keyword.
struct OptionAlias {
  const char* alias = nullptr;
  AliasKind kind = AliasKind::name;
  const char* origin = nullptr;  ///< where the alias comes from ("C++: SampleOptions::importance_exponent")
};

/// One sample option.
struct SampleOption {
  const char* name;  ///< the Python keyword
  unsigned calls;    ///< SampleCall bits
  /// Converts `value` (given for the keyword by a call of `function`) into its field of `o`; TypeError or
  /// InvalidArgument naming the function and the keyword for a value it does not take.
  void (*set)(const char* function, const char* name, PyObject* value, SampleOptions& o);
  /// The default, as Python writes it: SampleOptions{}'s value (the signatures' and docstrings' default).
  std::string (*default_text)();
  const char* doc;  ///< one sentence (docstrings)
  std::array<OptionAlias, 3> aliases;
};

// ---------------------------------------------------------------------------------------------------------------
// Conversions: a Python value into a field's type (the errors are argument()'s), and a field's value as Python
// writes it.

struct CountOption {
  static uint64_t from(const char* f, const char* n, PyObject* v) { return argument<uint64_t>(f, n, v); }
  static std::string text(uint64_t v) { return std::to_string(v); }
};
/// None or a count (std::optional<uint64_t>).
struct OptionalCountOption {
  static std::optional<uint64_t> from(const char* f, const char* n, PyObject* v) {
    if (v == Py_None) return std::nullopt;
    return argument<uint64_t>(f, n, v);
  }
  static std::string text(std::optional<uint64_t> v) { return v ? std::to_string(*v) : "None"; }
};
struct FlagOption {
  static bool from(const char* f, const char* n, PyObject* v) { return argument<bool>(f, n, v); }
  static std::string text(bool v) { return v ? "True" : "False"; }
};
struct NumberOption {
  static double from(const char* f, const char* n, PyObject* v) { return argument<double>(f, n, v); }
  static std::string text(double v) { return python_float_text(v); }
};
/// Seconds in Python, whole milliseconds in SampleOptions (timeout_ms: rounded; inf waits without end).
struct SecondsOption {
  static uint64_t from(const char* f, const char* n, PyObject* v) { return timeout_ms(n, argument<double>(f, n, v)); }
  static std::string text(uint64_t ms) { return python_float_text(timeout_seconds(ms)); }
};
struct EpisodesOption {
  static Episodes from(const char* f, const char* n, PyObject* v) {
    return parse_episodes(argument<std::string>(f, n, v));
  }
  static std::string text(Episodes e) { return fmt::format("'{}'", episodes_name(e)); }
};

/// A consuming call's order: 'fifo', 'random' or None (not a consuming call).
struct ConsumeOption {
  static Consume from(const char* f, const char* n, PyObject* v) {
    if (v == Py_None) return Consume::off;
    const std::string text = argument<std::string>(f, n, v);
    if (text == to_string(Consume::fifo)) return Consume::fifo;
    if (text == to_string(Consume::random)) return Consume::random;
    throw Error(Errc::invalid_argument,
                fmt::format("{}(): {} is '{}', expected 'fifo', 'random' or None", f, n, text));
  }
  static std::string text(Consume c) { return c == Consume::off ? "None" : fmt::format("'{}'", to_string(c)); }
};

/// A mixture of selectors: a dict {selector name: fraction} with names from to_string(Selector);
/// the fractions' own checks are the Sampler's (InvalidArgument naming the fraction). {} (the default) or None: none.
struct MixtureOption {
  static Mixture from(const char* f, const char* n, PyObject* v) {
    Mixture m;
    if (v == Py_None) return m;
    if (!PyDict_Check(v)) {
      throw py::type_error(fmt::format("{}(): argument '{}' must be a dict {{selector: fraction}} or None, got {}", f,
                                       n, Py_TYPE(v)->tp_name));
    }
    double* fractions[kSelectors] = {&m.uniform, &m.prioritized, &m.recency, &m.online, &m.reanalysed};
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t at = 0;
    while (PyDict_Next(v, &at, &key, &value)) {
      const std::string name = argument<std::string>(f, n, key);
      std::size_t s = 0;
      while (s < kSelectors && to_string(static_cast<Selector>(s)) != name) ++s;
      if (s == kSelectors) {
        throw Error(Errc::invalid_argument, fmt::format("{}(): {} has no selector '{}', expected 'uniform', "
                                                        "'prioritized', 'recency', 'online' or 'reanalysed'",
                                                        f, n, name));
      }
      *fractions[s] = argument<double>(f, n, value);
    }
    return m;
  }
  static std::string text(const Mixture&) { return "{}"; }  // no selector: the call's own
};

template <auto Member, class Conversion>
void set_option(const char* function, const char* name, PyObject* value, SampleOptions& o) {
  o.*Member = Conversion::from(function, name, value);
}
template <auto Member, class Conversion>
std::string option_default() {
  return Conversion::text(SampleOptions{}.*Member);
}
template <auto Member, class Conversion>
constexpr SampleOption option(const char* name, unsigned calls, const char* doc,
                              std::array<OptionAlias, 3> aliases = {}) {
  return {name, calls, &set_option<Member, Conversion>, &option_default<Member, Conversion>, doc, aliases};
}

inline constexpr unsigned kSequenceCalls = kSample | kSampleMixed | kTotalWeight;  // options of sequences' starts
inline constexpr unsigned kDrawCalls = kSample | kSampleMixed | kSampleTransitions;  // options of a draw
inline constexpr const char* kRateLimitOrigin = "C++: SampleOptions::rate_limit_timeout_ms";

// ---------------------------------------------------------------------------------------------------------------
// The table

inline constexpr std::array kSampleOptions = {
    option<&SampleOptions::episodes, EpisodesOption>(
        "episodes", kSequenceCalls,
        "how rows treat episode ends: 'cross' (rows run across them), 'stop' (a row's mask ends at its episode's "
        "end) or 'within' (rows lie inside one episode); stop and within need a buffer with episode fields."),
    option<&SampleOptions::period, CountOption>(
        "period", kSequenceCalls, "starts every period steps, counted from each env's oldest step in the view."),
    option<&SampleOptions::min_steps, CountOption>(
        "min_steps", kSequenceCalls,
        "EmptyView unless the view holds at least this many steps (all envs together)."),
    option<&SampleOptions::prioritized, FlagOption>(
        "prioritized", kDrawCalls | kTotalWeight,
        "draw starts by priority**alpha (a buffer with priorities; power must be 0); batch.weights holds the "
        "importance weights."),
    option<&SampleOptions::importance_exponent, NumberOption>(
        "beta", kDrawCalls,
        "the importance-sampling exponent of a prioritized sample (finite, >= 0): weights in [0, 1] for any beta.",
        {{{"importance_exponent", AliasKind::name, "C++: SampleOptions::importance_exponent"}}}),
    option<&SampleOptions::zero_on_sample, FlagOption>(
        "zero_on_sample", kDrawCalls,
        "with prioritized (or a mixture's prioritized rows), set each returned row's start step's priority to 0 once "
        "copied, so no learner draws it by priority again until update_priorities raises it (DreamerV3)."),
    option<&SampleOptions::sequence_priority_eta, NumberOption>(
        "sequence_priority_eta", kDrawCalls | kTotalWeight,
        "in a buffer with sequence priorities, a prioritized start of sequence_priority_length steps weighs eta * max "
        "+ (1 - eta) * mean of its sequence's priority**alpha (R2D2's 0.9 by default; in [0, 1])."),
    option<&SampleOptions::recency_half_life, NumberOption>(
        "recency_half_life", kDrawCalls | kTotalWeight,
        "recency sampling (0: off): a start weighs min(steps left, sequence_length)**power * "
        "2**(-age / recency_half_life), age in steps behind its env's newest (cross, period 1; not with "
        "prioritized)."),
    option<&SampleOptions::reanalysed, FlagOption>(
        "reanalysed", kDrawCalls | kTotalWeight,
        "draw starts uniformly from the freshly reanalysed steps: the stored chunks of the buffer's reanalyse walk "
        "completed with its newest target version (cross, period 1; not with prioritized or recency)."),
    option<&SampleOptions::mixture, MixtureOption>(
        "mixture", kSample | kSampleTransitions,
        "a per-batch mixture of selectors, {'uniform': f, 'prioritized': f, 'recency': f, 'online': f, "
        "'reanalysed': f} (fractions "
        "of the batch, normalized; rows by largest remainder), one block of rows each in that order; "
        "batch.selector_rows tells the blocks, and batch.weights holds the prioritized block's importance weights."),
    option<&SampleOptions::mixture_importance, FlagOption>(
        "mixture_importance", kSample | kSampleTransitions,
        "with a mixture, every row's importance weight from the mixture's own probability (the whole batch corrected "
        "toward uniform) instead of the prioritized block's alone (period 1; episodes='cross' or single steps)."),
    option<&SampleOptions::rate_limit_timeout_ms, SecondsOption>(
        "rate_limit_timeout", kDrawCalls,
        "in a buffer with a rate limiter, the seconds the call waits for it (0: RateLimited at once when it holds "
        "the call back; inf: no timeout; Ctrl-C raises KeyboardInterrupt within 50 ms).",
        {{{"rate_limit_timeout_ms", AliasKind::seconds, kRateLimitOrigin},
          {"timeout_ms", AliasKind::seconds, kRateLimitOrigin},
          {"timeout", AliasKind::name, "the wait for the rate limiter"}}}),
    option<&SampleOptions::max_staleness, OptionalCountOption>(
        "max_staleness", kDrawCalls | kTotalWeight,
        "in a buffer with a policy-version field, draw only steps of versions >= V - max_staleness, V the version "
        "the learners published (None: the published window, if any).",
        {{{"max_policy_age", AliasKind::name, "torchforge"}, {"staleness", AliasKind::name, "the policy window"}}}),
    option<&SampleOptions::consume, ConsumeOption>(
        "consume", kSample | kSampleTransitions,
        "in a consuming queue (consuming_queue=True), take rows whose starts no call took before and deliver them: "
        "'fifo' in insertion order, 'random' uniformly over the undelivered steps (replay view, power 0, no other "
        "sampling option); each step is delivered once over every learner. With fewer undelivered steps than "
        "batch_size while a writer waits on the queue, a partial batch of those found (Batch.rows; with out=, views "
        "of its first rows)."),
    option<&SampleOptions::consume_timeout_ms, SecondsOption>(
        "consume_timeout", kSample | kSampleTransitions,
        "with consume, the seconds the call waits for enough undelivered steps (0: EmptyView at once; inf: no "
        "timeout), then EmptyView with nothing delivered."),
};

// ---------------------------------------------------------------------------------------------------------------
// What the calls make of the table

/// How many options `call` takes.
constexpr std::size_t option_count(SampleCall call) {
  std::size_t n = 0;
  for (const SampleOption& o : kSampleOptions) n += (o.calls & call) != 0;
  return n;
}

/// The argument names of `call` for bind_arguments: its own (`lead`), its options, then "out" when `out`.
template <SampleCall Call, bool Out, std::size_t Lead>
constexpr auto argument_names(const std::array<const char*, Lead>& lead) {
  std::array<const char*, Lead + option_count(Call) + (Out ? 1 : 0)> names{};
  std::size_t i = 0;
  for (const char* name : lead) names[i++] = name;
  for (const SampleOption& o : kSampleOptions) {
    if ((o.calls & Call) != 0) names[i++] = o.name;
  }
  if (Out) names[i] = "out";
  return names;
}

/// The SampleOptions of a call of `call` whose bound arguments (bind_arguments) hold its options from `first` on:
/// each given one converted by its row, the others SampleOptions{}'s.
template <std::size_t N>
SampleOptions options_of(SampleCall call, const char* function, const std::array<PyObject*, N>& args,
                         std::size_t first) {
  SampleOptions o;
  std::size_t i = first;
  for (const SampleOption& row : kSampleOptions) {
    if ((row.calls & call) == 0) continue;
    if (args[i] != nullptr) row.set(function, row.name, args[i], o);
    ++i;
  }
  return o;
}

/// The text signature and docstring of a call (CPython's "name($self, ...)\n--\n\n" form, which inspect.signature
/// reads): `lead` its own parameters, then its options with their defaults (keyword-only), then out=None when
/// `out`; `body` the description, followed by one line per option.
std::string sample_call_doc(const char* method, SampleCall call, const char* lead, bool out, const char* body);

}  // namespace shmreplay::python
