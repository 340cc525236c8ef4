"""The numbers and lists in the docs' prose that code can change, checked against the code they describe, so that a
later change that makes one false fails here (test_docs.py checks the docs' code blocks and links; this file their
facts). Each test names the sentence it holds true; a fact that no test here covers is either generated or not in
the docs.

Run by ctest inside test_python; it reads files only (no buffer, no build)."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def text(path):
    return (ROOT / path).read_text(encoding="utf-8")


def flat(path):
    """The file's text with line breaks and indentation folded into single spaces (prose wraps anywhere)."""
    return re.sub(r"\s+", " ", text(path))


def header(name):
    """A public or internal header of include/shmreplay/ by file name (the tool-only ones live under internal/)."""
    found = sorted((ROOT / "include" / "shmreplay").rglob(name))
    assert found, f"no include/shmreplay/**/{name}"
    return found[0].read_text(encoding="utf-8")


def constant(source, name):
    """The integer value of `inline constexpr ... name = VALUE;` (digits, ' separators, or 1ull << N)."""
    m = re.search(rf"\b{name}\s*=\s*([^;]+);", source)
    assert m, f"no constant {name}"
    value = m.group(1).replace("'", "").replace("ull", "").replace("u", "").strip()
    shift = re.fullmatch(r"1\s*<<\s*(\d+)", value)
    return 1 << int(shift.group(1)) if shift else int(value)


def struct_lines(source, struct):
    """sizeof(struct) in cache lines, from layout.hpp's static_assert(sizeof(S) == N * kCacheLineBytes ...)."""
    m = re.search(rf"sizeof\({struct}\)\s*==\s*(\d+)\s*\*\s*kCacheLineBytes", source)
    assert m, f"layout.hpp pins no size of {struct} in cache lines"
    return int(m.group(1))


def test_the_tsan_test_list_in_testing_md_is_the_ctest_threads_label():
    cmake = text("tests/CMakeLists.txt")
    m = re.search(r"set_property\(TEST([^)]*?)APPEND\s+PROPERTY\s+LABELS\s+threads", cmake, re.S)
    assert m, "tests/CMakeLists.txt gives no tests the label threads"
    labelled = set(m.group(1).split())
    m = re.search(r"ctest label `threads`: ([^;)]*)", flat("docs/design/testing.md"))
    assert m, "docs/design/testing.md does not list the label threads' tests"
    listed = set(re.findall(r"`(test_\w+)`", m.group(1)))
    assert listed == labelled, f"testing.md lists {sorted(listed)}, the label holds {sorted(labelled)}"


def test_limits_md_gives_a_learner_slots_cost_as_layout_hpp_sizes_it():
    layout = header("layout.hpp")
    line = constant(layout, "kCacheLineBytes")
    slot, stats = struct_lines(layout, "LearnerSlot") * line, struct_lines(layout, "LearnerStats") * line
    limits = flat("docs/limits.md")
    assert f"its statistics, {stats} bytes (`LearnerStats`)" in limits
    assert f"a `LearnerSlot` of {slot} bytes plus 8 bytes per env" in limits
    # the 8 bytes per env: one online-queue start (u64) per env in each extra slot
    assert re.search(r"online_start\[max_learners - 1\]\[num_envs\] u64", layout)


@pytest.mark.parametrize("doc", ["README.md", "docs/limits.md"])
def test_the_learner_slot_bound_in_the_docs_is_k_max_learners(doc):
    bound = constant(header("layout.hpp"), "kMaxLearners")
    found = re.findall(r"up to (\d+)\)? ?learner slots|--learners N`, up to (\d+)\)", flat(doc))
    numbers = {int(a or b) for a, b in found}
    assert numbers == {bound}, f"{doc} gives the learner slots' bound as {numbers}, layout.hpp's kMaxLearners: {bound}"


