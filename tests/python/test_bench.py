"""The Python benchmark runs and prints its table (a smoke run: no timing is checked)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_python_benchmark_prints_every_figure():
    bench = os.path.join(ROOT, "tools", "bench", "python_bench.py")
    out = subprocess.run([sys.executable, bench, "--quick", "--json"], capture_output=True, text=True,
                         env=os.environ, timeout=120)
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    assert len(figures) == 6
    for f in figures:
        assert f["ours"] > 0 and f["numpy"] > 0 and f["bytes"] > 0, f
    table = subprocess.run([sys.executable, bench, "--quick"], capture_output=True, text=True, env=os.environ,
                           timeout=120)
    rows = [line for line in table.stdout.splitlines() if line.startswith("| ")]
    assert table.returncode == 0 and len(rows) == 7, table.stdout  # the header and six figures


def test_the_handover_benchmark_prints_every_figure():
    bench = os.path.join(ROOT, "tools", "bench", "handover_bench.py")
    out = subprocess.run([sys.executable, bench, "--quick", "--json"], capture_output=True, text=True,
                         env=os.environ, timeout=180)
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    assert figures[0]["copies"] == "baseline" and figures[0]["seconds"] > 0
    assert all(f["bytes"] > 0 for f in figures)
    for framework in ("PyTorch", "JAX"):
        mine = [f for f in figures if f["hand-over"].startswith(framework)]
        assert mine, figures
        if "not installed" not in mine[0]["hand-over"]:
            assert all(f["seconds"] > 0 for f in mine), mine


def test_the_sample_reuse_benchmark_prints_a_row_per_schema_and_length():
    bench = os.path.join(ROOT, "tools", "bench", "sample_reuse_bench.py")
    out = subprocess.run([sys.executable, bench, "--rounds", "1", "--calls", "2", "--steps", "64", "--lengths", "1,2"],
                         capture_output=True, text=True, env=os.environ, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:]]
    assert [(r[0], r[1], r[3]) for r in rows] == [(tag, "256", length) for tag in ("atari", "atari-stacked")
                                                  for length in ("1", "2")], out.stdout


def test_the_actor_benchmark_prints_both_rates_for_every_adapter_and_env():
    pytest.importorskip("gymnasium")
    pytest.importorskip("pufferlib")
    bench = os.path.join(ROOT, "tools", "bench", "actors_bench.py")
    out = subprocess.run([sys.executable, bench, "--steps", "8", "--trials", "1", "--envs", "2"],
                         capture_output=True, text=True, env=os.environ, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.stdout.splitlines() if line.startswith("| ")]
    assert [r[:2] for r in rows[1:]] == [["Gymnasium SyncVectorEnv", "CartPole-v1"],
                                         ["Gymnasium AsyncVectorEnv", "CartPole-v1"],
                                         ["PufferLib Serial", "CartPole-v1"], ["Gymnasium SyncVectorEnv", "Breakout"],
                                         ["PufferLib Serial", "Breakout"]], out.stdout
    for r in rows[1:]:
        if r[3].startswith("not run"):  # Breakout without ale-py or OpenCV (the atari extra)
            assert r[1] == "Breakout", r
        else:
            assert float(r[3].replace(",", "")) > 0 and float(r[4].replace(",", "")) > 0, r
