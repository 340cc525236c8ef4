// detail/sampling/planner_table.hpp: which planner a sample call uses. One table, one row per planner, in order:
// the first row whose test holds for the call's options and sequence length chooses. Planners holds one planner
// of each row's type, made from the same PlannerInputs, and hands the chosen one to the caller (with). A new way
// of drawing is its planner file (the interface in planner.hpp, with a constructor from PlannerInputs) and one
// row here, as Reverb's selectors are one file each behind a small interface, which a table chooses from.
//
// Who calls it: the Sampler (lib/sampler_parts.hpp owns a Planners), once per sample call (each view of a mixed
// call) and once per total_weight, so that both choose alike; tests/planner/table.cpp checks every choice. The
// dispatch is once per call: `with` calls the caller's function with the chosen planner as its own (final) type,
// so that a per-row draw is a direct call; nothing allocates. Nothing here touches the segment; a Planners is
// used by one thread at a time (the Sampler's).
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "detail/sampling/cross_planners.hpp"
#include "detail/sampling/episode_planners.hpp"
#include "detail/sampling/fresh_planner.hpp"
#include "detail/sampling/planner.hpp"
#include "detail/sampling/priority_planner.hpp"
#include "detail/sampling/recency_planner.hpp"
#include "shmreplay/vocabulary.hpp"  // SampleOptions, Episodes

namespace shmreplay::detail {

/// One row of the table: planner type P, chosen for a call whose options and sequence length pass `when`.
template <class P>
struct PlannerRow {
  using Planner = P;
  bool (*when)(const SampleOptions& options, std::size_t length);
};

/// The table. Its last row's test holds always (the default).
inline constexpr std::tuple kPlannerTable{
    // Sampler::check_args refuses reanalysed with prioritized, recency, a period above 1, stop and within.
    PlannerRow<FreshPlanner>{[](const SampleOptions& o, std::size_t) { return o.reanalysed; }},
    PlannerRow<PriorityPlanner>{[](const SampleOptions& o, std::size_t) { return o.prioritized; }},
    // Sampler::check_args refuses a half-life with prioritized, a period above 1, and stop or within with L > 1.
    PlannerRow<RecencyPlanner>{[](const SampleOptions& o, std::size_t) { return o.recency_half_life > 0.0; }},
    // A single step never crosses an episode end: with period 1 every mode is the uniform closed form.
    PlannerRow<ClosedFormPlanner>{
        [](const SampleOptions& o, std::size_t length) {
          return o.period == 1 && (o.episodes == Episodes::cross || length == 1);
        }},
    PlannerRow<PeriodPlanner>{[](const SampleOptions& o, std::size_t) { return o.episodes == Episodes::cross; }},
    PlannerRow<RejectionPlanner>{[](const SampleOptions&, std::size_t) { return true; }},  // stop and within
};

inline constexpr std::size_t kPlannerRows = std::tuple_size_v<std::remove_cvref_t<decltype(kPlannerTable)>>;

/// The row the table chooses for a call with options `o` and sequence length `length`.
constexpr std::size_t planner_row(const SampleOptions& o, std::size_t length) noexcept {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    std::size_t row = kPlannerRows - 1;
    (void)((std::get<I>(kPlannerTable).when(o, length) ? (row = I, true) : false) || ...);
    return row;
  }(std::make_index_sequence<kPlannerRows>{});
}

/// The row of planner type P.
template <class P>
inline constexpr std::size_t kPlannerRowOf = []<std::size_t... I>(std::index_sequence<I...>) {
  std::size_t row = kPlannerRows;
  (void)((std::is_same_v<typename std::tuple_element_t<I, std::remove_cvref_t<decltype(kPlannerTable)>>::Planner, P>
              ? (row = I, true)
              : false) ||
         ...);
  return row;
}(std::make_index_sequence<kPlannerRows>{});

/// One planner of each row's type (their scratch storage only grows: keep one Planners across calls).
class Planners {
 public:
  /// `in` must outlive the planners.
  explicit Planners(const PlannerInputs& in) : Planners(in, std::make_index_sequence<kPlannerRows>{}) {}
  Planners(const Planners&) = delete;
  Planners& operator=(const Planners&) = delete;

  /// f(planner) with the planner the table chooses for `o` and `length` (planner_row), as its own type; returns
  /// what f returns (the same type for every planner).
  template <class F>
  decltype(auto) with(const SampleOptions& o, std::size_t length, F&& f) {
    return dispatch<0>(planner_row(o, length), f);
  }

 private:
  template <class Row>
  struct PlannerOf;
  template <class... Rows>
  struct PlannerOf<std::tuple<Rows...>> {
    using type = std::tuple<typename Rows::Planner...>;
  };

  template <std::size_t... I>
  Planners(const PlannerInputs& in, std::index_sequence<I...>) : all_(((void)I, in)...) {}

  template <std::size_t I, class F>
  decltype(auto) dispatch(std::size_t row, F& f) {
    if constexpr (I + 1 == kPlannerRows) {
      return f(std::get<I>(all_));
    } else {
      if (row == I) return f(std::get<I>(all_));
      return dispatch<I + 1>(row, f);
    }
  }

  typename PlannerOf<std::remove_cvref_t<decltype(kPlannerTable)>>::type all_;
};

}  // namespace shmreplay::detail
