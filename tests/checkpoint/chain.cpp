// Checkpoint chains (include/shmreplay/checkpoint.hpp, "Chains"): links that hold only the steps published since
// the previous one, whole windows after a rewrite or a load, pruning and compaction. Part of test_checkpoint
// (tests/CMakeLists.txt); its helpers are in checkpoint_helpers.hpp and chain_helpers.hpp.
#include "checkpoint/chain_helpers.hpp"

namespace {

// `link`, the link saved after `previous` once env e of `b` got pushed[e] more steps (a ring of 64): the next link
// of the chain, each env's records from the previous link's head on (its whole window where the env lapped it).
void check_next_link(const Buffer& b, const LinkResult& previous, const LinkResult& link,
                     const std::vector<uint64_t>& pushed) {
  CHECK_FALSE(link.whole);
  CHECK(link.info.link_seq == previous.info.link_seq + 1);
  CHECK(link.removed.empty());  // keep = 3, and each link is needed
  for (const CheckpointEnv& e : link.info.envs) {
    CAPTURE(e.env);
    const CheckpointEnv& before = previous.info.envs[e.env];
    CHECK(e.head == before.head + pushed[e.env]);
    CHECK(e.head == segment_of(b).env_control(e.env).head.load());
    if (pushed[e.env] >= 64) {  // lapped: its whole window, the previous link holding none of it
      CHECK(e.first_step == e.head - 64);
      CHECK(e.data_from == e.first_step);
    } else {
      CHECK(e.first_step == before.first_step);
      CHECK(e.data_from == before.head);
    }
    CHECK(e.steps == e.head - e.data_from);
  }
  CHECK(link.chain_bytes == link.info.file_bytes + previous.chain_bytes);
}

}  // namespace

TEST_CASE("a chain's first link is whole, each later link holds only the steps published since the previous one, "
          "and the newest restores exactly what a whole save of the same instant holds") {
  SegmentGuard source(unique_name("chain-src"));
  SegmentGuard from_chain(unique_name("chain-restored"));
  SegmentGuard from_file(unique_name("chain-whole"));
  DirGuard dir(temp_dir("chain"));
  FileGuard whole_file(temp_path("chain-whole"));
  Buffer b = Buffer::create(source.name(), 4, 64, kPayloadSchema, {.priority_exponent = 0.6});
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  const uint64_t sb = kPayloadSchema.step_bytes();
  Writer w(b, {0, 1, 2, 3});
  Sampler learner(b);
  push_steps(w, {0, 1, 2}, 10);  // env 3 stays empty

  const LinkResult first = save_link(reader, dir.path());
  CHECK(first.whole);
  CHECK(first.info.link_seq == 1);
  CHECK(first.info.path == link_file(dir.path(), 1));
  CHECK(first.info.chain_id != 0);
  CHECK(first.record_bytes == 30 * sb);
  CHECK(first.removed.empty());
  for (const CheckpointEnv& e : first.info.envs) {
    CAPTURE(e.env);
    CHECK(e.first_step == 0);
    CHECK(e.data_from == 0);
    CHECK(e.steps == e.head);
  }

  // Per round, the steps each env gets between two links; env 1 laps its ring of 64 in round 3.
  const std::vector<std::vector<uint64_t>> rounds = {{5, 0, 30, 3}, {2, 100, 0, 7}};
  LinkResult previous = first;
  for (std::size_t round = 0; round < rounds.size(); ++round) {
    CAPTURE(round);
    uint64_t new_steps = 0;
    for (uint64_t e = 0; e < 4; ++e) {
      push_steps(w, {static_cast<int32_t>(e)}, rounds[round][e]);
      new_steps += std::min<uint64_t>(rounds[round][e], 64);
    }
    // The learner gives a few steps new priorities: weights are whole in every link.
    const std::vector<uint64_t> envs{0, 2};
    const std::vector<uint64_t> steps{round, 3 + round};
    const std::vector<float> prios{2.5f + static_cast<float>(round), 7.0f};
    CHECK(learner.update_priorities(envs, steps, prios).applied == 2);

    const LinkResult link = save_link(reader, dir.path());
    CHECK(link.info.chain_id == first.info.chain_id);
    check_next_link(b, previous, link, rounds[round]);
    CHECK(link.record_bytes == new_steps * sb);
    CHECK(link.info.total_steps == new_steps);
    previous = link;
  }

  // A whole save of the same (quiet) instant differs from the newest link only by the records it leaves to earlier
  // links: the weights, episode records and counters are whole in both.
  const CheckpointInfo whole = save_checkpoint(reader, whole_file.path());
  CHECK(whole.self_contained());
  CHECK(whole.window_bytes() == previous.info.window_bytes());
  CHECK(whole.file_bytes - previous.info.file_bytes == (whole.total_steps - previous.info.total_steps) * sb);

  const LoadResult chained = load_chain(dir.path(), from_chain.name());
  CHECK(chained.created);
  CHECK(chained.notes.empty());
  CHECK(chained.info.link_seq == 3);
  load_checkpoint(whole_file.path(), from_file.name());
  const Buffer a = Buffer::open(from_chain.name(), {.read_only = true});
  const Buffer c = Buffer::open(from_file.name(), {.read_only = true});
  CHECK(state_difference(a, c) == "");
  CHECK(state_difference(a, reader) == "");
  CHECK(chained.info.learner == whole.learner);
  CHECK(chained.info.limiter == whole.limiter);
  CHECK(chained.info.max_priority == whole.max_priority);
  CHECK(payload_violation(a) == "");
}

