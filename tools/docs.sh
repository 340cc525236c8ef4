#!/usr/bin/env bash
# The API reference: Doxygen over include/shmreplay/*.hpp (docs/api/Doxyfile) and Sphinx's autodoc over the Python
# package shmreplay (docs/api/conf.py), as HTML under build/docs/ (docs/api.md says how to read it). The
# api_reference test (tests/CMakeLists.txt) runs it with --check.
#
#   tools/docs.sh [--out DIR] [--check] [--cpp-only | --python-only]
#
#   --out DIR   write DIR/cpp/index.html, DIR/python/index.html and DIR/index.html (default build/docs)
#   --check     fail (exit 1) on any warning: an undocumented public name, a broken reference, a markup error
#               (Doxygen's WARN_AS_ERROR=FAIL_ON_WARNINGS, sphinx-build -W --keep-going -n); without it the
#               warnings are printed and the reference is built anyway
#
# Python: SHMREPLAY_DOCS_PYTHON, else .venv/bin/python, else python3; it must import sphinx (the `docs` extra,
# which tools/setup.sh installs into .venv) and shmreplay (installed, or a build's module through PYTHONPATH, e.g.
# PYTHONPATH=build/python). Exit 77 (the test's skip code) when doxygen or sphinx is missing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

out=build/docs
check=0
cpp=1
python=1
while (($#)); do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift ;;
    --check) check=1 ;;
    --cpp-only) python=0 ;;
    --python-only) cpp=0 ;;
    *) echo "usage: tools/docs.sh [--out DIR] [--check] [--cpp-only | --python-only]" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

py=${SHMREPLAY_DOCS_PYTHON:-}
if [[ -z $py ]]; then
  if [[ -x .venv/bin/python ]]; then py=.venv/bin/python; else py=python3; fi
fi
if ((cpp)) && ! command -v doxygen >/dev/null; then
  echo "tools/docs.sh: skipped: doxygen is not installed (Debian: apt-get install doxygen; tools/setup.sh installs it)" >&2
  exit 77
fi
if ((python)) && ! "$py" -c 'import sphinx' >/dev/null 2>&1; then
  echo "tools/docs.sh: skipped: $py cannot import sphinx (install the docs extra's Sphinx there, pyproject.toml;" \
       "tools/setup.sh does so for .venv; SHMREPLAY_DOCS_PYTHON names another interpreter)" >&2
  exit 77
fi

failed=0
if ((cpp)); then
  start=$SECONDS
  rm -rf "$out/cpp"
  # Doxygen reads the Doxyfile, then these lines, from standard input: a later setting replaces an earlier one.
  warn_as_error=NO
  ((check)) && warn_as_error=FAIL_ON_WARNINGS
  log="$out/doxygen-warnings.log"
  if ! { cat docs/api/Doxyfile; printf 'OUTPUT_DIRECTORY = %s\nWARN_AS_ERROR = %s\nWARN_LOGFILE = %s\n' \
           "$out" "$warn_as_error" "$log"; } | doxygen - >/dev/null; then
    failed=1
  fi
  # The paths relative to the repository, as a compiler prints them.
  sed -i "s|$root/||" "$log"
  cat "$log" >&2
  echo "tools/docs.sh: Doxygen: $(grep -c . "$log" || true) warning(s) in $((SECONDS - start)) s; $out/cpp/index.html" >&2
  [[ -s $log ]] && ((check)) && failed=1
fi

if ((python)); then
  start=$SECONDS
  if ! "$py" -c 'import shmreplay' >/dev/null 2>&1; then
    echo "tools/docs.sh: $py cannot import shmreplay: install the package (pip install .) or put a build's module" \
         "on PYTHONPATH (PYTHONPATH=build/python)" >&2
    exit 1
  fi
  # -E -a: read and write everything each time (autodoc's input, the package, is not tracked by Sphinx's cache)
  sphinx_args=(-b html -q -n --keep-going -E -a -d "$out/.doctrees")
  ((check)) && sphinx_args+=(-W)
  log="$out/sphinx-warnings.log"
  if ! PYTHONDONTWRITEBYTECODE=1 "$py" -m sphinx "${sphinx_args[@]}" docs/api "$out/python" 2>"$log"; then
    failed=1
  fi
  cat "$log" >&2
  echo "tools/docs.sh: Sphinx: $(grep -c -E 'WARNING|ERROR' "$log" || true) warning(s) in $((SECONDS - start)) s;" \
       "$out/python/index.html (shmreplay from $("$py" -c 'import os, shmreplay; print(os.path.dirname(shmreplay.__file__))'))" >&2
fi

if ((cpp && python)); then
  cat > "$out/index.html" <<'HTML'
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>shmreplay: API reference</title></head>
<body><h1>shmreplay: API reference</h1>
<ul><li><a href="cpp/index.html">C++</a> (Doxygen, from the headers' <code>///</code> comments)</li>
<li><a href="python/index.html">Python</a> (Sphinx, from the package's docstrings)</li></ul>
<p>Built by <code>tools/docs.sh</code>; docs/api.md says how.</p></body></html>
HTML
  echo "tools/docs.sh: the reference's index: $out/index.html" >&2
fi
if ((failed)); then
  echo "tools/docs.sh: the reference has warnings (listed above); every public name needs a doc comment" >&2
  exit 1
fi
