#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what is missing, builds, and runs every test twice,
# once in an optimised build (which also checks that find_package(shmreplay) works from an install tree) and
# once under AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   tools/test.sh                  everything (this is what CI runs)
#   tools/test.sh --no-sanitize    skip the sanitizer build, for a quicker local loop
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

sanitize=1
for arg in "$@"; do
  case "$arg" in
    --no-sanitize) sanitize=0 ;;
    *) echo "usage: tools/test.sh [--no-sanitize]" >&2; exit 2 ;;
  esac
done

tools/setup.sh
jobs=$(nproc)

run_suite() { # build-dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 300
}

echo "== release build and tests" >&2
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo

if ((sanitize)); then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and tests" >&2
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DSHMREPLAY_SANITIZE=ON
fi
echo "== all tests passed" >&2
