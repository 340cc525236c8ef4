"""Priorities from Python: a buffer created with priority_exponent, pushes with and without priorities, prioritized
sample / sample_mixed / sample_transitions with importance weights, update_priorities taking NumPy arrays, and the
errors. (The distribution itself is checked against a reference model in tests/priorities/sampling.cpp.)"""
import os
import types
import threading

import numpy as np
import pytest

import shmreplay

SCHEMA = "env:u64 step:u64"


def push(writer, buf, envs, priorities=None):
    envs = np.asarray(envs, dtype=np.int64)
    steps = np.array([buf.heads()[e] for e in envs], dtype=np.uint64)
    writer.push(envs, {"env": envs.astype(np.uint64), "step": steps}, priorities=priorities)


def test_prioritized_samples_follow_priorities_and_carry_importance_weights(name):
    buf = shmreplay.Buffer.create(name, 2, 16, SCHEMA, priority_exponent=1.0)
    assert buf.priority_exponent == 1.0
    w = shmreplay.Writer(buf, [0, 1])
    # env 0: steps with priorities 0, 1, 2, 3; env 1: one step at priority 6
    for p in range(4):
        push(w, buf, [0], np.array([p], np.float32))
    push(w, buf, [1], [6.0])
    s = shmreplay.Sampler(buf, seed=3)
    b = s.sample("replay", 20000, 2, prioritized=True, beta=1.0)
    assert b.weights.dtype == np.float32 and b.weights.shape == (20000,)
    cells, counts = np.unique(np.stack([b.env_ids, b.starts], axis=1), axis=0, return_counts=True)
    freq = {tuple(c): n / 20000 for c, n in zip(cells, counts)}
    assert (0, 0) not in freq                       # priority 0: never drawn
    assert freq[(1, 0)] == pytest.approx(6 / 12, abs=0.02)
    assert freq[(0, 3)] == pytest.approx(3 / 12, abs=0.02)
    assert freq[(0, 1)] == pytest.approx(1 / 12, abs=0.01)
    # beta = 1: weight = (N P)^-1 / max; the rarest drawn (priority 1) has the largest weight, 1
    n = 5
    expected = {(0, 1): 1 / (n * 1 / 12), (0, 2): 1 / (n * 2 / 12), (0, 3): 1 / (n * 3 / 12), (1, 0): 1 / (n * 6 / 12)}
    largest = max(expected.values())
    for (e, st), wt in zip(zip(b.env_ids, b.starts), b.weights):
        assert wt == pytest.approx(expected[(int(e), int(st))] / largest, rel=1e-5)
    # rows are the sampled steps, masked at the head
    assert np.all(b["step"][b.mask] == (b.starts[:, None] + np.arange(2))[b.mask])
    # an unprioritized sample has weights 1
    assert np.all(s.sample("replay", 8, 1).weights == 1)
    t = s.sample_transitions("replay", 64, prioritized=True)
    assert t.rows == 64 and np.all((t.weights > 0) & (t.weights <= 1))
    m = s.sample_mixed(4, 4, 2, prioritized=True, beta=0.5)
    assert m.rows == 8


def test_update_priorities_takes_numpy_arrays_and_drops_overwritten_steps(name):
    buf = shmreplay.Buffer.create(name, 1, 4, SCHEMA, priority_exponent=0.5)
    w = shmreplay.Writer(buf, [0])
    for _ in range(4):
        push(w, buf, [0])                            # no priorities: the running maximum, 1
    s = shmreplay.Sampler(buf, seed=1)
    b = s.sample("replay", 8, 1, prioritized=True)
    push(w, buf, [0])                                # step 4 overwrites step 0
    applied, dropped = s.update_priorities(np.zeros(2, np.int64), np.array([0, 2]), np.array([5.0, 0.0]))
    assert (applied, dropped) == (1, 1)
    applied, dropped = s.update_priorities(b.env_ids, b.starts, np.full(b.rows, 2.0, np.float32))
    assert applied + dropped == b.rows
    # step 2 has priority 0 unless the batch updated it: draws only from steps with positive priority
    for _ in range(5):
        r = s.sample("replay", 64, 1, prioritized=True)
        assert np.all(r["step"][:, 0] == r.starts)


