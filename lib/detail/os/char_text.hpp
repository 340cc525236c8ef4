// detail/os/char_text.hpp: one byte of user text, shown in an error message. Messages quote names and specs whole,
// but a message that points at one offending byte must not cut a UTF-8 character in half: that would make the
// message invalid UTF-8 (Python could not even show it).
#pragma once

#include <fmt/format.h>

#include <string>

namespace shmreplay::detail {

// 'x' for a printable ASCII character; otherwise the byte in hex, e.g. "byte 0xc3 (not ASCII)".
inline std::string char_text(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return fmt::format("'{}'", c);
  return fmt::format("byte 0x{:02x} ({})", u, u < 0x80 ? "a control character" : "not ASCII");
}

}  // namespace shmreplay::detail