def test_limits_md_gives_the_schema_and_env_bounds_of_the_code():
    layout, schema = header("layout.hpp"), header("schema.hpp")
    envs = constant(layout, "kMaxEnvs")
    limits = flat("docs/limits.md")
    m = re.search(r"Up to 2\^(\d+) envs, 2\^\d+ steps per env in a ring, (\d+) fields of up to (\d+) dimensions",
                  limits)
    assert m, "limits.md's bounds sentence changed shape: update this test with it"
    assert (1 << int(m.group(1)), int(m.group(2)), int(m.group(3))) == (
        envs, constant(schema, "kMaxFields"), constant(schema, "kMaxDims"))


@pytest.mark.parametrize("doc, pattern", [
    ("docs/limits.md", r"This library \(layout (\d+\.\d+)\)"),
    ("docs/design/segment.md", r"The layout version is (\d+\.\d+)"),
    ("docs/design/README.md", r"the segment's bytes \(layout (\d+\.\d+)\)"),
])
def test_the_docs_name_the_layout_version_of_this_library(doc, pattern):
    layout = header("layout.hpp")
    version = f"{constant(layout, 'kLayoutMajor')}.{constant(layout, 'kLayoutMinor')}"
    m = re.search(pattern, flat(doc))
    assert m and m.group(1) == version, f"{doc} says layout {m and m.group(1)}, layout.hpp {version}"


@pytest.mark.parametrize("doc", ["README.md", "docs/cpp.md", "docs/python.md", "lib/python/shmreplay/__init__.py"])
def test_no_doc_says_a_buffer_has_one_learner(doc):
    said = re.findall(r"one (?:learner )?per buffer|one learner process samples", flat(doc), re.I)
    assert not said, f"{doc} says {said}: a buffer has max_learners learner slots (layout 1.7)"


def test_the_readme_figures_table_has_at_most_six_rows():
    readme = text("README.md")
    section = re.search(r"^## Figures\n(.*?)(?=^## )", readme, re.M | re.S)
    assert section, "README.md has no '## Figures' section"
    rows = [line for line in section.group(1).splitlines() if line.startswith("|")][2:]  # less header and rule
    assert 0 < len(rows) <= 6, f"the README's figures table has {len(rows)} rows; the rest belong in docs/benchmarks"


def test_the_benchmark_index_lists_every_benchmark_file():
    folder = ROOT / "docs" / "benchmarks"
    files = {p.name for p in folder.glob("*.md")} - {"README.md"}
    index = text("docs/benchmarks/README.md")
    section = index[index.index("## The files"):index.index("## ", index.index("## The files") + 3)]
    listed = set(re.findall(r"\]\(([a-z0-9_]+\.md)\)", section))
    assert listed == files, f"docs/benchmarks/README.md lists {sorted(listed)}, the folder holds {sorted(files)}"


def test_the_benchmark_files_keep_no_dated_history_headings():
    """One current table per question: a heading for an earlier run ("before issue N", "until issue N", "a later
    run", "round 2") means history kept in the file instead of in git."""
    old = re.compile(r"^#+ .*\b(before issue|until issue|a later run|earlier run|round \d|runs? \d+ to \d+)",
                     re.I | re.M)
    found = [f"{p.name}: {m.group(0)}" for p in sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
             for m in old.finditer(p.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)


def test_source_layout_md_names_only_paths_that_exist():
    """The tree drawing of docs/design/source_layout.md: every path it spells out from the root exists."""
    doc = text("docs/design/source_layout.md")
    missing = []
    for path in sorted(set(re.findall(r"^((?:include|lib|tools|tests|examples|docs)/[\w./-]*\w/?)\s", doc, re.M))):
        if not (ROOT / path).exists():
            missing.append(path)
    assert not missing, f"source_layout.md names paths that do not exist: {missing}"


def test_every_mutant_of_the_mutation_list_still_finds_its_text_in_its_file():
    """docs/design/testing.md's mutation run (tools/mutation/run.py) needs each mutant's text exactly once in its file:
    code that moves must take the list with it, or the run stops before the first mutant."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    listed = subprocess.run([sys.executable, str(ROOT / "tools/mutation/run.py"), "--list"], capture_output=True,
                            text=True, timeout=60, check=False)
    assert listed.returncode == 0, listed.stderr
    assert "each one's text is found exactly once" in listed.stdout
