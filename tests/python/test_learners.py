"""Several learners on one buffer (layout 1.7): Sampler(rank=), Buffer.max_learners, each rank's own stream and
online view, learner processes sampling at once and one of them SIGKILLed and replaced."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import shmreplay
from conftest import PAYLOAD_SCHEMA, check_batch, payload

HERE = os.path.dirname(os.path.abspath(__file__))


def fill(buffer, steps):
    w = shmreplay.Writer(buffer, list(range(buffer.num_envs)))
    for s in range(steps):
        ids = np.arange(buffer.num_envs)
        w.push(ids, payload(ids, [s] * buffer.num_envs))
    w.close()


def test_a_buffer_admits_max_learners_samplers_by_rank_or_the_first_free_slot(name):
    b = shmreplay.Buffer.create(name, 2, 16, PAYLOAD_SCHEMA, max_learners=3)
    assert b.max_learners == 3
    assert shmreplay.Buffer.open(name).max_learners == 3
    first = shmreplay.Sampler(b)
    third = shmreplay.Sampler(b, rank=2)
    second = shmreplay.Sampler(b)
    assert (first.rank, second.rank, third.rank) == (0, 1, 2)
    with pytest.raises(shmreplay.LeaseHeld, match="all 3 learner slots are held"):
        shmreplay.Sampler(b)
    with pytest.raises(shmreplay.LeaseHeld, match="this process already holds learner slot 2"):
        shmreplay.Sampler(b, rank=2)
    with pytest.raises(shmreplay.InvalidArgument, match=r"rank 3.*3 learner slots \(ranks 0 to 2\)"):
        shmreplay.Sampler(b, rank=3)
    second.close()
    assert shmreplay.Sampler(b).rank == 1
    with pytest.raises(shmreplay.InvalidArgument, match="max_learners is 65, expected 1 to 64"):
        shmreplay.Buffer.create(name + "-x", 1, 4, PAYLOAD_SCHEMA, max_learners=65)
    assert shmreplay.Buffer.create(name + "-one", 1, 4, PAYLOAD_SCHEMA).max_learners == 1
    shmreplay.Buffer.remove(name + "-one")


def test_ranks_with_one_seed_draw_different_rows_and_rank_0_draws_what_a_single_learner_draws(name):
    b = shmreplay.Buffer.create(name, 4, 16, PAYLOAD_SCHEMA, max_learners=2)
    fill(b, 10)
    r0 = shmreplay.Sampler(b, seed=7, rank=0)
    r1 = shmreplay.Sampler(b, seed=7, rank=1)
    x = r0.sample("replay", 256, 2)
    y = r1.sample("replay", 256, 2)
    assert check_batch(x, b.heads()) == [] and check_batch(y, b.heads()) == []
    same = np.mean((x.env_ids == y.env_ids) & (x.starts == y.starts))
    assert same < 0.2  # chance: 1/40 of the rows
    r1.seed(7)
    assert np.array_equal(r1.sample("replay", 256, 2).starts, y.starts)  # a rank's reseed is its own stream
    # A one-learner buffer with the same steps and seed draws exactly rank 0's rows.
    single_name = name + "-single"
    single = shmreplay.Buffer.create(single_name, 4, 16, PAYLOAD_SCHEMA)
    try:
        fill(single, 10)
        z = shmreplay.Sampler(single, seed=7).sample("replay", 256, 2)
        assert np.array_equal(z.env_ids, x.env_ids) and np.array_equal(z.starts, x.starts)
    finally:
        shmreplay.Buffer.remove(single_name)


def test_each_learner_has_its_own_online_view(name):
    b = shmreplay.Buffer.create(name, 2, 16, PAYLOAD_SCHEMA, max_learners=2)
    fill(b, 4)
    a = shmreplay.Sampler(b, rank=0)
    c = shmreplay.Sampler(b, rank=1)
    a.reset_online_queue()
    assert a.size("online") == 0 and c.size("online") == 8
    fill_more = shmreplay.Writer(b, [0, 1])
    fill_more.push(np.arange(2), payload(np.arange(2), [4, 4]))
    fill_more.close()
    assert a.size("online") == 2 and c.size("online") == 10
    assert set(a.sample("online", 32, 1).starts.tolist()) == {4}


LEARNER = r"""
import sys, numpy as np, shmreplay
sys.path.insert(0, {here!r})
from conftest import check_batch
buf = shmreplay.Buffer.open({name!r})
s = shmreplay.Sampler(buf, seed={seed}, rank={rank})
print("rank", s.rank, flush=True)
rows = 0
while True:
    b = s.sample("replay", 64, 4, power=1.0)
    problems = check_batch(b, buf.heads())
    if problems:
        print("BAD", problems[0], flush=True)
        sys.exit(3)
    rows += 64
    if rows % 6400 == 0:
        print("rows", rows, flush=True)
"""

WRITER = r"""
import sys, numpy as np, shmreplay
sys.path.insert(0, {here!r})
from conftest import payload
buf = shmreplay.Buffer.open({name!r})
w = shmreplay.Writer(buf, list(range(buf.num_envs)))
heads = [w.head(e) for e in range(buf.num_envs)]
ids = np.arange(buf.num_envs)
while True:
    w.push(ids, payload(ids, heads))
    heads = [h + 1 for h in heads]
"""


def start(code, **kw):
    return subprocess.Popen([sys.executable, "-c", code.format(here=HERE, **kw)], stdout=subprocess.PIPE, text=True)


def test_learner_processes_sample_at_once_beside_a_writer_and_a_killed_one_is_replaced(name):
    b = shmreplay.Buffer.create(name, 4, 64, PAYLOAD_SCHEMA, max_learners=2)
    fill(b, 8)
    procs = []
    try:
        writer = start(WRITER, name=name)
        procs.append(writer)
        learners = [start(LEARNER, name=name, seed=1, rank=r) for r in (0, 1)]
        procs += learners
        for r, p in enumerate(learners):
            assert p.stdout.readline().split() == ["rank", str(r)]
        for p in learners:
            assert p.stdout.readline().startswith("rows")  # both sample, each in its own slot
        learners[1].kill()
        learners[1].wait()
        replacement = start(LEARNER, name=name, seed=2, rank="None")  # the first free or dead slot: 1
        procs.append(replacement)
        assert replacement.stdout.readline().split() == ["rank", "1"]
        assert replacement.stdout.readline().startswith("rows")
        assert learners[0].poll() is None and replacement.poll() is None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    info = shmreplay.Buffer.open(name)
    assert info.max_learners == 2
