"""The main job on real envpool: the launcher runs envpool actor processes (async mode) and the PyTorch (or JAX)
learner on one buffer for a few seconds; every sampled step's stamp (env id, step index, checksum) is checked by the
learner, and the run must end with zero violations, every process clean and the buffer removed."""
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("learner", ["torch", "jax"])
def test_envpool_actors_and_the_learner_run_with_every_sampled_step_checked(name, learner):
    if learner == "jax":
        pytest.importorskip("jax")
    run = os.path.join(ROOT, "examples", "envpool", "run.py")
    out = subprocess.run([sys.executable, run, "--seconds", "20" if learner == "torch" else "10", "--json", "--quiet",
                          "--name", name, "--workers", "2", "--envs-per-worker", "8", "--batch-size", "4",
                          "--min-replay", "256", "--learner", learner],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout)
    assert summary["ok"] and summary["violations"] == 0, summary
    assert summary["pushes"] > 500 and summary["updates"] > 0 and summary["rows_sampled"] > 0, summary
    assert all(p["clean"] for p in summary["processes"]) and len(summary["processes"]) == 3
    assert summary["processes"][0]["report"]["framework"] == learner
    assert not shmreplay.Buffer.exists(name)
    print(f"{summary['pushes']} env steps, {summary['updates']} updates, return {summary['return_first']:.1f} -> "
          f"{summary['return_last']:.1f}")


def test_two_learner_ranks_each_sample_their_share_from_one_buffer(name):
    """--learners 2: two PyTorch learner processes (ranks of a torch.distributed gloo group, DistributedDataParallel)
    on one buffer made with two learner slots; each samples 16 + 16 rows per update from its own slot, the ranks stop
    after the same update, and the run ends clean with every rank's sampled steps checked."""
    run = os.path.join(ROOT, "examples", "envpool", "run.py")
    out = subprocess.run([sys.executable, run, "--seconds", "20", "--json", "--quiet", "--name", name, "--workers", "2",
                          "--envs-per-worker", "8", "--batch-size", "4", "--min-replay", "256", "--learners", "2"],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout)
    assert summary["ok"] and summary["violations"] == 0 and summary["learners"] == 2, summary
    roles = [p["role"] for p in summary["processes"]]
    assert roles == ["learner 0", "learner 1", "actor 0", "actor 1"], roles
    assert all(p["clean"] and p["exit"] == 0 for p in summary["processes"]), summary["processes"]
    ranks = [p["report"] for p in summary["processes"][:2]]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["rows_per_update"] == 32 for r in ranks), ranks
    assert summary["updates"] > 0 and ranks[0]["updates"] == ranks[1]["updates"], ranks  # one collective each
    per_rank = summary["rows_sampled_per_rank"]
    assert all(n > 0 for n in per_rank) and summary["rows_sampled"] == sum(per_rank), summary
    assert summary["pushes"] > 500
    assert not shmreplay.Buffer.exists(name)
    print(f"{summary['pushes']} env steps, {summary['updates']} updates, rows per rank {per_rank}")


