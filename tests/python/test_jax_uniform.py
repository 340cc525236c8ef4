"""shmreplay.jax.UniformBuffer against a reference written from the seed's semantics (the Muesli/envpool JAX
UniformBuffer in shared/seeds): per env a ring of max_size items, a replay pointer and an online-queue pointer;
a start is drawn among the view's items with weight min(remaining, L) ** power; rows are [B, L, ...] with a
mask that is True for the steps that exist. Every row's data and mask is checked exactly, start frequencies by
chi-square (which is also shown to reject a wrong power), and a loop written against the seed's calls runs
unchanged apart from the constructor."""
from typing import NamedTuple

import numpy as np
import pytest

jax = pytest.importorskip("jax")
stats = pytest.importorskip("scipy.stats")
import jax.numpy as jnp  # noqa: E402

from shmreplay.jax import UniformBuffer, key_seed  # noqa: E402


class Obs(NamedTuple):
    pixels: np.ndarray
    tag: np.ndarray


def prototype():
    # id = (env, global step index): the test reads each row's env and start from its first step
    return {"id": np.zeros(2, np.int32), "obs": Obs(np.zeros((2, 3), np.uint8), np.float32(0)),
            "act": (np.int32(0), np.bool_(False))}


def item(env, step):
    return {"id": np.array([env, step], np.int32),
            "obs": Obs(np.full((2, 3), (env * 31 + step) % 251, np.uint8), np.float32(step * 0.5 + env)),
            "act": (np.int32(step * 7 - env), np.bool_((step + env) % 3 == 0))}


def stack(items):
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *items)


class SeedModel:
    """The seed's state in NumPy: rings of items and, per env, the ring head and the two views' lengths."""

    def __init__(self, num_envs, max_size):
        self.n, self.c = num_envs, max_size
        self.items = [[None] * max_size for _ in range(num_envs)]
        self.head = np.zeros(num_envs, int)      # ring position of the next item
        self.pushed = np.zeros(num_envs, int)    # items ever pushed (global step index of the next)
        self.length = {"replay": np.zeros(num_envs, int), "online": np.zeros(num_envs, int)}

    def push(self, env_ids):
        for e in env_ids:
            self.items[e][self.head[e]] = item(e, self.pushed[e])
            self.head[e] = (self.head[e] + 1) % self.c
            self.pushed[e] += 1
            for v in self.length.values():
                v[e] = min(v[e] + 1, self.c)

    def reset_online_queue(self):
        self.length["online"][:] = 0

    def candidates(self, view, seq_len, power):
        """{(env, global start): probability} of the view's starts."""
        w = {}
        for e in range(self.n):
            n = self.length[view][e]
            for k in range(n):
                w[(e, int(self.pushed[e] - n + k))] = float(min(n - k, seq_len)) ** power
        total = sum(w.values())
        return {c: x / total for c, x in w.items()}

    def valid_steps(self, env, start, seq_len):
        return min(self.pushed[env] - start, seq_len)


def check_rows(tree, mask, model, seq_len, view_candidates, label):
    """Every row: its start is a candidate of its view, its mask is exactly the existing steps, and every valid
    step's every leaf equals the item the model stored. Returns the (env, start) of each row."""
    ids, mask = np.asarray(tree["id"]), np.asarray(mask)
    leaves = jax.tree_util.tree_leaves(tree)
    starts = []
    for r in range(mask.shape[0]):
        env, start = int(ids[r, 0, 0]), int(ids[r, 0, 1])
        assert (env, start) in view_candidates, f"{label}: row {r} starts at {(env, start)}, not in its view"
        valid = model.valid_steps(env, start, seq_len)
        assert mask[r].tolist() == [t < valid for t in range(seq_len)], f"{label}: row {r} mask {mask[r]}"
        for t in range(valid):
            want = jax.tree_util.tree_leaves(item(env, start + t))
            for got, w in zip(leaves, want):
                np.testing.assert_array_equal(np.asarray(got)[r, t], w, err_msg=f"{label}: row {r} step {t}")
        for got in leaves:
            assert not np.asarray(got)[r, valid:].any(), f"{label}: masked steps of row {r} are not zero"
        starts.append((env, start))
    return starts


def chi_square_p(starts, probabilities):
    keys = sorted(probabilities)
    counts = np.array([sum(1 for s in starts if s == k) for k in keys], float)
    expected = np.array([probabilities[k] for k in keys]) * len(starts)
    return stats.chisquare(counts, expected).pvalue


@pytest.fixture
def buf(name):
    b = UniformBuffer.init(prototype(), 3, 8, name=name)
    yield b
    b.close()


def fill(buf, model, pushes, rng):
    for _ in range(pushes):
        envs = np.array([e for e in rng.permutation(3) if rng.random() < [0.9, 0.5, 0.2][e]], dtype=np.int32)
        if len(envs) == 0:
            continue
        assert buf.push_env_updates(stack([item(e, model.pushed[e]) for e in envs]), envs) is buf
        model.push(envs)


