"""Policy versions from Python (docs/design/policy.md): create's policy_version=, Sampler.publish_policy and .policy,
max_staleness= on the sample calls, Batch.policy_version and .policy_floor, held writers (Writer.policy_timeout),
pacing, and what `shmreplay info --json` says."""
import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import shmreplay

SCHEMA = "version:u32 step:u64"


def push(writer, env, version, step):
    writer.push_one(env, {"version": np.uint32(version), "step": np.uint64(step)})


def test_a_window_keeps_only_the_steps_of_recent_versions_and_the_batch_says_which(name, closing):
    buf = shmreplay.Buffer.create(name, 2, 64, SCHEMA, policy_version="version")
    assert buf.policy_version == "version"
    w = shmreplay.Writer(buf, [0, 1])
    s = shmreplay.Sampler(buf, seed=3)
    closing += [w, s]
    for step in range(40):
        push(w, 0, step // 4, step)  # versions 0..9
        push(w, 1, step // 10, step)  # versions 0..3: a slow producer
    state = s.publish_policy(9, 2)
    assert state == {"version": 9, "max_staleness": 2, "publishes": 1}
    assert s.policy == state
    b = s.sample_transitions("replay", 4000)
    assert b.policy_version == 9 and b.policy_floor == 7
    assert b["version"].min() >= 7
    assert set(np.unique(b["step"][:, 0])) == set(range(28, 40))  # env 0's steps of versions 7..9, all drawn
    wide = s.sample_transitions("replay", 4000, max_staleness=6)  # versions >= 3: env 1's last ten steps too
    assert wide.policy_floor == 3 and wide["version"].min() == 3
    assert s.total_weight("replay", 1, max_staleness=100) == 80.0
    s.publish_policy(50, 1)
    with pytest.raises(shmreplay.EmptyView, match="none of its 80 steps lies inside the policy window"):
        s.sample_transitions("replay", 8)


def test_a_writer_left_behind_by_the_window_waits_and_goes_on_when_the_window_widens(name, closing):
    buf = shmreplay.Buffer.create(name, 1, 16, SCHEMA, policy_version="version")
    s = shmreplay.Sampler(buf)
    w = shmreplay.Writer(buf, [0], policy_timeout=0)
    closing += [w, s]
    s.publish_policy(10, 1)
    with pytest.raises(shmreplay.RateLimited, match="its step has policy version 3, outside the window"):
        push(w, 0, 3, 0)
    assert buf.heads()[0] == 0
    w.policy_timeout = 30.0
    assert w.policy_timeout == 30.0
    threading.Timer(0.2, lambda: s.publish_policy(10, 8)).start()
    started = time.monotonic()
    push(w, 0, 3, 0)  # held until the window reaches version 2
    assert time.monotonic() - started >= 0.1
    assert buf.heads()[0] == 1
    with pytest.raises(shmreplay.InvalidArgument, match="below the env's newest version 3"):
        push(w, 0, 2, 1)
    info = json.loads(subprocess.run([sys.executable, "-m", "shmreplay", "info", name, "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    assert info["policy"]["version"] == 10 and info["policy"]["max_staleness"] == 8
    assert info["policy"]["writers_held"] == 2 and info["policy"]["writer_timeouts"] == 1
    assert info["envs"][0]["policy_held_pushes"] == 2 and info["envs"][0]["policy_version"] == 3


def test_pacing_waits_for_the_slow_writer_instead_of_leaving_it_behind(name, closing):
    buf = shmreplay.Buffer.create(name, 2, 16, SCHEMA, policy_version="version")
    s = shmreplay.Sampler(buf)
    w = shmreplay.Writer(buf, [0, 1])
    closing += [w, s]
    s.publish_policy(2, 1)
    push(w, 0, 2, 0)
    push(w, 1, 1, 0)
    with pytest.raises(shmreplay.RateLimited, match="env 1 .* still produces with version 1, below 2"):
        s.publish_policy(3, 1, pace=True, pace_timeout=0)
    assert s.policy["version"] == 2
    threading.Timer(0.2, lambda: push(w, 1, 2, 1)).start()
    assert s.publish_policy(3, 1, pace=True, pace_timeout=30)["version"] == 3


def test_a_window_needs_a_policy_version_field_and_the_field_must_be_an_integer(name, closing):
    with pytest.raises(shmreplay.InvalidArgument, match="is not a version: expected a scalar integer field"):
        shmreplay.Buffer.create(name, 1, 8, "version:f32", policy_version="version")
    buf = shmreplay.Buffer.create(name, 1, 8, "x:f32")
    assert buf.policy_version is None
    s = shmreplay.Sampler(buf)
    closing.append(s)
    with pytest.raises(shmreplay.InvalidArgument, match="it has no policy-version field"):
        s.publish_policy(1, 1)
    assert s.publish_policy(1)["max_staleness"] is None


def test_a_buffer_sets_the_window_without_a_learner_slot_and_keeps_the_version(name, closing):
    buf = shmreplay.Buffer.create(name, 1, 16, SCHEMA, policy_version="version")
    s = shmreplay.Sampler(buf, seed=1)
    w = shmreplay.Writer(buf, [0])
    closing += [w, s]
    for step in range(12):
        push(w, 0, step // 2, step)  # versions 0..5
    s.publish_policy(5)
    assert buf.set_policy_window(1) == {"version": 5, "max_staleness": 1, "publishes": 2}
    assert buf.policy == s.policy
    assert s.sample_transitions("replay", 200)["version"].min() == 4  # the window the buffer set
    assert buf.set_policy_window(None)["max_staleness"] is None
    assert s.sample_transitions("replay", 2000)["version"].min() == 0
    plain = shmreplay.Buffer.create(name + "-plain", 1, 8, "x:f32")
    try:
        with pytest.raises(shmreplay.InvalidArgument, match="has no policy-version field"):
            plain.set_policy_window(2)
    finally:
        shmreplay.Buffer.remove(name + "-plain")


def test_a_checkpoint_keeps_the_published_version_and_window_and_its_info_says_which(name, closing, tmp_path):
    buf = shmreplay.Buffer.create(name, 1, 16, SCHEMA, policy_version="version")
    s = shmreplay.Sampler(buf, seed=2)
    w = shmreplay.Writer(buf, [0])
    closing += [w, s]
    for step in range(12):
        push(w, 0, step // 2, step)  # versions 0..5
    s.publish_policy(5, 2)
    info = shmreplay.save(buf, tmp_path / "p.shmrckpt")
    assert (info.policy_version, info.policy_max_staleness) == (5, 2)
    assert shmreplay.verify(tmp_path / "p.shmrckpt").info.policy_max_staleness == 2
    copy = name + "-copy"
    try:
        shmreplay.load(tmp_path / "p.shmrckpt", copy)
        assert shmreplay.Buffer.open(copy).policy == {"version": 5, "max_staleness": 2, "publishes": 1}
    finally:
        shmreplay.Buffer.remove(copy)
    buf.set_policy_window(None)
    assert shmreplay.save(buf, tmp_path / "q.shmrckpt", force=True).policy_max_staleness is None
