#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what is missing (tools/setup.sh), builds, and runs every test:
# 1. tools/build_wheel.sh builds the Python package's wheel from this clone (pip: scikit-build-core, the project's
#    CMake; then auditwheel makes it self-contained) and it is installed into .venv (NumPy 2, PyTorch 2, JAX) and
#    .venv-numpy1 (NumPy 1.24);
# 2. an optimised build and its tests: the C++ tests, the benchmarks' smoke runs, find_package(shmreplay) from an
#    install tree, the Python suite against the package pip installed (in both environments), and a fresh virtual
#    environment that pip installs the clone's wheel into (the one from step 1) and runs processes and the CLI from,
#    and another where the compilers and -dev files are hidden (test_wheel_without_compiler);
#    and the API reference built with no warnings (api_reference: tools/docs.sh --check, Doxygen and Sphinx);
# 3. the library, the CLI, the examples, the C++ tests and the Python module again under AddressSanitizer +
#    UndefinedBehaviorSanitizer (the Python suite against the sanitized module in the build tree, with .venv's
#    interpreter; what runs in one pass only: docs/design/testing.md, "What runs where"), then a short run of each
#    fuzz target.
# Each stage prints "== STAGE (at N s)" as it starts, and a table of every stage's seconds at the end (also when a
# stage fails).
#
#   tools/test.sh                  everything (this is what CI runs)
#   tools/test.sh --no-sanitize    skip the sanitizer build and the fuzzers, for a quicker local loop
#   tools/test.sh --quick [COMPONENT...]
#                                  the inner loop: no setup and no sanitizers; rebuilds in build/ only what the
#                                  components' tests need (target quick_COMPONENT; the wheel too, into .venv, when
#                                  one runs the installed package) and runs those tests (ctest label COMPONENT). A
#                                  component is a folder of tests/ or a test of one file without its test_ prefix
#                                  (cli, sampler, checkpoint, writer, python, docs, bench, ...). With none: those of
#                                  the test files changed against git's HEAD. --quick --list prints them all
#   tools/test.sh --tsan           only a ThreadSanitizer build (build-tsan) and the tests that run threads (ctest label
#                                  "threads"), the seqlock's by-design payload races suppressed by name (tests/tsan.supp);
#                                  not part of the default run: about 10 minutes on 2 cores, most of it the build
#                                  (docs/design/testing.md, "Build, test and CI")
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage="usage: tools/test.sh [--no-sanitize | --tsan | --quick [--list] [COMPONENT...]]"
sanitize=1
tsan=0
quick=0
list=0
components=()
for arg in "$@"; do
  case "$arg" in
    --no-sanitize) sanitize=0 ;;
    --tsan) tsan=1 ;;
    --quick) quick=1 ;;
    --list) list=1 ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "$usage" >&2; exit 2 ;;
    *) components+=("$arg") ;;
  esac
