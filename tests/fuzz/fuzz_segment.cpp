// Fuzz target: a segment file of arbitrary bytes. Buffer::open must refuse it with shmreplay::Error or accept it
// only when every range it will touch lies inside the file; whatever it accepts, the inspector (snapshot, listing,
// read_steps) and a learner (every kind of sample, peek, episodes) must then survive its counters, however
// hostile, with an Error at worst.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace shmreplay;
  const std::string name = "seg";
  fuzz::write_file(fuzz::private_dir() + "/" + name, data, size);
  fuzz::Choices choices(data, size);
  fuzz::read_as_inspector(name, choices);
  fuzz::drive_learner(name, choices);
  return 0;
}
