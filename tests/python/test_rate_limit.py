"""The rate limiter from Python: settings at create and on a running buffer, the learner's and a waiting writer's
waits and RateLimited errors, the state as properties, and a writer process that waits for a learner in this
process, with the ratio checked after every sample call."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import shmreplay

SCHEMA = "x:u64"


def push(w, envs):
    w.push(np.array(envs), {"x": np.zeros(len(envs), dtype=np.uint64)})


def test_rate_limit_ratio_and_min_size_are_reverbs_bounds():
    r = shmreplay.RateLimit.ratio(4.0, 1000, 256.0)
    assert (r.min_size_to_sample, r.samples_per_insert, r.min_diff, r.max_diff) == (1000, 4.0, 3744.0, 4256.0)
    assert r.has_ratio and r.error_buffer == 256.0
    m = shmreplay.RateLimit.min_size(50)
    assert not m.has_ratio and m.min_size_to_sample == 50
    assert "min size 50" in repr(m)
    assert shmreplay.RateLimit(min_size_to_sample=50) == m


def test_a_buffer_keeps_its_limit_and_a_running_buffer_can_change_or_drop_it(name):
    buf = shmreplay.Buffer.create(name, 2, 64, SCHEMA, rate_limit=shmreplay.RateLimit.ratio(2.0, 4, 8.0))
    assert shmreplay.Buffer.open(name).rate_limit == shmreplay.RateLimit.ratio(2.0, 4, 8.0)
    with shmreplay.Writer(buf, [0, 1]) as w:
        for _ in range(10):
            push(w, [0, 1])
    s = buf.rate_limit_state()
    assert (s.inserts, s.samples, s.error, s.stored) == (20, 0, 40.0, 20)
    assert s.learner_waiting_since is None and s.writer_waiting_since is None
    other = shmreplay.Buffer.open(name)
    other.rate_limit = shmreplay.RateLimit.ratio(1.0, 4, 6.0)
    assert buf.rate_limit_state().error == 4.0 and buf.rate_limit_state().changes == 1
    other.rate_limit = None
    assert buf.rate_limit is None and buf.rate_limit_state().limit is None
    with pytest.raises(shmreplay.InvalidArgument, match="samples_per_insert is 0"):
        other.rate_limit = shmreplay.RateLimit.ratio(0.0, 4, 6.0)


def test_the_learner_is_held_back_with_ratelimited_a_timeouterror_that_says_why(name):
    buf = shmreplay.Buffer.create(name, 2, 1024, SCHEMA, rate_limit=shmreplay.RateLimit.ratio(2.0, 4, 8.0))
    with shmreplay.Writer(buf, [0, 1]) as w, shmreplay.Sampler(buf, seed=1) as s:
        push(w, [0])
        assert s.rate_limit_verdict(1) == "min_size"
        with pytest.raises(shmreplay.RateLimited, match="1 steps are stored, fewer than min_size_to_sample 4"):
            s.sample_transitions("replay", 1, rate_limit_timeout=0)
        push(w, [0, 1])
        push(w, [1])
        batch = s.sample_transitions("replay", 8, rate_limit_timeout=0)  # error 8 - 8 = 0 = min_diff
        assert batch.rows == 8
        assert s.rate_limit_verdict(1) == "learner_ahead"
        with pytest.raises(TimeoutError):
            s.sample("replay", 1, 1, rate_limit_timeout=0.05)
        with pytest.raises(shmreplay.InvalidArgument, match="rate_limit_timeout is -1"):
            s.sample_transitions("replay", 1, rate_limit_timeout=-1)
        # mixed samples count both parts
        for _ in range(4):
            push(w, [0, 1])
        s.sample_mixed(8, 8, 1, rate_limit_timeout=0)
        assert buf.rate_limit_state().samples == 24
        assert buf.rate_limit_state().learner_limited == 2  # the refused timeout never reached it
        assert buf.rate_limit_state().learner_timeouts == 2  # both held-back calls gave up (layout 1.8)


def test_a_waiting_writer_times_out_with_nothing_written_and_can_go_on_without_waiting(name):
    buf = shmreplay.Buffer.create(name, 2, 64, SCHEMA, rate_limit=shmreplay.RateLimit.ratio(1.0, 2, 4.0))
    w = shmreplay.Writer(buf, [0, 1], wait_for_rate_limit=True, rate_limit_timeout=0.1)
    assert w.wait_for_rate_limit and w.rate_limit_timeout == pytest.approx(0.1)
    for _ in range(3):
        push(w, [0, 1])
    with pytest.raises(shmreplay.RateLimited, match="no learner is attached"):
        push(w, [0])
    assert w.head(0) == 3
    state = buf.rate_limit_state()
    assert state.writer_timeouts == 1 and state.writers_limited == 1 and state.writer_waiters == 0
    w.wait_for_rate_limit = False
    for _ in range(5):
        push(w, [0, 1])
    assert w.head(0) == 8
    w.close()


def test_closing_a_writer_whose_push_waits_in_another_thread_lets_the_other_threads_run(name):
    # close() needs the Writer's mutex, which the waiting push holds (with the GIL released) until its timeout; it
    # waits for it without the GIL, so the interpreter's other threads keep running meanwhile (before, close()
    # held the GIL while it waited, and every other thread stopped until the push's wait was over).
    buf = shmreplay.Buffer.create(name, 2, 64, SCHEMA, rate_limit=shmreplay.RateLimit.ratio(1.0, 2, 4.0))
    w = shmreplay.Writer(buf, [0, 1], wait_for_rate_limit=True, rate_limit_timeout=2.0)
    for _ in range(3):
        push(w, [0, 1])
    outcome, probe = [], []

    def waiting_push():
        try:
            push(w, [0])
        except shmreplay.RateLimited as e:
            outcome.append(e)

    pusher = threading.Thread(target=waiting_push)
    pusher.start()
    deadline = time.monotonic() + 30
    while buf.rate_limit_state().writer_waiters == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert buf.rate_limit_state().writer_waiters == 1
    # a thread that needs the GIL a moment after close() starts: it runs then only if close() let the GIL go
    prober = threading.Thread(target=lambda: (time.sleep(0.2), probe.append(time.monotonic())))
    started_at = time.monotonic()
    prober.start()
    w.close()  # returns once the push has timed out
    closed_at = time.monotonic()
    prober.join()
    pusher.join()
    assert len(outcome) == 1  # the push ended with RateLimited, then close() went on
    # (the prober may also run in the instant the push lets the mutex go, just before close() returns: so it must
    # have run in the first half of close()'s wait, which lasts the rest of the push's 2 s)
    assert probe[0] - started_at < (closed_at - started_at) / 2, "no other thread ran while close() waited"
    with pytest.raises(shmreplay.InvalidArgument, match="closed"):
        push(w, [1])
    assert buf.heads()[0] == 3


def test_a_reservation_that_waits_for_the_limiter_lets_the_other_threads_run(name):
    buf = shmreplay.Buffer.create(name, 2, 64, SCHEMA, rate_limit=shmreplay.RateLimit.ratio(1.0, 2, 4.0))
    w = shmreplay.Writer(buf, [0, 1], wait_for_rate_limit=True, rate_limit_timeout=1.0)
    for _ in range(3):
        push(w, [0, 1])
    probe = []
    prober = threading.Thread(target=lambda: (time.sleep(0.1), probe.append(time.monotonic())))
    started_at = time.monotonic()
    prober.start()
    with pytest.raises(shmreplay.RateLimited):
        w.reserve(0)  # waits for the limiter, without the GIL, then times out
    ended_at = time.monotonic()
    prober.join()
    assert probe[0] - started_at < (ended_at - started_at) / 2, "no other thread ran while reserve() waited"
    w.wait_for_rate_limit = False
    with w.reserve(0) as slot:
        slot["x"][...] = 7
    assert buf.heads()[0] == 4
    w.close()


WRITER = r"""
import numpy as np, shmreplay
buf = shmreplay.Buffer.open({name!r})
w = shmreplay.Writer(buf, [0, 1, 2], wait_for_rate_limit=True, rate_limit_timeout=30.0)
for i in range({pushes}):
    w.push(np.array([0, 1, 2]), {{"x": np.full(3, i, dtype=np.uint64)}})
