"""Sampler: the views, mixed and flat sampling, peek, out=, wait, updates, episodes, errors."""
import threading
import time
import tracemalloc

import numpy as np
import pytest

import shmreplay
from conftest import PAYLOAD_SCHEMA, check_batch, payload


def fill(buffer, steps_per_env, start=None):
    """Pushes steps_per_env[e] steps to each env e, in batches of shuffled env subsets."""
    w = shmreplay.Writer(buffer, list(range(buffer.num_envs)))
    rng = np.random.default_rng(0)
    heads = list(buffer.heads())
    left = list(steps_per_env)
    while any(left):
        ids = np.array([e for e in rng.permutation(buffer.num_envs) if left[e] > 0 and rng.random() < 0.7])
        if len(ids) == 0:
            continue
        w.push(ids, payload(ids, [heads[e] for e in ids]))
        for e in ids:
            heads[e] += 1
            left[e] -= 1
    w.close()


def test_samples_are_arrays_of_the_schema_with_mask_env_ids_and_starts(buffer):
    fill(buffer, [20, 5, 0, 1])  # env 0 wrapped (capacity 16), env 2 empty
    s = shmreplay.Sampler(buffer, seed=3)
    b = s.sample("replay", 64, 4, power=1.0)
    assert b.rows == 64 and b.sequence_length == 4
    assert b["head"].shape == (64, 4, 3) and b["head"].dtype == np.uint64
    assert b["body"].shape == (64, 4, 5) and b["half"].dtype == np.float16 and b["brain"].dtype == np.uint16
    assert b["flag"].dtype == np.bool_ and b.mask.dtype == np.bool_ and b.mask.shape == (64, 4)
    assert b.env_ids.dtype == np.int64 and b.starts.dtype == np.int64
    assert set(b.keys()) == set(buffer.schema.names) and "body" in b
    assert set(b.env_ids.tolist()) <= {0, 1, 3}
    assert check_batch(b, buffer.heads()) == []
    assert all(b.starts[b.env_ids == 0] >= 4)  # env 0 keeps its newest 16 steps: 4..19
    assert s.size("replay") == 16 + 5 + 1
    assert (s.sizes(0).head, s.sizes(0).replay) == (20, 16)


def test_the_same_seed_gives_the_same_samples(buffer):
    fill(buffer, [10, 10, 10, 10])
    s = shmreplay.Sampler(buffer, seed=42)
    a = s.sample("replay", 32, 3)
    s.seed(42)
    b = s.sample("replay", 32, 3)
    assert np.array_equal(a.env_ids, b.env_ids) and np.array_equal(a.starts, b.starts)
    assert np.array_equal(a["body"], b["body"])


def test_the_online_view_holds_the_steps_since_the_last_reset(buffer):
    fill(buffer, [6, 6, 6, 6])
    s = shmreplay.Sampler(buffer, seed=1)
    s.reset_online_queue()
    assert s.size("online") == 0
    with pytest.raises(shmreplay.EmptyView):
        s.sample("online", 4, 1)
    fill(buffer, [0, 3, 0, 0])
    assert s.size("online") == 3
    b = s.sample("online", 50, 3)
    assert set(b.env_ids.tolist()) == {1} and set(b.starts.tolist()) <= {6, 7, 8}
    assert check_batch(b, buffer.heads()) == []
    m = s.sample_mixed(5, 7, 2)
    assert m.rows == 12 and set(m.env_ids[5:].tolist()) == {1} and np.all(m.starts[5:] >= 6)
    assert check_batch(m, buffer.heads()) == []


def test_transitions_and_peek(buffer):
    fill(buffer, [3, 0, 2, 1])
    s = shmreplay.Sampler(buffer, seed=5)
    t = s.sample_transitions("replay", 100)
    assert t.sequence_length == 1 and t.mask.all() and check_batch(t) == []
    p = s.peek()
    assert p.mask[:, 0].tolist() == [True, False, True, True]
    assert p["head"][[0, 2, 3], 0, 1].tolist() == [2, 1, 0]
    q = s.peek([3, 0])
    assert q.env_ids.tolist() == [3, 0] and q["head"][:, 0, 1].tolist() == [0, 2]