TEST_CASE("a step rewritten in place between two links, or a load into the source, makes the next link copy the "
          "env's whole window, and the chain restores the new bytes") {
  SegmentGuard source(unique_name("chain-upd"));
  SegmentGuard restored(unique_name("chain-upd-restored"));
  DirGuard dir(temp_dir("chain-upd"));
  FileGuard earlier(temp_path("chain-upd-earlier"));
  Buffer b = Buffer::create(source.name(), 3, 32, kPayloadSchema);
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  {
    Writer w(b, {0, 1, 2});
    Sampler learner(b);
    push_steps(w, {0, 1, 2}, 10);
    REQUIRE(save_link(reader, dir.path()).whole);
    save_checkpoint(reader, earlier.path());  // heads 10, for the load below

    const PayloadFields v1(test::make_payload(1, 4, 1));
    REQUIRE(learner.try_update(1, 4, {field_bytes(v1.hdr), field_bytes(v1.body), field_bytes(v1.tail)}));
    push_steps(w, {0, 1, 2}, 2);
    const LinkResult link = save_link(reader, dir.path());
    CHECK_FALSE(link.whole);
    CHECK(link.info.envs[0].data_from == 10);
    CHECK(link.info.envs[1].data_from == 0);  // rewritten: its whole window
    CHECK(link.info.envs[1].steps == 12);
    CHECK(link.info.envs[2].data_from == 10);

    const LoadResult r = load_chain(dir.path(), restored.name());
    CHECK(r.info.link_seq == 2);
    const Buffer a = Buffer::open(restored.name(), {.read_only = true});
    CHECK(state_difference(a, reader) == "");
    CHECK(stored_step(a, 1, 4) == versioned_bytes(1, 4, 1));
    CHECK(stored_step(a, 1, 5) == payload_bytes(1, 5));
    push_steps(w, {0, 1, 2}, 5);
    CHECK_FALSE(save_link(reader, dir.path()).whole);  // nothing rewritten since link 2: incremental again
  }
  Buffer::remove(restored.name());

  // The earlier checkpoint loaded into the source: the heads go back to 10 and every env's update_seq moves.
  load_checkpoint(earlier.path(), source.name());
  const LinkResult after_load = save_link(reader, dir.path());
  CHECK(after_load.whole);
  for (const CheckpointEnv& e : after_load.info.envs) {
    CAPTURE(e.env);
    CHECK(e.head == 10);
    CHECK(e.data_from == e.first_step);
    CHECK(e.steps == 10);
  }
  const LoadResult r = load_chain(dir.path(), restored.name());
  CHECK(r.info.link_seq == after_load.info.link_seq);
  const Buffer a = Buffer::open(restored.name(), {.read_only = true});
  CHECK(state_difference(a, reader) == "");
  CHECK(stored_step(a, 1, 4) == payload_bytes(1, 4));  // the earlier checkpoint's step, before the rewrite
  CHECK(payload_violation(a) == "");
}

