#!/usr/bin/env bash
# Redraws the benchmark figures that docs/benchmarks.md shows (docs/img/bench_*.png) from the tables in
# docs/benchmarks/*.md, with tools/bench/plot_tables.py (matplotlib; .venv has it, envpool needs it).
#
#   tools/bench/plot_docs.sh [PYTHON]          default: .venv/bin/python
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py=${1:-.venv/bin/python}
plot=("$py" tools/bench/plot_tables.py)

"${plot[@]}" docs/benchmarks/core.md --after "## The current table" --columns "ours/memcpy" \
  --reference 100 "memcpy" --title "shmreplay_bench: shmreplay as a share of memcpy of the same bytes" \
  --xlabel "ours / memcpy, %" --size 900x420 --out docs/img/bench_core_memcpy.png
"${plot[@]}" docs/benchmarks/checkpoints.md --after "### Incremental against whole" \
  --columns "time / whole" "bytes / whole" --reference 1 "whole save" \
  --title "Checkpoints of a 1 GB buffer: a link against a whole save (2026-11-28)" \
  --xlabel "fraction of a whole save" --size 900x420 --out docs/img/bench_checkpoints.png
"${plot[@]}" docs/benchmarks/learners.md --after "## The current run" --columns "2 / 1" "memcpy 2 / 1" \
  --reference 1.7 "issue 34's 1.7x" --reference 2 "2x" \
  --title "2 learner processes against 1 on one buffer: rows/s ratio (2026-11-28, 2 cores)" \
  --xlabel "rows/s of 2 processes over 1" --out docs/img/bench_learners.png
# Issue 36's scaling run (docs/benchmarks/scaling.md): log-x lines against the stored steps and the writers.
"${plot[@]}" docs/benchmarks/scaling.md --after "### Size: small steps" --x "stored steps" --logx \
  --columns "transitions ours/gather" "seq 64 ours/gather" "push ours/limit" --reference 100 "the limit" \
  --ylabel "% of the machine's limit" --title "Small steps against the stored steps: a share of the limit (moderate run)" \
  --out docs/img/bench_scaling_size.png
"${plot[@]}" docs/benchmarks/scaling.md --after "### Size: small steps" --x "stored steps" --logx --log \
  --columns "transitions M rows/s" "transitions gather M rows/s" "seq 64 M rows/s" "seq 64 gather M rows/s" \
  --ylabel "M rows per second" --title "Small steps: ours and the limit's own curve (moderate run)" \
  --out docs/img/bench_scaling_size_rates.png
"${plot[@]}" docs/benchmarks/scaling.md --after "Latency of the calls (small steps)" --x "stored steps" --logx --log \
  --columns "transitions p50 µs" "transitions p99 µs" "seq 64 p50 µs" "seq 64 p99 µs" --ylabel "µs per sample call" \
  --title "Small steps: latency of a sample call against the stored steps (moderate run)" \
  --out docs/img/bench_scaling_latency.png
"${plot[@]}" docs/benchmarks/scaling.md --after "### Writers at full speed" --x writers --logx --log \
  --columns "push M steps/s" "plain push M steps/s" "push per writer-core M steps/s" "learner M rows/s" \
  --ylabel "M steps (rows) per second" --title "Writer processes at full speed beside one learner (moderate run, 2 cores)" \
  --out docs/img/bench_scaling_writers.png
ls -l docs/img/bench_*.png