def test_out_fills_the_same_arrays_and_allocates_none(buffer):
    fill(buffer, [16, 16, 16, 16])
    s = shmreplay.Sampler(buffer, seed=9)
    out = s.new_batch(32, 4)
    ids = {k: id(v) for k, v in out.fields.items()}
    for _ in range(3):  # warm up
        assert s.sample("replay", 32, 4, out=out) is out
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(200):
        s.sample("replay", 32, 4, 1.0, out=out)
        s.sample_mixed(16, 16, 4, out=out)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    # only what this file's lines allocated (the calls below): other threads (JAX's, when another test imported it)
    # allocate meanwhile too
    mine = [tracemalloc.Filter(True, __file__)]
    grown = sum(d.size_diff for d in after.filter_traces(mine).compare_to(before.filter_traces(mine), "filename")
                if d.size_diff > 0)
    assert grown < 4096, f"{grown} bytes allocated by 400 calls with out="  # a new batch would be ~5 KiB
    assert {k: id(v) for k, v in out.fields.items()} == ids
    assert check_batch(out) == []
    with pytest.raises(shmreplay.SizeMismatch, match="32 rows x 4 steps"):
        s.sample("replay", 16, 4, out=out)
    peek_out = s.new_batch(4, 1)
    assert s.peek(out=peek_out) is peek_out and peek_out.mask.all()


def test_bad_sample_arguments_are_clear_errors(buffer):
    s = shmreplay.Sampler(buffer)
    with pytest.raises(shmreplay.EmptyView):
        s.sample("replay", 4, 1)
    fill(buffer, [2, 0, 0, 0])
    with pytest.raises(shmreplay.InvalidArgument, match="batch size is 0"):
        s.sample("replay", 0, 1)
    with pytest.raises(shmreplay.InvalidArgument, match="sequence_length is 17"):
        s.sample("replay", 1, 17)
    with pytest.raises(shmreplay.InvalidArgument, match="unknown view 'all'"):
        s.sample("all", 1, 1)
    with pytest.raises(shmreplay.InvalidArgument, match="unknown episodes mode"):
        s.sample("replay", 1, 1, episodes="never")
    with pytest.raises(shmreplay.EnvOutOfRange):
        s.peek([4])
    with pytest.raises(shmreplay.InvalidArgument, match="cannot make a batch for .*sequence_length is 17"):
        s.new_batch(4, 17)
    with pytest.raises(shmreplay.InvalidArgument, match="batch size is 4611686018427387904.*address space"):
        s.new_batch(2**62, 4)


def test_one_learner_at_a_time(buffer):
    s = shmreplay.Sampler(buffer)
    with pytest.raises(shmreplay.LeaseHeld):
        shmreplay.Sampler(buffer)
    s.close()
    with pytest.raises(shmreplay.InvalidArgument, match="closed"):
        s.sample("replay", 1, 1)
    with shmreplay.Sampler(buffer):
        pass
    shmreplay.Sampler(buffer)


def test_wait_returns_when_a_writer_thread_pushes_and_releases_the_gil(buffer):
    s = shmreplay.Sampler(buffer)
    assert s.wait("replay", 1, timeout=0.05) is False
    ticks = 0

    def writer():
        nonlocal ticks
        w = shmreplay.Writer(buffer, [0])
        for step in range(5):
            time.sleep(0.05)
            w.push([0], payload([0], [step]))
        ticks = 1

    t = threading.Thread(target=writer)
    t.start()
    started = time.monotonic()
    assert s.wait("replay", 5, timeout=30.0) is True  # the writer thread runs while we wait: GIL released
    assert time.monotonic() - started < 25.0
    t.join()
    assert s.size("replay") == 5
    started = time.monotonic()
    assert s.wait("replay", 6, timeout=0.3) is False
    assert time.monotonic() - started >= 0.29


