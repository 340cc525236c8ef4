"""The wheel as a user without a compiler gets it: the wheel that tools/build_wheel.sh made self-contained with
auditwheel carries a manylinux platform tag that auditwheel confirms (the one docs/packaging.md states), and it
installs into a fresh virtual environment and runs there (import, a writer and a learner process, the CLI:
installed_check.py) on this machine with every compiler, header folder and -dev library file hidden
(without_toolchain.sh: a private mount namespace), and with the system's copies of the libraries that auditwheel
copied into the wheel hidden too. Importing the module loads no library from outside the environment but those
that the wheel's manylinux policy lets a wheel expect on the user's machine.

Run by ctest as test_wheel_without_compiler (tests/CMakeLists.txt), with SHMREPLAY_PIP_WHEEL naming the repaired
wheel (tools/test.sh exports it; without it the tests skip and say so); the namespace needs root (CI runs as root),
and the test skips elsewhere with the reason. SHMREPLAY_PIP_WORK_DIR: a scratch folder."""
import importlib.resources
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WHEEL = os.environ.get("SHMREPLAY_PIP_WHEEL")
pytestmark = pytest.mark.skipif(not WHEEL, reason="SHMREPLAY_PIP_WHEEL (the repaired wheel: tools/test.sh builds it "
                                                  "with tools/build_wheel.sh) is not set")

# Runs inside the namespace with this interpreter: what the machine offers a build (probes), then the user's steps.
INSIDE = textwrap.dedent('''
    import json, os, shutil, subprocess, sys, time
    wheel, work, checker = sys.argv[1:4]

    def run(args):  # its stdout; on failure, exits with the command and its output
        out = subprocess.run(args, capture_output=True, text=True)
        sys.stderr.write(out.stderr)
        if out.returncode != 0:
            sys.exit(f"{args} exited {out.returncode}\\n{out.stdout}")
        return out.stdout

    found = [c for c in ("gcc", "g++", "cc", "c++", "cpp", "clang", "clang++", "ld", "as") if shutil.which(c)]
    runs = []
    for c in ("/usr/bin/cc", "/usr/bin/c++", "/usr/bin/gcc", "/usr/bin/g++"):
        try:
            subprocess.run([c, "--version"], capture_output=True, check=True)
            runs.append(c)
        except (OSError, subprocess.CalledProcessError):
            pass
    include = sorted(os.listdir("/usr/include")) if os.path.isdir("/usr/include") else []
    venv = os.path.join(work, "venv")
    run([sys.executable, "-m", "venv", venv])
    python = os.path.join(venv, "bin", "python")
    started = time.monotonic()
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--only-binary", ":all:", wheel])
    install_s = time.monotonic() - started
    maps = 'import json; f = lambda: {l.split()[-1] for l in open("/proc/self/maps") if "/" in l}; ' \\
           'import numpy; before = f(); import shmreplay; print(json.dumps(sorted(f() - before)))'
    loaded = json.loads(run([python, "-c", maps]))
    sys.stderr.write(run([python, checker, os.path.join(work, "check")]))
    print(json.dumps({"found": found, "runs": runs, "include": include, "install_s": install_s, "loaded": loaded,
                      "venv": venv}))
''')


def wheel_platform(path):
    """The platform part of the wheel's Tag line (WHEEL metadata), e.g. manylinux_2_34_x86_64."""
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
        tags = re.findall(r"^Tag: \S+-\S+-(\S+)$", z.read(meta).decode(), re.M)
    assert tags, f"{path}: no Tag line in {meta}"
    return tags[0]


def grafted_libraries(path):
    """The libraries auditwheel copied into the wheel, by the name of the system's file it copied
    (shmreplay.libs/libzstd-1a2b3c4d.so.1.5.4 was libzstd.so.1.5.4)."""
    with zipfile.ZipFile(path) as z:
        names = [n.split("/", 1)[1] for n in z.namelist() if re.match(r"^[^/]+\.libs/.", n)]
    return {re.sub(r"-[0-9a-f]{8}(\.so)", r"\1", n) for n in names}


