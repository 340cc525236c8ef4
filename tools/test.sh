#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what is missing (tools/setup.sh), builds, and runs every test:
# 1. pip builds the Python package's wheel from this clone (scikit-build-core, the project's CMake) and installs it
#    into .venv (NumPy 2, PyTorch 2, JAX) and .venv-numpy1 (NumPy 1.24);
# 2. an optimised build and its tests: the C++ tests, find_package(shmreplay) from an install tree, the Python
#    suite against the package pip installed (in both environments), and a fresh virtual environment that pip
#    installs the clone's wheel into (the one from step 1) and runs processes and the CLI from; and the API
#    reference built with no warnings (api_reference: tools/docs.sh --check, Doxygen and Sphinx);
# 3. everything again under AddressSanitizer + UndefinedBehaviorSanitizer (the Python suite against the
#    sanitized module in the build tree, with .venv's interpreter), then a short run of each fuzz target.
#
#   tools/test.sh                  everything (this is what CI runs)
#   tools/test.sh --no-sanitize    skip the sanitizer build and the fuzzers, for a quicker local loop
#   tools/test.sh --tsan           only a ThreadSanitizer build (build-tsan) and the tests that run threads (ctest label
#                                  "threads"), the seqlock's by-design payload races suppressed by name (tests/tsan.supp);
#                                  not part of the default run: about 10 minutes on 2 cores, most of it the build
#                                  (docs/design/testing.md, "Build, test and CI")
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

sanitize=1
tsan=0
for arg in "$@"; do
  case "$arg" in
    --no-sanitize) sanitize=0 ;;
    --tsan) tsan=1 ;;
    *) echo "usage: tools/test.sh [--no-sanitize | --tsan]" >&2; exit 2 ;;
  esac
done

tools/setup.sh
echo "== setup done after ${SECONDS} s" >&2
jobs=$(nproc)
venv=$PWD/.venv
# ccache (tools/setup.sh installs it): every build below (the wheel's, release, ASan) compiles through it, and a
# clone in another folder hits the same cache (CCACHE_BASEDIR makes the paths it hashes relative to the clone).
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=$PWD
  ccache --max-size=5G >/dev/null
fi

run_suite() { # build-dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 300
}

if ((tsan)); then
  echo "== ThreadSanitizer build and the threaded tests (at ${SECONDS} s)" >&2
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHMREPLAY_SANITIZE_THREAD=ON -DSHMREPLAY_BUILD_PYTHON=OFF \
    -DSHMREPLAY_BUILD_TOOLS=OFF -DSHMREPLAY_BUILD_BENCH=OFF -DSHMREPLAY_BUILD_EXAMPLES=OFF -DSHMREPLAY_INSTALL=OFF >/dev/null
  cmake --build build-tsan -j "$jobs"
  ctest --test-dir build-tsan --output-on-failure -j "$jobs" --timeout 900 -L threads
  echo "== the threaded tests passed under ThreadSanitizer (at ${SECONDS} s)" >&2
  exit 0
fi

echo "== Python package: pip builds the wheel from this clone and installs it into .venv and .venv-numpy1 (at ${SECONDS} s)" >&2
# build/wheelhouse; as root, with the Boost headers hidden (the package declares none: tools/build_wheel.sh)
tools/build_wheel.sh --python "$venv/bin/python"
wheels=(build/wheelhouse/shmreplay-*.whl)
for env in .venv .venv-numpy1; do
  "$env/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "${wheels[0]}"
done

echo "== release build and tests (at ${SECONDS} s)" >&2
# test_pip_install installs this wheel into its fresh virtual environment rather than building the clone again.
SHMREPLAY_PIP_WHEEL="$PWD/${wheels[0]}"
export SHMREPLAY_PIP_WHEEL
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHMREPLAY_BUILD_PYTHON=OFF \
  -DSHMREPLAY_TEST_PYTHON="$venv/bin/python" -DSHMREPLAY_TEST_PYTHON_NUMPY1="$PWD/.venv-numpy1/bin/python"

if ((sanitize)); then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and tests (at ${SECONDS} s)" >&2
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DSHMREPLAY_SANITIZE=ON -DPython_EXECUTABLE="$venv/bin/python"
  echo "== fuzzers: a short run of each libFuzzer target (clang, ASan+UBSan; longer: tools/fuzz/run.sh --seconds S) (at ${SECONDS} s)" >&2
  tools/fuzz/run.sh --runs 5000
fi
echo "== all tests passed (at ${SECONDS} s)" >&2
