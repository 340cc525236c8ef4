// lib/vocabulary.cpp: the names of the shared words' values (shmreplay/vocabulary.hpp).
#include "shmreplay/vocabulary.hpp"

namespace shmreplay {

std::string_view to_string(EpisodeEnd end) noexcept {
  switch (end) {
    case EpisodeEnd::none: return "none";
    case EpisodeEnd::done: return "done";
    case EpisodeEnd::terminated: return "terminated";
    case EpisodeEnd::truncated: return "truncated";
  }
  return "?";
}

}  // namespace shmreplay