done
if ((!quick && (list || ${#components[@]}))); then
  echo "$usage (components and --list go with --quick)" >&2
  exit 2
fi

# Stages: stage NAME closes the running stage and opens NAME; the table of their seconds prints on exit.
stage_names=()
stage_seconds=()
stage_now=""
stage_start=0
stage() { # [--quiet] NAME (--quiet: the stage prints its own "== ..." line)
  local quiet=0
  if [[ $1 == --quiet ]]; then quiet=1; shift; fi
  if [[ -n $stage_now ]]; then
    stage_names+=("$stage_now")
    stage_seconds+=($((SECONDS - stage_start)))
  fi
  stage_now=$1
  stage_start=$SECONDS
  [[ -z $1 ]] || ((quiet)) || echo "== $1 (at ${SECONDS} s)" >&2
}
stage_table() {
  local status=$? failed=$stage_now
  stage ""
  ((${#stage_names[@]})) || return "$status"
  {
    echo "== stage times (s)"
    for i in "${!stage_names[@]}"; do
      printf '%6d  %s%s\n' "${stage_seconds[$i]}" "${stage_names[$i]}" \
        "$([[ $status != 0 && ${stage_names[$i]} == "$failed" ]] && echo '  (failed)')"
    done
    printf '%6d  total\n' "$SECONDS"
  } >&2
  return "$status"
}
trap stage_table EXIT

jobs=$(nproc)
venv=$PWD/.venv
# ccache (tools/setup.sh installs it): every build below (the wheel's, release, ASan) compiles through it, and a
# clone in another folder hits the same cache: CCACHE_BASEDIR makes the paths it hashes relative to the clone, and
# CCACHE_NOHASHDIR leaves the compiling directory out of the hash of a build with debug info (-g: RelWithDebInfo,
# Debug), which ccache otherwise adds, so that a fresh clone would miss every object of those builds. (The cost: an
# object's debug info may name the folder of the clone that compiled it first.)
use_ccache() {
  if command -v ccache >/dev/null; then
    export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
    ccache --max-size=5G >/dev/null
  fi
}
# The optimised build's configuration (build/): the full run's and --quick's.
release_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHMREPLAY_BUILD_PYTHON=OFF
  -DSHMREPLAY_TEST_PYTHON="$venv/bin/python" -DSHMREPLAY_TEST_PYTHON_NUMPY1="$PWD/.venv-numpy1/bin/python")

run_suite() { # build-dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 300
}

# --quick: the components named, or those of the files changed against HEAD that name one (a test folder or file,
# the CLI, the benchmarks, the examples, the Python package, the docs).
changed_components() {
  local file
  git status --porcelain --untracked-files=all | cut -c4- | sed 's/.* -> //' | while read -r file; do
    case $file in
      tests/python/* | lib/python/*) echo python ;;
      tests/docs_cpp.cmake | README.md | docs/*) echo docs ;;
      tests/packaging/*) echo packaging ;;
      tests/*/*) file=${file#tests/}; echo "${file%%/*}" ;;
      tests/test_*.cpp) file=${file#tests/test_}; echo "${file%.cpp}" ;;
      tools/cli/*) echo cli ;;
      tools/bench/*) echo bench ;;
      examples/*) echo examples ;;
      tools/check_includes.py | tools/check_sizes.py) echo structure ;;
    esac
  done | sort -u
}
quick_loop() {
  use_ccache
  if [[ ! -f build/CMakeCache.txt ]]; then
    stage "configure build/"
    cmake -S . -B build "${release_args[@]}" >/dev/null
  fi
  local known
  known=$(ctest --test-dir build --print-labels | sed -n 's/^  //p' | grep -vx -e threads -e wheel)
  if ((list)); then
    echo "$known"
    return 0
  fi
  if ((${#components[@]} == 0)); then
    mapfile -t components < <(changed_components | grep -Fx -f <(echo "$known") || true)
    if ((${#components[@]} == 0)); then
      echo "tools/test.sh --quick: no changed file names a component; name one or more of:" $known >&2
      return 2
    fi
  fi
  local c targets=()
  for c in "${components[@]}"; do
    grep -qFx "$c" <<<"$known" || { echo "tools/test.sh --quick: no component '$c'; the components:" $known >&2; return 2; }
    targets+=("quick_$c")
  done
  local labels
  labels="^($(IFS='|'; echo "${components[*]}"))\$"
  stage "build: ${targets[*]}"
  cmake --build build -j "$jobs" --target "${targets[@]}"
  if ctest --test-dir build -N -L "$labels" -L '^wheel$' 2>/dev/null | grep -q '^ *Test *#'; then
    stage "wheel: built and installed into .venv and .venv-numpy1 (the Python tests run the installed package)"
    tools/build_wheel.sh --python "$venv/bin/python"  # build/wheelhouse, with the Boost headers hidden as root
    for env in .venv .venv-numpy1; do
      [[ ! -x $env/bin/python ]] ||
        "$env/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps build/wheelhouse/shmreplay-*.whl
    done
    SHMREPLAY_PIP_WHEEL=$(echo "$PWD"/build/wheelhouse/shmreplay-*.whl)
    export SHMREPLAY_PIP_WHEEL
  fi
  stage "tests: ${components[*]}"
  ctest --test-dir build --output-on-failure -j "$jobs" --timeout 300 -L "$labels"
  stage ""
}
if ((quick)); then
  quick_loop
  exit
fi

stage "setup (tools/setup.sh)"
tools/setup.sh
use_ccache

if ((tsan)); then
  stage "ThreadSanitizer build and the threaded tests"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHMREPLAY_SANITIZE_THREAD=ON -DSHMREPLAY_BUILD_PYTHON=OFF \
    -DSHMREPLAY_BUILD_TOOLS=OFF -DSHMREPLAY_BUILD_BENCH=OFF -DSHMREPLAY_BUILD_EXAMPLES=OFF -DSHMREPLAY_INSTALL=OFF >/dev/null
  cmake --build build-tsan -j "$jobs"
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" --timeout 900 -L threads
  stage ""
  echo "== the threaded tests passed under ThreadSanitizer (at ${SECONDS} s)" >&2
  exit 0
fi

stage --quiet "Python package (the wheel)"
echo "== Python package: pip builds the wheel from this clone and installs it into .venv and .venv-numpy1 (at ${SECONDS} s)" >&2
# build/wheelhouse; as root, with the Boost headers hidden (the package declares none: tools/build_wheel.sh)
tools/build_wheel.sh --python "$venv/bin/python"
wheels=(build/wheelhouse/shmreplay-*.whl)
for env in .venv .venv-numpy1; do
  "$env/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "${wheels[0]}"
done

stage "release build and tests"
# test_pip_install installs this wheel into its fresh virtual environment rather than building the clone again.
SHMREPLAY_PIP_WHEEL="$PWD/${wheels[0]}"
export SHMREPLAY_PIP_WHEEL
run_suite build "${release_args[@]}"

if ((sanitize)); then
  stage "AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
  # Without the benchmarks: their smoke runs are the optimised pass's (docs/design/testing.md, "What runs where").
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DSHMREPLAY_SANITIZE=ON -DSHMREPLAY_BUILD_BENCH=OFF \
    -DPython_EXECUTABLE="$venv/bin/python"
  stage "fuzzers: a short run of each libFuzzer target (clang, ASan+UBSan; longer: tools/fuzz/run.sh --seconds S)"
  tools/fuzz/run.sh --runs 5000
fi
stage ""
echo "== all tests passed (at ${SECONDS} s)" >&2