def test_a_python_thread_keeps_running_while_another_samples(buffer):
    fill(buffer, [16, 16, 16, 16])
    s = shmreplay.Sampler(buffer, seed=1)
    stop = threading.Event()
    counts = [0]

    def counter():
        while not stop.is_set():
            counts[0] += 1

    t = threading.Thread(target=counter)
    t.start()
    out = s.new_batch(256, 16)
    for _ in range(200):
        s.sample("replay", 256, 16, out=out)
    stop.set()
    t.join()
    assert counts[0] > 0


def test_closing_a_sampler_while_another_thread_uses_it_ends_that_threads_calls_cleanly(buffer):
    # Each call keeps the C++ Sampler alive until it returns, so a close() from another thread never destroys it
    # under a running call (a use after free before; the sanitized test run sees one at once). The other thread's
    # calls either complete or raise "this Sampler is closed", and the learner role is free once it has stopped.
    fill(buffer, [16, 16, 16, 16])
    for trial in range(60):
        s = shmreplay.Sampler(buffer, seed=trial)
        out = s.new_batch(64, 1)
        errors, started = [], threading.Event()

        def user():
            calls = [lambda: s.sample_transitions("replay", 64, out=out), lambda: s.sample("replay", 4, 3),
                     lambda: s.size("replay"), lambda: s.sizes(1), lambda: s.retries, lambda: s.peek(),
                     lambda: s.total_weight("replay", 2), lambda: s.reset_online_queue(), lambda: s.seed(trial),
                     lambda: s.pop_episodes(), lambda: s.wait("replay", 1, 0.0)]
            started.set()
            for i in range(100_000):
                try:
                    calls[i % len(calls)]()
                except Exception as e:  # noqa: BLE001 - the test asserts what it was
                    errors.append(e)
                    return

        t = threading.Thread(target=user)
        t.start()
        started.wait()
        time.sleep(0.0003 * (trial % 5))
        s.close()
        t.join()
        assert len(errors) == 1 and isinstance(errors[0], shmreplay.InvalidArgument), errors
        assert "this Sampler is closed" in str(errors[0])
        shmreplay.Sampler(buffer).close()  # the learner role was released


def test_two_samplers_filling_one_out_batch_from_two_threads_take_turns(buffer, name):
    # The out= batch has a mutex of its own: each call fills it whole, and the two never prepare it at once.
    other = shmreplay.Buffer.create(name + "-other", 4, 16, PAYLOAD_SCHEMA)
    try:
        fill(buffer, [16, 16, 16, 16])
        fill(other, [9, 9, 9, 9])
        samplers = [shmreplay.Sampler(buffer, seed=1), shmreplay.Sampler(other, seed=2)]
        shared = samplers[0].new_batch(64, 4)
        errors = []

        def run(s):
            try:
                for _ in range(300):
                    s.sample("replay", 64, 4, out=shared)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(s,)) for s in samplers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert check_batch(shared) == []
        for s in samplers:
            s.close()
    finally:
        shmreplay.Buffer.remove(name + "-other")


def test_updates_rewrite_stored_steps_in_place(buffer):
    fill(buffer, [3, 3, 0, 0])
    s = shmreplay.Sampler(buffer)
    assert s.try_update(0, 1, {"body": np.full(5, 99, np.float32)}) is True
    done = s.update([1, 1, 0], [0, 2, 2], {"body": np.full((3, 5), 7, np.float32)})
    assert done.tolist() == [True, True, True]
    b = s.sample("replay", 1, 3)  # any row; read the steps back through peek and samples
    rows = {}
    for _ in range(50):
        b = s.sample("replay", 8, 1, out=b if b.rows == 8 and b.sequence_length == 1 else None)
        for e, st, body in zip(b.env_ids, b.starts, b["body"][:, 0]):
            rows[(int(e), int(st))] = body.tolist()
    assert rows[(0, 1)] == [99.0] * 5 and rows[(1, 0)] == [7.0] * 5 and rows[(0, 2)] == [7.0] * 5
    assert rows[(0, 0)] != [7.0] * 5
    with pytest.raises(shmreplay.InvalidArgument, match="never published"):
        s.try_update(2, 0, {"body": np.zeros(5, np.float32)})


