"""The docs' code blocks run, and their links resolve, so that the docs cannot drift from the API or the tree.

- Every ```python block of README.md and docs/**/*.md (not docs/design/, whose blocks are illustrations) runs alone:
  written to a file of its own and run by this interpreter in a fresh subprocess, with SHMREPLAY_SHM_DIR set to
  a new temporary directory (so its buffer names meet no other test's, and whatever it leaves behind is removed
  with the directory), its own working directory, and a timeout. Blocks are not chained: each must be a whole
  script. A block whose fence follows a line `<!-- not run: reason -->` is skipped (reported with its reason and
  counted); any other block fails the test if it exits non-zero.
- ```sh / ```bash blocks are not run (they install, build and run for minutes); the commands of the README's
  quick start must exist in the tree as executable files.
- ```cpp blocks are compiled and run by ctest, not here: every block of README.md and the blocks of docs/cpp.md
  marked `<!-- run ... -->` (tests/docs_cpp.cmake, tests docs_cpp_*). Here: README.md has at least one, and each
  block that ctest runs is a whole program.
- Every relative link of README.md and docs/**/*.md ([text](path) or [text](path#anchor), and images' ![alt](path))
  names a file or directory that exists, and an anchor into a Markdown file names one of its headings (GitHub's slugs).

Run by ctest as test_docs (tests/CMakeLists.txt), beside test_python."""
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT = 300  # seconds per block: a block that imports torch and JAX takes ~10 s on a loaded 2-core machine

FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(\S.*?)\s*-->\s*$")
RUN = re.compile(r"^<!--\s*run\b.*-->\s*$")


