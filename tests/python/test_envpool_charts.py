"""The envpool main job's charts (examples/envpool/charts.py): run.py --logdir writes TensorBoard event files and --plot
draws a PNG when the run ends. A 25 s run, read back with TensorBoard's own reader (EventAccumulator). Its own ctest
entry (test_python_charts, as test_ray and test_docs are), so that test_python's timeout does not have to cover it;
it skips itself where envpool, PyTorch, matplotlib or tensorboard is missing."""
import json
import os
import subprocess
import sys

import pytest

import shmreplay

if os.environ.get("LD_PRELOAD"):  # the sanitizer pass: envpool and torch together do not load under ASan's runtime
    pytest.skip("the sanitizer pass (ASan preloaded): envpool is not run there", allow_module_level=True)
pytest.importorskip("envpool")
pytest.importorskip("torch")
pytest.importorskip("matplotlib")
pytest.importorskip("tensorboard")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_launcher_writes_tensorboard_event_files_and_draws_the_run(name, tmp_path):
    """--logdir and --plot (examples/envpool/charts.py): TensorBoard's own reader (EventAccumulator) finds every curve
    in the event file the launcher wrote, with steps (env steps pushed) that never go back and plausible values, and
    the PNG is a PNG of the size asked."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    run = os.path.join(ROOT, "examples", "envpool", "run.py")
    png = tmp_path / "run.png"
    out = subprocess.run([sys.executable, run, "--seconds", "25", "--json", "--quiet", "--name", name, "--workers", "2",
                          "--envs-per-worker", "8", "--batch-size", "4", "--min-replay", "256",
                          "--logdir", str(tmp_path / "runs"), "--plot", str(png), "--plot-size", "800x600"],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout)
    assert summary["ok"] and summary["plot"] == str(png), summary
    run_dir = summary["logdir"]
    assert os.path.dirname(run_dir) == str(tmp_path / "runs") and os.path.basename(run_dir).startswith(name + "-")
    events = EventAccumulator(run_dir)
    events.Reload()
    tags = set(events.Tags()["scalars"])
    wanted = {"charts/episodic_return", "charts/episodes", "charts/SPS", "charts/rows_sampled_per_s",
              "rate_limit/samples_per_insert", "rate_limit/error", "rate_limit/learner_held_back",
              "rate_limit/writers_held_back"}
    assert wanted <= tags, tags
    series = {tag: events.Scalars(tag) for tag in wanted}
    for tag, points in series.items():
        steps = [p.step for p in points]
        assert steps == sorted(steps) and steps[-1] > steps[0], (tag, steps)     # env steps pushed: never back
        assert steps[-1] <= summary["pushes"], (tag, steps[-1], summary["pushes"])
    returns = [p.value for p in series["charts/episodic_return"]]
    assert len(returns) >= 2 and all(8 <= r <= 500 for r in returns), returns   # CartPole-v1: 8 to 500 steps
    curve = [c["mean_return"] for c in summary["learning_curve"]]                # the same series, as float32
    assert len(returns) == len(curve) and all(abs(r - c) < 1e-3 * c for r, c in zip(returns, curve)), (returns, curve)
    sps = [p.value for p in series["charts/SPS"]]
    rows = [p.value for p in series["charts/rows_sampled_per_s"]]
    assert len(sps) >= 15 and len(rows) == len(sps), (len(sps), len(rows))    # about one a second for 25 s
    assert all(v >= 0 for v in sps + rows) and sum(v > 0 for v in sps) >= len(sps) // 2, sps
    assert 0.2 < sum(sps) / len(sps) / summary["env_steps_per_s"] < 5, (sps, summary["env_steps_per_s"])
    ratio = series["rate_limit/samples_per_insert"][-1].value                 # the limiter holds 1/16 rows per step
    assert abs(ratio - summary["rate_limit"]["samples_per_insert_measured"]) < 1e-4, ratio
    assert abs(ratio - 1 / 16) < 0.01, ratio
    held = series["rate_limit/learner_held_back"]
    assert [p.value for p in held] == sorted(p.value for p in held)            # counts since the start
    assert held[-1].value == summary["rate_limit"]["learner_limited"], held[-1]
    assert series["rate_limit/writers_held_back"][-1].value == summary["rate_limit"]["writers_limited"]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")  # the IHDR chunk
    assert (width, height) == (800, 600), (width, height)
    assert not shmreplay.Buffer.exists(name)
    print(f"{len(sps)} seconds charted, returns {returns}, {len(data)} bytes of PNG")


def test_a_logdir_that_cannot_be_made_stops_the_launcher_before_any_process_starts(name, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    run = os.path.join(ROOT, "examples", "envpool", "run.py")
    out = subprocess.run([sys.executable, run, "--seconds", "1", "--name", name, "--logdir", str(blocker / "runs")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "cannot write the event files there" in out.stderr, out.stdout + out.stderr
    assert "processes:" not in out.stdout and not shmreplay.Buffer.exists(name), out.stdout
