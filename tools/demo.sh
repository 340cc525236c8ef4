#!/usr/bin/env bash
# The main job, from a fresh clone: installs what is missing, pip installs the package into the project's .venv,
# and runs the envpool example: 2 envpool actor processes (CartPole-v1 in async mode) and a PyTorch learner on
# one shmreplay buffer, 180 s by default, then a summary with every process's figures.
#
#   tools/demo.sh                                  the envpool run (options go to examples/envpool/run.py)
#   tools/demo.sh --seconds 60 --workers 3         any run.py option (see --help)
#   tools/demo.sh --cpp [cartpole_run options]     the C++ example instead (C++ actors and learner)
#   tools/demo.sh --cpp --python                   the C++ actors with the PyTorch DQN learner
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

args=()
cpp=0
python=0
for arg in "$@"; do
  case "$arg" in
    --cpp) cpp=1 ;;
    --python) python=1 ;;
    *) args+=("$arg") ;;
  esac
done

tools/setup.sh --no-numpy1
if ((cpp)); then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j "$(nproc)" --target cartpole_run cartpole_actor cartpole_learner shmreplay_cli
  if ((python)); then
    echo "shmreplay demo: pip builds this clone's package and installs it into .venv (minutes the first time)" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps .
    exec build/examples/cartpole_run --learner "$PWD/.venv/bin/python $PWD/examples/python/torch_learner.py" \
      "${args[@]}"
  fi
  exec build/examples/cartpole_run "${args[@]}"
fi
# the package as a user has it: pip installs this clone into .venv (recompiling only what changed)
echo "shmreplay demo: pip builds this clone's package and installs it into .venv (the first time it compiles the" \
  "library: a few minutes on 2 cores; later, only what changed)" >&2
start=$SECONDS
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps .
echo "shmreplay demo: installed in $((SECONDS - start)) s; starting the envpool job (examples/envpool/run.py)" >&2
exec .venv/bin/python examples/envpool/run.py --seconds 180 "${args[@]}"
