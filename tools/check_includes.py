#!/usr/bin/env python3
"""Checks the include rule of docs/design/source_layout.md over the tree; ctest runs it as `check_includes`.

Every C++ file under include/ and lib/ belongs to one layer, and may include only files of its own layer or of
layers below it (with #include "..." or #include <...>: either form that names one of the project's files counts):

    0 foundation  include/shmreplay/{error,sample_age,schema,wait,version,vocabulary,rate_limit}.hpp and
                  include/shmreplay/internal/ (layout, segment, checkpoint_format: the bytes, not part of the API)
    1 os          lib/detail/os/, lib/detail/*.hpp (leaf helpers: always_inline, copy_bytes)
    2 protocol    lib/detail/protocol/
    3 storage     lib/detail/storage/       (the storage kinds: field_storage.hpp)
    4 sampling    lib/detail/sampling/      } siblings: neither includes the other
    4 segment     lib/detail/segment/       }
    5 roles       the other public headers (buffer, writer, sampler, inspector, checkpoint, ...), lib/*.{cpp,hpp},
                  lib/checkpoint/ and any other folder of lib/ outside lib/detail and lib/python
    6 users       lib/python/, tools/, examples/, tests/ (white-box tests may reach lib/detail)

and three more rules: a public header never includes a private one (lib/...), nor does it or an example include
an internal one (include/shmreplay/internal/), and a file of lib/ never includes a user's file. A file of include/
or lib/ that no layer claims (a new folder) is an error too, so that a new folder gets its place in the rule (here
and in the design doc) before it gets code.

    tools/check_includes.py [ROOT]      exit 0 and a one-line summary, or 1 and one line per violation
"""
from __future__ import annotations

import pathlib
import re
import sys

FOUNDATION = {"error", "sample_age", "schema", "wait", "version", "vocabulary", "rate_limit"}
RANK = {"foundation": 0, "os": 1, "protocol": 2, "storage": 3, "sampling": 4, "segment": 4, "roles": 5, "users": 6}
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)', re.M)
SOURCES = (".hpp", ".cpp", ".h", ".cc")


def layer_of(rel: pathlib.PurePosixPath) -> str | None:
    parts = rel.parts
    if parts[0] == "include":
        if len(parts) == 3 and parts[1] == "shmreplay":
            return "foundation" if rel.stem in FOUNDATION else "roles"
        if len(parts) == 4 and parts[1:3] == ("shmreplay", "internal"):
            return "foundation"  # the segment's bytes: not part of the API (out of the umbrella and the reference)
        return None
    if parts[0] == "lib":
        if len(parts) >= 2 and parts[1] == "python":
            return "users"
        if len(parts) >= 2 and parts[1] == "detail":
            if len(parts) == 3:
                return "os"  # lib/detail/*.hpp: leaf helpers with no includes of the project
            return {"os": "os", "protocol": "protocol", "storage": "storage", "sampling": "sampling",
                    "segment": "segment"}.get(parts[2])
        return "roles"
    if parts[0] in ("tools", "examples", "tests"):
        return "users"
    return None


def resolve(root: pathlib.Path, src: pathlib.Path, name: str, quoted: bool) -> pathlib.Path | None:
    """Where the compiler would find `name` among the project's files: include/ and lib/ (the project's -I
    folders), and first the file's own folder for a quoted include. None for a header outside the project."""
    for base in ((src.parent,) if quoted else ()) + (root / "include", root / "lib"):
        p = (base / name).resolve()
        if p.is_file() and root in p.parents:
            return p
    return None


def check(root: pathlib.Path) -> tuple[list[str], int, int]:
    problems: list[str] = []
    files = 0
    edges = 0
    for top in ("include", "lib", "tools", "examples", "tests"):
        for src in sorted((root / top).rglob("*")):
            if src.suffix not in SOURCES or not src.is_file():
                continue
            rel = pathlib.PurePosixPath(src.relative_to(root).as_posix())
            layer = layer_of(rel)
            if layer is None:
                problems.append(f"{rel}: no layer claims this file; give its folder a place in tools/check_includes.py "
                                f"and docs/design/source_layout.md")
                continue
            files += 1
            text = src.read_text(encoding="utf-8", errors="replace")
            for m in INCLUDE.finditer(text):
                quoted = m.group(1) is not None
                target = resolve(root, src, m.group(1) if quoted else m.group(2), quoted)
                if target is None:
                    continue
                trel = pathlib.PurePosixPath(target.relative_to(root).as_posix())
                tlayer = layer_of(trel)
                if tlayer is None:
                    continue  # reported as its own problem when it is a source file
                edges += 1
                line = text.count("\n", 0, m.start()) + 1
                where = f"{rel}:{line}: includes {trel}"
                internal = trel.parts[:3] == ("include", "shmreplay", "internal")
                if rel.parts[0] == "include" and trel.parts[0] != "include":
                    problems.append(f"{where}: a public header includes a private one")
                elif internal and rel.parts[0] in ("include", "examples") and "internal" not in rel.parts:
                    problems.append(f"{where}: the API (a public header, an example) includes an internal header")
                elif layer == tlayer:
                    continue
                elif RANK[tlayer] > RANK[layer]:
                    problems.append(f"{where}: layer {layer} ({RANK[layer]}) includes layer {tlayer} "
                                    f"({RANK[tlayer]}), which sits above it")
                elif RANK[tlayer] == RANK[layer]:
                    problems.append(f"{where}: layer {layer} includes its sibling layer {tlayer}")
    return problems, files, edges


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent).resolve()
    problems, files, edges = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_includes: {len(problems)} violation(s) of the include rule (docs/design/source_layout.md)")
        return 1
    print(f"check_includes: {files} files, {edges} includes of the project's own files, every one within the rule")
    return 0


if __name__ == "__main__":
    sys.exit(main())
