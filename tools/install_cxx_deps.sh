#!/usr/bin/env bash
# Installs the C++ libraries that building the Python package needs (fmt, CLI11, nlohmann-json: the CLI's, all
# used header-only) from their sources into PREFIX, for a machine without Debian's packages of them: the manylinux
# images in which cibuildwheel builds the release wheels run it as their before-all (pyproject.toml,
# [tool.cibuildwheel.linux]). The versions are those of Debian 12's packages (libfmt-dev, libcli11-dev,
# nlohmann-json3-dev), which tools/setup.sh installs and the test suite builds with, so the released wheels are built
# against what CI tests. Each comes from its repository at a release tag whose commit is checked against the hash
# written here, so a moved tag cannot change what is built. Needs git, CMake 3.25 or later and a C++ compiler.
#
#   tools/install_cxx_deps.sh [--prefix PREFIX]     PREFIX: default /usr/local (CMake finds packages there)
#
# SHMREPLAY_DEPS_GIT_URL: where the repositories are, with {owner} and {name} in it
# (default https://github.com/{owner}/{name}.git); a mirror can stand in.
set -euo pipefail

prefix=/usr/local
while (($#)); do
  case "$1" in
    --prefix) prefix=${2:?--prefix needs a folder}; shift ;;
    *) echo "usage: tools/install_cxx_deps.sh [--prefix PREFIX]" >&2; exit 2 ;;
  esac
  shift
done
github='https://github.com/{owner}/{name}.git'
url_template=${SHMREPLAY_DEPS_GIT_URL:-$github}

# owner/name  tag  commit  CMake options (what to leave out; each installs its CMake package config)
deps=(
  "fmtlib/fmt 9.1.0 a33701196adfad74917046096bf5a2aa0ab0bb50 -DFMT_TEST=OFF -DFMT_DOC=OFF -DFMT_INSTALL=ON"
  "CLIUtils/CLI11 v2.1.2 70f8072f9dd2292fd0b9f9e5f58e279f60483ed3 -DCLI11_BUILD_TESTS=OFF -DCLI11_BUILD_EXAMPLES=OFF -DCLI11_BUILD_DOCS=OFF -DCLI11_INSTALL=ON"
  "nlohmann/json v3.11.2 bc889afb4c5bf1c0d8ee29ef35eaaf4c8bef8a5d -DJSON_BuildTests=OFF -DJSON_Install=ON"
)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for dep in "${deps[@]}"; do
  read -r repo tag commit options <<<"$dep"
  url=${url_template//\{owner\}/${repo%/*}}
  url=${url//\{name\}/${repo#*/}}
  src=$work/${repo#*/}
  git init -q "$src"
  git -C "$src" fetch -q --depth 1 "$url" "refs/tags/$tag"
  got=$(git -C "$src" rev-parse 'FETCH_HEAD^{commit}')
  if [[ $got != "$commit" ]]; then
    echo "tools/install_cxx_deps.sh: $repo tag $tag at $url is commit $got, expected $commit" >&2
    exit 1
  fi
  git -C "$src" -c advice.detachedHead=false checkout -q "$commit"
  # CMAKE_POLICY_VERSION_MINIMUM: CMake 4 refuses CLI11 2.1.2's cmake_minimum_required(VERSION 3.4) without it.
  # shellcheck disable=SC2086 # the options are words
  cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -Wno-deprecated $options >/dev/null
  cmake --build "$src/build" -j "$(nproc)" >/dev/null
  cmake --install "$src/build" >/dev/null
  echo "tools/install_cxx_deps.sh: $repo $tag ($commit) installed into $prefix" >&2
done
