"""The other two seeds' call sets on a shmreplay buffer: the functional JAX buffer (``ReplayBuffer``: ``init``,
``add``, ``sample``, ``add_and_sample``) and dejax (``uniform_replay``: ``init_fn``, ``add_fn``, ``sample_fn``,
``update_fn``), for flat transitions sampled uniformly.

Their state is a value the caller threads through its loop; here it is a :class:`State`, a handle to the shared
segment (the calls act in place and return it), so a loop written for either seed keeps its shape and only the
constructor changes: ``ReplayBuffer(buffer_size=N, name="x")`` and ``uniform_replay(max_size=N, name="x")``.

Storage: ``num_envs`` rings (default 1) of ``buffer_size // num_envs`` transitions. ``add`` takes leaves with a
leading dimension of parallel envs: with ``num_envs`` rings and that many rows, row i goes to ring i (one push);
with one ring the rows go in order. ``sample`` draws stored transitions uniformly with replacement (the seeds'
``randint`` over the filled part), deterministic for a key and a state.
"""
import numpy as np

import jax

from ._jax_uniform import UniformBuffer, key_seed

__all__ = ["ReplayBuffer", "State", "uniform_replay"]


class State:
    """The handle that stands for the seeds' state: the shared buffer (``.buffer``, a UniformBuffer) and, read
    live, ``size`` (transitions stored) and ``position`` (where the next goes, in ring 0's terms)."""

    def __init__(self, buffer):
        self.buffer = buffer

    @property
    def size(self):
        """Transitions stored now, all rings together."""
        cap = self.buffer.max_size
        return int(sum(min(int(h), cap) for h in self.buffer.buffer.heads()))

    @property
    def position(self):
        """Where the next transition goes, in ring 0's terms (its head modulo the ring's size)."""
        return int(self.buffer.buffer.heads()[0]) % self.buffer.max_size


def _add(state, transitions):
    leaves = jax.tree_util.tree_leaves(transitions)
    if not leaves:
        raise ValueError("transitions must be a non-empty pytree")
    rows, rings = int(np.shape(leaves[0])[0]), state.buffer.num_envs
    if rows == rings:
        state.buffer.push_env_updates(transitions, np.arange(rings, dtype=np.int32))
    elif rings == 1:
        for r in range(rows):
            one = jax.tree_util.tree_map(lambda x, r=r: np.asarray(x)[r:r + 1], transitions)
            state.buffer.push_env_updates(one, np.zeros(1, np.int32))
    else:
        raise ValueError(f"add: the transitions have {rows} rows; this buffer has {rings} rings, so it takes "
                         f"{rings} rows (one per ring) or was to be made with num_envs=1")
    return state


def _sample(state, batch_size, key):
    b = state.buffer
    s = b._learner()
    s.seed(key_seed(key))
    return b._result(s.sample("replay", int(batch_size), 1), squeeze=True)


class ReplayBuffer:
    """The functional JAX replay buffer's calls (``init``, ``add``, ``sample``, ``add_and_sample``) on the shared
    buffer ``name``. ``init`` creates it (``replace=True`` replaces one of that name); a process that attaches
    to an existing one uses ``UniformBuffer.attach``."""

    def __init__(self, buffer_size, *, name, num_envs=1, mode=0o600, replace=False, stack_axes=None):
        if buffer_size < num_envs or buffer_size % num_envs:
            raise ValueError(f"buffer_size {buffer_size} must be a positive multiple of num_envs {num_envs}")
        self.buffer_size, self.name, self.num_envs = int(buffer_size), name, int(num_envs)
        self.mode, self.replace, self.stack_axes = mode, replace, stack_axes

    def init(self, sample_transition):
        """Create the shared buffer, its items shaped like ``sample_transition`` (a pytree); returns the
        :class:`State`."""
        return State(UniformBuffer.init(sample_transition, self.num_envs, self.buffer_size // self.num_envs,
                                        name=self.name, mode=self.mode, replace=self.replace,
                                        stack_axes=self.stack_axes))

    def add(self, state, transitions):
        """Push ``transitions`` (leaves ``[num_envs, ...]``: one per ring; or, with ``num_envs=1``, any number
        of rows, pushed in order); returns ``state``."""
        return _add(state, transitions)

    def sample(self, state, batch_size, key):
        """``(state, batch)``: ``batch_size`` stored transitions drawn uniformly, leaves ``[batch_size, ...]``."""
        return state, _sample(state, batch_size, key)

    def add_and_sample(self, state, transitions, batch_size, key):
        """:meth:`add`, then :meth:`sample`: ``(state, batch)``."""
        return self.sample(self.add(state, transitions), batch_size, key)


class _UniformReplay:
    """dejax's buffer object: ``init_fn``, ``add_fn`` (one item, no batch dimension), ``sample_fn``,
    ``update_fn``."""

    def __init__(self, max_size, name, mode, replace, stack_axes):
        self.max_size, self.name, self.mode, self.replace = int(max_size), name, mode, replace
        self.stack_axes = stack_axes

    def init_fn(self, item_prototype):
        return State(UniformBuffer.init(item_prototype, 1, self.max_size, name=self.name, mode=self.mode,
                                        replace=self.replace, stack_axes=self.stack_axes))

    def add_fn(self, state, item):
        state.buffer.push_env_updates(jax.tree_util.tree_map(lambda x: np.asarray(x)[None], item),
                                      np.zeros(1, np.int32))
        return state

    def sample_fn(self, state, rng, batch_size):
        return _sample(state, batch_size, rng)

    def update_fn(self, state, item_update_fn):
        """Applies ``item_update_fn`` to every stored item (vectorised with ``jax.vmap``) and writes the results
        back in place; an item that a writer overwrote meanwhile keeps the writer's newer value."""
        b = state.buffer
        for env in range(b.num_envs):
            head = int(b.buffer.heads()[env])
            first, by_name = b.buffer.read_steps(env, max(0, head - b.max_size), b.max_size)
            count = len(next(iter(by_name.values())))
            if count == 0:
                continue
            items = b.tree.unflatten(by_name) if b.tree is not None else by_name
            updated = jax.vmap(item_update_fn)(items)
            data = b._data(updated, "the updated items")
            b._learner().update(np.full(count, env, np.int64), np.arange(first, first + count), data)
        return state


def uniform_replay(max_size, *, name, mode=0o600, replace=False, stack_axes=None):
    """dejax's ``uniform_replay(max_size)`` on the shared buffer ``name`` (created by ``init_fn``); ``stack_axes``:
    ``{field name: axis}`` of the item's frame stacks (stored one frame per step)."""
    return _UniformReplay(max_size, name, mode, replace, stack_axes)
