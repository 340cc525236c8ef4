"""The package under test is the one it should be: when ctest runs the suite against a pip-installed package
(SHMREPLAY_EXPECT_INSTALLED=1), it imports from the environment's site-packages, its version is the wheel's, and
the environment's `shmreplay` CLI prints the same version; SHMREPLAY_EXPECT_NUMPY=1 asserts the NumPy 1 pass. In
every mode, shmreplay.__version__ is the library's kVersion: what include/shmreplay/version.hpp says and what the
CLI (the build's, SHMREPLAY_CLI, else the installed one) prints for --version."""
import importlib.metadata
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import shmreplay

installed = pytest.mark.skipif(os.environ.get("SHMREPLAY_EXPECT_INSTALLED") != "1",
                               reason="testing the build tree (SHMREPLAY_EXPECT_INSTALLED is not 1)")


@installed
def test_the_package_under_test_is_the_one_pip_installed_in_this_environment():
    where = os.path.realpath(shmreplay.__file__)
    assert where.startswith(os.path.realpath(sys.prefix)) and "site-packages" in where, where
    assert importlib.metadata.version("shmreplay") == shmreplay.__version__


@installed
def test_the_environments_cli_and_python_m_shmreplay_print_the_packages_version():
    cli = os.path.join(os.path.dirname(sys.executable), "shmreplay")
    for command in ([cli, "--version"], [sys.executable, "-m", "shmreplay", "--version"]):
        out = subprocess.run(command, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"shmreplay {shmreplay.__version__} "), out.stdout


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_modules_version_is_version_hpps_and_the_clis():
    header = open(os.path.join(ROOT, "include", "shmreplay", "version.hpp")).read()
    parts = [re.search(rf"#define SHMREPLAY_VERSION_{p} (\d+)", header).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    assert shmreplay.__version__ == ".".join(parts)
    cli = os.environ.get("SHMREPLAY_CLI")
    if not cli:
        from shmreplay.__main__ import cli_path
        try:
            cli = cli_path()
        except SystemExit:
            pytest.skip("no shmreplay CLI: SHMREPLAY_CLI is not set and none is installed with the package")
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    m = re.match(r"shmreplay (\S+) \(segment layout", out.stdout)
    assert m, out.stdout
    assert m.group(1) == shmreplay.__version__


def test_numpy_is_the_version_this_pass_is_for():
    major = int(np.__version__.split(".")[0])
    if os.environ.get("SHMREPLAY_EXPECT_NUMPY") == "1":
        assert major == 1 and tuple(map(int, np.__version__.split(".")[:2])) >= (1, 24), np.__version__
    print(f"NumPy {np.__version__}")