def test_several_learners_need_the_pytorch_learner(name):
    run = os.path.join(ROOT, "examples", "envpool", "run.py")
    out = subprocess.run([sys.executable, run, "--learners", "2", "--learner", "jax", "--name", name],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--learners 2 needs --learner torch" in out.stderr, out.stderr
    assert not shmreplay.Buffer.exists(name)


def test_the_atari_throughput_run_reports_every_process():
    run = os.path.join(ROOT, "examples", "envpool", "throughput.py")
    out = subprocess.run([sys.executable, run, "--seconds", "4", "--json", "--workers", "2", "--envs-per-worker", "2",
                          "--batch-size", "1", "--capacity", "128", "--replay-rows", "4", "--online-rows", "4"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    reports = {r["role"]: r for r in json.loads(out.stdout)}
    assert set(reports) == {"learner", "actor 0", "actor 1", "buffer"}, reports
    assert all(reports[f"actor {w}"]["env_steps"] > 0 for w in range(2)), reports
    assert all(r["layout"] == "stacked" for r in reports.values()), reports
    assert reports["learner"]["batches"] >= 0
    assert reports["learner"]["replay_steps"] <= reports["learner"]["stored_steps"] <= 4 * 128
    assert all(reports[role]["memory"]["VmRSS"] > 0 for role in ("learner", "actor 0", "actor 1")), reports
    buffer = reports["buffer"]  # obs stored one 84x84 frame per step: about a quarter of the 28,233 bytes pushed
    assert buffer["step_bytes_pushed"] == 4 * 84 * 84 + 9
    assert 84 * 84 < buffer["segment_bytes_per_step"] < buffer["step_bytes_pushed"] / 3, buffer
    assert buffer["resident_bytes"] is None or buffer["resident_bytes"] <= buffer["segment_bytes"], buffer


def test_the_atari_throughput_run_with_compress_keeps_obs_frames_compressed():
    """--compress lz4: obs is a compressed stacked field; its segment takes well under one raw frame per step (the
    default budget: a quarter of the frames' bytes), and the actors and the learner run on it as on the stacked one."""
    run = os.path.join(ROOT, "examples", "envpool", "throughput.py")
    out = subprocess.run([sys.executable, run, "--seconds", "4", "--json", "--workers", "1", "--envs-per-worker", "2",
                          "--batch-size", "1", "--capacity", "128", "--replay-rows", "4", "--online-rows", "4",
                          "--compress", "lz4"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    reports = {r["role"]: r for r in json.loads(out.stdout)}
    assert set(reports) == {"learner", "actor 0", "buffer"}, reports
    assert reports["actor 0"]["env_steps"] > 0, reports
    buffer = reports["buffer"]
    assert buffer["schema"].startswith("obs:u8[4,84,84]:stack=0:lz4 "), buffer
    assert buffer["step_bytes_pushed"] == 4 * 84 * 84 + 9
    assert buffer["segment_bytes_per_step"] < 84 * 84 / 2, buffer
    assert reports["learner"]["replay_steps"] <= reports["learner"]["stored_steps"] <= 2 * 128


def test_the_atari_throughput_run_refuses_an_unknown_codec_before_anything_starts():
    run = os.path.join(ROOT, "examples", "envpool", "throughput.py")
    out = subprocess.run([sys.executable, run, "--compress", "gzip"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "expected lz4, zstd or zstd=LEVEL, got 'gzip'" in out.stderr, out.stderr


def test_the_watchdog_prints_every_process_state_while_the_learner_is_stopped(name):
    """SIGSTOP the learner once it trains: the actors fill the limiter's budget and wait, nothing progresses, and the
    launcher (watchdog 1 s) prints the limiter's state, the actors' answers (held back by the limiter) and the
    learner's state from /proc (stopped); after SIGCONT it says progress resumed, and Ctrl-C ends a clean run."""
    import queue
    import re
    import signal
    import threading
    import time
    run = os.path.join(ROOT, "examples", "envpool", "run.py")
    p = subprocess.Popen([sys.executable, run, "--seconds", "120", "--watchdog", "1", "--name", name, "--workers", "2",
                          "--envs-per-worker", "4", "--batch-size", "2", "--min-replay", "256"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in p.stdout] + [lines.put(None)], daemon=True).start()
    seen, learner, stopped = [], None, False

    def until(pattern, seconds=60):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            assert line is not None, "".join(seen)
            seen.append(line)
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r} in:\n" + "".join(seen))

    try:
        learner = int(re.search(r"learner pid (\d+)", until(r"^processes: ")).group(1))
        until(r"^\[learner\] t ")
        os.kill(learner, signal.SIGSTOP)
        stopped = True
        until(r"^\[watchdog\] no progress for [\d.]+ s: .*limiter error [-\d.]+ .*bounds -240 .. 272.* writer\(s\) "
              r"wait for it")
        until(rf"^\[watchdog\] learner \(pid {learner}\): no answer in 2 s; state T \(stopped\)")
        assert any(re.search(r"^\[watchdog\] actor \d \(pid \d+\): held back by the rate limiter .*above max_diff 272",
                             line) for line in seen), "".join(seen)
        os.kill(learner, signal.SIGCONT)
        stopped = False
        until(r"^\[watchdog\] progress again after [\d.]+ s")
        until(r"^\[learner\] t ")
        p.send_signal(signal.SIGINT)  # the launcher's Ctrl-C: SIGTERM to every process, then the summary
        until(r"^  buffer +removed")
        assert p.wait(timeout=60) == 0, "".join(seen)
    finally:
        if stopped:
            os.kill(learner, signal.SIGCONT)
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            p.wait(timeout=60)


def test_a_limiter_that_allows_fewer_fresh_steps_per_update_than_the_learner_waits_for_does_not_stall_the_job(name):
    """--samples-per-insert 0.5: after a sample of 64 rows the actors may push only 128 steps before the limiter holds
    them, fewer than the 256 online steps the learner waits for by default; it waits for what can come (112 here)."""
    run = os.path.join(ROOT, "examples", "envpool", "run.py")
    out = subprocess.run([sys.executable, run, "--seconds", "8", "--json", "--name", name, "--workers", "2",
                          "--envs-per-worker", "8", "--batch-size", "4", "--min-replay", "256",
                          "--samples-per-insert", "0.5"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout)
    assert "[learner] waiting for 112 online steps per update, not 256" in out.stderr, out.stderr
    assert summary["ok"] and summary["updates"] >= 20, summary  # a stalled run stops after its first few updates


def test_charts_options_are_checked_before_anything_starts(name):
    run = os.path.join(ROOT, "examples", "envpool", "run.py")
    out = subprocess.run([sys.executable, run, "--plot", "x.png", "--plot-size", "800", "--name", name],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--plot-size '800': WIDTHxHEIGHT in pixels" in out.stderr, out.stderr
    assert not shmreplay.Buffer.exists(name)