def test_priorities_refuse_bad_input_with_clear_errors(name):
    plain = shmreplay.Buffer.create(name, 1, 4, SCHEMA)
    assert plain.priority_exponent is None
    w = shmreplay.Writer(plain, [0])
    with pytest.raises(shmreplay.InvalidArgument, match="created without priorities"):
        push(w, plain, [0], [1.0])
    push(w, plain, [0])
    s = shmreplay.Sampler(plain)
    with pytest.raises(shmreplay.InvalidArgument, match="without priorities"):
        s.sample("replay", 1, 1, prioritized=True)
    s.close()
    w.close()
    shmreplay.Buffer.remove(name)
    buf = shmreplay.Buffer.create(name, 2, 4, SCHEMA, priority_exponent=0.6)
    w = shmreplay.Writer(buf, [0, 1])
    with pytest.raises(shmreplay.SizeMismatch, match="2 priorities for 1 steps"):
        push(w, buf, [0], [1.0, 2.0])
    with pytest.raises(shmreplay.InvalidArgument, match="not a finite number"):
        push(w, buf, [0], [float("nan")])
    assert buf.heads()[0] == 0
    push(w, buf, [0, 1], [1.0, 2.0])
    s2 = shmreplay.Sampler(buf)
    with pytest.raises(shmreplay.InvalidArgument, match="never published"):
        s2.update_priorities([0], [5], [1.0])
    with pytest.raises(shmreplay.InvalidArgument, match="period = 2"):
        s2.sample("replay", 1, 1, prioritized=True, period=2)
    with pytest.raises(shmreplay.InvalidArgument, match="priority_exponent is -1"):
        shmreplay.Buffer.create(name + "-bad", 1, 4, SCHEMA, priority_exponent=-1.0)


def test_priorities_whose_weight_overflows_float32_are_refused_as_given(name):
    # alpha 1.5: 1e27**1.5 = 3.2e40 is past float32's 3.4e38; accepted, it made every later prioritized sample fail
    # with a false "ring too small for the write rate".
    buf = shmreplay.Buffer.create(name, 1, 8, SCHEMA, priority_exponent=1.5)
    w = shmreplay.Writer(buf, [0])
    push(w, buf, [0], [2.0])
    with pytest.raises(shmreplay.InvalidArgument, match=r"priority 1e\+27 \(position 0\).*priority\^alpha"):
        push(w, buf, [0], [1e27])
    # a float64 past float32's range is reported as given, not as the "inf" that converting it would make
    with pytest.raises(shmreplay.InvalidArgument, match=r"priority 1e\+39 \(position 0\)"):
        push(w, buf, [0], np.array([1e39]))
    with pytest.raises(shmreplay.InvalidArgument, match=r"priority -1e\+39 \(position 0\)"):
        push(w, buf, [0], [-1e39])
    assert buf.heads()[0] == 1
    with w.reserve(0) as slot:
        slot["env"][...] = 0
        slot["step"][...] = 1
        with pytest.raises(shmreplay.InvalidArgument, match=r"priority 1e\+39"):
            slot.set_priority(1e39)
        slot.set_priority(3.0)
    s = shmreplay.Sampler(buf)
    with pytest.raises(shmreplay.InvalidArgument, match=r"priority 1e\+39 \(position 1"):
        s.update_priorities([0, 0], [0, 1], np.array([1.0, 1e39]))
    with pytest.raises(shmreplay.InvalidArgument, match=r"priority 1e\+27 \(position 0, env 0 step 0\)"):
        s.update_priorities([0], [0], [1e27])
    b = s.sample("replay", 64, 1, prioritized=True)
    assert np.all(np.isfinite(b.weights))


def test_all_zero_priorities_huge_beta_and_power_with_priorities(name):
    buf = shmreplay.Buffer.create(name, 1, 8, SCHEMA, priority_exponent=1.0)
    w = shmreplay.Writer(buf, [0])
    push(w, buf, [0], [0.0])
    push(w, buf, [0], [0.0])
    s = shmreplay.Sampler(buf)
    with pytest.raises(shmreplay.EmptyView, match="every stored step.*priority 0"):
        s.sample("replay", 4, 1, prioritized=True)
    assert s.total_weight("replay", 1, prioritized=True) == 0.0
    s.update_priorities([0, 0], [0, 1], [1.0, 4.0])
    # beta 1e9: the least likely row (priority 1) weighs 1, the others 0; never NaN
    b = s.sample("replay", 256, 1, prioritized=True, beta=1e9)
    assert set(b.starts.tolist()) == {0, 1}
    np.testing.assert_array_equal(b.weights, np.where(b.starts == 0, 1.0, 0.0).astype(np.float32))
    with pytest.raises(shmreplay.InvalidArgument, match="distribution_power = 1"):
        s.sample("replay", 4, 2, 1.0, prioritized=True)
    with pytest.raises(shmreplay.InvalidArgument, match="distribution_power = 2"):
        s.sample_mixed(2, 0, 2, 2.0, prioritized=True)
    with pytest.raises(shmreplay.InvalidArgument, match="distribution_power = 0.5"):
        s.total_weight("replay", 2, 0.5, prioritized=True)


