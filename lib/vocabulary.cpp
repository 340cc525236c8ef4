// lib/vocabulary.cpp: the names of the shared words' values (shmreplay/vocabulary.hpp).
#include "shmreplay/vocabulary.hpp"

#include <algorithm>

namespace shmreplay {

std::string_view to_string(View view) noexcept { return view == View::replay ? "replay" : "online"; }

std::string_view to_string(Consume consume) noexcept {
  switch (consume) {
    case Consume::fifo: return "fifo";
    case Consume::random: return "random";
    default: return "off";
  }
}

std::string_view to_string(ReanalyseOrder order) noexcept {
  switch (order) {
    case ReanalyseOrder::sweep: return "sweep";
    case ReanalyseOrder::largest_return: return "largest_return";
    default: return "oldest_version";
  }
}

std::string_view to_string(Episodes episodes) noexcept {
  switch (episodes) {
    case Episodes::cross: return "cross";
    case Episodes::stop: return "stop";
    case Episodes::within: return "within";
  }
  return "?";
}

std::string_view to_string(Selector selector) noexcept {
  switch (selector) {
    case Selector::uniform: return "uniform";
    case Selector::prioritized: return "prioritized";
    case Selector::recency: return "recency";
    case Selector::online: return "online";
    case Selector::reanalysed: return "reanalysed";
  }
  return "?";
}

std::array<std::size_t, kSelectors> Mixture::rows(std::size_t batch) const noexcept {
  const double f[kSelectors] = {uniform, prioritized, recency, online, reanalysed};
  double sum = 0.0;
  for (const double x : f) sum += x;
  std::array<std::size_t, kSelectors> rows{};
  double remainder[kSelectors] = {};
  std::size_t given = 0;
  for (std::size_t s = 0; s < kSelectors; ++s) {
    const double quota = f[s] / sum * static_cast<double>(batch);
    rows[s] = std::min(static_cast<std::size_t>(quota), batch - given);  // quota <= batch, up to rounding
    remainder[s] = f[s] > 0.0 ? quota - static_cast<double>(rows[s]) : -2.0;  // never a row without a fraction
    given += rows[s];
  }
  while (given < batch) {  // at most kSelectors - 1 rows left, to the largest remainders (ties: the earlier)
    std::size_t best = 0;
    for (std::size_t s = 1; s < kSelectors; ++s) {
      if (remainder[s] > remainder[best]) best = s;
    }
    ++rows[best];
    remainder[best] = -1.0;
    ++given;
  }
  return rows;
}

std::string_view to_string(EpisodeEnd end) noexcept {
  switch (end) {
    case EpisodeEnd::none: return "none";
    case EpisodeEnd::done: return "done";
    case EpisodeEnd::terminated: return "terminated";
    case EpisodeEnd::truncated: return "truncated";
  }
  return "?";
}

std::string_view to_string(StackContinuity continuity) noexcept {
  switch (continuity) {
    case StackContinuity::compare: return "compare";
    case StackContinuity::episodes: return "episodes";
  }
  return "?";
}

}  // namespace shmreplay
