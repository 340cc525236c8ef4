#!/usr/bin/env bash
# The main job, from a fresh clone: installs what is missing, builds the CartPole actor/learner example, and
# runs it (1 learner and 2 envpool-style actor processes on one shmreplay buffer, 25 s by default).
#
#   tools/demo.sh                     the default run
#   tools/demo.sh --seconds 60 --workers 3 --keep     any cartpole_run option (see --help)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target cartpole_run cartpole_actor cartpole_learner shmreplay_cli
exec build/examples/cartpole_run "$@"
