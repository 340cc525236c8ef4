"""The reanalyse example (examples/reanalyse, issue 48 part 4) for a few seconds: envpool actors, the JAX learner and
two reanalyse worker processes on one buffer. The run must end with every process clean, write-backs applied and
chunks completed by the workers (and counted by the buffer), zero violations in the learner's checked rows, and the
buffer removed. Whether it learns takes minutes: docs/python.md records a long run."""
import json
import os
import subprocess
import sys

import pytest

import shmreplay

if os.environ.get("LD_PRELOAD"):  # the sanitizer pass: envpool does not load under ASan's runtime
    pytest.skip("the sanitizer pass (ASan preloaded): envpool is not run there", allow_module_level=True)
pytest.importorskip("envpool")
pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_reanalyse_example_writes_targets_back_and_completes_chunks_with_every_process_clean(name):
    run = os.path.join(ROOT, "examples", "reanalyse", "run.py")
    out = subprocess.run([sys.executable, run, "--seconds", "8", "--json", "--quiet", "--name", name,
                          "--envs-per-actor", "8", "--batch-size", "4", "--capacity", "1024", "--chunk", "32",
                          "--min-replay", "256"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    s = json.loads(out.stdout)
    assert s["ok"] and s["violations"] == 0, s
    assert [p["role"] for p in s["processes"]] == ["learner", "reanalyser 0", "reanalyser 1", "actor 0"]
    assert all(p["clean"] for p in s["processes"]), s["processes"]
    assert s["pushes"] > 0 and s["updates"] > 0 and s["rows_trained"] > 0, s
    assert s["chunks_completed"] > 0 and s["write_backs_applied"] > 0, s
    c = s["buffer_counters"]
    assert c["write_backs_applied"] == s["write_backs_applied"], c
    assert c["write_backs_refused"] == s["write_backs_refused"], c
    assert c["walk_completed"] == s["chunks_completed"], c
    assert all(p["report"]["completed"] > 0 for p in s["processes"][1:3]), "each worker completed a chunk"
    assert not shmreplay.Buffer.exists(name)
