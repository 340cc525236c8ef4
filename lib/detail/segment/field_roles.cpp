// detail/segment/field_roles.cpp: which fields carry episode bookkeeping, resolved at create from the names asked
// for and checked again at open from the field table's role codes (one check, episode_role_problem, for both).
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "detail/segment/rules.hpp"

namespace shmreplay::detail {
namespace {

using namespace layout;

bool is_integer_or_bool(DType d) noexcept {
  switch (d) {
    case DType::u8: case DType::i8: case DType::u16: case DType::i16: case DType::u32: case DType::i32:
    case DType::u64: case DType::i64: case DType::boolean: return true;
    default: return false;
  }
}

}  // namespace

std::string episode_role_problem(const Schema& schema, const EpisodeFieldIndices& r) {
  auto describe = [&](const char* role, std::size_t f) {
    return fmt::format("episode field {} = '{}' ({})", role, schema[f].name, schema[f].to_string());
  };
  if (r.done && (r.terminated || r.truncated)) {
    return fmt::format("{} is given together with {}: name either done, or terminated and/or truncated",
                       describe("done", *r.done),
                       r.terminated ? describe("terminated", *r.terminated) : describe("truncated", *r.truncated));
  }
  const std::pair<const char*, std::optional<std::size_t>> flags[] = {
      {"done", r.done}, {"terminated", r.terminated}, {"truncated", r.truncated}};
  for (const auto& [role, f] : flags) {
    if (f && (schema[*f].elements() != 1 || !is_integer_or_bool(schema[*f].dtype))) {
      return fmt::format("{} is not a flag: expected a scalar bool or integer field, actual dtype {} shape {}",
                         describe(role, *f), dtype_name(schema[*f].dtype), schema[*f].shape_string());
    }
  }
  if (r.policy_version) {
    const Field& f = schema[*r.policy_version];
    if (f.elements() != 1 || !is_integer_or_bool(f.dtype) || f.dtype == DType::boolean) {
      return fmt::format("policy_version = '{}' ({}) is not a version: expected a scalar integer field, actual dtype "
                         "{} shape {}",
                         f.name, f.to_string(), dtype_name(f.dtype), f.shape_string());
    }
  }
  if (r.reward) {
    const Field& f = schema[*r.reward];
    if (f.elements() != 1 || f.dtype == DType::boolean) {
      return fmt::format("{} is not a reward: expected a scalar numeric field (not bool), actual dtype {} shape {}",
                         describe("reward", *r.reward), dtype_name(f.dtype), f.shape_string());
    }
    if (!r.any_flag()) {
      return fmt::format("{} is given without an episode-end field: name done, or terminated and/or truncated too",
                         describe("reward", *r.reward));
    }
  }
  return {};
}

FieldRoles resolve_field_roles(const std::string& name, const Schema& schema, const EpisodeFields& ep,
                               uint64_t episode_queue_capacity, const std::string& policy_version) {
  FieldRoles roles;
  roles.of_field.assign(schema.size(), kRoleNone);
  auto fail = [&](const std::string& what) {
    throw Error(Errc::invalid_argument, fmt::format("cannot create shmreplay segment '{}': {}", name, what));
  };
  const std::pair<const char*, const std::string*> named[] = {{"done", &ep.done},
                                                              {"terminated", &ep.terminated},
                                                              {"truncated", &ep.truncated},
                                                              {"reward", &ep.reward},
                                                              {"policy_version", &policy_version}};
  const uint32_t codes[] = {kRoleDone, kRoleTerminated, kRoleTruncated, kRoleReward, kRolePolicyVersion};
  std::optional<std::size_t>* slots[] = {&roles.indices.done, &roles.indices.terminated, &roles.indices.truncated,
                                         &roles.indices.reward, &roles.indices.policy_version};
  for (std::size_t i = 0; i < std::size(codes); ++i) {
    const std::string& field = *named[i].second;
    if (field.empty()) continue;
    const auto f = schema.find(field);
    if (!f) {
      std::vector<std::string> names;
      for (const Field& x : schema.fields()) names.push_back(x.name);
      fail(fmt::format("{} {} = '{}' names no field of the schema (its fields: {})",
                       codes[i] == kRolePolicyVersion ? "field" : "episode field", named[i].first,
                       field, fmt::join(names, ", ")));
    }
    if (roles.of_field[*f] != kRoleNone) {
      const char* other = named[roles.of_field[*f] - 1].first;
      fail(fmt::format("field '{}' is named as field {} and as {}; each role needs its own field", field,
                       other, named[i].first));
    }
    roles.of_field[*f] = codes[i];
    *slots[i] = *f;
  }
  if (const std::string problem = episode_role_problem(schema, roles.indices); !problem.empty()) fail(problem);
  if (roles.indices.any_flag()) {
    roles.queue_capacity = episode_queue_capacity == 0 ? kDefaultEpisodeQueueCapacity
                                                               : episode_queue_capacity;
    if (roles.queue_capacity > kMaxEpisodeQueueCapacity) {
      fail(fmt::format("episode_queue_capacity is {} records, expected 1 to {}", roles.queue_capacity,
                       kMaxEpisodeQueueCapacity));
    }
  } else if (episode_queue_capacity != 0) {
    fail(fmt::format("episode_queue_capacity is {}, but the buffer has no episode fields (set "
                     "CreateOptions::episodes.done, or terminated and/or truncated)",
                     episode_queue_capacity));
  }
  return roles;
}

}  // namespace shmreplay::detail
