#!/usr/bin/env python3
"""Checks the house's size rule over the tree: every C++ and Python source file under lib/ include/ tools/ tests/
examples/ is at most 500 lines and every function in it at most 80 (docs/design/source_layout.md, "Sizes"); ctest
runs it through tests/structure/test_sizes.py (label structure).

A function's length is its lines from its name to its closing brace (or its last line, in Python), as lizard
counts them: lizard (PyPI) parses C++ and Python without a compiler or the headers, so this check needs no build.
A doctest TEST_CASE is a function here, as it is to the compiler.

The few exceptions are listed below, each with its one-line argument. An entry that no longer applies (its file
or function gone, or back within the limit) fails the check too, so that the list only shrinks.

    tools/check_sizes.py [ROOT]      exit 0 and a one-line summary, or 1 and one line per violation
"""
from __future__ import annotations

import pathlib
import sys

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80
TOPS = ("lib", "include", "tools", "tests", "examples")
SOURCES = (".cpp", ".hpp", ".h", ".cc", ".py", ".pyi")
SKIP_DIRS = {"__pycache__", "build", "node_modules"}

# Files allowed past MAX_FILE_LINES: path -> why.
FILES: dict[str, str] = {
    "include/shmreplay/internal/layout.hpp":
        "the segment's struct definitions, one file by design: every byte of the segment declared in one place, "
        "with its diagram and static_asserts (docs/design/layout.md)",
    "lib/python/shmreplay/_shmreplay.pyi":
        "the extension module's stub: type checkers find a compiled module's signatures in the one .pyi beside it "
        "(PEP 561), so it cannot be split the way a source file can; it holds signatures only",
}

# Functions allowed past MAX_FUNCTION_LINES: (path, name as lizard gives it) -> why.
FUNCTIONS: dict[tuple[str, str], str] = {
    ("lib/buffer.cpp", "shmreplay::check_create_arguments"):
        "create's argument checks, one after the other in the order CreateOptions declares them, each with its own "
        "message, before anything is made (5 lines over)",
    ("tools/cli/dump.cpp", "shmreplay::cli::run_dump"):
        "dump from its arguments to its last row, read top to bottom: the checks of its fields, envs and step "
        "range, then the chunked listing in its text and --json forms side by side (3 lines over)",
}


def sources(root: pathlib.Path) -> list[pathlib.Path]:
    out = []
    for top in TOPS:
        base = root / top
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            rel = path.relative_to(root)
            if path.suffix in SOURCES and path.is_file() and not SKIP_DIRS.intersection(rel.parts[:-1]) \
                    and not any(part.startswith(".") for part in rel.parts):
                out.append(path)
    return out


def check(root: pathlib.Path) -> tuple[list[str], int, int]:
    """The violations under `root` (one line each), the number of files and of functions checked."""
    try:
        import lizard  # noqa: PLC0415 (imported here: the message below says how to get it)
    except ImportError:
        sys.exit("check_sizes: needs lizard (pip install lizard; tools/setup.sh puts it into .venv)")
    violations: list[str] = []
    seen_files: set[str] = set()
    seen_functions: set[tuple[str, str]] = set()
    files = sources(root)
    num_functions = 0
    for path in files:
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > MAX_FILE_LINES:
            if rel in FILES:
                seen_files.add(rel)
            else:
                violations.append(f"{rel}: {lines} lines, more than {MAX_FILE_LINES}")
        if path.suffix == ".pyi":
            continue  # stubs: signatures only
        analysis = lizard.analyze_file.analyze_source_code(str(path), text)
        for fn in analysis.function_list:
            num_functions += 1
            length = fn.end_line - fn.start_line + 1
            if length <= MAX_FUNCTION_LINES:
                continue
            key = (rel, fn.name)
            if key in FUNCTIONS:
                seen_functions.add(key)
            else:
                violations.append(f"{rel}:{fn.start_line}: function {fn.name} has {length} lines, more than "
                                  f"{MAX_FUNCTION_LINES}")
    for rel in sorted(set(FILES) - seen_files):
        violations.append(f"{rel}: listed in check_sizes.py's FILES but no longer over {MAX_FILE_LINES} lines (or "
                          "gone): take it out of the list")
    for rel, name in sorted(set(FUNCTIONS) - seen_functions):
        violations.append(f"{rel}: function {name} is listed in check_sizes.py's FUNCTIONS but no longer over "
                          f"{MAX_FUNCTION_LINES} lines (or gone): take it out of the list")
    return violations, len(files), num_functions


def main(argv: list[str]) -> int:
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[1]).resolve()
    violations, num_files, num_functions = check(root)
    for v in violations:
        print(v)
    if violations:
        print(f"{len(violations)} violation(s) of the size rule (files at most {MAX_FILE_LINES} lines, functions at "
              f"most {MAX_FUNCTION_LINES}; tools/check_sizes.py)")
        return 1
    print(f"{num_files} files, {num_functions} functions: every one within the size rule "
          f"({len(FILES)} file(s) and {len(FUNCTIONS)} function(s) allowed past it, each with its reason)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
