// lib/vocabulary.cpp: the names of the shared words' values (shmreplay/vocabulary.hpp).
#include "shmreplay/vocabulary.hpp"

namespace shmreplay {

std::string_view to_string(View view) noexcept { return view == View::replay ? "replay" : "online"; }

std::string_view to_string(Episodes episodes) noexcept {
  switch (episodes) {
    case Episodes::cross: return "cross";
    case Episodes::stop: return "stop";
    case Episodes::within: return "within";
  }
  return "?";
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