def system_copies(names):
    """The files among the dynamic loader's libraries (ldconfig -p) that are named NAMES, or linked to them."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    cache = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=True).stdout
    found = {os.path.realpath(m.group(2)) for m in re.finditer(r"^\s*(\S+) \(.*\) => (\S+)$", cache, re.M)}
    return sorted(f for f in found if os.path.basename(f) in names)


def policy_libraries(platform_tag):
    """The sonames that the manylinux policy of PLATFORM_TAG lets a wheel expect on the user's machine (auditwheel's
    policy file)."""
    name = re.sub(r"_(x86_64|aarch64|i686|ppc64le|s390x|armv7l|riscv64)$", "", platform_tag)
    policies = json.loads((importlib.resources.files("auditwheel.policy") / "manylinux-policy.json").read_text())
    policy = [p for p in policies if p["name"] == name or name in p.get("aliases", [])]
    assert policy, f"auditwheel has no policy {name}"
    return set(policy[0]["lib_whitelist"])


def test_the_wheel_carries_the_manylinux_tag_that_auditwheel_confirms_and_the_docs_state():
    pytest.importorskip("auditwheel", reason="auditwheel is not installed here (tools/setup.sh puts it into .venv)")
    tag = wheel_platform(WHEEL)
    assert tag.startswith("manylinux_"), f"{WHEEL}: platform tag {tag}: not repaired by auditwheel"
    assert os.path.basename(WHEEL).endswith(f"-{tag}.whl"), (WHEEL, tag)
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", WHEEL], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    said = re.search(r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s+"([^"]+)"', shown.stdout)
    assert said and said.group(1) == tag, f"auditwheel show: {shown.stdout}\nexpected the tag {tag}"
    libc, version = platform.libc_ver()
    if (libc, version) == ("glibc", "2.36"):  # Debian 12, the machine docs/packaging.md speaks of
        with open(os.path.join(ROOT, "docs", "packaging.md"), encoding="utf-8") as f:
            docs = f.read()
        assert f"`{tag}`" in docs, f"docs/packaging.md does not state the tag {tag} of the wheel built on Debian 12"


def test_the_wheel_installs_and_runs_processes_and_cli_where_no_compiler_headers_or_dev_libraries_are(tmp_path):
    work = os.path.join(os.environ.get("SHMREPLAY_PIP_WORK_DIR") or str(tmp_path), "no-compiler")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tag = wheel_platform(WHEEL)
    assert tag.startswith("manylinux_"), f"{WHEEL}: platform tag {tag}: not repaired by auditwheel"
    hide = [arg for f in system_copies(grafted_libraries(WHEEL)) for arg in ("--hide", f)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    out = subprocess.run([os.path.join(HERE, "without_toolchain.sh"), *hide, "--", sys.executable, "-c", INSIDE,
                          WHEEL, work, os.path.join(HERE, "installed_check.py")],
                         capture_output=True, text=True, env=env, cwd=work, timeout=600)
    if out.returncode == 77:
        pytest.skip(f"no mount namespace to hide the compilers in: {out.stderr.strip()}")
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    print(out.stderr.strip())
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"pip install of the wheel without a compiler: {seen['install_s']:.1f} s; libraries hidden: {hide[1::2]}")

    assert not seen["found"] and not seen["runs"] and not seen["include"], \
        f"the namespace still offers a compiler or headers: {seen}"
    allowed = policy_libraries(tag) if importlib.util.find_spec("auditwheel") else None
    venv = os.path.realpath(seen["venv"]) + os.sep
    for path in seen["loaded"]:
        if path.startswith(venv) or allowed is None:
            continue
        base = os.path.basename(path)
        assert any(base == so or base.startswith(so + ".") for so in allowed), \
            f"importing shmreplay loaded {path}, neither from the environment nor allowed by the {tag} policy"
