#!/usr/bin/env bash
# Installs the Debian 12 packages that shmreplay needs to build and test, and only those that are missing.
# Safe to run again: it does nothing when everything is present. Needs root (or sudo) only to install.
set -euo pipefail

packages=(
  g++ cmake make git pkg-config   # toolchain
  libboost-dev                    # Boost.Interprocess and Boost.Lockfree (header-only)
  libfmt-dev                      # formatting
  libcli11-dev                    # argument parsing for the CLI and tools
  nlohmann-json3-dev              # --json output
  doctest-dev                     # tests
  util-linux                      # unshare/mount, used by the full-/dev/shm test
  pybind11-dev python3-dev         # the Python module
  python3-numpy python3-pytest    # its arrays and its tests
  python3-torch                   # the PyTorch learner example (examples/python/torch_learner.py)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "shmreplay setup: installing ${missing[*]}" >&2
sudo=()
if [[ $(id -u) != 0 ]]; then
  command -v sudo >/dev/null || { echo "shmreplay setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
