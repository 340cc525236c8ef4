"""The release configuration, read without building (no container runs here; docs/packaging.md): pyproject.toml's
[tool.cibuildwheel] is valid under cibuildwheel's own schema, selects a manylinux x86_64 build for each CPython
from requires-python's minimum up, names scripts that exist, and its image's tag is the one docs/packaging.md
states; tools/install_cxx_deps.sh (its before-all) pins the
versions of the C++ libraries that Debian 12's packages have, which the test suite builds with; and
.github/workflows/wheels.yml is a valid GitHub Actions workflow that builds with the cibuildwheel version tools/setup.sh
installs and publishes only tags, by trusted publishing.

Run by ctest as test_release_config (tests/CMakeLists.txt). cibuildwheel, check-jsonschema, jsonschema and PyYAML
come from tools/setup.sh (.venv); a test skips where its tool is missing and says which."""
import importlib.metadata
import importlib.util
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKFLOW = os.path.join(ROOT, ".github", "workflows", "wheels.yml")


def pyproject():
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def test_cibuildwheel_selects_a_manylinux_x86_64_wheel_for_each_cpython_from_requires_python_up():
    pytest.importorskip("cibuildwheel", reason="cibuildwheel is not installed here (tools/setup.sh puts it in .venv)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    out = subprocess.run([sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform", "linux"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = out.stdout.split()
    minors = []
    for ident in ids:
        m = re.fullmatch(r"cp3(\d+)-manylinux_x86_64", ident)
        assert m, f"cibuildwheel selects {ident}: not a CPython manylinux x86_64 build ({ids})"
        minors.append(int(m.group(1)))
    lowest = re.fullmatch(r">=\s*3\.(\d+)", pyproject()["project"]["requires-python"])
    assert lowest, pyproject()["project"]["requires-python"]
    assert minors == list(range(int(lowest.group(1)), max(minors) + 1)), \
        f"not each CPython from requires-python's 3.{lowest.group(1)} up: {ids}"
    assert sys.version_info.minor in minors, f"the suite's Python 3.{sys.version_info.minor} is not built: {ids}"


def test_the_cibuildwheel_table_is_valid_under_its_schema_and_names_scripts_that_exist():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed here (tools/setup.sh)")
    pytest.importorskip("cibuildwheel", reason="cibuildwheel is not installed here (tools/setup.sh puts it in .venv)")
    schema = json.loads((importlib.resources.files("cibuildwheel") / "resources" / "cibuildwheel.schema.json")
                        .read_text(encoding="utf-8"))
    table = pyproject()["tool"]["cibuildwheel"]
    jsonschema.validate(table, schema)
    commands = [table["test-command"], table["linux"]["before-all"]]
    scripts = [w.replace("{project}", ROOT) for c in commands for w in c.split() if w.startswith("{project}/")]
    assert len(scripts) == len(commands), commands
    for script in scripts:
        assert os.path.isfile(script), f"{script}, named in [tool.cibuildwheel], does not exist"


def test_docs_packaging_states_the_tag_that_the_release_image_gives_the_wheels():
    image = pyproject()["tool"]["cibuildwheel"]["manylinux-x86_64-image"]
    assert re.fullmatch(r"manylinux_2_\d+", image), f"not a PEP 600 image name: {image}"
    assert f"`{image}_x86_64`" in read("docs", "packaging.md"), \
        f"docs/packaging.md does not state the release wheels' tag {image}_x86_64"


def test_the_before_all_script_pins_the_cxx_libraries_at_the_versions_debian_12_packages():
    if not shutil.which("dpkg-query"):
        pytest.skip("not a Debian machine: no dpkg-query to read the packages' versions")
    pinned = dict(re.findall(r'^\s*"\S+/(\S+) v?(\S+) [0-9a-f]{40} ', read("tools", "install_cxx_deps.sh"), re.M))
    packages = {"fmt": "libfmt-dev", "CLI11": "libcli11-dev", "json": "nlohmann-json3-dev"}
    assert set(pinned) == set(packages), pinned
    for name, package in packages.items():
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip(f"{package} is not installed (tools/setup.sh installs it)")
        upstream = re.match(r"(?:\d+:)?([\d.]+)", out.stdout).group(1)
        assert pinned[name] == upstream, f"tools/install_cxx_deps.sh pins {name} {pinned[name]}; Debian has {upstream}"


def test_the_workflow_is_valid_and_builds_with_the_pinned_cibuildwheel_and_publishes_tags_by_trusted_publishing():
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed here (tools/setup.sh)")
    pytest.importorskip("check_jsonschema", reason="check-jsonschema is not installed here (tools/setup.sh)")
    out = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                          WORKFLOW], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    with open(WORKFLOW, encoding="utf-8") as f:
        flow = yaml.safe_load(f)
    on = flow.get("on", flow.get(True))  # YAML 1.1 reads the key `on` as true
    assert on["push"] == {"tags": ["v*"]}, on

    text = read(".github", "workflows", "wheels.yml")
    setup = read("tools", "setup.sh")
    in_flow = re.findall(r"cibuildwheel==([\w.]+)", text)
    in_setup = re.findall(r"cibuildwheel==([\w.]+)", setup)
    assert in_flow and set(in_flow) == set(in_setup), (in_flow, in_setup)
    if importlib.util.find_spec("cibuildwheel"):
        assert importlib.metadata.version("cibuildwheel") == in_setup[0]

    publish = flow["jobs"]["publish"]
    assert set(publish["needs"]) == {"wheels", "sdist"}, publish["needs"]
    assert "refs/tags/v" in publish["if"] and "push" in publish["if"], publish["if"]
    assert publish["permissions"] == {"id-token": "write"}, publish["permissions"]
    assert publish["environment"]["name"] == "pypi"
    uses = [s.get("uses", "") for s in publish["steps"]]
    assert any(u.startswith("pypa/gh-action-pypi-publish@") for u in uses), uses
    assert "secrets." not in text, "trusted publishing needs no token: the workflow names a secret"
    assert flow["permissions"] == {"contents": "read"}, flow["permissions"]
