#!/usr/bin/env bash
# The main job, from a fresh clone: installs what is missing, builds the CartPole actor/learner example, and
# runs it (1 learner and 2 envpool-style actor processes on one shmreplay buffer, 25 s by default).
#
#   tools/demo.sh                     the default run (the C++ learner)
#   tools/demo.sh --python            the PyTorch learner (examples/python/torch_learner.py) in its place
#   tools/demo.sh --seconds 60 --workers 3 --keep     any cartpole_run option (see --help)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

args=()
python=0
for arg in "$@"; do
  if [[ $arg == --python ]]; then python=1; else args+=("$arg"); fi
done

tools/setup.sh --no-numpy1
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target cartpole_run cartpole_actor cartpole_learner shmreplay_cli
if ((python)); then
  # the package as a user has it: pip installs this clone into the project's .venv (recompiling only what changed)
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps .
  exec build/examples/cartpole_run --learner "$PWD/.venv/bin/python $PWD/examples/python/torch_learner.py" "${args[@]}"
fi
exec build/examples/cartpole_run "${args[@]}"
