// tools/bench/frames_file.hpp: reads a frames file (real Atari or DMC frames recorded by tools/frames/record_*.py;
// the layout is documented in tools/frames/frames_file.py) for the codec benchmark (codecs.cpp) and the compressed
// storage benchmark (compressed.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace shmreplay::bench {

/// One frames file in memory: envs x steps frames of height x width x channels bytes, env-major, each with its
/// flags (kFirst: the env's stack restarts here, a reset; kDone: the env reported the episode's or a life's end).
struct Recording {
  static constexpr uint8_t kFirst = 1, kDone = 2;
  std::string name;
  uint32_t height = 0, width = 0, channels = 0, envs = 0, steps = 0, depth = 0;
  std::vector<uint8_t> flags;   // [envs * steps]
  std::vector<std::byte> data;  // [envs * steps * frame_bytes()]

  std::size_t frame_bytes() const noexcept { return std::size_t{height} * width * channels; }
  std::size_t frames() const noexcept { return std::size_t{envs} * steps; }
  const std::byte* frame(std::size_t i) const noexcept { return data.data() + i * frame_bytes(); }
  /// Whether frame i (env-major) starts its env's stack: a reset, or the env's first step.
  bool first(std::size_t i) const noexcept { return (flags[i] & kFirst) != 0; }
  /// The frame of env-major step i's stack slot k (0 the oldest), as frames_file.stacks rebuilds it.
  const std::byte* stack_frame(std::size_t i, std::size_t k) const noexcept {
    std::size_t at = i;
    for (std::size_t back = depth - 1 - k; back > 0 && !first(at); --back) --at;
    return frame(at);
  }
};

/// Reads `path`; throws std::runtime_error saying what is wrong (the magic, the header, the size) where it is not a
/// whole frames file.
inline Recording read_recording(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("frames file {}: cannot open it", path));
  unsigned char head[64];
  if (!in.read(reinterpret_cast<char*>(head), sizeof head)) {
    throw std::runtime_error(fmt::format("frames file {}: shorter than its 64-byte header", path));
  }
  if (std::memcmp(head, "SHMRFRM1", 8) != 0) {
    throw std::runtime_error(fmt::format("frames file {}: magic is not SHMRFRM1 (not a frames file)", path));
  }
  const auto u32 = [&](std::size_t at) {
    uint32_t v = 0;
    std::memcpy(&v, head + at, 4);  // little-endian, as the machines this runs on
    return v;
  };
  Recording r;
  if (u32(8) != 64) {
    throw std::runtime_error(fmt::format("frames file {}: header of {} bytes, expected 64", path, u32(8)));
  }
  r.height = u32(12), r.width = u32(16), r.channels = u32(20), r.envs = u32(24), r.steps = u32(28), r.depth = u32(32);
  r.name.assign(reinterpret_cast<const char*>(head + 40), strnlen(reinterpret_cast<const char*>(head + 40), 24));
  if (r.frames() == 0 || r.frame_bytes() == 0 || r.depth == 0) {
    throw std::runtime_error(fmt::format("frames file {}: {} envs x {} steps of {}x{}x{}, depth {}: nothing to read",
                                         path, r.envs, r.steps, r.height, r.width, r.channels, r.depth));
  }
  r.flags.resize(r.frames());
  r.data.resize(r.frames() * r.frame_bytes());
  in.read(reinterpret_cast<char*>(r.flags.data()), static_cast<std::streamsize>(r.flags.size()));
  in.read(reinterpret_cast<char*>(r.data.data()), static_cast<std::streamsize>(r.data.size()));
  if (!in || in.peek() != std::char_traits<char>::eof()) {
    throw std::runtime_error(fmt::format("frames file {}: not {} bytes long, as its header says ({} envs x {} steps "
                                         "of {} bytes and a flag)",
                                         path, 64 + r.frames() * (1 + r.frame_bytes()), r.envs, r.steps,
                                         r.frame_bytes()));
  }
  for (uint32_t e = 0; e < r.envs; ++e) r.flags[std::size_t{e} * r.steps] |= Recording::kFirst;
  return r;
}

/// Every frames file (*.frames) of `dir`, the stacked (Atari) ones first, each by name; at most `max_steps` steps per
/// env (0: all). Throws std::runtime_error, saying how to make them, when `dir` holds none.
inline std::vector<Recording> load_recordings(const std::string& dir, uint32_t max_steps) {
  std::vector<std::string> paths;
  if (std::filesystem::is_directory(dir)) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() == ".frames") paths.push_back(entry.path().string());
    }
  }
  if (paths.empty()) {
    throw std::runtime_error(fmt::format("no frames files (*.frames) in {}: make them with `python "
                                         "tools/frames/record_atari.py --out {}` (and record_dmc.py for DMC pixels)",
                                         dir, dir));
  }
  std::vector<Recording> out;
  for (const auto& p : paths) out.push_back(read_recording(p));
  for (Recording& r : out) {
    if (max_steps == 0 || r.steps <= max_steps) continue;
    Recording cut = r;
    cut.steps = max_steps;
    cut.flags.clear();
    cut.data.clear();
    for (std::size_t e = 0; e < r.envs; ++e) {
      const auto from = static_cast<std::ptrdiff_t>(e * r.steps), n = static_cast<std::ptrdiff_t>(max_steps);
      const auto fb = static_cast<std::ptrdiff_t>(r.frame_bytes());
      cut.flags.insert(cut.flags.end(), r.flags.begin() + from, r.flags.begin() + from + n);
      cut.data.insert(cut.data.end(), r.data.begin() + from * fb, r.data.begin() + (from + n) * fb);
    }
    r = std::move(cut);
  }
  std::stable_sort(out.begin(), out.end(), [](const Recording& a, const Recording& b) {
    return a.depth != b.depth ? a.depth > b.depth : a.name < b.name;
  });
  return out;
}

}  // namespace shmreplay::bench
