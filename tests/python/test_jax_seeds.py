"""The functional JAX buffer's and dejax's call sets on a shmreplay buffer: a loop written against each seed's
calls runs unchanged apart from the constructor, every sampled transition is one that was added (checked
exactly), sampling is uniform over what is stored (chi-square), and dejax's update_fn rewrites items in place."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
stats = pytest.importorskip("scipy.stats")
import jax.numpy as jnp  # noqa: E402

from shmreplay.jax import ReplayBuffer, uniform_replay  # noqa: E402


def transition(i):
    """Transition number i: every leaf a function of i, so a sampled transition can be checked exactly."""
    return {"i": np.int32(i), "obs": np.full(3, i * 0.25, np.float32), "next": (np.int32(i + 1), np.bool_(i % 2))}


def stack(ts):
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *ts)


def check_sampled(batch, added):
    i = np.asarray(batch["i"])
    assert set(i.tolist()) <= added
    for r, n in enumerate(i.tolist()):
        for got, want in zip(jax.tree_util.tree_leaves(batch), jax.tree_util.tree_leaves(transition(n))):
            np.testing.assert_array_equal(np.asarray(got)[r], want)
    return i


def functional_loop(buffer, key, iterations, envs):
    """Written against the functional seed's calls only: init, add_and_sample, sample."""
    state = buffer.init(transition(0))
    added, seen = set(), []
    for it in range(iterations):
        ts = [transition(it * envs + e) for e in range(envs)]
        added |= {it * envs + e for e in range(envs)}
        key, k = jax.random.split(key)
        state, batch = buffer.add_and_sample(state, stack(ts), 16, k)
        seen.append(check_sampled(batch, added))
    key, k = jax.random.split(key)
    state, batch = buffer.sample(state, 4000, k)
    return state, batch, added


@pytest.mark.parametrize("rings", [1, 4])
def test_a_functional_buffer_loop_runs_unchanged_but_for_the_constructor(name, rings):
    buffer = ReplayBuffer(buffer_size=64, name=name, num_envs=rings)  # the seed: ReplayBuffer(buffer_size=64)
    state, batch, added = functional_loop(buffer, jax.random.PRNGKey(0), 30, 4)
    try:
        assert state.size == 64
        i = check_sampled(batch, added)
        stored = sorted(added)[-64:]               # the newest 64 of 120: each ring keeps its newest
        assert set(i.tolist()) == set(stored)
        counts = np.array([np.sum(i == n) for n in stored])
        assert stats.chisquare(counts).pvalue > 1e-4   # uniform over what is stored
    finally:
        state.buffer.remove()


def dejax_loop(buffer, items, rng):
    """Written against dejax's calls only: init_fn, add_fn, sample_fn, update_fn."""
    state = buffer.init_fn(items[0])
    for item in items:
        state = buffer.add_fn(state, item)
    before = buffer.sample_fn(state, rng, 64)
    state = buffer.update_fn(state, lambda item: {**item, "obs": item["obs"] * 2})
    after = buffer.sample_fn(state, rng, 64)
    return state, before, after


def test_a_dejax_loop_runs_unchanged_but_for_the_constructor_and_update_fn_rewrites_in_place(name):
    buffer = uniform_replay(max_size=16, name=name)  # dejax: uniform_replay(max_size=16)
    items = [transition(i) for i in range(40)]
    state, before, after = dejax_loop(buffer, items, jax.random.PRNGKey(1))
    try:
        assert state.size == 16
        check_sampled(before, set(range(24, 40)))
        i = np.asarray(after["i"])
        assert set(i.tolist()) <= set(range(24, 40))
        np.testing.assert_array_equal(np.asarray(after["obs"]), np.repeat(i[:, None] * 0.5, 3, axis=1))
        np.testing.assert_array_equal(np.asarray(after["next"][0]), i + 1)  # other leaves untouched
        assert jnp.array_equal(before["i"], after["i"])  # same key, same state of the counters: same draws
    finally:
        state.buffer.remove()