TEST_CASE("save_link keeps the newest `keep` links and every link they need, and a whole link (compaction) frees "
          "the old link that an env which stopped pushing kept alive") {
  SegmentGuard source(unique_name("chain-prune"));
  DirGuard dir(temp_dir("chain-prune"));
  // 4 envs x 4096 steps of 113 bytes: a window of 1.85 MB, above the 1 MiB floor of the compaction budget.
  constexpr uint64_t kCap = 4096;
  Buffer b = Buffer::create(source.name(), 4, kCap, kPayloadSchema);
  const Buffer reader = Buffer::open(source.name(), {.read_only = true});
  const uint64_t window = 4 * kCap * kPayloadSchema.step_bytes();
  Writer w(b, {0, 1, 2, 3});
  push_steps(w, {0, 1, 2, 3}, kCap + 7);

  // Env 0 stops pushing after link 1; envs 1-3 lap their rings between links, so each later link holds their whole
  // windows and none of env 0's steps: every link needs link 1 for env 0, until a whole link holds env 0 again.
  bool compacting = false;
  ChainOptions options;
  options.keep = 2;
  SUBCASE("without compaction (a ratio no chain reaches)") { options.compact_ratio = 100; }
  SUBCASE("with compaction at 1.5 times the window") {
    options.compact_ratio = 1.5;
    compacting = true;
  }
  CAPTURE(options.compact_ratio);
  std::vector<LinkResult> links;
  for (uint64_t seq = 1; seq <= 7; ++seq) {
    CAPTURE(seq);
    if (seq > 1) push_steps(w, {1, 2, 3}, kCap + 3);
    links.push_back(save_link(reader, dir.path(), options));
    const LinkResult& r = links.back();
    REQUIRE(r.info.link_seq == seq);
    CHECK(r.info.envs[0].head == kCap + 7);

    // Which links are whole, which are removed: with compaction, the links after link 1 alternate between a whole
    // link (link n - 1 needs link n - 2 and itself: 1.75 windows, over 1.5) and an incremental one.
    const bool whole = seq == 1 || (compacting && seq % 2 == 1);
    CHECK(r.whole == whole);
    if (seq > 1) CHECK((r.info.chain_id == links[seq - 2].info.chain_id) == !whole);  // a whole link: a new chain
    if (!whole) {
      CHECK(r.info.envs[0].steps == 0);  // env 0 is in an earlier link
      CHECK(r.info.envs[1].data_from == r.info.envs[1].first_step);
    }
    std::vector<uint64_t> removed;
    if (!compacting && seq >= 4) removed = {seq - 2};        // link 1 stays: links seq - 1 and seq need it
    if (compacting && seq >= 4 && seq % 2 == 0) removed = {seq - 3, seq - 2};  // the previous whole link frees them
    CHECK(r.removed == link_files(removed, dir.path()));

    // What is left: the newest two links and what they need, each of them restoring from the links up to it.
    const std::vector<uint64_t> kept = link_seqs(dir.path());
    uint64_t bytes = 0;
    for (const ChainLink& l : list_links(dir.path())) bytes += l.file_bytes;
    CHECK(r.chain_bytes == bytes);
    CHECK(static_cast<double>(r.chain_bytes) <= (options.compact_ratio + 2) * static_cast<double>(window) + 16384);
    if (!compacting) {
      CHECK(kept.front() == 1);  // needed by every kept link, never removed
    } else if (seq >= 4) {
      CHECK(kept.front() == (seq % 2 == 0 ? seq - 1 : seq - 2));  // the chain's whole link
    }
    for (const uint64_t k : {seq - (seq > 1), seq}) CHECK(restores_alone(dir.path(), k) == k);
  }
  if (!compacting) CHECK(links.back().chain_bytes > window + 2 * (3 * window / 4));
  SegmentGuard restored(unique_name("chain-prune-restored"));
  load_chain(dir.path(), restored.name());
  CHECK(state_difference(Buffer::open(restored.name(), {.read_only = true}), reader) == "");
}
