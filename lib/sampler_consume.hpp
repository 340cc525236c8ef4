// lib/sampler_consume.hpp: a consuming call's state (SampleOptions::consume; docs/design/consuming_queue.md): the
// rows it claimed, the per-env windows it picks them from, and the insertion-order heap of fifo. The call itself is
// Sampler::sample_consume (lib/sampler_consume.cpp); the words it moves are detail/protocol/consume.hpp's.
//
// Who uses it: the Sampler's thread only. Private to lib/sampler*.cpp; grows to the largest batch, then never
// allocates.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace shmreplay::sampler_parts {

// Draw-time refusals of a random call before it counts the starts still free: a base plus this many per row; each
// count doubles the budget (so the counts cost O(stored steps) per doubling of the refusals).
inline constexpr uint64_t kConsumeCheckBase = 64;
inline constexpr uint64_t kConsumeCheckPerRow = 16;
inline constexpr std::size_t kProposalsAhead = 16;  // random: proposals drawn (and prefetched) before their claims

struct ConsumeState {
  struct Row {
    uint64_t env;
    uint64_t start;
    uint64_t steps;  // min(head - start, length) at the claim
    uint64_t age;    // head - (start + steps), for the slot's sample ages
    uint64_t slot;   // start % capacity: its ring slot
    std::atomic<uint64_t>* word;  // its count word
  };
  struct Proposal {  // random: a start drawn, its count word prefetched, not yet claimed
    uint64_t env;
    uint64_t step;
  };
  struct Candidate {  // fifo: env's first free step from its cursor, by (ticket, env)
    uint64_t ticket;
    uint64_t env;
    uint64_t step;
  };
  std::vector<Row> rows;               // the call's claims, in batch order
  std::vector<uint64_t> lo, hi;        // per env: the window [lo, hi) claims are looked for in
  std::vector<uint64_t> lo_slot;       // per env: lo % capacity (a step's slot without a division)
  std::vector<std::atomic<uint64_t>*> words;  // per env: its count words
  std::vector<uint64_t> cumulative;    // random: per env, the steps of the windows up to and including it
  std::vector<Candidate> heap;         // fifo: a min-heap by (ticket, env)
  std::array<Proposal, kProposalsAhead> ahead{};  // random: the proposals drawn ahead of their claims (a ring)
  std::vector<uint32_t> failed;        // rows whose copy failed validation (copied again)
  std::vector<uint32_t> to_copy;          // the rows a copy round copies
  uint64_t pending_slots = 0;          // bit s: a pending claim of learner slot s was met (repair candidates)
  uint64_t refused = 0;                // claims refused since the last flush (the slot's counter)
  uint64_t heads_sum = 0;              // the windows' heads summed at the last attempt (the wait's condition)

  void reset(std::size_t envs, std::size_t batch) {
    rows.clear();
    rows.reserve(batch);
    lo.resize(envs);
    hi.resize(envs);
    lo_slot.resize(envs);
    words.resize(envs);
    cumulative.resize(envs);
    heap.clear();
    heap.reserve(envs);
    pending_slots = 0;
  }
};

}  // namespace shmreplay::sampler_parts
