#!/usr/bin/env bash
# Makes the fuzz targets' seed corpora with the project's own tools: the seed program (tests/fuzz/make_seeds.cpp,
# buffers of several schemas and fill states, copied as segment files and saved as checkpoints) and the CLI
# (a segment with episode fields made by `shmreplay create`, its `save`, and a `load` + `save` round trip).
#
#   tools/fuzz/make_corpus.sh SEEDS_PROGRAM SHMREPLAY_CLI OUT_DIR
#
# OUT_DIR/schema, OUT_DIR/segment and OUT_DIR/checkpoint feed fuzz_schema, fuzz_segment and fuzz_checkpoint.
set -euo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: $0 SEEDS_PROGRAM SHMREPLAY_CLI OUT_DIR" >&2
  exit 2
fi
seeds=$1
cli=$2
out=$3
rm -rf "$out"
mkdir -p "$out"
"$seeds" "$out"

dir=$(mktemp -d /dev/shm/shmreplay-corpus-XXXXXX)
trap 'rm -rf "$dir"' EXIT
export SHMREPLAY_SHM_DIR=$dir
"$cli" create cli-made --envs 2 --capacity 4 --schema 'obs:f32[2] reward:f32 done:bool' --done done --reward reward \
  --episode-queue 3 >/dev/null
cp "$dir/cli-made" "$out/segment/cli-made"
"$cli" save cli-made "$out/checkpoint/cli-made.ckpt" >/dev/null
"$cli" load "$out/checkpoint/cartpole-17.ckpt" reloaded >/dev/null
cp "$dir/reloaded" "$out/segment/reloaded"
"$cli" save reloaded "$out/checkpoint/reloaded.ckpt" >/dev/null
echo "$0: added 2 segments and 2 checkpoints made by the CLI"