def run_docs():
    """The Markdown files whose Python blocks run: README.md and docs/**/*.md except docs/design/."""
    return [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md") if "design" not in p.parts)


def all_docs():
    """The Markdown files whose links are checked: README.md and docs/**/*.md."""
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def blocks(path):
    """(language, line number of the opening fence, code, the line right before the fence) of each fenced block."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start, j = i, i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        assert j < len(lines), f"{path.relative_to(ROOT)}:{start + 1}: a ``` block is not closed"
        marker = lines[start - 1].strip() if start > 0 else ""  # the line right before the fence
        out.append((m.group(1), start + 1, "\n".join(lines[start + 1:j]) + "\n", marker))
        i = j + 1
    return out


def python_blocks():
    found = []
    for path in run_docs():
        rel = path.relative_to(ROOT).as_posix()
        for lang, line, code, marker in blocks(path):
            if lang == "python":
                found.append(pytest.param(rel, line, code, marker, id=f"{rel}:{line}"))
    return found


PYTHON_BLOCKS = python_blocks()


def shm_parent():
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


@pytest.mark.parametrize("doc,line,code,marker", PYTHON_BLOCKS)
def test_python_block_runs(doc, line, code, marker):
    skipped = NOT_RUN.match(marker)
    if skipped:
        pytest.skip(f"{doc}:{line}: not run: {skipped.group(1)}")
    assert not marker.startswith("<!-- not run"), f"{doc}:{line}: a not-run marker needs a reason: {marker}"
    shm = tempfile.mkdtemp(prefix="shmreplay-docs-", dir=shm_parent())
    work = tempfile.mkdtemp(prefix="shmreplay-docs-work-")
    try:
        script = pathlib.Path(work) / f"{pathlib.Path(doc).stem}_{line}.py"
        script.write_text(code, encoding="utf-8")
        env = dict(os.environ, SHMREPLAY_SHM_DIR=shm, PYTHONDONTWRITEBYTECODE="1")
        try:
            out = subprocess.run([sys.executable, str(script)], cwd=work, env=env, capture_output=True, text=True,
                                 timeout=TIMEOUT)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{doc}:{line}: the block ran past {TIMEOUT} s\n{e.stdout}\n{e.stderr}")
        assert out.returncode == 0, (f"{doc}:{line}: the block exited {out.returncode}\n--- code\n{code}"
                                     f"--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}")
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def test_the_docs_have_python_blocks_that_run():
    """The count of blocks run and skipped (printed with -s or -rA); the README's example is among those run."""
    ran = [p for p in PYTHON_BLOCKS if not NOT_RUN.match(p.values[3])]
    print(f"python blocks: {len(PYTHON_BLOCKS)}, run {len(ran)}, not run {len(PYTHON_BLOCKS) - len(ran)}")
    assert any(p.values[0] == "README.md" for p in ran), "README.md has no Python block that runs"


def test_every_block_has_a_known_language():
    """A fence names its language, so that a Python block cannot hide from this test as plain text; the
    languages are those this test knows to run or not."""
    known = {"python", "cpp", "sh", "bash", "cmake", "text", "console", "json", "toml", "yaml", ""}
    problems = []
    for path in run_docs():
        for lang, line, code, _ in blocks(path):
            if lang not in known:
                problems.append(f"{path.relative_to(ROOT)}:{line}: ```{lang}")
            elif lang == "" and re.search(r"^\s*(import |from \w+ import )", code, re.M):
                problems.append(f"{path.relative_to(ROOT)}:{line}: Python in a block without a language")
    assert not problems, "\n".join(problems)


def test_cpp_blocks_that_ctest_runs_are_whole_programs():
    """tests/docs_cpp.cmake builds these blocks as programs: each must have main()."""
    readme = [b for b in blocks(ROOT / "README.md") if b[0] == "cpp"]
    assert readme, "README.md has no C++ block"
    run = [(ROOT / "README.md", b) for b in readme if not b[3].startswith("<!-- not run")]
    cpp = ROOT / "docs" / "cpp.md"
    if cpp.exists():
        run += [(cpp, b) for b in blocks(cpp) if b[0] == "cpp" and RUN.match(b[3])]
    problems = [f"{p.relative_to(ROOT)}:{b[1]}: no main()" for p, b in run if not re.search(r"\bint main\(", b[2])]
    assert not problems, "\n".join(problems)


def test_quick_start_commands_exist():
    """The README's quick start names commands of the tree (its shell blocks are not run here)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.M | re.S)
    assert section, "README.md has no '## Quick start' section"
    commands = [b[2] for b in blocks_of_text(section.group(1)) if b[0] in ("sh", "bash")]
    assert commands, "the quick start has no shell block"
    named = []
    for block in commands:
        for cmd in block.splitlines():
            cmd = cmd.split("#", 1)[0].strip()
            if cmd:
                named.append(cmd.split()[0])
    assert named
    for cmd in named:
        path = ROOT / cmd
        assert path.is_file() and os.access(path, os.X_OK), f"the quick start's {cmd} is not an executable file"


def blocks_of_text(text):
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="shmreplay-docs-md-")) / "x.md"
    try:
        tmp.write_text(text, encoding="utf-8")
        return blocks(tmp)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")   # images' ![alt](path) too


def prose(path):
    """(line number, text) of the lines outside fenced blocks, with inline code removed."""
    inside = False
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if line.startswith("```"):
            inside = not inside
            continue
        if not inside:
            yield n, re.sub(r"`[^`]*`", "", line)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    for _, line in prose_with_code(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            k = seen.get(s, 0)
            out.add(s if k == 0 else f"{s}-{k}")
            seen[s] = k + 1
    return out


def prose_with_code(path):
    inside = False
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if line.startswith("```"):
            inside = not inside
            continue
        if not inside:
            yield n, line


def test_relative_links_resolve():
    """Every relative link of README.md and docs/**/*.md names an existing file, and an anchor names a heading of
    the file it points into. Checked strictly: the docs that other work adds (docs/design/*, docs/naming.md,
    docs/api.md) must exist in the tree that runs this test."""
    problems = []
    for path in all_docs():
        for n, line in prose(path):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                where = f"{path.relative_to(ROOT)}:{n}: {target}"
                if not dest.exists():
                    problems.append(f"{where}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{where}: no heading '{anchor}' in {dest.relative_to(ROOT)}")
    assert not problems, "\n".join(problems)
