"""A buffer with a cold tier from Python (docs/design/cold_tier.md): Buffer.create(cold_capacity=, cold_dir=), rows
sampled over both tiers with every value as pushed, the files removed with the buffer, and what it refuses."""
import os

import numpy as np
import pytest

import shmreplay

SCHEMA = "env:u32 step:u64 obs:f32[3]"


def push(buf, steps):
    w = shmreplay.Writer(buf, list(range(buf.num_envs)))
    try:
        for _ in range(steps):
            for env in range(buf.num_envs):
                step = w.head(env)
                w.push_one(env, {"env": np.uint32(env), "step": np.uint64(step),
                                 "obs": np.array([step, env, step * 0.5], dtype=np.float32)})
    finally:
        w.close()


def test_rows_over_both_tiers_hold_every_value_as_pushed(name, tmp_path, closing):
    buf = shmreplay.Buffer.create(name, 2, 8, SCHEMA, cold_capacity=64, cold_dir=str(tmp_path))
    assert buf.cold_capacity == 64
    assert sorted(os.listdir(tmp_path / f"{name}.cold")) == ["env-0", "env-1"]
    push(buf, 50)  # per env: steps 0..49, 0..41 below the ring of 8
    s = shmreplay.Sampler(buf)
    closing.append(s)
    b = s.sample("replay", 256, 5)
    expected = b.starts[:, None] + np.arange(5)[None, :]
    assert np.array_equal(b.mask, expected < 50)  # rows end at the head
    steps = b["step"].astype(np.int64)
    m = b.mask
    assert np.array_equal(steps[m], expected[m]) and np.all(steps[~m] == 0)
    assert np.array_equal(b["env"].astype(np.int64)[m], np.repeat(b.env_ids[:, None], 5, axis=1)[m])
    assert np.array_equal(b["obs"][..., 0][m], steps[m].astype(np.float32))
    assert np.array_equal(b["obs"][..., 2][m], steps[m] * 0.5)
    assert b.starts.min() < 42 - 5  # rows wholly in the cold tier were drawn
    assert s.total_weight("replay", 5, 0.0) == pytest.approx(2 * 50)


def test_remove_takes_the_cold_files_with_the_buffer(name, tmp_path):
    shmreplay.Buffer.create(name, 3, 4, SCHEMA, cold_capacity=10, cold_dir=str(tmp_path))
    assert (tmp_path / f"{name}.cold").is_dir()
    shmreplay.Buffer.remove(name)
    assert not (tmp_path / f"{name}.cold").exists()


def test_create_refuses_what_the_cold_tier_does_not_support_yet(name, tmp_path):
    with pytest.raises(shmreplay.InvalidArgument, match="priority_exponent is given"):
        shmreplay.Buffer.create(name, 2, 8, SCHEMA, cold_capacity=16, cold_dir=str(tmp_path), priority_exponent=0.6)
    with pytest.raises(shmreplay.InvalidArgument, match="expected the absolute path"):
        shmreplay.Buffer.create(name, 2, 8, SCHEMA, cold_capacity=16, cold_dir="relative")
    assert not shmreplay.Buffer.exists(name)
    assert os.listdir(tmp_path) == []
