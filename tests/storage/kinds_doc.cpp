// tests/storage/kinds_doc.cpp: docs/design/storage.md's table of storage kinds against the code's table
// (lib/detail/storage/storage_kinds.cpp, kKinds): every kind the library has is a row of the doc with its name and
// its code (FieldDesc::storage_kind: layout::kStoragePlainRing, kStorageFrameRing, ...), and the doc has no other
// row. Kinds a test adds (codes from layout::kStorageTestKinds) are not the doc's.
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "detail/storage/storage_kinds.hpp"
#include "shmreplay/internal/layout.hpp"

namespace storage_kinds_doc {

// The rows of the doc's kind table ("| kind | code | ..."), name (spaces as in the doc) -> code as written.
std::map<std::string, std::string> doc_rows() {
  std::ifstream in(SHMREPLAY_STORAGE_DOC);
  REQUIRE_MESSAGE(in.good(), "cannot read " SHMREPLAY_STORAGE_DOC);
  std::map<std::string, std::string> rows;
  bool in_table = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("| kind | code |")) {
      in_table = true;
      std::getline(in, line);  // |---|---|...
      continue;
    }
    if (!in_table) continue;
    if (!line.starts_with("|")) break;
    std::istringstream cells(line.substr(1));
    std::string name, code;
    std::getline(cells, name, '|');
    std::getline(cells, code, '|');
    const auto trim = [](std::string s) {
      s.erase(0, s.find_first_not_of(' '));
      s.erase(s.find_last_not_of(' ') + 1);
      return s;
    };
    const bool fresh = rows.emplace(trim(name), trim(code)).second;
    CHECK_MESSAGE(fresh, "the doc's kind table names '" << trim(name) << "' twice");
  }
  return rows;
}

TEST_CASE("docs/design/storage.md's table of storage kinds has one row per kind of the code's table, with its code, "
          "and no other row") {
  std::map<std::string, std::string> doc = doc_rows();
  REQUIRE_MESSAGE(!doc.empty(), "no table headed '| kind | code |' in " SHMREPLAY_STORAGE_DOC);
  std::size_t kinds = 0;
  for (const shmreplay::detail::StorageKindRow* row : shmreplay::detail::storage_kinds()) {
    if (row->id >= shmreplay::layout::kStorageTestKinds) continue;  // a kind a test added
    ++kinds;
    std::string name = row->name;  // plain_ring: "plain ring" in the doc
    for (char& c : name) c = c == '_' ? ' ' : c;
    CAPTURE(name);
    const auto it = doc.find(name);
    REQUIRE_MESSAGE(it != doc.end(), fmt::format("storage kind '{}' (code {}) has no row in {}", row->name, row->id,
                                                 SHMREPLAY_STORAGE_DOC));
    CHECK_MESSAGE(it->second == std::to_string(row->id),
                  fmt::format("the doc gives '{}' code {}, the code {}", name, it->second, row->id));
    doc.erase(it);
  }
  for (const auto& [name, code] : doc) {
    FAIL_CHECK(fmt::format("the doc's kind table has a row '{}' (code {}) that no storage kind of the code has", name,
                           code));
  }
  CHECK(kinds >= 2);
  // The codes the doc's prose names are the table's: the plain ring 0, the frame ring 1.
  CHECK(shmreplay::detail::storage_kind(shmreplay::layout::kStoragePlainRing)->name == std::string("plain_ring"));
  CHECK(shmreplay::detail::storage_kind(shmreplay::layout::kStorageFrameRing)->name == std::string("frame_ring"));
}

}  // namespace storage_kinds_doc
