#!/usr/bin/env python3
"""Mutation testing of the protocol code: do the tests notice a small deliberate bug?

Applies each mutant of tools/mutation/mutants.toml (an exact piece of text in a file under lib/ and its
replacement) to the source tree, one at a time; rebuilds, in a build directory of its own (ccache when it is
installed), only the test executables it runs; runs the mutant's own tests first, then the rest of the C++ suite,
each with a timeout, until one fails; and restores the file. Prints a table: mutant, file:line, killed or survived,
the test that killed it and the seconds the tests ran until it failed (the killing test's output is kept in
<build dir>/mutation-logs/<mutant>.log). See docs/design/testing.md, "Mutation testing".

    tools/mutation/run.py                  every mutant (first a baseline run of the unmutated tree)
    tools/mutation/run.py --only ID,ID     some of them
    tools/mutation/run.py --list           the mutants, and a check that each one's text is still in its file

The tree is always restored: on exit, on an exception, on SIGINT/SIGTERM/SIGHUP; and if the script was killed
outright (SIGKILL) with a mutant applied, the next run restores the file from the journal in the build directory
before anything else. A mutant whose text is not found exactly once fails the run before anything is changed: the
code moved, and the list must follow it.

Exit status: 0 when every mutant ended as the list expects (killed; or survived where the list argues it is
equivalent), 1 otherwise, 2 for a usage error or a list that no longer matches the code.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIST = Path(__file__).resolve().with_name("mutants.toml")

# The C++ suite is every doctest executable that tests/CMakeLists.txt registers, tried after a mutant's own tests
# in this order (quick ones first), then any others in the file's order. test_cli, test_cli_metrics, test_cli_naming and
# test_cartpole_run are left out (they need the CLI and the examples, which this build leaves off: listing one made
# the build fail), and so is the Python suite (minutes); a mutant may still name a pytest file (needs --python).
PREFERRED = [
    "test_layout", "test_schema", "test_inspector", "test_writer", "test_planner", "test_sampler", "test_buffer",
    "test_checkpoint",
    "test_threads", "test_episodes", "test_priorities", "test_processes", "test_rate_limit",
]
LEFT_OUT = {"test_cli", "test_cli_metrics", "test_cli_naming", "test_cartpole_run"}


def suite() -> list[str]:
    text = (ROOT / "tests" / "CMakeLists.txt").read_text()
    names = [n for n in re.findall(r"^\s*shmreplay_add_test\((test_\w+)", text, re.M) if n not in LEFT_OUT]
    return [n for n in PREFERRED if n in names] + [n for n in names if n not in PREFERRED]


SUITE = suite()


@dataclass
class Mutant:
    id: str
    file: str
    find: str | list[str]  # a list: alternatives (the code before and after a change), with one replace each
    replace: str | list[str]
    tests: list[str]
    what: str
    expect: str = "killed"  # or "survived": the list argues it is equivalent (why)
    why: str = ""
    note: str = ""
    timeout_s: float = 0  # per test executable; 0: --timeout
    line: int = 0


@dataclass
class Outcome:
    mutant: Mutant
    result: str = ""  # killed, survived, build error
    killer: str = ""
    detect_s: float = 0.0
    build_s: float = 0.0
    details: list[str] = field(default_factory=list)


class Interrupted(Exception):
    pass


def fail(msg: str, code: int = 2) -> None:
    print(f"mutation: {msg}", file=sys.stderr)
    sys.exit(code)


def load_mutants() -> list[Mutant]:
    with LIST.open("rb") as f:
        data = tomllib.load(f)
    out = []
    seen = set()
    for m in data.get("mutant", []):
        mut = Mutant(**m)
        if mut.id in seen:
            fail(f"{LIST}: mutant id '{mut.id}' appears twice")
        seen.add(mut.id)
        if mut.expect not in ("killed", "survived"):
            fail(f"{LIST}: mutant '{mut.id}': expect is '{mut.expect}', expected 'killed' or 'survived'")
        if mut.expect == "survived" and not mut.why:
            fail(f"{LIST}: mutant '{mut.id}' is expected to survive but says not why")
        path = ROOT / mut.file
        if not path.is_file():
            fail(f"{LIST}: mutant '{mut.id}': no file {mut.file}")
        text = path.read_text()
        finds = mut.find if isinstance(mut.find, list) else [mut.find]
        replaces = mut.replace if isinstance(mut.replace, list) else [mut.replace]
        if len(finds) != len(replaces):
            fail(f"{LIST}: mutant '{mut.id}': {len(finds)} texts to find but {len(replaces)} replacements")
        counts = [text.count(f) for f in finds]
        if counts.count(1) != 1 or any(c > 1 for c in counts):
            fail(f"{LIST}: mutant '{mut.id}': its text occurs {' / '.join(map(str, counts))} times in {mut.file}, "
                 f"expected exactly once (the code changed: update the list). The text:\n" + "\n--\n".join(finds))
        mut.find, mut.replace = finds[counts.index(1)], replaces[counts.index(1)]
        common = os.path.commonprefix([mut.find, mut.replace])
        common = common[: common.rfind("\n") + 1]  # the first line that changes
        mut.line = text[: text.index(mut.find)].count("\n") + common.count("\n") + 1
        out.append(mut)
    return out


# ---------------------------------------------------------------------------------------------------------------
# The tree: apply, restore, and a journal for a run that was killed outright.

class Tree:
    def __init__(self, build: Path):
        self.journal = build / "mutation-journal.json"
        self.applied: dict[str, str] | None = None  # {file: original text}

    def recover(self) -> None:
        if not self.journal.exists():
            return
        saved = json.loads(self.journal.read_text())
        for rel, original in saved.items():
            (ROOT / rel).write_text(original)
            print(f"mutation: restored {rel} from {self.journal} (an earlier run was killed with a mutant applied)",
                  file=sys.stderr)
        self.journal.unlink()

    def apply(self, m: Mutant) -> None:
        path = ROOT / m.file
        original = path.read_text()
        self.journal.write_text(json.dumps({m.file: original}))
        self.applied = {m.file: original}
        path.write_text(original.replace(m.find, m.replace, 1))

    def restore(self) -> None:
        if self.applied is None:
            return
        for rel, original in self.applied.items():
            (ROOT / rel).write_text(original)
        self.applied = None
        self.journal.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------------------
# Building and running

# The child running now (a build or a test), in a session of its own: a timeout or an interruption of this script
# kills its whole process group (a test's forked children included).
CHILD: subprocess.Popen | None = None


def run_child(cmd: list[str], timeout_s: float | None = None, **kw) -> tuple[int | None, str]:
    """Runs cmd with stdout and stderr together; returns (exit status, output), status None on a timeout."""
    global CHILD
    CHILD = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True, **kw)
    try:
        out, _ = CHILD.communicate(timeout=timeout_s)
        return CHILD.returncode, out
    except subprocess.TimeoutExpired:
        kill_child()
        out, _ = CHILD.communicate()
        return None, out
    finally:
        CHILD = None


def kill_child() -> None:
    if CHILD is not None and CHILD.poll() is None:
        try:
            os.killpg(CHILD.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_quiet(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    code, out = run_child(cmd, **kw)
    return subprocess.CompletedProcess(cmd, code if code is not None else -9, out)


def configure(build: Path, python: str | None) -> None:
    args = ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
            "-DSHMREPLAY_BUILD_TOOLS=OFF", "-DSHMREPLAY_BUILD_BENCH=OFF", "-DSHMREPLAY_BUILD_EXAMPLES=OFF",
            "-DSHMREPLAY_INSTALL=OFF"]
    args += [f"-DSHMREPLAY_BUILD_PYTHON={'ON' if python else 'OFF'}"]
    if python:
        args += [f"-DPython_EXECUTABLE={python}"]
    if shutil.which("ccache"):
        args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
    r = run_quiet(args)
    if r.returncode != 0:
        fail(f"cmake failed:\n{r.stdout[-4000:]}", 1)


def target_of(spec: str) -> str:
    if spec.startswith("pytest:"):
        return "_shmreplay"
    return spec.split("[", 1)[0]


def build_targets(build: Path, targets: list[str], jobs: int) -> tuple[bool, float, str]:
    start = time.monotonic()
    r = run_quiet(["cmake", "--build", str(build), "-j", str(jobs), "--target", *targets])
    return r.returncode == 0, time.monotonic() - start, r.stdout


def doctest_cases(exe: Path, pattern: str | None) -> list[str]:
    cmd = [str(exe), "--list-test-cases", "--no-version"]
    if pattern:
        cmd.append(f"--test-case={pattern}")
    r = run_quiet(cmd)
    names = []
    for line in r.stdout.splitlines():
        if line.startswith("[doctest]") or line.startswith("=====") or not line.strip():
            continue
        names.append(line.strip())
    return names


def run_test(build: Path, spec: str, timeout_s: float, python: str | None) -> tuple[bool, float, str, str]:
    """Runs one test spec; returns (passed, seconds, what failed, its output)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if spec.startswith("pytest:"):
        if not python:
            return True, 0.0, "skipped: needs --python", ""
        cmd = [python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", str(ROOT / spec[len("pytest:"):])]
        env["PYTHONPATH"] = str(build / "python")
        exe = None
        pattern = None
    else:
        name, _, rest = spec.partition("[")
        pattern = rest[:-1] if rest else None
        exe = build / "tests" / name
        cmd = [str(exe), "--abort-after=1", "--duration=true", "--no-version"]
        if pattern:
            cmd.append(f"--test-case={pattern}")
    start = time.monotonic()
    returncode, out = run_child(cmd, timeout_s, env=env, cwd=ROOT)
    timed_out = returncode is None
    seconds = time.monotonic() - start
    if returncode == 0:
        return True, seconds, "", out
    if spec.startswith("pytest:"):
        m = re.search(r"^FAILED (\S+)", out, re.M)
        what = m.group(1) if m else spec
        return False, seconds, ("timeout: " if timed_out else "") + what, out
    # --duration prints every case's header: the failed one is the last header before the first failure line.
    failure = re.search(r"^.*(: ERROR: |FATAL ERROR|TEST CASE FAILED).*$", out, re.M)
    headers = re.findall(r"^TEST CASE:\s+(.*)$", out[: failure.start()] if failure else "", re.M)
    if headers:
        case = headers[-1].strip()
    elif timed_out:  # the first case that did not finish (--duration prints "<seconds> s: <name>" after each)
        done = set(re.findall(r"^[0-9.]+ s: (.*)$", out, re.M))
        pending = [c for c in doctest_cases(exe, pattern) if c not in done]
        case = pending[0] if pending else "?"
    else:
        case = f"exit status {returncode}"
    prefix = f"hung (timeout {timeout_s:.0f} s) in " if timed_out else ""
    return False, seconds, f"{prefix}{spec.split('[', 1)[0]}: {case}", out


def order(m: Mutant | None, all_tests: bool) -> list[str]:
    """The mutant's own tests (those this tree has), then the rest of the suite."""
    first = [t for t in (m.tests if m else []) if t.startswith("pytest:") or target_of(t) in SUITE]
    rest = [t for t in SUITE if t not in first] if all_tests else []
    return first + rest


def run_baseline(build: Path, mutants: list[Mutant], all_tests: bool, args: argparse.Namespace) -> None:
    """Builds and runs every test the mutants will run, on the unmutated tree: each must pass (else a kill would
    mean nothing)."""
    specs = list(dict.fromkeys(t for m in mutants for t in order(m, all_tests)))
    ok, secs, log = build_targets(build, list(dict.fromkeys(target_of(s) for s in specs)), args.jobs)
    if not ok:
        fail(f"the unmutated tree does not build:\n{log[-4000:]}", 1)
    print(f"baseline: built in {secs:.0f} s", file=sys.stderr)
    for spec in specs:
        passed, secs, what, _ = run_test(build, spec, args.timeout, args.python)
        print(f"baseline: {spec} {'passed' if passed else 'FAILED'} in {secs:.1f} s", file=sys.stderr)
        if not passed:
            fail(f"the unmutated tree fails {what}: a kill would mean nothing; fix that first", 1)


def run_mutant(tree: Tree, build: Path, m: Mutant, all_tests: bool, args: argparse.Namespace) -> Outcome:
    """Applies `m`, builds and runs its tests (then the rest, with all_tests) until one fails, restores the tree."""
    o = Outcome(m)
    tree.apply(m)
    try:
        for spec in order(m, all_tests):
            ok, secs, log = build_targets(build, [target_of(spec)], args.jobs)
            o.build_s += secs
            if not ok:
                o.result = "build error"
                o.details.append(log[-3000:])
                break
            passed, secs, what, out = run_test(build, spec, m.timeout_s or args.timeout, args.python)
            o.detect_s += secs
            print(f"   {spec}: {'passed' if passed else 'FAILED: ' + what} ({secs:.1f} s)", file=sys.stderr)
            if not passed:
                o.result = "killed"
                o.killer = what
                log_path = build / "mutation-logs" / f"{m.id}.log"
                log_path.parent.mkdir(exist_ok=True)
                log_path.write_text(out)
                break
        else:
            o.result = "survived"
    finally:
        tree.restore()
    if o.result == "build error":
        print(f"   build error:\n{o.details[-1]}", file=sys.stderr)
    return o


# ---------------------------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--list", action="store_true", help="list the mutants (and check that each still applies)")
    ap.add_argument("--build-dir", default=str(ROOT / "build-mutation"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per test executable (a hang is a kill)")
    ap.add_argument("--own-tests-only", action="store_true",
                    help="run only each mutant's own tests, not the rest of the suite after them")
    ap.add_argument("--no-baseline", action="store_true", help="skip the run of the unmutated tree")
    ap.add_argument("--python", help="interpreter for the mutants' pytest tests (builds the Python module)")
    args = ap.parse_args()

    build = Path(args.build_dir).resolve()
    build.mkdir(parents=True, exist_ok=True)
    tree = Tree(build)
    tree.recover()
    mutants = load_mutants()
    if args.only:
        wanted = args.only.split(",")
        unknown = [w for w in wanted if w not in {m.id for m in mutants}]
        if unknown:
            fail(f"no mutant {', '.join(unknown)}; --list shows them")
        mutants = [m for m in mutants if m.id in wanted]
    if args.list:
        for m in mutants:
            print(f"{m.id:32} {m.file}:{m.line:<5} {m.what}")
        print(f"{len(mutants)} mutants; each one's text is found exactly once")
        return 0

    def on_signal(signum, _frame):
        raise Interrupted(f"signal {signum}")

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)

    all_tests = not args.own_tests_only
    started = time.monotonic()
    outcomes: list[Outcome] = []
    try:
        configure(build, args.python)
        if not args.no_baseline:
            run_baseline(build, mutants, all_tests, args)
        for m in mutants:
            print(f"== {m.id} ({m.file}:{m.line}): {m.what}", file=sys.stderr)
            outcomes.append(run_mutant(tree, build, m, all_tests, args))
    except Interrupted as e:
        kill_child()
        tree.restore()
        print(f"mutation: interrupted ({e}); the tree is restored", file=sys.stderr)
        return 1
    finally:
        tree.restore()

    wall = time.monotonic() - started
    print_table(outcomes)
    killed = sum(o.result == "killed" for o in outcomes)
    unexpected = [o for o in outcomes if o.result != o.mutant.expect]
    print(f"\n{killed} of {len(outcomes)} mutants killed; {len(outcomes) - killed} survived "
          f"({sum(o.result == 'survived' and o.mutant.expect == 'survived' for o in outcomes)} argued equivalent "
          f"in the list); wall time {wall / 60:.1f} min")
    for o in unexpected:
        print(f"UNEXPECTED: {o.mutant.id} {o.result} (the list expects {o.mutant.expect})")
    return 1 if unexpected else 0


def print_table(outcomes: list[Outcome]) -> None:
    print("\n| mutant | file:line | result | killed by | detect s | build s |")
    print("|---|---|---|---|---:|---:|")
    for o in outcomes:
        m = o.mutant
        result = o.result
        if o.result == "survived" and m.expect == "survived":
            result = "survived (equivalent)"
        elif o.result != m.expect:
            result += " (unexpected)"
        killer = o.killer.replace("|", "\\|") if o.killer else (m.note or "")
        detect = f"{o.detect_s:.1f}" if o.result == "killed" else "-"
        print(f"| {m.id} | {m.file.removeprefix('lib/')}:{m.line} | {result} | {killer} | {detect} | "
              f"{o.build_s:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
