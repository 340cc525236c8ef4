// lib/python/bind_sampler.cpp: the Python learner's side: Sampler (its outputs are bound in bind_batch.cpp).
#include "shmreplay/internal/layout.hpp"
#include "bindings.hpp"
#include "objects.hpp"

namespace shmreplay::python {

using namespace py::literals;

using SamplerClass = py::class_<PySampler, std::shared_ptr<PySampler>>;

namespace {

// Sampler's priority calls: priority_weights, update_priorities.
void def_sampler_priorities(SamplerClass& c) {
  c.def(
          "priority_weights",
          [](PySampler& s, py::object env_ids, py::object steps) {
            const std::shared_ptr<Sampler> smp = s.get("priority_weights");
            const std::vector<uint64_t> ids = env_id_vector("priority_weights", env_ids, s.buffer->num_envs());
            const std::vector<uint64_t> step_vec = step_vector("priority_weights", steps, ids.size());
            py::array_t<double> out(static_cast<py::ssize_t>(ids.size()));
            const std::span<double> o(out.mutable_data(), ids.size());
            {
              py::gil_scoped_release release;
              std::lock_guard lock(s.mu);
              smp->priority_weights(ids, step_vec, o);
            }
            return out;
          },
          "env_ids"_a, "steps"_a,
          "float64 array: the sampling weight priority**alpha of each stored step (pass batch.env_ids and "
          "batch.starts), -1 where the step is no longer stored. With total_weight and size, exact importance "
          "weights across several buffers (shmreplay.ray).")
      .def(
          "update_priorities",
          [](PySampler& s, py::object env_ids, py::object steps, py::object priorities) {
            const std::shared_ptr<Sampler> smp = s.get("update_priorities");
            const std::vector<uint64_t> ids = env_id_vector("update_priorities", env_ids, s.buffer->num_envs());
            const std::vector<uint64_t> step_vec = step_vector("update_priorities", steps, ids.size());
            const auto prio = priority_array("update_priorities", priorities, ids.size());
            const std::span<const float> p(prio.data(), ids.size());
            PriorityUpdateResult r;
            {
              py::gil_scoped_release release;
              std::lock_guard lock(s.mu);
              r = smp->update_priorities(ids, step_vec, p);
            }
            return py::make_tuple(r.applied, r.dropped);
          },
          "env_ids"_a, "steps"_a, "priorities"_a,
          "Set the priorities of stored steps (pass batch.env_ids and batch.starts of a sample, with the new "
          "priorities: each a finite float32 >= 0 whose priority**alpha is a finite float32, else InvalidArgument "
          "naming the value as given, before anything is set). Returns (applied, dropped): an update for a step a "
          "writer has overwritten since is dropped.");
}

// Sampler's reads that are not samples: peek, new_batch, and the blocking wait.
void def_sampler_reads(SamplerClass& c) {
  c.def(
          "peek",
          [](PySampler& s, py::object env_ids, py::object out) {
            std::vector<uint64_t> ids;
            if (env_ids.is_none()) {
              ids.resize(s.buffer->num_envs());
              for (uint64_t e = 0; e < ids.size(); ++e) ids[e] = e;
            } else {
              ids = env_id_vector("peek", env_ids, s.buffer->num_envs());
            }
            return s.fill("peek", ids.size(), 1, out, [&](Sampler& smp, SampleBatch& b) { smp.peek(ids, b); });
          },
          "env_ids"_a = py::none(), py::kw_only(), "out"_a = py::none(),
          "The newest step of each env (all envs by default); mask is False for an env with no step.")
      .def(
          "new_batch",
          [](PySampler& s, Int<"Sampler.new_batch(): rows", std::size_t> rows,
             Int<"Sampler.new_batch(): sequence_length", std::size_t> sequence_length) {
            if (rows == 0 || sequence_length == 0) {
              throw Error(Errc::invalid_argument,
                          fmt::format("new_batch: rows and sequence_length must be positive, got {} and {}", rows,
                                      sequence_length));
            }
            Sampler::check_batch_shape(*s.buffer, "make a batch for", rows, sequence_length);
            return make_batch_object("new_batch", s.schema, rows, sequence_length);
          },
          "rows"_a, "sequence_length"_a,
          "Arrays for out=: made once, filled by every call (which refuses the batch while any of its arrays is "
          "read-only). MemoryError when they do not fit in memory.")
      .def(
          "wait",
          [](PySampler& s, const std::string& view, Int<"Sampler.wait(): min_steps"> min_steps, double timeout) {
            const View v = parse_view(view);
            const std::shared_ptr<Sampler> smp = s.get("wait");
            const auto deadline = deadline_after_ms(timeout_ms("wait: timeout", timeout));
            // Slices of at most 100 ms, so that Ctrl-C (a Python signal handler) is seen while waiting, and a
            // close() from another thread takes mu between them.
            for (;;) {
              const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now());
              const uint64_t slice = static_cast<uint64_t>(std::clamp<int64_t>(left.count(), 0, 100));
              bool ok = false;
              {
                py::gil_scoped_release release;
                std::lock_guard lock(s.mu);
                ok = smp->wait(v, min_steps, slice);
              }
              if (ok) return true;
              if (PyErr_CheckSignals() != 0) throw py::error_already_set();
              if (std::chrono::steady_clock::now() >= deadline) return false;
            }
          },
          "view"_a, "min_steps"_a, "timeout"_a,
          "Block until view holds at least min_steps steps (True) or timeout seconds pass (False; inf: no "
          "timeout); woken by writers in any process. Ctrl-C raises KeyboardInterrupt within 100 ms.");
}

// Sampler's online reset, rate-limit verdict, sizes, retries and buffer.
void def_sampler_state(SamplerClass& c) {
  c.def("reset_online_queue", [](PySampler& s, const std::string& to) {
        const std::shared_ptr<Sampler> smp = s.get("reset_online_queue");
        const OnlineReset where = parse_online_reset(to);
        py::gil_scoped_release release;
        std::lock_guard lock(s.mu);
        smp->reset_online_queue(where);
      }, "to"_a = "now",
      "Empty the online view. to='now': it restarts at each env's head. to='sampled': at the heads the last "
      "draw from the online view saw, so the steps published since stay (what a learner that waits for fresh "
      "online steps under a rate limiter needs: docs/design/rate_limiter.md, 'The online queue and the limiter').")
      .def(
          "rate_limit_verdict",
          [](PySampler& s, Int<"Sampler.rate_limit_verdict(): rows", std::size_t> rows) { return rate_limit_reason(s.get("rate_limit_verdict")->rate_limit_verdict(rows)); },
          "rows"_a,
          "Whether the rate limiter would admit a sample call of rows rows now: 'none' (it would; also without a "
          "limiter), 'min_size' or 'learner_ahead'. Never waits.")
      .def("size", [](PySampler& s, const std::string& view) { return s.get("size")->size(parse_view(view)); },
           "view"_a, "Steps in the view over all envs.")
      .def("sizes", [](PySampler& s, Int<"Sampler.sizes(): env"> env) { return s.get("sizes")->sizes(env); }, "env"_a,
           "The step counts of one env (head, replay and online view sizes) as an EnvSizes.")
      .def_property_readonly("retries", [](PySampler& s) { return s.get("retries")->retries(); },
                             "rows redrawn because a writer overwrote them while they were copied")
      .def_property_readonly("buffer", [](PySampler& s) { return s.buffer; }, "the Buffer it samples");
}

// Sampler's in-place rewrites of stored steps (try_update, update) and its episode records.
void def_sampler_rewrites(SamplerClass& c) {
  c.def(
          "try_update",
          [](PySampler& s, Int<"Sampler.try_update(): env"> env, Int<"Sampler.try_update(): step"> step,
             const py::dict& data) {
            const std::shared_ptr<Sampler> smp = s.get("try_update");
            const auto arrays = field_arrays("try_update", *s.schema, data, true, {});
            const auto fields = arrays.bytes();
            py::gil_scoped_release release;
            std::lock_guard lock(s.mu);
            return smp->try_update(env, step, fields);
          },
          "env"_a, "step"_a, "data"_a,
          "Rewrite fields of stored step `step` of env `env` in place (dejax's update_fn); data maps some field "
          "names to values. False, changing nothing, when the step was overwritten already.")
      .def(
          "update",
          [](PySampler& s, py::object env_ids, py::object steps, const py::dict& data) {
            const std::shared_ptr<Sampler> smp = s.get("update");
            const std::vector<uint64_t> ids = env_id_vector("update", env_ids, s.buffer->num_envs());
            const std::vector<uint64_t> step_vec = step_vector("update", steps, ids.size());
            const auto n = static_cast<py::ssize_t>(ids.size());
            const auto arrays = field_arrays("update", *s.schema, data, true, {n});
            py::array_t<bool> done(n);
            {
              py::gil_scoped_release release;
              std::lock_guard lock(s.mu);
              std::vector<FieldBytes> row(arrays.arrays.size());
              for (std::size_t i = 0; i < ids.size(); ++i) {
                for (std::size_t f = 0; f < row.size(); ++f) {
                  if (!arrays.given[f]) continue;
                  const std::size_t b = (*s.schema)[f].bytes();
                  row[f] = {static_cast<const std::byte*>(arrays.array(f).data()) + i * b, b};
                }
                done.mutable_data()[i] = smp->try_update(ids[i], step_vec[i], row);
              }
            }
            return done;
          },
          "env_ids"_a, "steps"_a, "data"_a,
          "try_update for many steps: data maps some field names to arrays of shape ``(len(env_ids), *shape)``. "
          "Returns a bool array, False where the step was overwritten already.")
      .def(
          "pop_episodes",
          [](PySampler& s, Int<"Sampler.pop_episodes(): max", std::size_t> max) {
            const std::shared_ptr<Sampler> smp = s.get("pop_episodes");
            // no more than the envs' queues can hold at once, whatever max says
            const uint64_t queued_at_most = s.buffer->num_envs() * s.buffer->episode_queue_capacity();
            std::vector<EpisodeRecord> records(static_cast<std::size_t>(std::min<uint64_t>(max, queued_at_most)));
            py::list out;
            {
              py::gil_scoped_release release;
              std::lock_guard lock(s.mu);
              // The records become the list's objects before the call counts them delivered: a process killed
              // before that has them counted lost (episode_records_lost); once the list exists they are the
              // caller's. Waiting for the GIL holding mu is safe under objects.hpp's rule.
              smp->pop_episodes(records, [&](std::span<const EpisodeRecord> taken) {
                py::gil_scoped_acquire gil;
                for (const EpisodeRecord& r : taken) out.append(py::cast(r));
              });
            }
            return out;
          },
          "max"_a = 1024, "Completed episodes queued by the writers, oldest first per env (buffers with episode "
                          "fields). Each record reaches one learner at most once; the records a process killed inside "
                          "this call had taken are counted lost (`shmreplay info`: episode_records_lost).");
}

// Sampler.write_back: reanalysed values written back by handle (docs/design/write_back.md).
void def_sampler_write_back(SamplerClass& c) {
  c.def(
          "write_back",
          [](PySampler& s, py::object env_ids, py::object steps,
             std::optional<Int<"Sampler.write_back(): load_generation">> load_generation, const py::kwargs& data) {
            const std::shared_ptr<Sampler> smp = s.get("write_back");
            const std::vector<uint64_t> ids = env_id_vector("write_back", env_ids, s.buffer->num_envs());
            const std::vector<uint64_t> step_vec = step_vector("write_back", steps, ids.size());
            const auto n = static_cast<py::ssize_t>(ids.size());
            const auto arrays = field_arrays("write_back", *s.schema, data, true, {n});
            const auto fields = arrays.bytes();
            py::array_t<bool> refused(n);
            WriteBackResult r;
            {
              py::gil_scoped_release release;
              std::lock_guard lock(s.mu);
              static_assert(sizeof(bool) == sizeof(uint8_t), "a NumPy bool is one byte");
              const std::span<uint8_t> flags(reinterpret_cast<uint8_t*>(refused.mutable_data()), ids.size());
              r = load_generation ? smp->write_back(ids, step_vec, fields, flags, *load_generation)
                                  : smp->write_back(ids, step_vec, fields, flags);
            }
            return py::make_tuple(r.applied, refused);
          },
          "env_ids"_a, "steps"_a, py::kw_only(), "load_generation"_a = py::none(),
          "Write reanalysed values back into stored steps by handle (docs/design/write_back.md): each keyword names a "
          "derived field (declared ':derived') and gives an array of shape ``(len(env_ids), *shape)``, rows first. "
          "The handles are batch.env_ids and batch.starts (plus a row's offset inside a sequence), and "
          "load_generation= batch.load_generation (or a ReanalyseChunk's) for handles this Sampler did not sample: "
          "when a checkpoint was loaded into the buffer since, every row is refused. Returns (applied, refused): the "
          "rows written, and a bool array, True where the step was overwritten since or a load came between "
          "(refused, never written into the newer step). Data for a field that is not derived raises "
          "InvalidArgument.");
}

// Sampler's policy versions: publish_policy and policy (docs/design/policy.md).
void def_sampler_policy(SamplerClass& c) {
  c.def(
       "publish_policy",
       [](PySampler& s, Int<"Sampler.publish_policy(): version"> version,
               std::optional<Int<"Sampler.publish_policy(): max_staleness">> max_staleness, bool pace,
               double pace_timeout, std::optional<Int<"Sampler.publish_policy(): max_lag">> max_lag) {
         const std::shared_ptr<Sampler> smp = s.get("publish_policy");
         const PolicyPublish o{.pace = pace,
                               .pace_timeout_ms = timeout_ms("pace_timeout", pace_timeout),
                               .max_lag = max_lag ? std::optional<uint64_t>(*max_lag) : std::nullopt};
         PolicyState st;
         {
           py::gil_scoped_release release;
           const SignalCheck signals;  // Ctrl-C while pacing waits
           std::lock_guard lock(s.mu);
           st = smp->publish_policy(version, max_staleness ? std::optional<uint64_t>(*max_staleness) : std::nullopt,
                                    o);
         }
         return policy_dict(st);
       },
       "version"_a, "max_staleness"_a = py::none(), py::kw_only(), "pace"_a = false, "pace_timeout"_a = 10.0,
       "max_lag"_a = py::none(),
       "Publish the current policy version (raised, never lowered) and the staleness window (None: none): samples "
       "then draw only steps of versions >= version - max_staleness, and writers whose versions it leaves behind "
       "wait (Writer.policy_timeout). With pace=True, first wait (up to pace_timeout seconds, then RateLimited with "
       "nothing published) for every live writer the new window would leave behind to load a newer policy: pause, "
       "not discard (max_lag=1: for every live writer more than one version behind, which keeps a slow producer's "
       "steps in the window as long as a fast one's). Returns {'version', 'max_staleness', 'publishes'} now in force.")
      .def_property_readonly("policy", [](PySampler& s) { return policy_dict(s.get("policy")->policy()); },
                             "{'version', 'max_staleness', 'publishes'}: the policy version and window in force");
}

}  // namespace

