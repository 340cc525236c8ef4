#include "shmreplay/nstep.hpp"

#include <cmath>

#include <fmt/format.h>

#include "detail/protocol/episodes.hpp"
#include "shmreplay/error.hpp"

namespace shmreplay {
namespace {

NStep nstep_impl(const SampleBatch& b, std::size_t row, std::size_t t, std::size_t n, double discount,
                 std::optional<std::size_t> reward_field) {
  const std::size_t L = b.sequence_length();
  if (row >= b.rows() || t >= L) {
    throw Error(Errc::invalid_argument, fmt::format("cannot compute an n-step return at row {}, position {}: the "
                                                    "batch has {} rows of {} steps",
                                                    row, t, b.rows(), L));
  }
  if (n == 0 || !std::isfinite(discount)) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot compute an n-step return with n = {} and discount = {}: expected n >= 1 and a "
                            "finite discount",
                            n, discount));
  }
  if (!reward_field) {
    throw Error(Errc::invalid_argument, "cannot compute an n-step return: the buffer has no reward field (create it "
                                        "with CreateOptions::episodes.reward) and none was given");
  }
  const std::size_t rf = *reward_field;
  const auto step_bytes = [&](std::size_t f) { return b.field(f).size() / (b.rows() * L); };
  if (rf >= b.num_fields() || step_bytes(rf) != dtype_bytes(b.field_dtype(rf))) {
    throw Error(Errc::invalid_argument,
                fmt::format("cannot compute an n-step return from field {}: expected a scalar field below {}", rf,
                            b.num_fields()));
  }
  const EpisodeFieldIndices& ef = b.episode_fields();
  const auto flag = [&](const std::optional<std::size_t>& f, std::size_t pos) {
    return f && detail::flag_set(b.step(*f, row, pos), step_bytes(*f));
  };
  NStep r;
  double scale = 1.0;
  for (std::size_t k = 0; k < n && t + k < L && b.valid(row, t + k); ++k) {
    const std::size_t pos = t + k;
    r.reward_sum += scale * detail::element_as_double(b.field_dtype(rf), b.step(rf, row, pos));
    scale *= discount;
    r.steps = k + 1;
    if (flag(ef.terminated, pos) || flag(ef.done, pos)) {
      r.terminated = true;
      break;
    }
    if (flag(ef.truncated, pos)) {
      r.truncated = true;
      break;
    }
  }
  if (r.steps == 0 || r.terminated) return r;
  r.bootstrap_discount = scale;
  const std::size_t next = t + r.steps;
  if (!r.truncated && next < L && b.valid(row, next)) r.bootstrap = next;
  return r;
}

}  // namespace

NStep nstep(const SampleBatch& batch, std::size_t row, std::size_t t, std::size_t n, double discount) {
  return nstep_impl(batch, row, t, n, discount, batch.episode_fields().reward);
}

NStep nstep(const SampleBatch& batch, std::size_t row, std::size_t t, std::size_t n, double discount,
            std::size_t reward_field) {
  return nstep_impl(batch, row, t, n, discount, reward_field);
}

}  // namespace shmreplay
