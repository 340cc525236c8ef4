// tests/episodes/fields.cpp: the episode fields: validated at creation, their roles checked at open.
// Part of test_episodes (tests/CMakeLists.txt); its helpers are in episodes_helpers.hpp.
#include "episodes_helpers.hpp"

TEST_CASE("episode fields are validated at creation with what, where and expected versus actual") {
  const std::string name = unique_name("ep-create");
  SegmentGuard guard(name);
  std::string msg;
  auto create = [&](EpisodeFields f, uint64_t queue = 0) {
    return error_of([&] { Buffer::create(name, 2, 8, kSchema, {.episodes = f, .episode_queue_capacity = queue}); },
                    &msg);
  };
  CHECK(create({.done = "finished"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "'finished'") && contains(msg, "names no field") && contains(msg, "id, x, done")));
  CHECK(create({.done = "x"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "'x'") && contains(msg, "scalar bool or integer") && contains(msg, "f32")));
  CHECK(create({.terminated = "id"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "'id'") && contains(msg, "[2]")));
  CHECK(create({.done = "done", .terminated = "term"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "done") && contains(msg, "terminated") && contains(msg, "either")));
  CHECK(create({.done = "done", .truncated = "trunc"}) == code(Errc::invalid_argument));
  CHECK(create({.terminated = "term", .truncated = "term"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "'term'") && contains(msg, "its own field")));
  CHECK(create({.done = "done", .reward = "done"}) == code(Errc::invalid_argument));
  CHECK(create({.reward = "reward"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "reward") && contains(msg, "without an episode-end field")));
  CHECK(create({.done = "done", .reward = "term"}) == code(Errc::invalid_argument));
  CHECK((contains(msg, "'term'") && contains(msg, "scalar numeric")));
  CHECK(create({}, 16) == code(Errc::invalid_argument));
  CHECK(contains(msg, "no episode fields"));
  CHECK(create({.done = "done"}, (1ull << 24) + 1) == code(Errc::invalid_argument));
  CHECK(contains(msg, "episode_queue_capacity"));
  CHECK_FALSE(Buffer::exists(name));

  // Valid: done alone; terminated alone; truncated with an integer flag; any numeric reward.
  for (const EpisodeFields& f : {EpisodeFields{.done = "done"}, EpisodeFields{.terminated = "term"},
                                 EpisodeFields{.truncated = "trunc", .reward = "x"},
                                 EpisodeFields{.terminated = "term", .truncated = "trunc", .reward = "reward"}}) {
    CHECK(create(f) == 0);
    Buffer::remove(name);
  }
  const Buffer b = Buffer::create(name, 2, 8, kSchema, options_for(Flavor::term_trunc, 5));
  CHECK(b.has_episodes());
  CHECK(b.episode_queue_capacity() == 5);
  // Another process sees the same roles: they are identity data in the field table.
  const Buffer again = Buffer::open(name);
  CHECK(again.episode_fields() == b.episode_fields());
  CHECK(again.episode_fields().terminated == std::optional<std::size_t>(kTerm));
  CHECK(again.episode_fields().truncated == std::optional<std::size_t>(kTrunc));
  CHECK(again.episode_fields().reward == std::optional<std::size_t>(kReward));
  CHECK_FALSE(again.episode_fields().done);
  CHECK(again.episode_queue_capacity() == 5);
}

TEST_CASE("open refuses a field table whose episode roles are corrupt") {
  const std::string name = unique_name("ep-corrupt");
  SegmentGuard guard(name);
  auto table_of = [](Buffer& b) {
    auto& h = const_cast<layout::SegmentHeader&>(segment_of(b).header());
    return reinterpret_cast<layout::FieldDesc*>(reinterpret_cast<std::byte*>(&h) +
                                                h.sections[layout::kSectionFields].offset);
  };
  std::string msg;
  {
    Buffer b = Buffer::create(name, 2, 8, kSchema, options_for(Flavor::done));
    table_of(b)[kX].role = 9;
  }
  CHECK(error_of([&] { Buffer::open(name); }, &msg) == code(Errc::corrupt));
  CHECK((contains(msg, "'x'") && contains(msg, "role code 9")));
  Buffer::remove(name);
  {
    Buffer b = Buffer::create(name, 2, 8, kSchema, options_for(Flavor::done));
    table_of(b)[kTerm].role = layout::kRoleDone;  // two done fields
  }
  CHECK(error_of([&] { Buffer::open(name); }, &msg) == code(Errc::corrupt));
  Buffer::remove(name);
  {
    Buffer b = Buffer::create(name, 2, 8, kSchema, options_for(Flavor::done));
    table_of(b)[kTerm].role = layout::kRoleTerminated;  // done together with terminated
  }
  CHECK(error_of([&] { Buffer::open(name); }, &msg) == code(Errc::corrupt));
  CHECK(contains(msg, "either"));
  Buffer::remove(name);
  {
    Buffer b = Buffer::create(name, 2, 8, kSchema);
    table_of(b)[kDone].role = layout::kRoleDone;  // a flag, but no episode sections
  }
  CHECK(error_of([&] { Buffer::open(name); }, &msg) == code(Errc::corrupt));
  CHECK(contains(msg, "episode"));
}