print("done", flush=True)
"""


def test_a_writer_process_that_waits_stays_within_the_error_buffer_of_a_learner_here(name):
    limit = shmreplay.RateLimit.ratio(1.5, 30, 48.0)
    buf = shmreplay.Buffer.create(name, 3, 4096, SCHEMA, rate_limit=limit)
    pushes = 400
    p = subprocess.Popen([sys.executable, "-c", WRITER.format(name=name, pushes=pushes)], stdout=subprocess.PIPE,
                         text=True, env=os.environ)
    try:
        s = shmreplay.Sampler(buf, seed=2)
        out = s.new_batch(16, 1)
        calls = 0
        while calls * 16 < pushes * 3 * 1.5 - 48:
            s.sample_transitions("replay", 16, rate_limit_timeout=30.0, out=out)
            calls += 1
            state = buf.rate_limit_state()
            # Read right after our own call: samples are ours, inserts only grow while we read.
            assert state.error >= limit.min_diff
            assert state.error <= limit.max_diff
        assert p.wait(timeout=60) == 0
        state = buf.rate_limit_state()
        assert state.inserts == pushes * 3 and state.writer_timeouts == 0
        # (Which side was held back, and how often, depends on the machine's speed: not asserted.)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_rate_limit_compares_unequal_to_none_and_to_other_types(name):
    r = shmreplay.RateLimit.ratio(2.0, 4, 8.0)
    assert (r == None) is False and (r != None) is True  # noqa: E711 (the comparison under test)
    assert r != "ratio" and r != 4 and r == shmreplay.RateLimit.ratio(2.0, 4, 8.0)
    assert r != shmreplay.RateLimit.min_size(4)
    buf = shmreplay.Buffer.create(name, 1, 8, SCHEMA, rate_limit=r)
    assert buf.rate_limit != None and buf.rate_limit == r  # noqa: E711 ("a RateLimit or None")
    buf.rate_limit = None
    assert buf.rate_limit is None
