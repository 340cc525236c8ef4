// tools/cli/compression.cpp: what `info`, `watch` and `ls` show of a buffer's compressed fields (":lz4",
// ":zstd=LEVEL"; docs/design/compression.md): each field's codec and share of the byte budget, the bytes a stored
// step takes, the ratio the codec achieved and the steps the budget cost (commands.hpp).
#include <fmt/format.h>

#include "commands.hpp"
#include "info_forms.hpp"
#include "text.hpp"

namespace shmreplay::cli {

std::string codec_text(Codec codec, int32_t level) {
  switch (codec) {
    case Codec::lz4: return "lz4";
    case Codec::zstd: return fmt::format("zstd={}", level);
    default: return "none";
  }
}

namespace {

uint64_t frames_sum(const SegmentInfo& i, uint64_t CompressedFieldInfo::*word) {
  uint64_t v = 0;
  for (const CompressedFieldInfo& f : i.compressed) v += f.*word;
  return v;
}

}  // namespace

Json compressed_json(const SegmentInfo& i) {
  if (i.compressed.empty()) return nullptr;
  Json fields = Json::array();
  for (const CompressedFieldInfo& f : i.compressed) {
    fields.push_back({{"field", i.schema[f.field].name},
                      {"index", f.field},
                      {"codec", codec_text(f.codec, f.level)},
                      {"depth", f.depth},
                      {"frame_bytes", f.frame_bytes},
                      {"ring_bytes_per_env", f.ring_bytes},
                      {"budget_bytes", f.ring_bytes * i.num_envs},
                      {"frames", f.frames},
                      {"frame_bytes_pushed", f.frames * f.frame_bytes},
                      {"record_bytes", f.record_bytes},
                      {"raw_frames", f.raw_frames},
                      {"ratio", f.ratio()},
                      {"steps_lost_to_budget", f.budget_lost}});
  }
  return {{"fields", std::move(fields)},
          {"stored_bytes", i.stored_bytes},
          {"bytes_per_stored_step", stored_bytes_per_step(i)},
          {"steps_lost_to_budget", i.steps_lost_to_budget}};
}

std::vector<std::pair<std::string, std::string>> compressed_lines(const SegmentInfo& i) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const CompressedFieldInfo& f : i.compressed) {
    const std::string stored =
        f.frames == 0 ? std::string("no frame stored yet")
                      : fmt::format("{} frames stored in {}, ratio {:.1f}x, {} as pushed", f.frames,
                                    human_bytes(f.record_bytes), f.ratio(), f.raw_frames);
    out.emplace_back("compressed", fmt::format("{}: {}, {} a step of {} bytes; {} ring per env ({} in all); {}; {} "
                                               "lost to the budget",
                                               i.schema[f.field].name, codec_text(f.codec, f.level),
                                               counted(f.depth, "frame", "frames"), f.frame_bytes,
                                               human_bytes(f.ring_bytes), human_bytes(f.ring_bytes * i.num_envs),
                                               stored, counted(f.budget_lost, "step", "steps")));
  }
  if (!i.compressed.empty()) {
    out.emplace_back("stored", fmt::format("{:.1f} bytes per stored step ({} as pushed), {} lost to the budget",
                                           stored_bytes_per_step(i), i.step_bytes,
                                           counted(i.steps_lost_to_budget, "step", "steps")));
  }
  return out;
}

double compression_ratio(const SegmentInfo& i) {
  uint64_t pushed = 0;
  for (const CompressedFieldInfo& f : i.compressed) pushed += f.frames * f.frame_bytes;
  const uint64_t records = frames_sum(i, &CompressedFieldInfo::record_bytes);
  return records == 0 ? 0.0 : static_cast<double>(pushed) / static_cast<double>(records);
}

}  // namespace shmreplay::cli