def test_total_weight_and_priority_weights_are_what_a_learner_of_several_buffers_splits_and_weighs_by(name):
    buf = shmreplay.Buffer.create(name, 2, 4, SCHEMA, priority_exponent=0.5)
    w = shmreplay.Writer(buf, [0, 1])
    for p in (4.0, 9.0, 1.0, 16.0, 25.0, 36.0):  # env 0 wraps: its steps 0 and 1 are overwritten
        push(w, buf, [0], [p])
    push(w, buf, [1], [49.0])
    s = shmreplay.Sampler(buf)
    # Prioritized: the sum of priority**0.5 over the stored starts (env 0: steps 2..5, env 1: step 0).
    assert s.total_weight("replay", 3, prioritized=True) == pytest.approx(1 + 4 + 5 + 6 + 7, rel=1e-6)
    weights = s.priority_weights([0, 0, 0, 1, 1], [1, 2, 5, 0, 1])
    assert weights.dtype == np.float64
    np.testing.assert_allclose(weights, [-1, 1, 6, 7, -1], rtol=1e-6)  # overwritten, stored..., unpublished
    # length**power: env 0 holds 4 steps, env 1 one; L = 3: remaining lengths 3, 3, 2, 1 and 1.
    assert s.total_weight("replay", 3) == 5.0
    assert s.total_weight("replay", 3, 2.0) == pytest.approx(9 + 9 + 4 + 1 + 1)
    assert s.total_weight("replay", 3, 1.0, min_steps=6) == 0.0
    s.reset_online_queue()
    assert s.total_weight("online", 3, 1.0) == 0.0
    with pytest.raises(shmreplay.InvalidArgument):
        s.total_weight("replay", 0)
    plain = shmreplay.Sampler(shmreplay.Buffer.create(name + "-plain", 1, 4, SCHEMA))
    try:
        with pytest.raises(shmreplay.InvalidArgument, match="without priorities"):
            plain.priority_weights([0], [0])
    finally:
        plain.close()
        shmreplay.Buffer.remove(name + "-plain")


def test_cluster_importance_weights_are_finite_for_any_beta():
    # shmreplay.ray's global importance weights, (N P)**-beta over the batch's largest, for rows of priority**alpha
    # 1, 2 and 4 on one node (N = 3, T = 7): beta = 1e9 made them inf / inf.
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("Ray's import under the sanitizer pass (test_ray.py skips too)")
    sr = pytest.importorskip("shmreplay.ray", exc_type=ImportError)
    batch = types.SimpleNamespace(nodes=["a"], weights=None)
    parts = [(0, {"priority_weights": np.array([1.0, 2.0, 4.0, 1.0])})]
    for beta, expected in ((0.0, [1, 1, 1, 1]), (0.5, [1, 0.5 ** 0.5, 0.5, 1]), (1e9, [1, 0, 0, 1])):
        sr.ClusterSampler._importance_weights(batch, parts, {"a": (7.0, 3)}, {"a": 7.0}, beta)
        assert batch.weights.dtype == np.float32
        np.testing.assert_allclose(batch.weights, expected, rtol=1e-6)


def test_update_priorities_uses_the_priorities_it_checked_while_another_thread_changes_them(name):
    # A float32 array is read in place, with the GIL released: another thread flips its last priority between 1
    # and NaN. The call used to check the array, then read it again to set the priorities; each call must now
    # either refuse the NaN (nothing set) or set a priority it checked, never NaN.
    buf = shmreplay.Buffer.create(name, 1, 64, SCHEMA, priority_exponent=1.0)
    w = shmreplay.Writer(buf, [0])
    for _ in range(128):
        push(w, buf, [0])
    s = shmreplay.Sampler(buf, seed=1)
    # a long call, quickly done: every step but the last was overwritten (its update is dropped without a walk);
    # long enough that the other thread runs by the time the last priority is checked (a sanitizer build's call
    # is ten times slower per entry)
    n = 100_000 if "asan" in os.environ.get("LD_PRELOAD", "") else 1_000_000
    env_ids, steps = np.zeros(n, np.int64), np.zeros(n, np.int64)
    steps[-1] = 127
    priorities = np.ones(n, np.float32)
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            priorities[-1] = np.nan
            priorities[-1] = 1.0

    flipper = threading.Thread(target=flip)
    flipper.start()
    weights, refused = [], 0
    try:
        for _ in range(30):
            try:
                s.update_priorities(env_ids, steps, priorities)
            except shmreplay.InvalidArgument:
                refused += 1
            weights.append(s.priority_weights([0], [127])[0])
    finally:
        stop.set()
        flipper.join()
    unchecked = int(np.sum(~np.isfinite(weights)))
    assert unchecked == 0, f"a NaN priority was set by {unchecked} of 30 updates ({refused} refused it)"
    assert np.isfinite(s.total_weight("replay", 1))
