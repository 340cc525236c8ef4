"""Write-back by handle (issue 48; docs/design/write_back.md): Sampler.write_back writes derived fields of sampled
steps back, refuses and counts a step the ring overwrote since, refuses fields that are not derived, and racing a
writer that laps the ring, a sampling learner and SIGKILLed write-back processes never lands on another step nor
leaves a torn row."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import shmreplay

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = "env:u64 step:u64 done:bool target:u64[64]:derived"
WORDS = 64
MIX = np.uint64(0x9E3779B97F4A7C15)


def targets(envs, steps, tags):
    """The target a write-back with tag tags[i] stores into step steps[i] of env envs[i] (tag 0: as pushed): every
    word depends on all three, and word 0 gives the tag back (tag_of)."""
    envs, steps, tags = (np.asarray(a, dtype=np.uint64)[:, None] for a in (envs, steps, tags))
    k = np.arange(WORDS, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        t = (envs << np.uint64(48)) ^ (steps << np.uint64(8)) ^ (tags * MIX) ^ k
    t[:, 0] = ((envs << np.uint64(48)) ^ (steps << np.uint64(16)) ^ tags)[:, 0]
    return t


def tag_of(target, envs, steps):
    """Each row's tag, or -1 where the row is not a whole target of its own (env, step)."""
    envs = np.asarray(envs, dtype=np.uint64)
    steps = np.asarray(steps, dtype=np.uint64)
    tags = target[:, 0] ^ (envs << np.uint64(48)) ^ (steps << np.uint64(16))
    whole = np.all(target == targets(envs, steps, tags), axis=1) & (tags < np.uint64(1 << 20))
    return np.where(whole, tags.astype(np.int64), -1)


def push(writer, envs, steps):
    writer.push(np.asarray(envs), {"env": np.asarray(envs, dtype=np.uint64), "step": np.asarray(steps, dtype=np.uint64),
                                   "done": np.asarray(steps) % 7 == 6, "target": targets(envs, steps, [0] * len(envs))})


def fill(buffer, steps):
    w = shmreplay.Writer(buffer, list(range(buffer.num_envs)))
    ids = np.arange(buffer.num_envs)
    for s in range(steps):
        push(w, ids, [s] * len(ids))
    w.close()


def test_a_derived_field_is_declared_kept_by_the_segment_and_in_the_schema_text(name):
    f = shmreplay.Field("value", "f32", derived=True)
    assert f.derived and str(f) == "value:f32:derived"
    assert not shmreplay.Field("obs", "u8", (4,)).derived
    b = shmreplay.Buffer.create(name, 1, 8, SCHEMA)
    assert shmreplay.Buffer.open(name).schema["target"].derived
    assert "target:u64[64]:derived" in str(b.schema)
    with pytest.raises(shmreplay.InvalidSchema, match="stored as pushed"):
        shmreplay.Schema.parse("obs:u8[8]:lz4:derived")


def test_write_back_writes_the_handles_steps_and_refuses_steps_the_ring_overwrote_since(name):
    b = shmreplay.Buffer.create(name, 2, 16, SCHEMA)
    fill(b, 16)
    s = shmreplay.Sampler(b, seed=3)
    batch = s.sample("replay", 24, 1)
    envs, starts = batch.env_ids.copy(), batch.starts.copy()
    w = shmreplay.Writer(b, [0])
    for step in range(16, 26):  # env 0 laps steps 0..9
        push(w, [0], [step])
    tags = np.arange(1, len(envs) + 1)
    applied, refused = s.write_back(envs, starts, target=targets(envs, starts, tags))
    gone = (envs == 0) & (starts < 10)
    assert refused.dtype == np.bool_ and np.array_equal(refused, gone)
    assert applied == len(envs) - gone.sum()
    # Every stored step holds its own target: the last write-back meant for it, or the pushed one.
    last = {}
    for e, p, t, r in zip(envs, starts, tags, refused):
        if not r:
            last[(int(e), int(p))] = int(t)
    for _ in range(10):
        x = s.sample("replay", 64, 1)
        got = tag_of(x["target"][:, 0], x.env_ids, x.starts)
        want = [last.get((int(e), int(p)), 0) for e, p in zip(x.env_ids, x.starts)]
        assert np.array_equal(got, want)
    info = info_json(name)
    assert info["learner"]["write_backs_refused"] == gone.sum()
    assert info["learner"]["write_backs_applied"] == applied


def test_write_back_refuses_a_field_that_is_not_derived_before_writing_anything(name):
    b = shmreplay.Buffer.create(name, 1, 8, SCHEMA)
    fill(b, 4)
    s = shmreplay.Sampler(b)
    with pytest.raises(shmreplay.InvalidArgument, match="field 'step'.*not derived"):
        s.write_back([0, 0], [1, 2], target=targets([0, 0], [1, 2], [5, 5]), step=np.array([9, 9], np.uint64))
    with pytest.raises(shmreplay.InvalidArgument, match="never published"):
        s.write_back([0], [4], target=targets([0], [4], [5]))
    x = s.sample("replay", 32, 1)
    assert np.all(tag_of(x["target"][:, 0], x.env_ids, x.starts) == 0)


