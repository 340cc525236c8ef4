"""tools/check_sizes.py, the size rule's check (every C++ and Python source file under lib/ include/ tools/ tests/
examples/ at most 500 lines, every function at most 80, or listed with its reason): the tree passes it, and a copy
of the tree with a violation planted in it fails, naming the file (and function) and the sizes. ctest runs this as
test_sizes (label structure); it needs lizard, which tools/setup.sh puts into .venv."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECK = ROOT / "tools" / "check_sizes.py"
TOPS = ("lib", "include", "tools", "tests", "examples")


def check(root: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def lizard_present() -> None:
    try:
        import lizard  # noqa: F401
    except ImportError:
        pytest.fail(f"{sys.executable} has no lizard, which the size check needs: run tools/setup.sh (it installs "
                    "lizard into .venv) or pip install lizard")


@pytest.fixture
def tree(tmp_path: pathlib.Path, lizard_present: None) -> pathlib.Path:
    """A copy of the folders the rule covers, checked in place of the tree."""
    for top in TOPS:
        shutil.copytree(ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "build*"))
    return tmp_path


def plant(root: pathlib.Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def cpp_function(name: str, lines: int) -> str:
    """A C++ function of `lines` lines from its name to its closing brace."""
    body = "".join(f"  x += {i};\n" for i in range(lines - 4))
    return f"int {name}() {{\n  int x = 0;\n{body}  return x;\n}}\n"


def python_function(name: str, lines: int) -> str:
    """A Python function of `lines` lines, its def line included."""
    body = "".join(f"    x += {i}\n" for i in range(lines - 3))
    return f"def {name}():\n    x = 0\n{body}    return x\n"


def doctest_case(lines: int) -> str:
    """A doctest TEST_CASE of `lines` lines."""
    body = "".join(f"  CHECK({i} == {i});\n" for i in range(lines - 2))
    return f'TEST_CASE("a planted case") {{\n{body}}}\n'


def test_the_tree_is_within_the_size_rule(lizard_present: None) -> None:
    out = check(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every one within the size rule" in out.stdout


@pytest.mark.parametrize("rel, line", [("tests/planted.cpp", "int planted_{} = {};\n"),
                                       ("lib/python/shmreplay/planted.py", "PLANTED_{} = {}\n"),
                                       ("include/shmreplay/planted.hpp", "inline int planted_{} = {};\n")])
def test_a_planted_file_of_501_lines_fails_and_one_of_500_passes(tree: pathlib.Path, rel: str, line: str) -> None:
    plant(tree, rel, "".join(line.format(i, i) for i in range(500)))
    out = check(tree)
    assert out.returncode == 0, out.stdout
    plant(tree, rel, "".join(line.format(i, i) for i in range(501)))
    out = check(tree)
    assert out.returncode == 1, out.stdout
    assert f"{rel}: 501 lines, more than 500" in out.stdout
    assert "1 violation(s)" in out.stdout


@pytest.mark.parametrize("rel, make, name", [
    ("tools/bench/planted.cpp", lambda n: cpp_function("planted", n), "planted"),
    ("tests/python/test_planted.py", lambda n: python_function("planted", n), "planted"),
    ("tests/planted/case.cpp", doctest_case, "TEST_CASE"),
])
def test_a_planted_function_of_81_lines_fails_and_one_of_80_passes(tree: pathlib.Path, rel: str, make, name: str) -> None:
    plant(tree, rel, "// planted\n" + make(80))
    out = check(tree)
    assert out.returncode == 0, out.stdout
    plant(tree, rel, "// planted\n" + make(81))
    out = check(tree)
    assert out.returncode == 1, out.stdout
    assert f"{rel}:2: function {name} has 81 lines, more than 80" in out.stdout
    assert "1 violation(s)" in out.stdout


def test_an_allowed_file_back_within_the_limit_must_leave_the_list(tree: pathlib.Path) -> None:
    plant(tree, "include/shmreplay/internal/layout.hpp", "#pragma once\n")
    out = check(tree)
    assert out.returncode == 1, out.stdout
    assert ("include/shmreplay/internal/layout.hpp: listed in check_sizes.py's FILES but no longer over 500 lines"
            in out.stdout)
