"""DreamerV3's and R2D2's prioritized selectors from Python: zero_on_sample= takes each returned step (not drawn by
priority again until update_priorities raises it), initial_priority= (a fixed value, or inf: never-sampled steps
first) and sequence_priority_length= with sequence_priority_eta= (a start weighs eta * max + (1 - eta) * mean of
its sequence's priority**alpha; total_weight is their sum). Their distributions and the races of learner ranks are
checked in C++ (tests/priorities/zero_on_sample.cpp, initial.cpp, sequences.cpp)."""
import math

import numpy as np
import pytest

import shmreplay

SCHEMA = "env:u64 step:u64"


def push(writer, env, priorities):
    for p in priorities:
        writer.push([env], {"env": np.array([env], np.uint64), "step": np.array([0], np.uint64)},
                    priorities=None if p is None else [p])


def test_zero_on_sample_takes_each_returned_step_until_its_priority_is_raised(name):
    buf = shmreplay.Buffer.create(name, 1, 16, SCHEMA, priority_exponent=1.0)
    with shmreplay.Writer(buf, [0]) as w, shmreplay.Sampler(buf, seed=3) as s:
        push(w, 0, [1.0, 2.0, 3.0, 4.0])
        b = s.sample_transitions("replay", 4, prioritized=True, zero_on_sample=True)
        assert sorted(b.starts.tolist()) == [0, 1, 2, 3]
        with pytest.raises(shmreplay.EmptyView, match="priority 0"):
            s.sample_transitions("replay", 1, prioritized=True, zero_on_sample=True)
        s.update_priorities([0], [2], [5.0])
        assert s.sample_transitions("replay", 1, prioritized=True, zero_on_sample=True).starts.tolist() == [2]
        with pytest.raises(shmreplay.InvalidArgument, match="zero_on_sample"):
            s.sample_transitions("replay", 1, zero_on_sample=True)


def test_initial_priority_is_a_fixed_value_or_infinity_for_never_sampled_steps_first(name):
    fixed = shmreplay.Buffer.create(name, 1, 16, SCHEMA, priority_exponent=1.0, initial_priority=0.0)
    assert fixed.initial_priority == 0.0
    with shmreplay.Writer(fixed, [0]) as w, shmreplay.Sampler(fixed) as s:
        push(w, 0, [None, None, 2.0])
        assert s.priority_weights([0, 0, 0], [0, 1, 2]).tolist() == [0.0, 0.0, 2.0]
    shmreplay.Buffer.remove(name)
    first = shmreplay.Buffer.create(name, 1, 64, SCHEMA, priority_exponent=1.0, initial_priority=math.inf)
    assert first.initial_priority == math.inf
    assert shmreplay.Buffer.create(name + "m", 1, 8, SCHEMA, priority_exponent=1.0).initial_priority is None
    shmreplay.Buffer.remove(name + "m")
    with shmreplay.Writer(first, [0]) as w, shmreplay.Sampler(first, seed=5) as s:
        push(w, 0, [100.0] * 8)
        s.sample_transitions("replay", 8, prioritized=True)  # the 8 fresh steps, each once
        push(w, 0, [0.001] * 4)  # fresh, far below the others' priority: still drawn first
        assert sorted(s.sample_transitions("replay", 4, prioritized=True).starts.tolist()) == [8, 9, 10, 11]
    with pytest.raises(shmreplay.InvalidArgument, match="initial_priority"):
        shmreplay.Buffer.create(name + "x", 1, 8, SCHEMA, priority_exponent=1.0, initial_priority=-1.0)


def test_sequence_priorities_weigh_a_start_by_eta_max_plus_one_minus_eta_mean(name):
    buf = shmreplay.Buffer.create(name, 1, 16, SCHEMA, priority_exponent=1.0, sequence_priority_length=3)
    assert buf.sequence_priority_length == 3
    prios = [1.0, 4.0, 2.0, 8.0, 1.0]
    with shmreplay.Writer(buf, [0]) as w, shmreplay.Sampler(buf) as s:
        push(w, 0, prios)
        for eta in (0.9, 0.25):
            windows = [prios[q:q + 3] for q in range(len(prios))]
            total = sum(eta * max(x) + (1 - eta) * sum(x) / len(x) for x in windows)
            got = s.total_weight("replay", 3, prioritized=True, sequence_priority_eta=eta)
            assert got == pytest.approx(total, rel=1e-6)
        with pytest.raises(shmreplay.InvalidArgument, match="sequence_priority_eta"):
            s.sample("replay", 2, 3, prioritized=True, sequence_priority_eta=2.0)


def test_mixture_importance_weighs_every_row_by_the_whole_mixtures_probability(name):
    buf = shmreplay.Buffer.create(name, 1, 32, SCHEMA, priority_exponent=1.0)
    with shmreplay.Writer(buf, [0]) as w, shmreplay.Sampler(buf, seed=2) as s:
        push(w, 0, [1.0 + (i % 4) for i in range(32)])
        mix = {"uniform": 0.5, "prioritized": 0.5}
        b = s.sample_transitions("replay", 64, mixture=mix, mixture_importance=True, beta=1.0)
        # P = 0.5 / 32 + 0.5 * priority / sum: the weight is min P / P, so a row's weight falls as its priority rises.
        total = sum(1.0 + (i % 4) for i in range(32))
        p = 0.5 / 32 + 0.5 * (1.0 + b.starts % 4) / total
        np.testing.assert_allclose(b.weights, p.min() / p, rtol=1e-5)
        assert b.weights[: b.rows // 2].min() < 1.0  # the uniform block is weighed too
        with pytest.raises(shmreplay.InvalidArgument, match="mixture_importance"):
            s.sample_transitions("replay", 4, mixture_importance=True)