WORKER = r"""
import sys, numpy as np, shmreplay
sys.path.insert(0, {here!r})
from test_write_back import targets
buf = shmreplay.Buffer.open({name!r})
s = shmreplay.Sampler(buf, rank={rank}, seed={rank})
print("ready", flush=True)
call = 0
while True:
    try:
        x = s.sample("replay", 64, 1)
    except shmreplay.EmptyView:
        continue
    call += 1
    tags = np.full(len(x.starts), {rank} * 100000 + call % 100000)
    applied, refused = s.write_back(x.env_ids, x.starts, target=targets(x.env_ids, x.starts, tags))
"""

WRITER = r"""
import sys, time, numpy as np, shmreplay
sys.path.insert(0, {here!r})
from test_write_back import push
buf = shmreplay.Buffer.open({name!r})
w = shmreplay.Writer(buf, list(range(buf.num_envs)))
ids = np.arange(buf.num_envs)
print("ready", flush=True)
while True:
    heads = [w.head(e) for e in ids]
    push(w, ids, heads)
    time.sleep(0.0005)
"""


def info_json(name):
    """What `shmreplay info --json` says of the buffer."""
    out = subprocess.run([sys.executable, "-m", "shmreplay", "info", name, "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def start(code, **kw):
    return subprocess.Popen([sys.executable, "-c", code.format(here=HERE, **kw)], stdout=subprocess.PIPE, text=True)


def test_write_backs_racing_a_lapping_writer_a_learner_and_kills_never_land_on_another_step_nor_tear(name):
    b = shmreplay.Buffer.create(name, 4, 64, SCHEMA, max_learners=4)
    fill(b, 64)
    procs = []
    try:
        procs.append(start(WRITER, name=name))
        procs += [start(WORKER, name=name, rank=r) for r in (1, 2)]
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        learner = shmreplay.Sampler(b, rank=0, seed=9)
        checked = written = kills = 0
        end = time.monotonic() + 4
        while time.monotonic() < end:
            try:
                x = learner.sample("replay", 128, 2)
            except shmreplay.EmptyView:
                continue
            steps = x.starts[:, None] + np.arange(2)[None, :]
            envs = np.broadcast_to(x.env_ids[:, None], steps.shape)
            m = x.mask
            tags = tag_of(x["target"][m], envs[m], steps[m])
            assert np.all(tags >= 0), "a write-back on another step, or a torn row"
            checked += int(m.sum())
            written += int((tags > 0).sum())
            if time.monotonic() > end - 4 + kills and kills < 3:  # the rank-2 worker, killed wherever it is
                victim = procs[2]
                victim.kill()
                victim.wait()
                procs[2] = start(WORKER, name=name, rank=2)
                assert procs[2].stdout.readline().strip() == "ready"
                kills += 1
        assert written > 0 and checked > written
        assert procs[1].poll() is None and procs[0].poll() is None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    info = info_json(name)
    assert info["learners"][1]["write_backs_applied"] > 0
    assert info["learner"]["write_backs_refused"] > 0  # the writer lapped handles the workers held


def test_write_back_refuses_handles_from_before_a_checkpoint_load_into_the_same_buffer(name, tmp_path):
    b = shmreplay.Buffer.create(name, 1, 32, SCHEMA, reanalyse_chunk=4)
    w = shmreplay.Writer(b, [0])
    for s in range(8):
        push(w, [0], [s])
    w.close()
    path = tmp_path / "a.shmrckpt"
    shmreplay.save(b, path)  # steps 0..7
    w = shmreplay.Writer(b, [0])
    for s in range(8, 16):
        push(w, [0], [s])
    w.close()
    s = shmreplay.Sampler(b, seed=1)
    batch = s.sample("replay", 8, 1)
    envs, starts, before = batch.env_ids.copy(), batch.starts.copy(), batch.load_generation
    r = shmreplay.Reanalyser(b)
    chunk = r.try_next("sweep")
    s.close()
    shmreplay.load(path, name)  # head back to 8
    w = shmreplay.Writer(b, [0])
    for step in range(8, 16):  # the same step indices again
        push(w, [0], [step])
    w.close()
    s = shmreplay.Sampler(b, seed=2)
    applied, refused = s.write_back(envs, starts, load_generation=before, target=targets(envs, starts, [3] * 8))
    assert applied == 0 and refused.all()
    steps = np.arange(chunk.first_step, chunk.end_step)
    applied, refused = s.write_back([0] * len(steps), steps, load_generation=chunk.load_generation,
                                    target=targets([0] * len(steps), steps, [3] * len(steps)))
    assert applied == 0 and refused.all()
    now = s.sample("replay", 8, 1)
    assert now.load_generation != before
    applied, refused = s.write_back(now.env_ids, now.starts, load_generation=now.load_generation,
                                    target=targets(now.env_ids, now.starts, [4] * 8))
    assert applied == 8 and not refused.any()
    assert info_json(name)["learner"]["write_backs_refused"] == 8 + len(steps)
    r.close()
    s.close()
