"""Blocking waits from Python: timeouts in seconds of any size (1e10, 1e300 and inf wait; NaN and negative ones are
refused with the name of the argument), and Ctrl-C during a wait for the rate limiter (a push or a sample call):
KeyboardInterrupt arrives within a re-check, and the push writes nothing."""
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import shmreplay

SCHEMA = "x:u64"


def push(w, envs):
    w.push(np.array(envs), {"x": np.zeros(len(envs), dtype=np.uint64)})


def later(seconds, fn):
    """Runs fn in a thread after `seconds`; returns the thread (join it)."""
    t = threading.Thread(target=lambda: (time.sleep(seconds), fn()))
    t.start()
    return t


@pytest.mark.parametrize("timeout", [1e10, 1e300, math.inf])
def test_sampler_wait_with_a_huge_or_infinite_timeout_waits_for_the_step(name, timeout):
    buf = shmreplay.Buffer.create(name, 1, 16, SCHEMA)
    w = shmreplay.Writer(buf, [0])
    s = shmreplay.Sampler(buf)
    pusher = later(0.2, lambda: push(w, [0]))
    t0 = time.monotonic()
    assert s.wait("replay", 1, timeout) is True
    waited = time.monotonic() - t0
    pusher.join()
    assert waited >= 0.15


@pytest.mark.parametrize("timeout", [1e10, 1e300, math.inf])
def test_a_waiting_writer_with_a_huge_or_infinite_timeout_waits_for_the_learner(name, timeout):
    buf = shmreplay.Buffer.create(name, 1, 64, SCHEMA, rate_limit=shmreplay.RateLimit.ratio(1.0, 1, 4.0))
    w = shmreplay.Writer(buf, [0], wait_for_rate_limit=True, rate_limit_timeout=timeout)
    assert w.rate_limit_timeout == timeout if timeout != 1e300 else math.isinf(w.rate_limit_timeout)
    for _ in range(5):
        push(w, [0])  # the error is 5 = max_diff: the next push waits for a sample
    s = shmreplay.Sampler(buf)
    sampler = later(0.2, lambda: s.sample_transitions("replay", 2, rate_limit_timeout=0))
    t0 = time.monotonic()
    push(w, [0])
    waited = time.monotonic() - t0
    sampler.join()
    assert waited >= 0.15
    assert w.head(0) == 6


@pytest.mark.parametrize("timeout", [1e10, math.inf])
def test_a_sample_call_with_a_huge_or_infinite_timeout_waits_for_the_writers(name, timeout):
    buf = shmreplay.Buffer.create(name, 1, 64, SCHEMA, rate_limit=shmreplay.RateLimit.min_size(4))
    w = shmreplay.Writer(buf, [0])
    s = shmreplay.Sampler(buf)
    pusher = later(0.2, lambda: [push(w, [0]) for _ in range(4)])
    t0 = time.monotonic()
    batch = s.sample_transitions("replay", 2, rate_limit_timeout=timeout)
    waited = time.monotonic() - t0
    pusher.join()
    assert batch.rows == 2
    assert waited >= 0.15


@pytest.mark.parametrize("bad", [math.nan, -1.0, -math.inf])
def test_nan_and_negative_timeouts_are_refused_naming_the_argument(name, bad):
    buf = shmreplay.Buffer.create(name, 1, 64, SCHEMA, rate_limit=shmreplay.RateLimit.min_size(1))
    with pytest.raises(shmreplay.InvalidArgument, match=r"rate_limit_timeout is (nan|-1|-inf).*seconds >= 0"):
        shmreplay.Writer(buf, [0], wait_for_rate_limit=True, rate_limit_timeout=bad)
    w = shmreplay.Writer(buf, [0])
    with pytest.raises(shmreplay.InvalidArgument, match=r"rate_limit_timeout is (nan|-1|-inf).*seconds >= 0"):
        w.rate_limit_timeout = bad
    push(w, [0])
    s = shmreplay.Sampler(buf)
    with pytest.raises(shmreplay.InvalidArgument, match=r"rate_limit_timeout is (nan|-1|-inf).*seconds >= 0"):
        s.sample_transitions("replay", 1, rate_limit_timeout=bad)
    with pytest.raises(shmreplay.InvalidArgument, match=r"timeout is (nan|-1|-inf).*seconds >= 0"):
        s.wait("replay", 1, bad)
    with pytest.raises(shmreplay.InvalidArgument, match=r"ready_timeout is (nan|-1|-inf).*seconds >= 0"):
        shmreplay.Buffer.open(name, ready_timeout=bad)


# ---------------------------------------------------------------------------------------------------------------
# Ctrl-C during a wait for the rate limiter

_CHILD = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import shmreplay
    name, what = sys.argv[1], sys.argv[2]
    buf = shmreplay.Buffer.open(name)
    if what == "push":
        w = shmreplay.Writer(buf, [1], wait_for_rate_limit=True, rate_limit_timeout=30.0)
        call = lambda: w.push(np.array([1]), {"x": np.zeros(1, dtype=np.uint64)})
    elif what == "push_one":
        w = shmreplay.Writer(buf, [1], wait_for_rate_limit=True, rate_limit_timeout=30.0)
        call = lambda: w.push_one(1, {"x": np.uint64(3)})
    elif what == "reserve":
        w = shmreplay.Writer(buf, [1], wait_for_rate_limit=True, rate_limit_timeout=30.0)
        call = lambda: w.reserve(1)
    else:
        s = shmreplay.Sampler(buf)
        call = lambda: s.sample_transitions("replay", 4, rate_limit_timeout=30.0)
    print("waiting", flush=True)
    t0 = time.monotonic()
    try:
        call()
        outcome = "returned"
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    except Exception as e:
        outcome = f"{type(e).__name__}: {e}"
    print(json.dumps({"outcome": outcome, "seconds": time.monotonic() - t0}), flush=True)
""")


@pytest.mark.parametrize("what", ["push", "push_one", "reserve", "sample"])
def test_ctrl_c_during_a_wait_for_the_rate_limiter_raises_keyboard_interrupt_and_writes_nothing(name, what):
    # max_diff 5: env 0's 5 steps (pushed without waiting) fill the budget, so a waiting writer's push waits; a
    # min size of 100 holds a sample call back.
    limit = shmreplay.RateLimit.ratio(1.0, 1, 4.0) if what != "sample" else shmreplay.RateLimit.min_size(100)
    buf = shmreplay.Buffer.create(name, 2, 64, SCHEMA, rate_limit=limit)
    w = shmreplay.Writer(buf, [0])
    for _ in range(5):
        push(w, [0])
    child = subprocess.Popen([sys.executable, "-c", _CHILD, name, what], stdout=subprocess.PIPE, text=True,
                             env=os.environ)
    try:
        assert child.stdout.readline().strip() == "waiting"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (buf.rate_limit_state().writer_waiters == 0 if what != "sample"
                                               else buf.rate_limit_state().learner_waiting_rows == 0):
            time.sleep(0.01)
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        line = child.stdout.readline()
        seen = time.monotonic() - signalled
        assert line, "the child printed nothing"
        report = json.loads(line)
        assert report["outcome"] == "KeyboardInterrupt"
        assert seen < 2.0, f"KeyboardInterrupt came {seen:.2f} s after SIGINT"
        assert child.wait(timeout=20) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    # nothing was written, and nothing is left waiting or reserved
    assert buf.heads()[1] == 0
    state = buf.rate_limit_state()
    assert state.writer_waiters == 0 and state.learner_waiting_rows == 0
    if what != "sample":
        assert buf.rate_limit_state().writer_timeouts == 0
