"""tools/check_includes.py, the layer rule's check (docs/design/source_layout.md), on a copy of the tree with a
violation planted in it: the check must fail naming the file, the line and the layers, whichever include form the
violation uses. ctest runs this as test_check_includes (label structure)."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECK = ROOT / "tools" / "check_includes.py"


@pytest.fixture
def tree(tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the project's include/ and lib/ (what the layers are made of), checked in place of the tree."""
    for top in ("include", "lib"):
        shutil.copytree(ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return tmp_path


def check(root: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True, timeout=60)


def plant(root: pathlib.Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_copied_tree_passes_before_anything_is_planted(tree: pathlib.Path) -> None:
    out = check(tree)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every one within the rule" in out.stdout


@pytest.mark.parametrize("form", ["<shmreplay/buffer.hpp>", '"shmreplay/buffer.hpp"'])
def test_a_lower_layer_including_a_role_header_fails_in_either_include_form(tree: pathlib.Path, form: str) -> None:
    plant(tree, "lib/detail/os/planted.hpp", f"#pragma once\n#include <cstdint>\n#include {form}\n")
    out = check(tree)
    assert out.returncode == 1, out.stdout
    assert ("lib/detail/os/planted.hpp:3: includes include/shmreplay/buffer.hpp: layer os (1) includes layer roles "
            "(5), which sits above it") in out.stdout
    assert "1 violation(s)" in out.stdout


def test_a_public_header_including_a_private_one_with_angle_brackets_fails(tree: pathlib.Path) -> None:
    plant(tree, "include/shmreplay/planted.hpp", "#pragma once\n#include <detail/protocol/env_ids.hpp>\n")
    out = check(tree)
    assert out.returncode == 1, out.stdout
    assert ("include/shmreplay/planted.hpp:2: includes lib/detail/protocol/env_ids.hpp: a public header includes a "
            "private one") in out.stdout


def test_angle_bracket_includes_of_headers_outside_the_project_are_not_counted(tree: pathlib.Path) -> None:
    before = check(tree).stdout
    plant(tree, "lib/detail/os/planted.hpp", "#pragma once\n#include <vector>\n#include <fmt/format.h>\n"
                                             "#include <sys/mman.h>\n#include <no/such/header.hpp>\n")
    out = check(tree)
    assert out.returncode == 0, out.stdout
    assert out.stdout.split(" files, ")[1] == before.split(" files, ")[1]  # the same count of the project's includes


@pytest.mark.parametrize("where", ["examples/planted.cpp", "include/shmreplay/planted.hpp"])
def test_the_api_or_an_example_including_an_internal_header_fails(tree: pathlib.Path, where: str) -> None:
    plant(tree, where, "#pragma once\n#include <shmreplay/internal/segment.hpp>\n")
    out = check(tree)
    assert out.returncode == 1, out.stdout
    assert (f"{where}:2: includes include/shmreplay/internal/segment.hpp: the API (a public header, an example) "
            "includes an internal header") in out.stdout
