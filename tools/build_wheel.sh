#!/usr/bin/env bash
# Builds the Python package's wheel from this clone into build/wheelhouse (pip wheel: scikit-build-core and the
# project's CMake, pyproject.toml), and proves on the way that the build needs nothing it does not declare: run as
# root where `unshare --mount` works, pip runs in a private mount namespace in which an empty directory is bound
# over each Boost include folder (/usr/include/boost, /usr/local/include/boost), so that an #include of a Boost
# header anywhere in the package's sources fails the build, as it would on a clean Debian 12 following the README
# (README, pyproject.toml and lib/python/CMakeLists.txt declare no Boost). Elsewhere (not root, no unshare, a
# container that refuses it) it builds normally and prints one line saying the proof was skipped and why.
#
#   tools/build_wheel.sh [--python PY]     PY: the interpreter whose pip builds (default .venv/bin/python)
#
# Exit status: pip's. The wheel is build/wheelhouse/shmreplay-*.whl (the folder is emptied first).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python=.venv/bin/python
while (($#)); do
  case "$1" in
    --python) python=${2:?--python needs an interpreter}; shift ;;
    *) echo "usage: tools/build_wheel.sh [--python PY]" >&2; exit 2 ;;
  esac
  shift
done

rm -rf build/wheelhouse
pip_wheel=("$python" -m pip wheel -q --disable-pip-version-check --no-deps -w build/wheelhouse .)

hidden=()
for dir in /usr/include/boost /usr/local/include/boost; do
  [[ -d $dir ]] && hidden+=("$dir")
done

why=""
if ((${#hidden[@]} == 0)); then
  why="no Boost headers are installed here, so there is nothing to hide (this build proves it already)"
elif ((EUID != 0)); then
  why="binding over ${hidden[*]} needs root"
elif ! command -v unshare >/dev/null; then
  why="unshare (util-linux) is not installed"
elif ! err=$(unshare --mount true 2>&1); then
  why="unshare --mount failed: ${err:-no message}"
fi
if [[ -n $why ]]; then
  echo "tools/build_wheel.sh: the build with the Boost headers hidden was skipped: $why; building the wheel normally" >&2
  exec "${pip_wheel[@]}"
fi

empty=$(mktemp -d)
trap 'rmdir "$empty"' EXIT
echo "tools/build_wheel.sh: building the wheel with ${hidden[*]} hidden (an empty folder bound over each, in a" \
     "private mount namespace): a Boost include fails the build" >&2
# unshare --mount makes the namespace's mounts private: the binds are seen by pip and its compilers only.
unshare --mount --propagation private bash -c '
  set -euo pipefail
  empty=$1; shift
  while [[ $1 != -- ]]; do mount --bind "$empty" "$1"; shift; done
  shift
  exec "$@"' build_wheel "$empty" "${hidden[@]}" -- "${pip_wheel[@]}"
