#!/usr/bin/env bash
# Runs a command on this machine as a user without a compiler or C++ development packages would have it: in a private
# mount namespace (unshare --mount, as root) that hides
#   - every compiler driver, preprocessor, assembler and linker in /usr/bin and /usr/local/bin (gcc, g++, cc, c++,
#     cpp, clang*, ld*, as and their target-prefixed names): /dev/null is bound over the program each name leads
#     to, so that none is found on PATH or runs;
#   - the header and compiler folders /usr/include, /usr/local/include, /usr/lib/gcc, /usr/lib/llvm-*: an empty
#     read-only tmpfs over each;
#   - what only a -dev package installs in the library folders (/usr/lib, /usr/local/lib, /usr/lib/*-linux-gnu):
#     each lib*.so that is a link or a linker script (the runtime libraries are lib*.so.N and stay), each static
#     library (*.a) and start file (*.o): an overlay of the folder whose upper layer holds a whiteout for each, so
#     that the entry is gone while the library it links to stays;
#   - each file given with --hide: /dev/null over it (the test hides the system's copies of the libraries that
#     auditwheel copied into the wheel, so that only the wheel's copies can be loaded).
# The mounts are seen by COMMAND and its children only; nothing outside the namespace changes.
#
#   tests/packaging/without_toolchain.sh [--hide FILE]... -- COMMAND [ARG...]
#
# Exit status: COMMAND's; 77 (with the reason on stderr) where the namespace cannot be had: not root, no unshare, or
# a container that refuses it; 2 for a usage error.
set -euo pipefail
usage="usage: without_toolchain.sh [--hide FILE]... -- COMMAND [ARG...]"

if [[ ${1:-} != --in-namespace ]]; then
  reason=""
  if ((EUID != 0)); then
    reason="hiding the compilers needs root"
  elif ! command -v unshare >/dev/null; then
    reason="unshare (util-linux) is not installed"
  elif ! err=$(unshare --mount true 2>&1); then
    reason="unshare --mount failed: ${err:-no message}"
  fi
  if [[ -n $reason ]]; then
    echo "without_toolchain.sh: $reason" >&2
    exit 77
  fi
  # The overlays' upper layers live in a tmpfs that the namespace mounts over this folder: it goes with the namespace.
  scratch=$(mktemp -d)
  status=0
  unshare --mount --propagation private bash "${BASH_SOURCE[0]}" --in-namespace "$scratch" "$@" || status=$?
  rmdir "$scratch"
  exit "$status"
fi
scratch=$2
shift 2

extra=()
while (($#)) && [[ $1 != -- ]]; do
  case "$1" in
    --hide) extra+=("${2:?--hide needs a file}"); shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
(($# >= 2)) || { echo "$usage" >&2; exit 2; }
shift

shopt -s nullglob
tools=()
for bin in /usr/bin /usr/local/bin; do
  for f in "$bin"/{gcc,g++,cc,c++,cpp,gcc-[0-9]*,g++-[0-9]*,cpp-[0-9]*,clang*,ld,ld.bfd,ld.gold,as} \
           "$bin"/*-linux-gnu{-gcc,-gcc-[0-9]*,-g++,-g++-[0-9]*,-cpp,-cpp-[0-9]*,-ld,-ld.bfd,-ld.gold,-as}; do
    target=$(realpath -e "$f" 2>/dev/null) || continue
    [[ $target != *.so* ]] && tools+=("$target")  # never a library (Debian's /usr/bin/ld.so is the loader)
  done
done
mapfile -t tools < <(printf '%s\n' ${tools[@]+"${tools[@]}"} | sort -u)
folders=()
for d in /usr/include /usr/local/include /usr/lib/gcc /usr/lib/llvm-*; do
  [[ -d $d ]] && folders+=("$d")
done

mount -t tmpfs -o size=1m tmpfs "$scratch"
hidden_dev=0
layer=0
for libdir in /usr/lib /usr/local/lib /usr/lib/*-linux-gnu; do  # a folder before the folders inside it
  dev=()
  for f in "$libdir"/*.so; do
    # a link (to the runtime library lib*.so.N, which stays) or a linker script (libc.so, libm.so: read by ld only)
    [[ -L $f || $(head -c 4 "$f") != $'\x7fELF' ]] && dev+=("${f##*/}")
  done
  for f in "$libdir"/*.a "$libdir"/*.o; do dev+=("${f##*/}"); done
  ((${#dev[@]})) || continue
  layer=$((layer + 1))
  mkdir "$scratch/upper$layer" "$scratch/work$layer"
  for name in "${dev[@]}"; do mknod "$scratch/upper$layer/$name" c 0 0; done  # overlayfs' whiteout
  mount -t overlay overlay -o "lowerdir=$libdir,upperdir=$scratch/upper$layer,workdir=$scratch/work$layer" "$libdir"
  hidden_dev=$((hidden_dev + ${#dev[@]}))
done

for f in ${tools[@]+"${tools[@]}"}; do mount --bind /dev/null "$f"; done
for d in ${folders[@]+"${folders[@]}"}; do mount -t tmpfs -o ro,size=4k tmpfs "$d"; done
for f in ${extra[@]+"${extra[@]}"}; do mount --bind /dev/null "$(realpath -e "$f")"; done
echo "without_toolchain.sh: hidden ${#tools[@]} compilers and linkers, ${#folders[@]} folders (${folders[*]})," \
     "$hidden_dev development files in $layer library folders (.so links and scripts, .a, .o) and ${#extra[@]} more" \
     "files" >&2
exec "$@"
