"""shmreplay.jax.UniformBuffer: the Muesli/envpool UniformBuffer's calls on a buffer in shared memory.

The seed (a JAX buffer fed by envpool in async mode, all in one process) keeps, per env, a ring of items and two
boundary pointers: the replay buffer (everything stored) and the online queue (what arrived since the learner
last reset it). Its calls keep their names, arguments and results here; what changes is where the state lives:
in a named shmreplay buffer, so env worker processes push into it while the learner process samples, and the
calls act in place (each returns the buffer itself where the seed returned a new one, so ``buf =
buf.push_env_updates(...)`` still works).

    # the seed                                         # shmreplay
    buf = UniformBuffer.init(proto, num_envs, size)    buf = UniformBuffer.init(proto, num_envs, size, name="muesli")
    buf = buf.push_env_updates(update, env_ids)        buf = buf.push_env_updates(update, env_ids)      (same)
    seqs, mask = buf.sample_rb_and_oq(key, 32, 32, L)  seqs, mask = buf.sample_rb_and_oq(key, 32, 32, L)  (same)
    buf = buf.reset_online_queue()                     buf = buf.reset_online_queue()                     (same)
    # another process: UniformBuffer.attach("muesli", proto, env_ids=range(8, 16)) and push its envs

Sampling follows the seed: a start is drawn among all stored steps of the view with weight
``min(steps from the start to the env's newest, sequence_length) ** distribution_power``, with replacement;
rows are ``[batch, sequence_length, ...]`` with a mask that is True for the steps that exist. The same key and
the same buffer state give the same batch. Two differences: masked steps are zeros (the seed returns whatever
the ring holds there), and sampling an empty view raises ``shmreplay.EmptyView`` (the seed's draw is undefined).
"""
import numpy as np

import jax
import jax.numpy as jnp

from ._pytree import TreeSchema
from ._shmreplay import Buffer, Sampler, Writer
from ._jax_arrays import array as _jax_array

__all__ = ["UniformBuffer", "key_seed"]


