"""The peers benchmark (tools/bench/peers/run.py) runs every implementation and prints its table and JSON (a
smoke run, --quick: no timing is checked). Skipped where the peers are not installed in this interpreter
(`tools/setup.sh --bench` makes .venv-peers; run `.venv-peers/bin/python -m pytest tests/python/test_peers_bench.py`,
or configure with -DSHMREPLAY_TEST_PEERS_PYTHON=.venv-peers/bin/python for ctest's test_peers_bench)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = ("cpprb", "torchrl", "tensordict", "flashbax", "dejax")
missing = [m for m in PEERS if importlib.util.find_spec(m) is None]

pytestmark = pytest.mark.skipif(bool(missing), reason=f"peers not installed here: {', '.join(missing)} "
                                                      "(tools/setup.sh --bench makes .venv-peers)")


def test_the_peers_benchmark_prints_its_table_and_json(tmp_path):
    out = tmp_path / "peers.json"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench", "peers", "run.py"), "--quick",
                          "--json", str(out)], capture_output=True, text=True, timeout=840)
    assert run.returncode == 0, run.stderr[-4000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ")]
    assert any(line.startswith("| small | add, 1 writer") for line in rows), run.stdout
    data = json.loads(out.read_text())
    by_key = {r["key"]: r for r in data["results"]}
    for key in ("shmreplay", "cpprb", "cpprb-per", "torchrl", "flashbax-flat", "flashbax-trajectory", "dejax"):
        assert "figures" in by_key[key], (key, by_key[key].get("error"))
    ours = by_key["shmreplay"]["figures"]
    assert ours["probe"]["torn"] == 0 and ours["probe"]["checked"] > 0
    for key in ("small add 256/call 2w", "small sample flat 2w", "atari sample seq 0w"):
        assert ours[key]["median"] > 0 and len(ours[key]["trials"]) >= 3, ours[key]
    assert "reverb" in by_key  # measured, or a row saying why not
    assert any(r["ours_over_peer"] for r in data["rows"])
