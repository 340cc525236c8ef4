// The reanalyse walk over a checkpoint load: a load into a buffer with a walk resets it (docs/design/reanalyse.md,
// "Checkpoints"), so chunks are never skipped as overwritten when the load moves the heads back.
#include <doctest/doctest.h>

#include <optional>
#include <vector>

#include "checkpoint/checkpoint_helpers.hpp"
#include "reanalyse/reanalyse_helpers.hpp"
#include "shmreplay/internal/segment.hpp"

using namespace shmreplay;
using namespace shmreplay::test;

TEST_CASE("a checkpoint load resets the walk: every loaded chunk is never reanalysed, even with the heads moved "
          "back") {
  WalkRig rig("walk_ckpt", 1, 16, 4);
  FileGuard file(temp_path("walk_ckpt"));
  {
    Writer w(rig.buf, {0});
    push_steps(w, 0, 8);
  }
  (void)save_checkpoint(rig.buf, file.path());
  {
    Writer w(rig.buf, {0});
    push_steps(w, 0, 24);  // steps 16..31 stored; chunks 4..7
  }
  {
    Reanalyser r(rig.buf);
    CHECK(take_all(r, ReanalyseOrder::sweep, [](const ReanalyseChunk&) { return 3; }) ==
          std::vector<Taken>{{0, 4}, {0, 5}, {0, 6}, {0, 7}});
  }
  (void)load_checkpoint_into(rig.buf, file.path());  // head back to 8: chunks 0 and 1
  Reanalyser r(rig.buf);
  CHECK_FALSE(r.newest_version());
  CHECK(segment_of(rig.buf).walk_control().newest_version.load() == 0);
  CHECK(take_all(r, ReanalyseOrder::oldest_version, [](const ReanalyseChunk&) { return 4; }) ==
        std::vector<Taken>{{0, 0}, {0, 1}});
}
