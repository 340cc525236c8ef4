"""The reanalyse walk from Python (docs/design/reanalyse.md): Buffer.create(reanalyse_chunk=), Reanalyser's orders
and passes, a worker process SIGKILLed holding a chunk, and what it refuses."""
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import shmreplay

SCHEMA = "step:u64 reward:f32 done:bool"


def push(writer, env, steps, reward=lambda step: 0.0):
    for _ in range(steps):
        step = writer.head(env)
        writer.push_one(env, {"step": np.uint64(step), "reward": np.float32(reward(step)), "done": False})


def take_pass(r, order, version):
    """(env, chunk) of every chunk due in the pass of the first one, each completed with `version`."""
    out, walk_pass = [], None
    while (c := r.try_next(order)) is not None:
        if walk_pass is not None and c.walk_pass != walk_pass:
            assert r.give_back(c)
            break
        walk_pass = c.walk_pass
        out.append((c.env, c.chunk))
        assert r.complete(c, version)
    return out


def test_a_sweep_hands_each_full_chunk_once_per_pass_oldest_first(name, closing):
    buf = shmreplay.Buffer.create(name, 2, 16, SCHEMA, done="done", reward="reward", reanalyse_chunk=4)
    assert buf.reanalyse_chunk == 4
    w = shmreplay.Writer(buf, [0, 1])
    r = shmreplay.Reanalyser(buf)
    closing += [w, r]
    push(w, 0, 10)
    push(w, 1, 13)
    c = r.try_next("sweep")
    assert (c.env, c.chunk, c.first_step, c.end_step, c.steps, c.walk_pass) == (0, 0, 0, 4, 4, 1)
    assert r.give_back(c)
    assert take_pass(r, "sweep", 1) == [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2)]
    assert r.walk_pass == 2 and r.newest_version == 1


def test_oldest_version_first_and_largest_return_first(name, closing):
    buf = shmreplay.Buffer.create(name, 1, 16, SCHEMA, done="done", reward="reward", reanalyse_chunk=4)
    w = shmreplay.Writer(buf, [0])
    r = shmreplay.Reanalyser(buf)
    closing += [w, r]
    push(w, 0, 16, reward=lambda step: [1.0, 4.0, -2.0, 3.0][step // 4])
    assert take_pass(r, "largest_return", 0) == [(0, 1), (0, 3), (0, 0), (0, 2)]
    for version, chunk in [(5, 0), (2, 1), (9, 2), (1, 3)]:  # pass 2: record these versions
        c = r.next("sweep", timeout=1.0)
        assert c.chunk == chunk
        assert r.complete(c, version)
    assert take_pass(r, "oldest_version", 10) == [(0, 3), (0, 1), (0, 0), (0, 2)]


WORKER = """
import os, sys, time
import shmreplay
buf = shmreplay.Buffer.open(sys.argv[1])
r = shmreplay.Reanalyser(buf)
c = r.next("sweep", timeout=5.0)
print(c.env, c.chunk, flush=True)
time.sleep(60)  # killed holding it
"""


def test_a_chunk_held_by_a_sigkilled_worker_process_is_handed_again_in_the_same_pass(name, closing):
    buf = shmreplay.Buffer.create(name, 1, 16, SCHEMA, reanalyse_chunk=4)
    w = shmreplay.Writer(buf, [0])
    closing.append(w)
    push(w, 0, 8)
    victim = subprocess.Popen([sys.executable, "-c", WORKER, name], stdout=subprocess.PIPE, text=True)
    try:
        assert victim.stdout.readline().split() == ["0", "0"]
        r = shmreplay.Reanalyser(buf)
        closing.append(r)
        c = r.try_next("sweep")
        assert (c.chunk, c.walk_pass) == (1, 1)  # chunk 0 is held by a live worker
        assert r.try_next("sweep") is None
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        again = r.try_next("sweep")
        assert (again.chunk, again.walk_pass) == (0, 1)
    finally:
        victim.kill()
        victim.wait()


def test_the_walk_refuses_a_buffer_without_one_a_chunk_past_the_ring_an_unknown_order(name, closing):
    plain = shmreplay.Buffer.create(name, 1, 8, "x:f32")
    with pytest.raises(shmreplay.InvalidArgument, match="it has no walk"):
        shmreplay.Reanalyser(plain)
    with pytest.raises(shmreplay.InvalidArgument, match="reanalyse_chunk is 9, expected 0 .no walk. or 1 to"):
        shmreplay.Buffer.create(name, 1, 8, "x:f32", replace=True, reanalyse_chunk=9)
    buf = shmreplay.Buffer.create(name, 1, 8, "x:f32", replace=True, reanalyse_chunk=2)
    r = shmreplay.Reanalyser(buf)
    closing.append(r)
    with pytest.raises(shmreplay.InvalidArgument, match="order is 'newest', expected 'oldest_version'"):
        r.try_next("newest")
    with pytest.raises(shmreplay.InvalidArgument, match="it has no reward field"):
        r.try_next("largest_return")


def test_a_mixture_takes_its_reanalysed_fraction_from_the_chunks_completed_with_the_newest_version(name, closing):
    buf = shmreplay.Buffer.create(name, 1, 16, SCHEMA, reanalyse_chunk=4)
    w = shmreplay.Writer(buf, [0])
    r = shmreplay.Reanalyser(buf)
    s = shmreplay.Sampler(buf, seed=3)
    closing += [w, r, s]
    push(w, 0, 16)
    for version in [1, 2, 1, 2]:  # chunks 0..3: chunks 1 and 3 (steps 4-7, 12-15) are fresh
        c = r.try_next("sweep")
        assert r.complete(c, version)
    b = s.sample("replay", 40, 1, mixture={"uniform": 0.5, "reanalysed": 0.5})
    assert b.selector_rows == {"uniform": slice(0, 20, 1), "reanalysed": slice(20, 40, 1)}
    fresh = b["step"][20:, 0].tolist()
    assert all(4 <= t < 8 or 12 <= t < 16 for t in fresh)
    assert len(set(fresh)) > 4
    only = s.sample("replay", 16, 1, reanalysed=True)
    assert all(4 <= t < 8 or 12 <= t < 16 for t in only["step"][:, 0].tolist())


def test_next_sleeps_with_the_gil_released_until_a_writer_thread_fills_a_chunk_and_returns_none_at_its_timeout(
        name, closing, monkeypatch):
    monkeypatch.setenv("SHMREPLAY_RECHECK_MS", "30000")  # a wake-up that does not come shows as the 20 s timeout
    buf = shmreplay.Buffer.create(name, 1, 16, SCHEMA, reanalyse_chunk=4)
    w = shmreplay.Writer(buf, [0])
    r = shmreplay.Reanalyser(buf)
    closing += [w, r]
    push(w, 0, 3)
    assert r.next("sweep", timeout=0.2) is None
    got = []
    t = threading.Thread(target=lambda: got.append(r.next("sweep", timeout=20.0)))
    t.start()
    time.sleep(0.3)  # (most likely) asleep in next() by now
    push(w, 0, 1)  # this thread runs while the other sleeps in next(): the GIL is released
    t.join(30)
    assert not t.is_alive()
    assert got[0] is not None and (got[0].chunk, got[0].first_step, got[0].end_step) == (0, 0, 4)
