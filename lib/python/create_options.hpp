// lib/python/create_options.hpp: the options of Buffer.create, one row each (kCreateOptions): the keyword, how its
// value converts into CreateOptions (and so its default: the field's value in CreateOptions{}), and one sentence
// for the docstring. Everything else is driven from the rows: the call's argument names and parsing, its text
// signature and docstring (create_call.cpp), and the check of the stubs (tests/python/test_stubs.py compares the
// signature with shmreplay/_shmreplay.pyi's).
//
// A new create option: its field in CreateOptions (include/shmreplay/buffer.hpp), its row here, its keyword in the
// stubs and its row in docs/naming.md's table (test_naming.py asks for both).
#pragma once

#include <array>
#include <limits>
#include <string>

#include "shmreplay/internal/layout.hpp"
#include "convert.hpp"
#include "int_arg.hpp"
#include "vectorcall.hpp"

namespace shmreplay::python {

/// What a create call needs beyond CreateOptions: the callable populate_progress is (the option's function calls
/// it with the GIL taken back), kept alive and reachable for the call.
struct CreateExtras {
  py::object populate_progress = py::none();
};

/// One create option.
struct CreateOption {
  const char* name;  ///< the Python keyword
  /// Converts `value` into its field of `o` (or `x`); TypeError or InvalidArgument naming Buffer.create and the
  /// keyword for a value it does not take.
  void (*set)(const char* name, PyObject* value, CreateOptions& o, CreateExtras& x);
  const char* default_text;  ///< the default as Python writes it: CreateOptions{}'s value (create_call.cpp checks)
  const char* doc;           ///< one sentence (the docstring)
};

/// The function name the options' messages give (as the pybind11 bindings' Int<> arguments do).
inline constexpr const char* kCreateFunction = "Buffer.create";

/// An integer option in [Lo, Hi] (checked_int's InvalidArgument naming "Buffer.create(): NAME" otherwise).
template <auto Member, class T = uint64_t, T Lo = std::numeric_limits<T>::min(),
          T Hi = std::numeric_limits<T>::max()>
void set_int(const char* name, PyObject* v, CreateOptions& o, CreateExtras&) {
  o.*Member = checked_int<T>(fmt::format("{}(): {}", kCreateFunction, name).c_str(), v, Lo, Hi);
}
template <auto Member>
void set_flag(const char* name, PyObject* v, CreateOptions& o, CreateExtras&) {
  o.*Member = argument<bool>(kCreateFunction, name, v);
}
template <auto Member>
void set_number(const char* name, PyObject* v, CreateOptions& o, CreateExtras&) {
  o.*Member = argument<double>(kCreateFunction, name, v);
}
/// None or a number (std::optional<double>).
template <auto Member>
void set_optional_number(const char* name, PyObject* v, CreateOptions& o, CreateExtras&) {
  o.*Member = v == Py_None ? std::nullopt : std::optional<double>(argument<double>(kCreateFunction, name, v));
}
/// None or a str, None meaning "" (a field's name: none).
template <auto Member>
void set_name(const char* name, PyObject* v, CreateOptions& o, CreateExtras&) {
  o.*Member = v == Py_None ? std::string() : argument<std::string>(kCreateFunction, name, v);
}
/// An episode field's name (EpisodeFields' member), None meaning none.
template <auto Member>
void set_episode_field(const char* name, PyObject* v, CreateOptions& o, CreateExtras&) {
  o.episodes.*Member = v == Py_None ? std::string() : argument<std::string>(kCreateFunction, name, v);
}
void set_rate_limit(const char* name, PyObject* v, CreateOptions& o, CreateExtras&);
void set_populate(const char* name, PyObject* v, CreateOptions& o, CreateExtras&);
void set_populate_progress(const char* name, PyObject* v, CreateOptions& o, CreateExtras& x);
void set_stack_continuity(const char* name, PyObject* v, CreateOptions& o, CreateExtras&);

inline constexpr std::array kCreateOptions = {
    CreateOption{"mode", set_int<&CreateOptions::mode, uint32_t>, "0o600",
                 "the segment file's permission bits (read/write bits only)."},
    CreateOption{"replace", set_flag<&CreateOptions::replace>, "False",
                 "replace a buffer of the same name (else AlreadyExists)."},
    CreateOption{"done", set_episode_field<&EpisodeFields::done>, "None",
                 "the bool field that ends an episode (episodes, the episode queues)."},
    CreateOption{"terminated", set_episode_field<&EpisodeFields::terminated>, "None",
                 "the bool field of Gymnasium's terminated (with truncated, instead of done)."},
    CreateOption{"truncated", set_episode_field<&EpisodeFields::truncated>, "None",
                 "the bool field of Gymnasium's truncated."},
    CreateOption{"reward", set_episode_field<&EpisodeFields::reward>, "None",
                 "the scalar field summed into each completed episode's return."},
    CreateOption{"episode_queue_capacity", set_int<&CreateOptions::episode_queue_capacity>, "0",
                 "completed-episode records per env queue (0: the default with episode fields)."},
    CreateOption{"priority_exponent", set_optional_number<&CreateOptions::priority_exponent>, "None",
                 "alpha: every stored step has a priority and prioritized samples draw starts with probability "
                 "proportional to priority**alpha."},
    CreateOption{"rate_limit", set_rate_limit, "None",
                 "RateLimit.ratio(...) or RateLimit.min_size(...): samples per inserted step kept within an error "
                 "buffer across processes."},
    CreateOption{"populate", set_populate, "'never'",
                 "'always' faults every page in before the name appears, 'auto' when the segment is at most half of "
                 "MemAvailable, 'never' lets the first writer of each page do it."},
    CreateOption{"populate_progress", set_populate_progress, "None",
                 "a callable (done_bytes, total_bytes), called after each 64 MiB populated."},
    CreateOption{"stack_restarts", set_int<&CreateOptions::stack_restarts>, "0",
                 "with a stacked field (NAME:DTYPE[SHAPE]:stack=AXIS, one frame kept per step): how many steps per "
                 "env whose stack does not continue the previous one's its frame rings hold at no loss (0: 1 + "
                 "capacity // 128)."},
    CreateOption{"stack_continuity", set_stack_continuity, "'compare'",
                 "'compare' checks each pushed stack against the previous step's byte for byte; 'episodes' trusts "
                 "the episode flags instead (a push then reads and writes one frame)."},
    CreateOption{"max_learners", set_int<&CreateOptions::max_learners, uint64_t, 1, layout::kMaxLearners>, "1",
                 "learner processes that may sample it at once, one Sampler per rank (Sampler(buffer, rank=r))."},
    CreateOption{"compressed_bytes", set_int<&CreateOptions::compressed_bytes>, "0",
                 "the bytes of every compressed field's (NAME:DTYPE[SHAPE]:lz4 or :zstd=LEVEL) records, every env "
                 "together (0: their frames' bytes as pushed over expected_compression); an env whose frames "
                 "compress worse loses its oldest steps from the view."},
    CreateOption{"expected_compression", set_number<&CreateOptions::expected_compression>, "0.0",
                 "the ratio that sizes the compressed records without compressed_bytes (0 meaning 4)."},
    CreateOption{"policy_version", set_name<&CreateOptions::policy_version>, "None",
                 "a scalar integer field holding the version of the policy that produced each step (non-decreasing "
                 "per env): learners publish a version and a staleness window (Sampler.publish_policy) and sample "
                 "inside it (max_staleness=); writers the window left behind wait instead of being discarded."},
    CreateOption{"max_times_sampled", set_int<&CreateOptions::max_times_sampled>, "0",
                 "N (1 to 255; 0 for none): a stored step starts at most N sampled rows in total, over every "
                 "learner, and then leaves the views."},
    CreateOption{"initial_priority", set_optional_number<&CreateOptions::initial_priority>, "None",
                 "the priority of a step pushed without one (None: the running maximum; float('inf'): steps no "
                 "prioritized draw has returned are drawn first)."},
    CreateOption{"sequence_priority_length", set_int<&CreateOptions::sequence_priority_length>, "0",
                 "L: prioritized samples of L steps weigh a start by eta * max + (1 - eta) * mean of its sequence's "
                 "priority**alpha (sequence_priority_eta=)."},
    CreateOption{"consuming_queue", set_flag<&CreateOptions::consuming_queue>, "False",
                 "make it a queue (Reverb's): each step is delivered once, by sample calls with consume='fifo' or "
                 "'random', and writers wait (Writer queue_timeout) instead of overwriting a step not yet "
                 "delivered."},
    CreateOption{"reanalyse_chunk", set_int<&CreateOptions::reanalyse_chunk>, "0",
                 "C (1 to the capacity; 0 for none): a reanalyse walk over C-step chunks, handed to Reanalyser "
                 "workers once per pass in the order they ask for; sample calls may then draw freshly reanalysed "
                 "rows (reanalysed=, a mixture's 'reanalysed')."},
    CreateOption{"cold_capacity", set_int<&CreateOptions::cold_capacity>, "0",
                 "N (0 for none): a cold tier, N more steps per env kept on disk beyond the ring, in files under "
                 "cold_dir; sample calls draw over both tiers (docs/design/cold_tier.md)."},
    CreateOption{"cold_dir", set_name<&CreateOptions::cold_dir>, "None",
                 "the cold tier's directory (an absolute path on a local disk; with cold_capacity): its files go "
                 "into cold_dir/NAME.cold/, and Buffer.remove removes them."},
};

/// Installs Buffer.create (create_call.cpp) on the bound Buffer class: a static vectorcall method whose options
/// are the rows above.
void add_create_method(py::handle buffer_class);

}  // namespace shmreplay::python
