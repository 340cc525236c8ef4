// lib/python/bind_batch.cpp: what the Python learner's calls return: Batch (sampled sequences, reused with out=),
// EnvSizes (Sampler.sizes) and EpisodeRecord (Sampler.pop_episodes).
#include "bindings.hpp"
#include "objects.hpp"

namespace shmreplay::python {

void bind_batch(py::module_& m) {
  py::class_<Batch>(m, "Batch",
                    "Sampled sequences: per field an array ``[rows, sequence_length, *shape]``, mask (bool [rows, "
                    "sequence_length], True where the step exists), env_ids and starts (int64 [rows]).")
      .def_property_readonly("fields", &Batch::field_dict,
                             "{name: array ``[rows, sequence_length, *shape]``}, in schema order")
      .def_property_readonly("schema", [](const Batch& b) { return std::make_shared<Schema>(*b.schema); },
                             "the schema of the buffer it was sampled from")
      .def_readonly("mask", &Batch::mask, "bool [rows, sequence_length]: True where the step exists")
      .def_readonly("env_ids", &Batch::env_ids, "int64 [rows]: the env each row was sampled from")
      .def_readonly("starts", &Batch::starts, "the global step index of each row's first step")
      .def_readonly("weights", &Batch::weights,
                    "float32 [rows]: the importance weights (N * P)**-beta / max of a prioritized sample; 1 otherwise")
      .def_property_readonly(
          "selector_rows",
          [](const Batch& b) {
            py::dict out;
            std::size_t first = 0;
            for (std::size_t s = 0; s < kSelectors; ++s) {
              const std::size_t n = b.selector_rows[s];
              if (n > 0) out[py::str(std::string(to_string(static_cast<Selector>(s))))] = py::slice(first, first + n, 1);
              first += n;
            }
            return out;
          },
          "{selector: slice of rows} of the last sample, blocks in the order uniform, prioritized, recency, online, "
          "reanalysed: "
          "a mixture's blocks, or the one selector of a plain call (sample_mixed: its replay and online rows; "
          "a peek: none)")
      .def_readonly("policy_version", &Batch::policy_version,
                    "the policy version the learners had published when this batch was sampled (0 before any)")
      .def_readonly("load_generation", &Batch::load_generation,
                    "the buffer's checkpoint-load generation when this batch was sampled: pass it to "
                    "Sampler.write_back(load_generation=), which refuses the rows when a checkpoint was loaded into "
                    "the buffer since")
      .def_readonly("policy_floor", &Batch::policy_floor,
                    "the oldest policy version the sample's window admitted; None when it had no window")
      .def_readonly("rows", &Batch::rows, "rows of the last sample into this batch")
      .def_readonly("sequence_length", &Batch::length, "steps per row")
      .def("__getitem__", &Batch::field)
      .def("__contains__", [](const Batch& b, const std::string& n) {
        return std::find(b.names.begin(), b.names.end(), n) != b.names.end();
      })
      .def("keys", [](const Batch& b) { return b.names; }, "The field names, in schema order.")
      .def("__repr__", [](const Batch& b) {
        return fmt::format("<shmreplay.Batch {} rows x {} steps: {}>", b.rows, b.length, fmt::join(b.names, ", "));
      });

  py::class_<EnvSizes>(m, "EnvSizes", "Steps of one env: head (published since creation), replay and online.")
      .def_readonly("head", &EnvSizes::head, "steps published since creation")
      .def_readonly("replay", &EnvSizes::replay, "steps in the replay view (those the ring still holds)")
      .def_readonly("online", &EnvSizes::online,
                    "steps in the online view (published since the last reset_online_queue)")
      .def("__repr__", [](const EnvSizes& s) {
        return fmt::format("EnvSizes(head={}, replay={}, online={})", s.head, s.replay, s.online);
      });

  py::class_<EpisodeRecord>(m, "EpisodeRecord", "A completed episode, as queued by its writer.")
      .def_readonly("env", &EpisodeRecord::env, "the env it ran in")
      .def_readonly("first_step", &EpisodeRecord::first_step, "the global index of its first step")
      .def_readonly("length", &EpisodeRecord::length, "its steps")
      .def_readonly("episode_return", &EpisodeRecord::episode_return,
                    "the sum of its rewards (0 without a reward field)")
      .def_property_readonly("end", [](const EpisodeRecord& r) { return std::string(to_string(r.end)); },
                             "how it ended: 'terminated', 'truncated' or 'done'")
      .def("__repr__", [](const EpisodeRecord& r) {
        return fmt::format("EpisodeRecord(env={}, first_step={}, length={}, episode_return={}, end='{}')", r.env,
                           r.first_step, r.length, r.episode_return, to_string(r.end));
      });
}

}  // namespace shmreplay::python
