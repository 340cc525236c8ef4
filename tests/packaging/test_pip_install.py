"""The Python package as a user gets it: pip installs this source tree into a fresh virtual environment, then a
writer process and a learner process run from that environment (not the build tree) against one buffer, and the
environment's `shmreplay` CLI and `python -m shmreplay` see that buffer (the checks: installed_check.py).

Run by ctest as test_pip_install (SHMREPLAY_SOURCE_DIR: the clone; SHMREPLAY_PIP_WORK_DIR: a scratch folder).
SHMREPLAY_PIP_WHEEL, when set, names the wheel that pip already built from this clone (tools/test.sh builds it
with tools/build_wheel.sh first): the fresh environment installs that file instead of building the source a second
time, which is the same `pip install` split in two steps."""
import os
import shutil
import sys
import time

import pytest

from installed_check import check_environment, run

SOURCE = os.environ.get("SHMREPLAY_SOURCE_DIR")
pytestmark = pytest.mark.skipif(not SOURCE, reason="SHMREPLAY_SOURCE_DIR (the source tree to install) is not set")


def test_pip_installs_the_clone_into_a_fresh_venv_whose_processes_and_cli_share_one_buffer(tmp_path):
    work = os.environ.get("SHMREPLAY_PIP_WORK_DIR") or str(tmp_path)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    venv = os.path.join(work, "venv")
    python, cli = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "shmreplay")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}

    run([sys.executable, "-m", "venv", venv], env=env)
    started = time.monotonic()
    what = os.environ.get("SHMREPLAY_PIP_WHEEL") or SOURCE
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", what], env=env, timeout=840)
    print(f"pip install {what}: {time.monotonic() - started:.1f} s")

    learned = check_environment(python, cli, work, env)
    assert learned["module"].startswith(venv), learned
