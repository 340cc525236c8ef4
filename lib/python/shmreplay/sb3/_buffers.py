"""shmreplay.sb3.ReplayBuffer: SB3's ReplayBuffer on a shmreplay segment (the package docstring says what it
promises; _segment.py how a transition is stored)."""
import os
import pathlib
import tempfile
import weakref

import numpy as np
import torch as th
from stable_baselines3.common import buffers as sb3_buffers
from stable_baselines3.common.type_aliases import ReplayBufferSamples

import shmreplay

from .. import _step_pairs
from . import _segment


class _TruncateMarks:
    """What ``replay_buffer.dones`` is: SB3 writes ``dones[pos] = True`` when a new ``learn()`` resets the envs
    (optimize_memory_usage, SB3 #46); here that makes the next ``add`` start every env afresh."""

    def __init__(self, owner):
        self._owner = weakref.ref(owner)

    def __setitem__(self, index, value):
        owner = self._owner()
        if owner is not None and np.any(value):
            owner._fresh[:] = True

    def __getitem__(self, index):
        raise TypeError("shmreplay.sb3: a buffer's dones live in shared memory; sample() returns them")


class ReplayBuffer(sb3_buffers.ReplayBuffer):
    """SB3's ReplayBuffer (same constructor, ``add``, ``sample``, ``ReplayBufferSamples``) on a shmreplay segment.

    Extra keywords (also through ``replay_buffer_kwargs``): ``name`` (the segment's name; a private one when None),
    ``writers`` (processes that may ``add`` at once, each ``n_envs`` envs; ``buffer_size`` is their total),
    ``stack_axis`` (the observation's frame-stack axis, e.g. 0 for SB3's Atari ``(4, 84, 84)``: each frame stored
    once) and ``stack_restarts`` (see ``shmreplay.Buffer.create``).
    """

    def __init__(self, buffer_size, observation_space, action_space, device="auto", n_envs=1,
                 optimize_memory_usage=False, handle_timeout_termination=True, *, name=None, writers=1,
                 stack_axis=None, stack_restarts=0):
        sb3_buffers.BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self._check_options(optimize_memory_usage, handle_timeout_termination)
        self.optimize_memory_usage = optimize_memory_usage
        self.handle_timeout_termination = handle_timeout_termination
        if int(writers) < 1:
            raise ValueError(f"shmreplay.sb3: writers is {writers}, expected at least 1")
        self.writers = int(writers)
        self.buffer_size = max(buffer_size // n_envs, 1)  # transitions per env, as SB3
        self._stack_axis = stack_axis
        capacity = max(buffer_size // (n_envs * self.writers), 1) + 1  # + the first step's observation
        buf = shmreplay.Buffer.create(name or _segment.private_name(), num_envs=n_envs * self.writers,
                                      capacity=capacity, schema=self._schema(), done="done",
                                      stack_restarts=stack_restarts)
        self._own(buf)

    def _own(self, buf):
        """Opens ``buf``, a segment this process made, writes its description (what ``attach`` reads) and has both
        removed when this process ends."""
        self._open(buf, self._description())
        _segment.write_description(_segment.description_path(buf.path), self._description())
        self._owner = _segment.Owner(buf.name, [buf.path, _segment.description_path(buf.path)])
        self._finalizer = weakref.finalize(self, self._owner.release)

    # -- what the subclasses change ---------------------------------------------------------------------------

    def _check_options(self, optimize_memory_usage, handle_timeout_termination):
        """Refused where SB3's own class refuses (this storage keeps each observation once either way)."""
        if optimize_memory_usage and handle_timeout_termination:
            raise ValueError("ReplayBuffer does not support optimize_memory_usage = True and "
                             "handle_timeout_termination = True simultaneously (as SB3's own ReplayBuffer; "
                             "shmreplay.sb3 stores each observation once whatever optimize_memory_usage says)")

    def _obs_keys(self):
        """(observation key or None, its space) of each observation field, in field order."""
        return [(None, self.observation_space)]

    def _obs_field(self, i):
        return "obs" if i == 0 and len(self._obs_keys()) == 1 else f"obs{i}"

    def _stack_of(self, key):
        return self._stack_axis.get(key) if isinstance(self._stack_axis, dict) else self._stack_axis

    def _join_obs(self, arrays):
        """The observation as SB3 returns it, from one array per field."""
        return arrays[0]

    def _tensor(self, array):
        """A tensor of its own: one NumPy copy of the (strided) rows, shared by the tensor on the CPU (torch's own
        copy of a strided uint8 array is several times slower than NumPy's)."""
        return th.as_tensor(np.array(array, order="C"), device=self.device)

    def _samples(self, obs, actions, next_obs, dones, rewards, discounts=None):
        t = self._tensor
        return ReplayBufferSamples(t(obs), t(actions), t(next_obs), t(dones), t(rewards),
                                   None if discounts is None else t(discounts))

    # -- the segment ------------------------------------------------------------------------------------------

    def _schema(self):
        obs = [(self._obs_field(i), space.dtype, self._shape_of(space), self._stack_of(key))
               for i, (key, space) in enumerate(self._obs_keys())]
        return _segment.schema(obs, self._maybe_cast_dtype(self.action_space.dtype), self.action_dim)

    @staticmethod
    def _shape_of(space):
        from stable_baselines3.common.preprocessing import get_obs_shape
        return get_obs_shape(space)

    def _description(self):
        return {"class": type(self).__name__, "buffer_size": self.buffer_size * self.n_envs,
                "observation_space": self.observation_space, "action_space": self.action_space,
                "n_envs": self.n_envs, "writers": self.writers,
                "optimize_memory_usage": self.optimize_memory_usage,
                "handle_timeout_termination": self.handle_timeout_termination, "stack_axis": self._stack_axis,
                "options": self._subclass_options()}

    def _subclass_options(self):
        return {}

    def _open(self, buf, description):
        self._buffer = buf
        self._writer = None
        self._sampler = None
        self._seed = int(np.random.randint(0, 2**63 - 1))  # SB3's seeding (set_random_seed) reaches the draws
        self._fresh = np.ones(self.n_envs, bool)  # envs whose next add starts with a reset step
        self._last_next = None  # the next observations of the last add, per field: what the next obs must be
        self._ids = None
        self._owner = None
        self.dones = _TruncateMarks(self)

    @property
    def name(self):
        """The segment's name: ``ReplayBuffer.attach(name)`` opens it in another process."""
        return self._buffer.name

    @property
    def buffer(self):
        """The ``shmreplay.Buffer`` under this one (``shmreplay info NAME`` shows it too)."""
        return self._buffer

    @classmethod
    def attach(cls, name, device="auto"):
        """The buffer ``name`` that a ``shmreplay.sb3`` buffer made in another process: its ``add`` calls fill
        that buffer (with the next free ``n_envs`` env ids of its ``writers``), its ``sample`` calls draw from it.
        It never removes the segment; its creator does, when it ends."""
        buf = shmreplay.Buffer.open(name)
        description = _segment.read_description(name, buf.path)
        if description["class"] != cls.__name__:
            raise shmreplay.SchemaMismatch(f"shmreplay.sb3: buffer '{name}' is a {description['class']}, "
                                           f"attached as a {cls.__name__}")
        self = cls.__new__(cls)
        self._restore(description, device)
        self._open(buf, description)
        return self

    def _restore(self, d, device):
        sb3_buffers.BaseBuffer.__init__(self, d["buffer_size"], d["observation_space"], d["action_space"], device,
                                        n_envs=d["n_envs"])
        self.buffer_size = max(d["buffer_size"] // d["n_envs"], 1)
        self.writers = d["writers"]
        self.optimize_memory_usage = d["optimize_memory_usage"]
        self.handle_timeout_termination = d["handle_timeout_termination"]
        self._stack_axis = d["stack_axis"]
        for key, value in d["options"].items():
            setattr(self, key, value)
        self._finalizer = None

    def close(self):
        """Releases this process's writer and learner slots; in the creating process also removes the segment
        (as the end of the process would)."""
        for role in (self._writer, self._sampler):
            if role is not None:
                role.close()
        self._writer = self._sampler = None
        if self._finalizer is not None:
            self._finalizer()

    def _learner(self):
        if self._sampler is None:
            self._sampler = shmreplay.Sampler(self._buffer, seed=self._seed)
        return self._sampler

    def _lease(self):
        """This process's block of n_envs env ids: the first of the writers' blocks that no live process holds."""
        for k in range(self.writers):
            try:
                self._writer = shmreplay.Writer.range(self._buffer, k * self.n_envs, self.n_envs)
            except shmreplay.LeaseHeld:
                continue
            self._ids = np.arange(k * self.n_envs, (k + 1) * self.n_envs, dtype=np.int32)
            return self._writer
        raise shmreplay.LeaseHeld(f"shmreplay.sb3: all {self.writers} writer blocks of buffer '{self.name}' "
                                  f"({self.n_envs} envs each) are held by live processes; create it with "
                                  f"writers={self.writers + 1} for one more process that adds")

    # -- add --------------------------------------------------------------------------------------------------

    def _split_obs(self, obs):
        """One array per observation field, [n_envs, *shape] (Discrete observations reshaped, as SB3 does)."""
        keys = self._obs_keys()
        return [np.asarray(obs if key is None else obs[key]).reshape((self.n_envs, *self._shape_of(space)))
                for key, space in keys]

    def add(self, obs, next_obs, action, reward, done, infos):
        """SB3's add: one transition per env. A reset step goes first for the envs whose ``obs`` does not
        continue their last ``next_obs`` (a new episode, whether or not its end was flagged)."""
        writer = self._writer or self._lease()
        obs, nxt = self._split_obs(obs), self._split_obs(next_obs)
        done = np.asarray(done).reshape(self.n_envs).astype(bool)
        if self.handle_timeout_termination:
            timeout = np.array([bool(info.get("TimeLimit.truncated", False)) for info in infos])
        else:
            timeout = np.zeros(self.n_envs, bool)
        fresh = self._fresh.copy()
        if self._last_next is not None:
            for now, last in zip(obs, self._last_next):
                fresh |= (now != last).reshape(self.n_envs, -1).any(axis=1)
        names = [self._obs_field(i) for i in range(len(obs))]
        if fresh.any():
            n = int(fresh.sum())
            data = {name: o[fresh] for name, o in zip(names, obs)}
            data.update(action=np.zeros((n, self.action_dim), self._buffer.schema["action"].numpy_dtype),
                        reward=np.zeros(n, np.float32), done=np.zeros(n, bool), timeout=np.zeros(n, bool),
                        first=np.ones(n, bool))
            writer.push(self._ids[fresh], data)
        data = dict(zip(names, nxt))
        action = np.asarray(action).reshape(self.n_envs, self.action_dim)  # cast as SB3's array assignment does
        data.update(action=action.astype(self._buffer.schema["action"].numpy_dtype, copy=False),
                    reward=np.asarray(reward, np.float32).reshape(self.n_envs), done=done, timeout=timeout,
                    first=np.zeros(self.n_envs, bool))
        writer.push(self._ids, data)
        self._last_next = [np.array(o) for o in nxt]
        self._fresh = done.copy()
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full, self.pos = True, 0

    def size(self):
        """Observations stored, every writer's envs (each episode's first one begins a transition but ends none)."""
        return int(np.minimum(self._buffer.heads(), self._buffer.capacity).sum())

    def reset(self):
        raise NotImplementedError("shmreplay.sb3: a shared buffer is not reset; close() it and make a new one")

    # -- sample -----------------------------------------------------------------------------------------------

    def _draw(self, batch_size, length):
        """``batch_size`` rows of ``length`` steps of one env each whose first two steps are a transition, drawn
        uniformly over the stored transitions: a dict of arrays [rows, length, ...] and the mask."""
        fields, mask, _, _ = _step_pairs.draw(self._learner(), batch_size, length,
                                              episodes="within" if length == 2 else "stop", where=self.name,
                                              module="shmreplay.sb3")
        return fields, mask

    def _obs_at(self, fields, steps):
        """The observation of each row at its step ``steps`` (an int, or one per row)."""
        names = [self._obs_field(i) for i in range(len(self._obs_keys()))]
        if isinstance(steps, int):
            return self._join_obs([fields[n][:, steps] for n in names])
        rows = np.arange(len(steps))
        return self._join_obs([fields[n][rows, steps] for n in names])

    def sample(self, batch_size, env=None):
        """``batch_size`` transitions drawn uniformly over every stored one (the newest among them as soon as its
        ``add`` returned), as SB3's ``ReplayBufferSamples``."""
        fields, _ = self._draw(batch_size, 2)
        dones = (fields["done"][:, 1] & ~fields["timeout"][:, 1]).astype(np.float32).reshape(-1, 1)
        rewards = self._normalize_reward(fields["reward"][:, 1].reshape(-1, 1), env)
        return self._samples(self._normalize_obs(self._obs_at(fields, 0), env), fields["action"][:, 1],
                             self._normalize_obs(self._obs_at(fields, 1), env), dones, rewards)

    def _get_samples(self, batch_inds, env=None):
        """SB3's ``_get_samples``: ``batch_inds`` as SB3's positions (per env; the env drawn at random, as SB3
        does) name the transition whose next observation is stored at that position. A position that holds no
        transition end (an episode's first observation, or nothing yet) is an ``IndexError``."""
        batch_inds = np.asarray(batch_inds, np.int64)
        env_ids = np.random.randint(0, self.n_envs * self.writers, size=len(batch_inds))
        cap, heads = self._buffer.capacity, self._buffer.heads()
        rows = []
        for pos, e in zip(batch_inds, env_ids):
            head = int(heads[e])
            step = head - 1 - ((head - 1 - int(pos)) % cap)
            if step < 1 or step < head - cap + 1:
                raise IndexError(f"shmreplay.sb3: position {pos} of env {e} holds no transition (env head {head})")
            _, data = self._buffer.read_steps(int(e), step - 1, 2)
            if data["first"][1]:
                raise IndexError(f"shmreplay.sb3: position {pos} of env {e} holds an episode's first observation")
            rows.append(data)
        fields = {k: np.stack([r[k] for r in rows]) for k in rows[0]} if rows else {}
        dones = (fields["done"][:, 1] & ~fields["timeout"][:, 1]).astype(np.float32).reshape(-1, 1)
        return self._samples(self._normalize_obs(self._obs_at(fields, 0), env), fields["action"][:, 1],
                             self._normalize_obs(self._obs_at(fields, 1), env), dones,
                             self._normalize_reward(fields["reward"][:, 1].reshape(-1, 1), env))

    # -- pickling: save_replay_buffer / load_replay_buffer ----------------------------------------------------

    def __getstate__(self):
        """The Python state and a checkpoint of the segment (its bytes), so that a pickle carries the data."""
        with tempfile.TemporaryDirectory(prefix="shmreplay-sb3-") as work:
            path = os.path.join(work, "buffer.shmrckpt")
            shmreplay.save(self._buffer, path)
            checkpoint = pathlib.Path(path).read_bytes()
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_buffer", "_writer", "_sampler", "_owner", "_finalizer", "dones", "_ids")}
        state["_checkpoint"] = checkpoint
        return state

    def __setstate__(self, state):
        """A new segment (a private name) with the pickled one's data, owned by this process."""
        checkpoint = state.pop("_checkpoint")
        self.__dict__.update(state)
        with tempfile.TemporaryDirectory(prefix="shmreplay-sb3-") as work:
            path = os.path.join(work, "buffer.shmrckpt")
            pathlib.Path(path).write_bytes(checkpoint)
            loaded = shmreplay.load(path, _segment.private_name())
        buf = shmreplay.Buffer.open(loaded.name)
        self._own(buf)
