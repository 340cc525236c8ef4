"""The consuming queue from Python (docs/design/consuming_queue.md): Buffer.create(consuming_queue=True), the
consume= and consume_timeout= options of the sample calls, Writer(queue_timeout=), and what they refuse."""
import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import shmreplay

SCHEMA = "env:u64 step:u64"


def push(writer, env):
    writer.push_one(env, {"env": np.uint64(env), "step": np.uint64(writer.head(env))})


def rows(batch):
    return list(zip(batch["env"][:, 0].tolist(), batch["step"][:, 0].tolist()))


def test_a_consuming_queue_delivers_each_step_once_in_insertion_order_then_raises_empty_view(name, closing):
    buf = shmreplay.Buffer.create(name, 3, 8, SCHEMA, consuming_queue=True)
    assert buf.consuming_queue and buf.max_times_sampled == 1
    w = shmreplay.Writer(buf, [0, 1, 2])
    s = shmreplay.Sampler(buf, seed=1)
    closing += [w, s]
    pushed = []
    for env in [2, 0, 0, 1, 2, 1, 0, 2]:
        pushed.append((env, w.head(env)))
        push(w, env)
    got = []
    for _ in range(4):
        got += rows(s.sample_transitions("replay", 2, consume="fifo", consume_timeout=0))
    assert got == pushed
    with pytest.raises(shmreplay.EmptyView, match="nothing was delivered"):
        s.sample_transitions("replay", 1, consume="fifo", consume_timeout=0)


def test_random_consumption_delivers_every_step_exactly_once(name, closing):
    buf = shmreplay.Buffer.create(name, 2, 32, SCHEMA, consuming_queue=True)
    w = shmreplay.Writer(buf, [0, 1])
    s = shmreplay.Sampler(buf, seed=7)
    closing += [w, s]
    for _ in range(20):
        push(w, 0)
        push(w, 1)
    got = []
    for _ in range(10):
        got += rows(s.sample("replay", 4, 1, consume="random", consume_timeout=0))
    assert sorted(got) == sorted((e, t) for e in (0, 1) for t in range(20))
    assert got != sorted(got)  # drawn at random, not in order (seeded: fixed)


def test_a_full_queue_holds_its_writer_back_and_refuses_the_other_sample_calls(name, closing):
    buf = shmreplay.Buffer.create(name, 1, 4, SCHEMA, consuming_queue=True)
    w = shmreplay.Writer(buf, [0], queue_timeout=0)
    s = shmreplay.Sampler(buf, seed=1)
    closing += [w, s]
    assert w.queue_timeout == 0.0
    w.queue_timeout = 0.5
    assert w.queue_timeout == 0.5
    w.queue_timeout = 0
    for _ in range(4):
        push(w, 0)
    with pytest.raises(shmreplay.RateLimited, match="env 0"):
        push(w, 0)
    assert w.head(0) == 4
    assert rows(s.sample_transitions("replay", 1, consume="fifo")) == [(0, 0)]
    push(w, 0)  # its slot was delivered: the push goes through
    assert w.head(0) == 5
    with pytest.raises(shmreplay.InvalidArgument, match="it is a consuming queue"):
        s.sample_transitions("replay", 1)
    with pytest.raises(shmreplay.InvalidArgument, match="expected 'fifo', 'random' or None"):
        s.sample_transitions("replay", 1, consume="lifo")
    info = json.loads(subprocess.run([sys.executable, "-m", "shmreplay", "info", name, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    assert info["consuming_queue"] is True


@pytest.mark.parametrize("use_out", [False, True])
def test_a_consuming_call_returns_a_partial_batch_when_a_writer_waits_for_one_of_the_few_free_steps(
        name, closing, use_out):
    buf = shmreplay.Buffer.create(name, 2, 4, SCHEMA, consuming_queue=True)
    w = shmreplay.Writer(buf, [0, 1])
    s = shmreplay.Sampler(buf, seed=3)
    closing += [w, s]
    for env in (0, 1):
        for _ in range(4):
            push(w, env)
    assert rows(s.sample_transitions("replay", 4, consume="fifo")) == [(0, t) for t in range(4)]
    w.close()
    blocked = shmreplay.Writer(buf, [1], queue_timeout=5)
    closing.append(blocked)
    pusher = threading.Thread(target=push, args=(blocked, 1))  # waits for env 1's step 0 to be delivered
    pusher.start()
    time.sleep(0.2)
    out = s.new_batch(8, 2) if use_out else None
    batch = s.sample("replay", 8, 2, consume="random", consume_timeout=2, out=out)
    pusher.join()
    assert blocked.head(1) == 5
    assert batch.rows == 4
    assert batch["step"].shape == (4, 2) and batch.mask.shape == (4, 2)
    assert batch.env_ids.tolist() == [1] * 4 and sorted(batch.starts.tolist()) == [0, 1, 2, 3]
    assert sorted(rows(batch)) == [(1, t) for t in range(4)]
    if use_out:
        assert out.rows == 8 and np.shares_memory(batch["step"], out["step"])
        assert rows(s.sample_transitions("replay", 1, consume="fifo", out=s.new_batch(1, 1))) == [(1, 4)]


def test_consume_on_a_buffer_that_is_not_a_queue_is_refused(name, closing):
    buf = shmreplay.Buffer.create(name, 1, 4, SCHEMA)
    assert not buf.consuming_queue
    w = shmreplay.Writer(buf, [0])
    s = shmreplay.Sampler(buf)
    closing += [w, s]
    push(w, 0)
    with pytest.raises(shmreplay.InvalidArgument, match="it is not a consuming queue"):
        s.sample_transitions("replay", 1, consume="fifo")


def test_a_checkpoint_of_a_queue_loads_as_a_queue_that_delivers_only_the_steps_not_delivered_before_the_save(
        name, copy_name, closing, tmp_path):
    buf = shmreplay.Buffer.create(name, 2, 8, SCHEMA, consuming_queue=True)
    w = shmreplay.Writer(buf, [0, 1])
    s = shmreplay.Sampler(buf, seed=1)
    closing += [w, s]
    pushed = []
    for env in [1, 0, 0, 1, 1, 0]:
        pushed.append((env, w.head(env)))
        push(w, env)
    assert rows(s.sample_transitions("replay", 2, consume="fifo", consume_timeout=0)) == pushed[:2]
    path = tmp_path / "queue.shmrckpt"
    info = shmreplay.save(buf, path)
    assert (info.consuming_queue, info.max_times_sampled, info.initial_priority, info.sequence_priority_length) == (
        True, 1, None, 0)
    shown = json.loads(subprocess.run([sys.executable, "-m", "shmreplay", "save", name, str(tmp_path / "cli.shmrckpt"),
                                       "--json"], check=True, capture_output=True, text=True).stdout)
    assert (shown["consuming_queue"], shown["max_times_sampled"], shown["initial_priority"]) == (True, 1, None)
    assert shmreplay.load(path, copy_name).info.consuming_queue
    loaded = shmreplay.Buffer.open(copy_name)
    d = shmreplay.Sampler(loaded, seed=2)
    closing += [d]
    assert loaded.consuming_queue
    assert rows(d.sample_transitions("replay", 4, consume="fifo", consume_timeout=0)) == pushed[2:]
    with pytest.raises(shmreplay.EmptyView):
        d.sample_transitions("replay", 1, consume="fifo", consume_timeout=0)
