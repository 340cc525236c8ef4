"""What the actor adapters (shmreplay.gymnasium, shmreplay.pufferlib) store, and how a learner reads it back.

One env's stream of steps: a *reset step* (``first`` True, action and reward zero, no flag) holds an episode's first
observation; each later step holds the observation an action led to, with that action, its reward and the flags
``terminated`` and ``truncated`` (the buffer's episode roles: the step that ends an episode carries them, and its
observation is the episode's final one). So every observation is stored once: the next observation of a
transition is the observation of the env's next step, and a transition is a pair of consecutive steps of one env
whose second is not a reset step. ``first`` also catches a reset that no flag announced (an env reset in the middle
of an episode).

:class:`StepPusher` turns what an actor loop sees into these steps; :class:`Transitions` draws transitions
``(obs, action, reward, next_obs, terminated, truncated, ...)`` from them, uniformly over the stored ones.
"""
import numpy as np

import shmreplay

from . import _dtypes, _step_pairs

# The fields every step has besides the observation, the action and the caller's extra fields.
FLAGS = ("reward", "terminated", "truncated", "first")


def space_field(name, space, what, stack_axis=None):
    """The shmreplay Field holding one env's value of a Gymnasium space (Box, Discrete, MultiDiscrete,
    MultiBinary: anything with a fixed shape and a NumPy dtype)."""
    shape, dtype = getattr(space, "shape", None), getattr(space, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(f"shmreplay: the {what} {space!r} has no fixed shape and dtype; expected a Box, Discrete, "
                        f"MultiDiscrete or MultiBinary space")
    kind = _dtypes.dtype_name(dtype, f"the {what} {space!r}")
    return shmreplay.Field(name, kind, tuple(int(s) for s in shape), stack_axis=stack_axis)


def schema(observation_space, action_space, *, stack_axis=None, extra=()):
    """The step schema: obs, action, the caller's ``extra`` fields (Fields or "name:dtype[shape]" strings, stored
    with the action they came with), reward, terminated, truncated and first."""
    fields = [space_field("obs", observation_space, "observation space", stack_axis),
              space_field("action", action_space, "action space")]
    fields += [f if isinstance(f, shmreplay.Field) else shmreplay.Schema.parse(f).fields[0] for f in extra]
    fields += [shmreplay.Field("reward", "f32", ()), shmreplay.Field("terminated", "bool", ()),
               shmreplay.Field("truncated", "bool", ()), shmreplay.Field("first", "bool", ())]
    return shmreplay.Schema(fields)


def create_buffer(name, num_envs, capacity, step_schema, **create_kwargs):
    """``Buffer.create`` with the episode roles of the step layout (terminated, truncated, reward)."""
    return shmreplay.Buffer.create(name, num_envs, capacity, step_schema, terminated="terminated",
                                   truncated="truncated", reward="reward", **create_kwargs)


def check_schema(buffer):
    """Refuses a buffer whose schema lacks a field of the step layout (one not made by ``create_buffer``)."""
    names = set(buffer.schema.names)
    missing = [n for n in ("obs", "action", *FLAGS) if n not in names]
    if missing:
        raise shmreplay.SchemaMismatch(f"shmreplay: buffer '{buffer.name}' has no field {', '.join(missing)} "
                                       f"(schema {buffer.schema}); make it with create_buffer()")


class StepPusher:
    """Pushes the step layout for ``num_envs`` envs whose rows are env ids ``first_env + row``: ``reset`` for
    reset steps, ``step`` for the steps actions led to. One Writer, leased for those env ids, does the pushing."""

    def __init__(self, buffer, num_envs, first_env=0, **writer_kwargs):
        check_schema(buffer)
        self.buffer = buffer
        self.writer = shmreplay.Writer.range(buffer, int(first_env), int(num_envs), **writer_kwargs)
        self.ids = np.arange(int(first_env), int(first_env) + int(num_envs), dtype=np.int32)
        self._action = buffer.schema["action"]
        self._extra = [n for n in buffer.schema.names if n not in ("obs", "action", *FLAGS)]

    def reset(self, rows, obs):
        """Reset steps for ``rows`` (indices into this pusher's envs), ``obs`` their first observations."""
        n = len(np.asarray(rows).reshape(-1))
        no = np.zeros(n, bool)
        self._push(rows, obs, np.zeros((n, *self._action.shape), self._action.numpy_dtype), np.zeros(n, np.float32),
                   no, no, None, first=True)

    def step(self, rows, obs, action, reward, terminated, truncated, extra=None):
        """The steps of ``rows``: ``obs`` the observations the actions led to (the final one where an episode
        ended), ``extra`` the caller's extra fields (missing ones are zeros)."""
        self._push(rows, obs, action, reward, terminated, truncated, extra, first=False)

    def _push(self, rows, obs, action, reward, terminated, truncated, extra, first):
        rows = np.asarray(rows, np.int64)
        if len(rows) == 0:
            return
        n = len(rows)
        data = {"obs": obs, "action": np.asarray(action).reshape(n, *self._action.shape),
                "reward": np.asarray(reward, np.float32).reshape(n),
                "terminated": np.asarray(terminated, bool).reshape(n),
                "truncated": np.asarray(truncated, bool).reshape(n), "first": np.full(n, first)}
        for name in self._extra:
            f = self.buffer.schema[name]
            data[name] = (np.asarray(extra[name]).reshape(n, *f.shape) if extra and name in extra
                          else np.zeros((n, *f.shape), f.numpy_dtype))
        self.writer.push(self.ids[rows], data)

    def close(self):
        """Releases the writer's env ids."""
        self.writer.close()


class Transitions:
    """Transitions drawn uniformly over those stored in a buffer of the step layout (every env's, whichever
    process pushed them), each a dict of arrays: ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``,
    ``truncated``, the extra fields (those of the step the action led to), ``env_ids`` and ``steps`` (the step of
    ``obs``). The newest transition can be drawn as soon as its push returned."""

    def __init__(self, buffer, *, seed=0, rank=None):
        if isinstance(buffer, str):
            buffer = shmreplay.Buffer.open(buffer)
        check_schema(buffer)
        self.buffer = buffer
        self.sampler = shmreplay.Sampler(buffer, seed=seed, rank=rank)

    def sample(self, batch_size):
        """``batch_size`` transitions drawn uniformly over the stored ones, as a dict of arrays (the class says
        which)."""
        fields, _, env_ids, starts = _step_pairs.draw(self.sampler, int(batch_size), 2, episodes="within",
                                                      where=self.buffer.name)
        out = {"obs": fields["obs"][:, 0], "next_obs": fields["obs"][:, 1]}
        for name in self.buffer.schema.names:
            if name not in ("obs", "first"):
                out[name] = fields[name][:, 1]
        out["env_ids"], out["steps"] = env_ids, starts
        return out

    def close(self):
        """Releases this process's learner slot."""
        self.sampler.close()