void bind_sampler(py::module_& m) {
  // ----- Sampler
  auto sampler = SamplerClass(
      m, "Sampler", "A learner's view (one per learner slot: max_learners of a buffer at a time): samples "
                    "sequences from the replay view, the online queue, or both.")
      .def(py::init([](std::shared_ptr<Buffer> buffer, py::object seed,
                       Int<"Sampler(): max_retry_rounds", uint32_t> max_retry_rounds,
                       std::optional<Int<"Sampler(): rank", uint64_t, 0, layout::kMaxLearners - 1>> rank) {
             auto s = std::make_shared<PySampler>();
             s->buffer = buffer;
             s->schema = std::make_shared<const Schema>(buffer->schema());
             const uint64_t seed_value = seed_from("Sampler(): seed", seed);
             {
               py::gil_scoped_release release;
               s->sampler = std::make_shared<Sampler>(
                   *buffer, SamplerOptions{.max_retry_rounds = max_retry_rounds,
                                           .rank = rank ? std::optional<uint64_t>(*rank) : std::nullopt});
             }
             // The rank's own stream (rank 0: Rng(seed), as a single learner's), from the slot actually taken.
             s->rng = rank_rng(seed_value, s->sampler->rank());
             return s;
           }),
           "buffer"_a, py::kw_only(), "seed"_a = py::none(), "max_retry_rounds"_a = 10000, "rank"_a = py::none(),
           "Take a learner slot of the buffer: rank=r takes slot r (0 to buffer.max_learners - 1: a GPU rank's), "
           "None the first free one (LeaseHeld if live learners hold it, or all). With seed=, samples are "
           "deterministic for a given buffer state, and ranks sharing one seed draw unrelated streams.")
      .def_property_readonly("rank", [](PySampler& s) { return s.get("rank")->rank(); },
                             "The learner slot it holds (0 in a one-learner buffer)")
      .def("seed", [](PySampler& s, Int<"Sampler.seed(): seed"> seed) {
        const uint64_t rank = s.get("seed")->rank();
        py::gil_scoped_release release;
        std::lock_guard lock(s.mu);  // the sample calls use rng under mu
        s.rng = rank_rng(seed, rank);
      }, "seed"_a,
      "Reseed the sampler's random generator (its rank's stream of that seed): the next samples are deterministic "
      "for a given buffer state.")
      .def("close", &PySampler::close,
           "Release the learner role now (also done when the Sampler is garbage-collected).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PySampler& s, py::object, py::object, py::object) {
        s.close();
        return false;
      });
  def_sampler_priorities(sampler);
  def_sampler_reads(sampler);
  def_sampler_state(sampler);
  def_sampler_policy(sampler);
  def_sampler_rewrites(sampler);
  def_sampler_write_back(sampler);
  add_sample_methods(sampler);  // sample, sample_mixed, sample_transitions and total_weight (sample_call.cpp)
}

}  // namespace shmreplay::python