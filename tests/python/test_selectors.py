"""Recency sampling and mixtures of selectors from Python: recency_half_life= draws by 2**(-age / half_life) over
each env's steps, total_weight is their exact sum, and what the closed form cannot weigh is refused with the reason;
mixture= gives a block of rows per selector, told by batch.selector_rows. (The planner is checked against a reference
model in tests/planner/recency.cpp; recency under writer threads and mixtures' distributions in tests/sampler.)"""
import numpy as np
import pytest

import shmreplay

SCHEMA = "env:u64 step:u64"
HEADS = (40, 10)  # env 0 wrapped in a ring of 32: steps [8, 40); env 1: [0, 10)
CAPACITY = 32


def filled(name):
    buf = shmreplay.Buffer.create(name, 2, CAPACITY, SCHEMA)
    with shmreplay.Writer(buf, [0, 1]) as w:
        for e, head in enumerate(HEADS):
            for step in range(head):
                w.push([e], {"env": np.array([e], np.uint64), "step": np.array([step], np.uint64)})
    return buf


def weights(length, power, half_life):
    """{(env, start): weight} of every stored start: min(steps left, L)**power * 2**(-age / half_life)."""
    out = {}
    for e, head in enumerate(HEADS):
        for p in range(max(0, head - CAPACITY), head):
            out[(e, p)] = min(head - p, length) ** power * 2.0 ** (-(head - 1 - p) / half_life)
    return out


def chi_square(counts, model, draws):
    total = sum(model.values())
    return sum((counts.get(cell, 0) - draws * w / total) ** 2 / (draws * w / total) for cell, w in model.items())


def test_recency_draws_follow_the_half_life_and_total_weight_is_their_sum(name):
    buf = filled(name)
    with shmreplay.Sampler(buf, seed=11) as s:
        draws = 60000
        b = s.sample_transitions("replay", draws, recency_half_life=6.0)
        assert np.all(b["step"][:, 0] == b.starts) and np.all(b["env"][:, 0] == b.env_ids)
        assert np.all(b.weights == 1)  # the decay is the distribution asked for: nothing to correct
        cells, n = np.unique(np.stack([b.env_ids, b.starts], axis=1), axis=0, return_counts=True)
        counts = {(int(e), int(p)): int(k) for (e, p), k in zip(cells, n)}
        model = weights(1, 0.0, 6.0)
        assert set(counts) <= set(model)
        df = len(model) - 1
        bound = df + 6 * np.sqrt(2 * df)
        assert chi_square(counts, model, draws) < bound
        assert chi_square(counts, weights(1, 0.0, 8.0), draws) > bound  # a wrong half-life is rejected
        assert s.total_weight("replay", 1, recency_half_life=6.0) == pytest.approx(sum(model.values()), rel=1e-12)
        assert s.total_weight("replay", 5, 1.5, recency_half_life=3.0) == pytest.approx(
            sum(weights(5, 1.5, 3.0).values()), rel=1e-12)
        # sequences: rows hold their steps, cut at the head
        seq = s.sample("replay", 256, 5, 1.0, recency_half_life=3.0)
        valid = seq.mask
        assert np.all(seq["step"][valid] == (seq.starts[:, None] + np.arange(5))[valid])
        assert np.all((seq["step"] < np.array(HEADS)[seq.env_ids][:, None])[valid])
        m = s.sample_mixed(8, 0, 3, recency_half_life=3.0)
        assert m.rows == 8


def test_recency_refuses_what_its_closed_form_cannot_weigh(name):
    buf = filled(name)
    with shmreplay.Sampler(buf) as s:
        with pytest.raises(shmreplay.InvalidArgument, match=r"recency_half_life is -1"):
            s.sample("replay", 4, 2, recency_half_life=-1.0)
        with pytest.raises(shmreplay.InvalidArgument, match=r"period = 2.*closed form"):
            s.sample("replay", 4, 2, period=2, recency_half_life=4.0)
        with pytest.raises(shmreplay.InvalidArgument, match=r"recency_half_life is nan"):
            s.total_weight("replay", 2, recency_half_life=float("nan"))
        with pytest.raises(TypeError, match=r"recency_half_life"):
            s.sample("replay", 4, 2, recency_half_life="long")


def test_a_mixture_gives_a_block_per_selector_and_the_batch_tells_them(name):
    buf = shmreplay.Buffer.create(name, 2, CAPACITY, SCHEMA, priority_exponent=1.0)
    with shmreplay.Writer(buf, [0, 1]) as w:
        for e, head in enumerate(HEADS):
            for step in range(head):
                w.push([e], {"env": np.array([e], np.uint64), "step": np.array([step], np.uint64)},
                       priorities=np.array([1.0 + step % 3], np.float32))
    with shmreplay.Sampler(buf, seed=4) as s:
        mix = {"uniform": 0.5, "prioritized": 0.25, "recency": 0.25}
        b = s.sample("replay", 10, 3, 1.0, recency_half_life=4.0, mixture=mix, beta=1.0)
        # quotas 5, 2.5, 2.5: floors 5, 2, 2, and the row left to the earlier of the tied remainders
        assert b.selector_rows == {"uniform": slice(0, 5, 1), "prioritized": slice(5, 8, 1),
                                   "recency": slice(8, 10, 1)}
        assert np.all(b.weights[b.selector_rows["uniform"]] == 1)
        assert np.all(b.weights[b.selector_rows["recency"]] == 1)
        prio = b.weights[b.selector_rows["prioritized"]]
        assert prio.max() == 1 and np.all(prio > 0)
        assert np.all(b["step"][:, 0] == b.starts)
        # a plain call reports its one selector
        t = s.sample_transitions("replay", 6, mixture={"online": 1.0, "uniform": 1.0})
        assert t.selector_rows == {"uniform": slice(0, 3, 1), "online": slice(3, 6, 1)}
        assert s.sample("replay", 4, 2).selector_rows == {"uniform": slice(0, 4, 1)}
        assert s.sample_mixed(2, 3, 2).selector_rows == {"uniform": slice(0, 2, 1), "online": slice(2, 5, 1)}
        assert s.sample("replay", 4, 2, mixture=None).selector_rows == {"uniform": slice(0, 4, 1)}
        with pytest.raises(shmreplay.InvalidArgument, match=r"no selector 'newest'"):
            s.sample("replay", 4, 2, mixture={"newest": 1.0})
        with pytest.raises(shmreplay.InvalidArgument, match=r"recency fraction is -1"):
            s.sample("replay", 4, 2, mixture={"uniform": 1.0, "recency": -1.0})
        with pytest.raises(shmreplay.InvalidArgument, match=r"recency_half_life is 0"):
            s.sample("replay", 4, 2, mixture={"recency": 1.0})
        with pytest.raises(TypeError, match=r"argument 'mixture' must be a dict"):
            s.sample("replay", 4, 2, mixture=[("uniform", 1.0)])
