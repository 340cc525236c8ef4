// Fuzz target: Schema::parse of arbitrary text. A text that parses must print (to_string) as a text that parses
// back to an equal schema with the same size, and prints the same again; a text that does not parse must give
// shmreplay::Error (Errc::invalid_schema), never another exception or a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "shmreplay/error.hpp"
#include "shmreplay/schema.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  shmreplay::Schema schema;
  try {
    schema = shmreplay::Schema::parse(text);
  } catch (const shmreplay::Error&) {
    return 0;
  }
  const std::string printed = schema.to_string();
  const shmreplay::Schema again = shmreplay::Schema::parse(printed);  // must not throw: a finding if it does
  if (!(again == schema) || again.to_string() != printed || again.step_bytes() != schema.step_bytes() ||
      !shmreplay::Schema::differences(schema, again).empty() || again.size() != schema.size()) {
    std::abort();
  }
  for (std::size_t i = 0; i < schema.size(); ++i) {
    if (schema.find(schema[i].name) != i) std::abort();
  }
  return 0;
}