def test_every_view_length_and_power_matches_the_seeds_distribution_data_and_mask(buf):
    model, rng = SeedModel(3, 8), np.random.default_rng(0)
    fill(buf, model, 6, rng)
    assert buf.reset_online_queue() is buf
    model.reset_online_queue()
    fill(buf, model, 14, rng)        # env 0 wraps its ring; the online queue holds only these
    assert model.pushed[0] > 8 and 0 < model.length["online"].sum() < model.length["replay"].sum()
    key = jax.random.PRNGKey(7)
    for seq_len in range(1, 9):
        for power in (0, 1, 2):
            for view, sample in (("replay", buf.sample_replay_buffer), ("online", buf.sample_online_queue)):
                key, k = jax.random.split(key)
                probabilities = model.candidates(view, seq_len, power)
                tree, mask = sample(k, 400 if seq_len in (1, 3, 8) else 50, seq_len, distribution_power=power)
                assert mask.shape == (mask.shape[0], seq_len) and tree["obs"].pixels.shape[1:] == (seq_len, 2, 3)
                starts = check_rows(tree, mask, model, seq_len, probabilities, f"{view} L={seq_len} p={power}")
                if seq_len in (1, 3, 8):
                    p = chi_square_p(starts, probabilities)
                    assert p > 1e-4, f"{view} L={seq_len} power {power}: chi-square p = {p}"
                    if seq_len > 1 and power < 2:  # the same test rejects a wrong power
                        wrong = model.candidates(view, seq_len, power + 1)
                        assert chi_square_p(starts, wrong) < 1e-6, f"{view} L={seq_len}: power {power + 1} fits too"


def test_rb_and_oq_gives_replay_rows_then_online_rows_and_peek_the_newest_items(buf):
    model, rng = SeedModel(3, 8), np.random.default_rng(1)
    fill(buf, model, 10, rng)
    buf.reset_online_queue()
    model.reset_online_queue()
    fill(buf, model, 4, rng)
    tree, mask = buf.sample_rb_and_oq(jax.random.PRNGKey(3), 300, 200, 4, distribution_power=1)
    assert mask.shape == (500, 4)
    rb = model.candidates("replay", 4, 1)
    oq = model.candidates("online", 4, 1)
    first = jax.tree_util.tree_map(lambda a: a[:300], tree)
    last = jax.tree_util.tree_map(lambda a: a[300:], tree)
    assert chi_square_p(check_rows(first, mask[:300], model, 4, rb, "rb"), rb) > 1e-4
    assert chi_square_p(check_rows(last, mask[300:], model, 4, oq, "oq"), oq) > 1e-4

    envs = np.array([2, 0, 1])
    newest = buf.peek(envs)
    for i, e in enumerate(envs):
        if model.pushed[e]:
            want = jax.tree_util.tree_leaves(item(e, model.pushed[e] - 1))
            for got, w in zip(jax.tree_util.tree_leaves(newest), want):
                np.testing.assert_array_equal(np.asarray(got)[i], w)


def test_the_same_key_and_state_give_the_same_batch_and_other_keys_another(buf):
    model, rng = SeedModel(3, 8), np.random.default_rng(2)
    fill(buf, model, 12, rng)
    a = buf.sample_replay_buffer(jax.random.PRNGKey(5), 64, 3)
    b = buf.sample_replay_buffer(jax.random.PRNGKey(5), 64, 3)
    c = buf.sample_replay_buffer(jax.random.PRNGKey(6), 64, 3)
    same = jax.tree_util.tree_map(lambda x, y: bool(jnp.array_equal(x, y)), a, b)
    assert all(jax.tree_util.tree_leaves(same))
    assert not jnp.array_equal(a[0]["id"], c[0]["id"])
    assert key_seed(jax.random.key(5)) == key_seed(jax.random.key(5)) != key_seed(jax.random.key(6))


def muesli_loop(buf, source, steps, key):
    """A learner loop written against the seed's calls only (as in the Muesli agent): push what the async source
    returns, sample replay + online rows, reset the online queue. Returns the masks it saw."""
    masks = []
    for i in range(steps):
        update, env_ids = source()
        buf = buf.push_env_updates(update, env_ids)
        if i % 5 == 4:
            key, k = jax.random.split(key)
            seqs, mask = buf.sample_rb_and_oq(k, 8, 8, 4)
            masks.append(np.asarray(mask))
            latest = buf.peek(env_ids)
            assert jax.tree_util.tree_structure(latest) == jax.tree_util.tree_structure(update)
            buf = buf.reset_online_queue()
    return masks


def test_a_loop_written_for_the_seed_runs_unchanged_but_for_the_constructor(name):
    rng = np.random.default_rng(3)
    steps = np.zeros(4, int)

    def async_source():  # envpool-style recv: a random subset of envs, in random order
        envs = rng.permutation(4)[: rng.integers(1, 5)].astype(np.int32)
        out = stack([item(e, steps[e]) for e in envs])
        steps[envs] += 1
        return out, envs

    buf = UniformBuffer.init(prototype(), 4, 16, name=name)  # the seed: UniformBuffer.init(prototype(), 4, 16)
    try:
        masks = muesli_loop(buf, async_source, 60, jax.random.PRNGKey(0))
        assert len(masks) == 12 and all(m[:, 0].all() for m in masks)
        assert list(buf.buffer.heads()) == steps.tolist()
    finally:
        buf.remove()


def test_another_process_attaches_by_name_and_pushes_its_own_envs(name, tmp_path):
    import subprocess
    import sys
    import textwrap
    buf = UniformBuffer.init(prototype(), 4, 16, name=name)
    script = tmp_path / "actor.py"
    script.write_text(textwrap.dedent(f'''
        import sys
        import numpy as np
        from shmreplay.jax import UniformBuffer
        sys.path.insert(0, {__file__.rsplit("/", 1)[0]!r})
        from test_jax_uniform import item, prototype, stack
        actor = UniformBuffer.attach({name!r}, prototype(), env_ids=[2, 3])
        for step in range(5):
            actor.push_env_updates(stack([item(3, step), item(2, step)]), np.array([3, 2]))
        actor.close()
    '''))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    try:
        assert list(buf.buffer.heads()) == [0, 0, 5, 5]
        tree, mask = buf.sample_replay_buffer(jax.random.PRNGKey(0), 16, 2)
        assert set(np.asarray(tree["id"])[:, 0, 0].tolist()) <= {2, 3} and np.asarray(mask)[:, 0].all()
    finally:
        buf.close()