def key_seed(key):
    """A 64-bit sampler seed from a JAX PRNG key (raw uint32 keys and typed keys alike): the same key gives the
    same seed, and keys that differ give different seeds (FNV-1a over the key's words)."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    h = 0xCBF29CE484222325
    for word in np.asarray(key).astype(np.uint64).ravel().tolist():
        h = ((h ^ word) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class UniformBuffer:
    """The seed's UniformBuffer on a shmreplay buffer (see the module's text). Make one with :meth:`init` (creates
    the buffer) or :meth:`attach` (by name, from any process). A process pushes with a Writer on the envs it
    owns (all envs unless ``env_ids`` was given), made at its first push; sampling, peek and reset use the
    buffer's one learner Sampler, made at the first such call. Not for use by two threads at once."""

    def __init__(self, buffer, prototype=None, env_ids=None, seed_tree=None):
        self.buffer = buffer
        self.tree = None
        if prototype is not None:
            # The buffer's stacked fields are stacked in the prototype's schema too (a leaf holds the whole stack).
            names = TreeSchema(prototype).names
            stacked = {f.name: f.stack_axis for f in buffer.schema.fields
                       if f.stack_axis is not None and f.name in names}
            self.tree = TreeSchema(prototype, stacked)
        if self.tree is not None and not (self.tree.schema == buffer.schema):
            raise ValueError(f"the item prototype gives the schema '{self.tree.schema}', the buffer "
                             f"'{buffer.name}' has '{buffer.schema}'")
        self.env_ids = None if env_ids is None else [int(e) for e in env_ids]
        self.bf16 = {f.name for f in buffer.schema.fields if f.dtype == "bf16"}
        self._writer = None
        self._sampler = None

    # ----- making one
    @classmethod
    def init(cls, item_prototype, num_envs, max_size, *, name, env_ids=None, mode=0o600, replace=False,
             stack_axes=None):
        """Create the buffer ``name`` for ``num_envs`` envs of ``max_size`` items each, items shaped like
        ``item_prototype`` (a pytree of arrays or scalars), as the seed's ``init``. ``stack_axes``: ``{field name:
        axis}`` of the leaves that are frame stacks (e.g. ``{"obs": 0}`` for Atari's ``u8[4,84,84]``), stored one
        frame per step."""
        tree = TreeSchema(item_prototype, stack_axes)
        buf = Buffer.create(name, int(num_envs), int(max_size), tree.schema, mode=mode, replace=replace)
        return cls(buf, item_prototype, env_ids)

    @classmethod
    def attach(cls, name, item_prototype=None, *, env_ids=None, ready_timeout=10.0):
        """Attach to the existing buffer ``name``. With ``item_prototype`` its schema is checked and samples are
        pytrees of its structure; without, they are dicts keyed by field name. ``env_ids``: the envs this process
        pushes (default: all)."""
        return cls(Buffer.open(name, ready_timeout=ready_timeout), item_prototype, env_ids)

    @property
    def name(self):
        """The shared buffer's name."""
        return self.buffer.name

    @property
    def max_size(self):
        """Items kept per env (the buffer's capacity)."""
        return self.buffer.capacity

    @property
    def num_envs(self):
        """Envs of the buffer (one ring of items each)."""
        return self.buffer.num_envs

    def close(self):
        """Give back this process's leases (its Writer's envs, and the learner's Sampler)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None

    def remove(self):
        """Close, then remove the buffer's name (processes attached keep their mapping until they let go)."""
        self.close()
        Buffer.remove(self.buffer.name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ----- the writer's side
    def _data(self, tree, what):
        by_name = self.tree.flatten(tree, what) if self.tree is not None else dict(tree)
        out = {}
        for name, leaf in by_name.items():
            a = np.asarray(leaf)
            out[name] = a.view(np.uint16) if name in self.bf16 and a.dtype.name == "bfloat16" else a
        return out

    def push_env_updates(self, update_batch, env_ids):
        """Append one item to each env of ``env_ids`` (any subset, any order, as envpool's ``recv`` returns
        them): every leaf of ``update_batch`` is ``[len(env_ids), ...]``. Returns this buffer."""
        if self._writer is None:
            envs = self.env_ids if self.env_ids is not None else range(self.buffer.num_envs)
            self._writer = Writer(self.buffer, list(envs))
        self._writer.push(np.asarray(env_ids), self._data(update_batch, "the update batch"))
        return self

    # ----- the learner's side
    def _learner(self):
        if self._sampler is None:
            self._sampler = Sampler(self.buffer)
        return self._sampler

    def _result(self, batch, squeeze=False):
        by_name = {}
        for name, a in batch.fields.items():
            if squeeze:
                a = a[:, 0]
            by_name[name] = _jax_array(a, name in self.bf16)
        tree = self.tree.unflatten(by_name) if self.tree is not None else by_name
        return tree

    def _sample(self, view, rng, batch_size, sequence_length, distribution_power):
        s = self._learner()
        s.seed(key_seed(rng))
        batch = s.sample(view, int(batch_size), int(sequence_length), power=float(distribution_power))
        return self._result(batch), _jax_array(batch.mask)

    def sample_replay_buffer(self, rng, batch_size, sequence_length, distribution_power=1):
        """``(items [batch_size, sequence_length, ...], mask [batch_size, sequence_length])`` from every stored
        item; starts weighted by ``min(remaining, sequence_length) ** distribution_power``."""
        return self._sample("replay", rng, batch_size, sequence_length, distribution_power)

    def sample_online_queue(self, rng, batch_size, sequence_length, distribution_power=1):
        """The same, from the items pushed since the last :meth:`reset_online_queue`."""
        return self._sample("online", rng, batch_size, sequence_length, distribution_power)

    def sample_rb_and_oq(self, rng, rb_batch_size, oq_batch_size, sequence_length, distribution_power=1):
        """``rb_batch_size`` replay rows, then ``oq_batch_size`` online-queue rows, in one batch (one snapshot)."""
        s = self._learner()
        s.seed(key_seed(rng))
        batch = s.sample_mixed(int(rb_batch_size), int(oq_batch_size), int(sequence_length),
                               float(distribution_power))
        return self._result(batch), _jax_array(batch.mask)

    def peek(self, env_ids):
        """The newest item of each env of ``env_ids``: leaves ``[len(env_ids), ...]``."""
        return self._result(self._learner().peek(np.asarray(env_ids)), squeeze=True)

    def reset_online_queue(self):
        """Empty the online queue (the replay buffer keeps everything). Returns this buffer."""
        self._learner().reset_online_queue()
        return self
