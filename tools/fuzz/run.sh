#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (AddressSanitizer + UndefinedBehaviorSanitizer, the whole
# library instrumented for coverage) in a build directory of their own, makes the seed corpora with the project's
# tools (tools/fuzz/make_corpus.sh), and runs each target: a short run by default (for CI), or as long as asked.
#
#   tools/fuzz/run.sh [--runs N | --seconds S] [--target NAME]... [--coverage] [--build-dir DIR]
#
#   --runs N       inputs per target (default 10000)
#   --seconds S    run each target for S seconds instead
#   --target NAME  fuzz_schema, fuzz_segment, fuzz_checkpoint or fuzz_packed (repeatable; default: all four)
#   --coverage     then replay each target's corpus through a clang source-coverage build and print the line and
#                  region coverage of lib/ (llvm-profdata, llvm-cov)
#   --build-dir D  default: build-fuzz (and D-cov for --coverage)
#
# Each target's corpus grows in D/fuzz-corpus/NAME across runs; crashing inputs land in D/fuzz-findings/. Inputs
# that once found a bug are kept in tests/fuzz/regressions/NAME and replayed on every run (and by ctest in a
# build with -DSHMREPLAY_BUILD_FUZZERS=ON). Exit code 1 when any target finds a crash, a leak or a timeout.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-fuzz
runs=10000
seconds=
coverage=0
targets=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) runs=$2; seconds=; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --target) targets+=("$2"); shift 2 ;;
    --coverage) coverage=1; shift ;;
    --build-dir) build=$(realpath -m "$2"); shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "$0: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=(fuzz_schema fuzz_segment fuzz_checkpoint fuzz_packed)
jobs=$(nproc)

if ! command -v clang++ >/dev/null; then
  echo "$0: clang++ is needed (Debian: apt-get install clang)" >&2
  exit 2
fi

# Fuzz processes that crashed leave their /dev/shm/shmreplay-fuzz-<pid>-* directories: remove those of dead pids.
for d in /dev/shm/shmreplay-fuzz-*; do
  [[ -d $d ]] || continue
  pid=${d#/dev/shm/shmreplay-fuzz-}
  pid=${pid%%-*}
  [[ $pid =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null && rm -rf "$d"
done

configure() {  # DIR EXTRA_CMAKE_ARGS...
  local dir=$1
  shift
  cmake -S "$root" -B "$dir" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSHMREPLAY_BUILD_FUZZERS=ON -DSHMREPLAY_BUILD_PYTHON=OFF -DSHMREPLAY_BUILD_EXAMPLES=OFF \
    -DSHMREPLAY_BUILD_BENCH=OFF -DSHMREPLAY_INSTALL=OFF "$@" >"$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; exit 1; }
}

mkdir -p "$build"
configure "$build" -DSHMREPLAY_SANITIZE=ON
cmake --build "$build" -j"$jobs" --target "${targets[@]}" shmreplay_fuzz_seeds shmreplay_cli
"$root/tools/fuzz/make_corpus.sh" "$build/tests/fuzz/shmreplay_fuzz_seeds" "$build/tools/shmreplay" "$build/fuzz-seeds"

seeds_of() {
  case $1 in
    fuzz_schema) echo "$build/fuzz-seeds/schema" ;;
    fuzz_segment) echo "$build/fuzz-seeds/segment" ;;
    fuzz_checkpoint) echo "$build/fuzz-seeds/checkpoint" ;;
    fuzz_packed) mkdir -p "$build/fuzz-seeds/packed" && echo "$build/fuzz-seeds/packed" ;;  # from nothing
  esac
}

