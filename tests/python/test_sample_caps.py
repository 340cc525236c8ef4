"""Sample caps from Python (docs/design/sample_caps.md): create's max_times_sampled=, Buffer.max_times_sampled, a step
delivered at most N times and then gone, the counters `shmreplay info --json` shows, and a checkpoint keeping the
cap."""
import collections
import json
import subprocess
import sys

import numpy as np
import pytest

import shmreplay

SCHEMA = "env:u64 step:u64"


def push(writer, env, step):
    writer.push_one(env, {"env": np.uint64(env), "step": np.uint64(step)})


def starts(batch):
    return collections.Counter(zip(batch["env"][:, 0].tolist(), batch["step"][:, 0].tolist()))


def test_each_step_is_sampled_at_most_max_times_sampled_times_then_the_view_is_empty(name, closing):
    buf = shmreplay.Buffer.create(name, 2, 8, SCHEMA, max_times_sampled=2)
    assert buf.max_times_sampled == 2
    w = shmreplay.Writer(buf, [0, 1])
    s = shmreplay.Sampler(buf, seed=4)
    closing += [w, s]
    for step in range(3):
        push(w, 0, step)
        push(w, 1, step)
    seen = starts(s.sample_transitions("replay", 5))
    for _ in range(7):
        seen += starts(s.sample_transitions("replay", 1))
    assert seen == {(e, p): 2 for e in range(2) for p in range(3)}
    with pytest.raises(shmreplay.EmptyView, match="every stored step was sampled max_times_sampled = 2 times"):
        s.sample_transitions("replay", 1)
    info = json.loads(subprocess.run([sys.executable, "-m", "shmreplay", "info", name, "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    assert info["max_times_sampled"] == 2
    assert info["learner"]["cap_claimed"] == 12 and info["learner"]["cap_retired"] == 6
    assert info["learner"]["cap_rejected"] > 0
    text = subprocess.run([sys.executable, "-m", "shmreplay", "info", name], capture_output=True, text=True,
                          check=True).stdout
    assert "max_times_sampled 2; 12 delivered, 6 steps retired" in text


def test_a_buffer_without_a_cap_samples_a_step_any_number_of_times(name, closing):
    buf = shmreplay.Buffer.create(name, 1, 4, SCHEMA)
    assert buf.max_times_sampled == 0
    w = shmreplay.Writer(buf, [0])
    s = shmreplay.Sampler(buf)
    closing += [w, s]
    push(w, 0, 0)
    assert starts(s.sample_transitions("replay", 50)) == {(0, 0): 50}


def test_max_times_sampled_past_255_is_refused(name):
    with pytest.raises(shmreplay.InvalidArgument, match="max_times_sampled is 256, expected 0 \\(no cap\\) to 255"):
        shmreplay.Buffer.create(name, 1, 4, SCHEMA, max_times_sampled=256)
    with pytest.raises(shmreplay.InvalidArgument, match="max_times_sampled is -1"):
        shmreplay.Buffer.create(name, 1, 4, SCHEMA, max_times_sampled=-1)


def test_a_checkpoint_keeps_the_cap_and_each_steps_count_so_a_capped_step_is_not_delivered_after_the_load(name, copy_name, closing, tmp_path):
    buf = shmreplay.Buffer.create(name, 1, 4, SCHEMA, max_times_sampled=1)
    w = shmreplay.Writer(buf, [0])
    s = shmreplay.Sampler(buf)
    closing += [w, s]
    for step in range(4):
        push(w, 0, step)
    s.sample_transitions("replay", 4)  # every delivery taken
    shmreplay.save(buf, tmp_path / "caps.shmrckpt")
    shmreplay.load(tmp_path / "caps.shmrckpt", copy_name)
    loaded = shmreplay.Buffer.open(copy_name)
    d = shmreplay.Sampler(loaded)
    closing += [d]
    assert loaded.max_times_sampled == 1
    with pytest.raises(shmreplay.EmptyView, match="max_times_sampled"):
        d.sample_transitions("replay", 1)
