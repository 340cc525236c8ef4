// tools/bench/checkpoint_packed.cpp: checkpoints of a compressed field on real Atari frames (tools/frames/): file
// bytes, save time and load time of the records saved as they are (format 2.3's default) against the same buffer
// saved decoded (SaveOptions::decode_compressed, what 2.2 wrote), in one run, per game and codec. Each load goes into
// a new name (it decodes the file's records and codes them again). Usage:
//   shmreplay_bench_checkpoint_packed [--frames DIR] [--dir DIR] [--quick]
// docs/benchmarks/checkpoints.md has the figures.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "frames_file.hpp"
#include "shmreplay/shmreplay.hpp"

using namespace shmreplay;

namespace {

double seconds_of(const auto& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Fills a buffer `spec` with every step of `r` (its stacks rebuilt from the frames, as envpool gives them).
void fill(Buffer& b, const bench::Recording& r) {
  std::vector<uint64_t> envs(r.envs);
  for (uint64_t e = 0; e < r.envs; ++e) envs[e] = e;
  Writer w(b, envs);
  std::vector<std::byte> stack(r.depth * r.frame_bytes());
  for (uint32_t t = 0; t < r.steps; ++t) {
    for (uint32_t e = 0; e < r.envs; ++e) {
      const std::size_t i = std::size_t{e} * r.steps + t;
      for (std::size_t k = 0; k < r.depth; ++k) {
        std::memcpy(stack.data() + k * r.frame_bytes(), r.stack_frame(i, k), r.frame_bytes());
      }
      w.push_one(e, {{stack.data(), stack.size()}, {&t, sizeof t}});
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string frames = "build/frames", dir = "/tmp";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--frames" && i + 1 < argc) frames = argv[++i];
    else if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--quick") quick = true;
  }
  const std::vector<bench::Recording> recs = bench::load_recordings(frames, quick ? 128 : 0);
  fmt::print("| game | codec | steps | as is: file MB | decoded: file MB | bytes ratio | as is: save s | decoded: "
             "save s | save ratio | as is: load s | decoded: load s | load ratio |\n");
  fmt::print("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const bench::Recording& r : recs) {
    if (r.depth != 4) continue;
    for (const char* codec : {"lz4", "zstd=3"}) {
      const std::string name = fmt::format("ckpt-packed-bench-{}", ::getpid());
      const Schema schema = Schema::parse(fmt::format("obs:u8[4,{},{}]:stack=0:{} t:u32", r.height, r.width, codec));
      Buffer b = Buffer::create(name, r.envs, r.steps, schema, {.replace = true});
      fill(b, r);
      const std::string as_is = fmt::format("{}/{}.asis.ckpt", dir, name);
      const std::string decoded = fmt::format("{}/{}.dec.ckpt", dir, name);
      CheckpointInfo a, d;
      const double save_a = seconds_of([&] { a = save_checkpoint(b, as_is); });
      const double save_d = seconds_of([&] { d = save_checkpoint(b, decoded, {.decode_compressed = true}); });
      const double load_a = seconds_of([&] { (void)load_checkpoint(as_is, name + "-a"); });
      const double load_d = seconds_of([&] { (void)load_checkpoint(decoded, name + "-d"); });
      fmt::print("| {} | {} | {} | {:.2f} | {:.2f} | {:.3f} | {:.3f} | {:.3f} | {:.2f} | {:.3f} | {:.3f} | {:.2f} |\n",
                 r.name, codec, a.total_steps, double(a.file_bytes) / 1e6, double(d.file_bytes) / 1e6,
                 double(a.file_bytes) / double(d.file_bytes), save_a, save_d, save_a / save_d, load_a, load_d,
                 load_a / load_d);
      std::remove(as_is.c_str());
      std::remove(decoded.c_str());
      Buffer::remove(name);
      Buffer::remove(name + "-a");
      Buffer::remove(name + "-d");
    }
  }
  return 0;
}