def test_completed_episodes_are_popped_with_their_return(name):
    buf = shmreplay.Buffer.create(name, 2, 32, "obs:f32 reward:f32 done:bool", done="done", reward="reward")
    w = shmreplay.Writer(buf, [0, 1])
    for t in range(5):
        w.push([0, 1], {"obs": np.zeros(2, np.float32), "reward": np.array([1.0, 2.0], np.float32),
                        "done": np.array([t == 2, t == 4])})
    s = shmreplay.Sampler(buf)
    records = sorted(s.pop_episodes(), key=lambda r: r.env)
    assert [(r.env, r.first_step, r.length, r.episode_return, r.end) for r in records] == [
        (0, 0, 3, 3.0, "done"), (1, 0, 5, 10.0, "done")]
    assert s.pop_episodes() == []
    w.push([0], {"obs": np.zeros(1, np.float32), "reward": np.ones(1, np.float32), "done": np.array([True])})
    assert [r.length for r in s.pop_episodes(2**62)] == [3]  # max only bounds the answer: nothing is made for it
    b = s.sample("replay", 64, 4, episodes="stop")
    for r in range(b.rows):  # a row of env 0 never runs past step 2 into the next episode
        if b.env_ids[r] == 0 and b.starts[r] <= 2:
            assert b.starts[r] + b.mask[r].sum() <= 3


def test_out_must_be_a_batch(buffer):
    fill(buffer, [2, 2, 2, 2])
    s = shmreplay.Sampler(buffer)
    with pytest.raises(shmreplay.InvalidArgument, match="out= takes a shmreplay.Batch"):
        s.sample("replay", 2, 1, out={"head": np.zeros((2, 1, 3))})


def test_python_threads_pushing_and_sampling_at_once_never_see_a_torn_step(name):
    """Two threads share one Writer (its mutex serialises them), a third has its own Writer, and the main thread
    samples meanwhile with the GIL released during every copy: every sampled byte must check out."""
    buf = shmreplay.Buffer.create(name, 6, 32, "head:u64[3] body:f32[5] flag:bool half:f16[2] brain:bf16")
    shared = shmreplay.Writer(buf, [0, 1, 2, 3])
    own = shmreplay.Writer(buf, [4, 5])
    stop = threading.Event()
    errors = []

    def pusher(writer, envs):
        try:
            rng = np.random.default_rng(envs[0])
            while not stop.is_set():
                ids = [e for e in envs if rng.random() < 0.7]
                if ids:  # each thread has its own envs, so their heads move only here
                    writer.push(ids, payload(ids, [writer.head(e) for e in ids]))
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=pusher, args=(shared, [0, 1])),
               threading.Thread(target=pusher, args=(shared, [2, 3])),
               threading.Thread(target=pusher, args=(own, [4, 5]))]
    for t in threads:
        t.start()
    try:
        s = shmreplay.Sampler(buf, seed=2)
        assert s.wait("replay", 64, timeout=30.0)
        out = s.new_batch(64, 8)
        problems, rows, deadline = [], 0, time.monotonic() + 2.0
        while time.monotonic() < deadline:
            s.sample("replay", 64, 8, 1.0, out=out)
            problems += check_batch(out, buf.heads())
            rows += out.rows
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    assert problems == [], problems[:5]
    assert rows > 0 and int(buf.heads().sum()) > 100


def test_every_array_of_a_batch_starts_on_a_64_byte_boundary_and_is_writable(buffer):
    fill(buffer, [5, 5, 5, 5])
    s = shmreplay.Sampler(buffer, seed=1)
    for batch in (s.sample("replay", 7, 3), s.new_batch(5, 2), s.sample_transitions("replay", 9), s.peek()):
        for a in list(batch.fields.values()) + [batch.mask, batch.env_ids, batch.starts]:
            assert a.ctypes.data % 64 == 0 and a.flags.c_contiguous and a.flags.writeable, a.dtype
    assert batch.schema == buffer.schema