if [[ -n $seconds ]]; then budget=(-max_total_time="$seconds"); else budget=(-runs="$runs"); fi
mkdir -p "$build/fuzz-findings"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=0
summary=()
for t in "${targets[@]}"; do
  corpus=$build/fuzz-corpus/$t
  mkdir -p "$corpus"
  dirs=("$corpus" "$(seeds_of "$t")")
  [[ -d $root/tests/fuzz/regressions/$t ]] && dirs+=("$root/tests/fuzz/regressions/$t")
  log=$build/fuzz-$t.log
  echo "== $t: ${budget[*]} (log: $log)"
  status=0
  "$build/tests/fuzz/$t" "${budget[@]}" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-findings/$t-" "${dirs[@]}" >"$log" 2>&1 || status=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  execs=$(grep -E '^stat::number_of_executed_units:' "$log" | awk '{print $2}' || true)
  secs=$(grep -E '^Done [0-9]+ runs in' "$log" | awk '{print $5}' || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+) ft: ([0-9]+) corp: ([0-9]+)\/.*/\1 \2 \3/p' <<<"$done_line")
  if [[ $status -ne 0 ]]; then
    failed=1
    # The report itself (error line and the first frames), and the input as base64: a CI log alone reproduces it
    # (base64 -d > crash; build-fuzz/tests/fuzz/TARGET crash).
    grep -E 'runtime error|ERROR|SUMMARY|^ +#[0-9]+ |Test unit written' "$log" | head -40 || true
    artifact=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log" | tail -1)
    if [[ -n $artifact && -f $artifact && $(stat -c %s "$artifact") -le 65536 ]]; then
      echo "the input ($(stat -c %s "$artifact") bytes, base64):"
      base64 -w 120 "$artifact"
    fi
    summary+=("$(printf '%-16s FAILED (exit %d); see %s' "$t" "$status" "$log")")
  else
    read -r c f n <<<"${cov:-? ? ?}"
    summary+=("$(printf '%-16s %9s runs in %4ss   cov %6s   ft %6s   corpus %5s inputs' "$t" "${execs:-?}" \
      "${secs:-?}" "$c" "$f" "$n")")
  fi
done
echo
echo "fuzzing summary (libFuzzer: cov = coverage points, ft = features):"
printf '  %s\n' "${summary[@]}"

if [[ $coverage -eq 1 ]]; then
  cov_build=$build-cov
  mkdir -p "$cov_build"
  configure "$cov_build" -DSHMREPLAY_SANITIZE=OFF "-DCMAKE_CXX_FLAGS=-fprofile-instr-generate -fcoverage-mapping"
  cmake --build "$cov_build" -j"$jobs" --target "${targets[@]}"
  profiles=()
  for t in "${targets[@]}"; do
    dirs=("$build/fuzz-corpus/$t" "$(seeds_of "$t")")
    [[ -d $root/tests/fuzz/regressions/$t ]] && dirs+=("$root/tests/fuzz/regressions/$t")
    LLVM_PROFILE_FILE=$cov_build/$t.profraw "$cov_build/tests/fuzz/$t" -runs=0 "${dirs[@]}" \
      >"$cov_build/$t.log" 2>&1
    llvm-profdata merge -sparse "$cov_build/$t.profraw" -o "$cov_build/$t.profdata"
    profiles+=("$cov_build/$t.profdata")
    echo
    echo "== line coverage of lib/ by $t's corpus:"
    llvm-cov report "$cov_build/tests/fuzz/$t" -instr-profile="$cov_build/$t.profdata" \
      "$root/lib/" 2>/dev/null | sed -n '1,2p;/^TOTAL/p' | sed "s|$root/||"
  done
  # All targets together, per file.
  llvm-profdata merge -sparse "${profiles[@]}" -o "$cov_build/all.profdata"
  objects=()
  for t in "${targets[@]:1}"; do objects+=(-object "$cov_build/tests/fuzz/$t"); done
  echo
  echo "== coverage of lib/ by all targets together:"
  llvm-cov report "$cov_build/tests/fuzz/${targets[0]}" "${objects[@]}" -instr-profile="$cov_build/all.profdata" \
    "$root/lib/" 2>/dev/null | sed "s|$root/||"
fi
exit $failed
