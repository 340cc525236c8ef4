// tools/bench/staging.hpp: the workers' inputs and outputs (workloads.hpp): a push's staged steps, the references'
// sample output, a range of env ids. Used by ours.cpp, memcpy.cpp, mutex.cpp and workloads.cpp (Stores).
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "shmreplay/schema.hpp"
#include "shmreplay/writer.hpp"

namespace shmreplay::bench {

// What an env worker hands to a push: per field an array [rows][field bytes] (envpool's recv output), with a
// recognisable pattern.
struct Staging {
  std::vector<std::vector<std::byte>> data;  // per field
  std::vector<FieldBytes> all;               // per field: the whole array
  std::vector<std::vector<FieldBytes>> one;  // per row, per field: that row's value
  std::vector<std::size_t> bytes;            // per field: bytes per step

  Staging(const Schema& schema, std::size_t rows) {
    for (std::size_t f = 0; f < schema.size(); ++f) {
      const auto b = static_cast<std::size_t>(schema[f].bytes());
      bytes.push_back(b);
      data.emplace_back(rows * b);
      for (std::size_t i = 0; i < data.back().size(); ++i) data.back()[i] = static_cast<std::byte>(i * 7 + f);
      all.push_back({data.back().data(), data.back().size()});
    }
    one.resize(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t f = 0; f < schema.size(); ++f) one[r].push_back({data[f].data() + r * bytes[f], bytes[f]});
    }
  }
};

// Per field: an output array of `rows` x `length` steps (the references' sample output).
struct Rows {
  std::vector<std::vector<std::byte>> data;
  explicit Rows(const Schema& schema, std::size_t rows, std::size_t length) {
    for (const Field& f : schema.fields()) data.emplace_back(rows * length * static_cast<std::size_t>(f.bytes()));
  }
};

inline std::vector<uint64_t> env_range(uint64_t first, uint64_t count) {
  std::vector<uint64_t> ids(static_cast<std::size_t>(count));
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

}  // namespace shmreplay::bench
