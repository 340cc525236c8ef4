"""PufferLib's vectorized envs as shmreplay actors: ``ReplayWriter`` wraps what ``pufferlib.vector.make`` returns
(Serial or Multiprocessing, any ``batch_size``) and pushes every agent's step that ``recv()`` returns into a shared
buffer, under the env ids that ``recv`` names (its async env ids, as envpool's)::

    import pufferlib.vector, shmreplay.pufferlib as sp
    vecenv = pufferlib.vector.make(creator, num_envs=8, num_workers=2, batch_size=4,
                                   backend=pufferlib.vector.Multiprocessing)
    buf = sp.create_buffer("puffer", vecenv, capacity=100_000)
    vecenv = sp.ReplayWriter(vecenv, buf)
    vecenv.async_reset(seed=0)
    while True:
        obs, rewards, terminals, truncations, teacher, infos, env_ids, masks = vecenv.recv()   # pushed
        vecenv.send(policy(obs))

PufferLib's emulated envs (Gymnasium and PettingZoo envs under ``pufferlib.emulation``) reset one step after an
episode ends: the ``recv`` that shows ``terminals``/``truncations`` holds the final observation, and the next
``recv`` of that env holds the reset observation (reward 0, no flag; the action sent for it is ignored). The writer
stores the first as the step that ends the episode and the second as the next episode's reset step, so each
observation is stored once and no reset observation is taken for a next observation (the layout:
``shmreplay.gymnasium``'s). Only rows whose ``masks`` entry is True are pushed (absent agents).

Native PufferEnvs (PufferLib's C envs) reset inside the step that ends an episode and never return its final
observation: they are refused (``NotImplementedError``), as a truncated transition of theirs could not bootstrap
from the right observation.
"""
import numpy as np

from . import _env_steps
from ._env_steps import Transitions

__all__ = ["ReplayWriter", "Transitions", "create_buffer", "schema"]


def schema(vecenv, *, stack_axis=None, extra=()):
    """The step schema of a PufferLib vecenv's single observation and (transport) action spaces."""
    action_space = getattr(vecenv, "transport_single_action_space", None) or vecenv.single_action_space
    return _env_steps.schema(vecenv.single_observation_space, action_space, stack_axis=stack_axis, extra=extra)


def create_buffer(name, vecenv, capacity, *, num_envs=None, stack_axis=None, extra=(), **create_kwargs):
    """A buffer for ``vecenv``: one env id per agent (``num_envs``, default every agent of the vecenv,
    ``vecenv.num_agents``), ``capacity`` steps per env; other keywords go to ``shmreplay.Buffer.create``."""
    return _env_steps.create_buffer(name, int(num_envs or _agents(vecenv)), capacity,
                                    schema(vecenv, stack_axis=stack_axis, extra=extra), **create_kwargs)


def _agents(vecenv):
    return int(getattr(vecenv, "num_agents", vecenv.num_envs))


class ReplayWriter:
    """The vecenv, whose ``recv()`` also pushes the steps it returns into ``buffer``, agent id ``a`` as env id
    ``first_env + a``; ``send(actions, extra=None)`` remembers each agent's action (and the schema's extra fields,
    one row per agent of the last ``recv``) for the step its next ``recv`` returns. ``reset``/``step`` are
    PufferLib's synchronous pair over these two; any other attribute is the vecenv's. Other keywords go to
    ``shmreplay.Writer``. ``close()`` releases the env ids and closes the vecenv."""

    def __init__(self, vecenv, buffer, *, first_env=0, **writer_kwargs):
        if getattr(vecenv, "emulated", None) is False:
            raise NotImplementedError(
                "shmreplay.pufferlib: this vecenv runs native PufferEnvs, which reset inside the step that ends an "
                "episode and do not return its final observation; ReplayWriter takes emulated envs "
                "(pufferlib.emulation.GymnasiumPufferEnv / PettingZooPufferEnv)")
        self.vecenv = vecenv
        n = _agents(vecenv)
        self.pusher = _env_steps.StepPusher(buffer, n, first_env, **writer_kwargs)
        self._reset_next = np.ones(n, bool)   # the agent's next recv returns a reset observation
        action = buffer.schema["action"]
        self._action = np.zeros((n, *action.shape), action.numpy_dtype)
        self._extra = {}
        self._ids = None                      # the agent ids of the last recv

    @property
    def buffer(self):
        """The ``shmreplay.Buffer`` the steps go to."""
        return self.pusher.buffer

    def async_reset(self, seed=0):
        """The vecenv's ``async_reset``; each agent's next ``recv`` returns a reset observation (a reset step)."""
        self._reset_next[:] = True
        return self.vecenv.async_reset(seed)

    def recv(self):
        """The vecenv's ``recv``, its live agents' steps pushed: a reset step after a reset or an episode's end, else
        the step the agent's last ``send`` led to."""
        out = self.vecenv.recv()
        obs, rewards, terminals, truncations, _teacher, _infos, ids, masks = out
        ids = np.asarray(ids, np.int64)
        self._ids = ids
        live = np.asarray(masks, bool).reshape(len(ids))
        resets = live & self._reset_next[ids]
        steps = live & ~self._reset_next[ids]
        obs = np.asarray(obs)
        self.pusher.reset(ids[resets], obs[resets])
        rows = ids[steps]
        extra = {k: v[rows] for k, v in self._extra.items()} or None
        self.pusher.step(rows, obs[steps], self._action[rows], np.asarray(rewards)[steps],
                         np.asarray(terminals)[steps], np.asarray(truncations)[steps], extra)
        ended = np.asarray(terminals, bool) | np.asarray(truncations, bool)
        self._reset_next[ids[live]] = ended[live]
        return out

    def send(self, actions, extra=None):
        """The vecenv's ``send``; ``actions`` (and ``extra``: field name to one row per agent of the last ``recv``)
        are stored with the steps the next ``recv`` returns."""
        if self._ids is None:
            raise RuntimeError("shmreplay.pufferlib.ReplayWriter: recv() before send()")
        actions = np.asarray(actions)
        self._action[self._ids] = actions.reshape(len(self._ids), *self._action.shape[1:])
        for name, value in (extra or {}).items():
            if name not in self._extra:
                f = self.buffer.schema[name]
                self._extra[name] = np.zeros((len(self._action), *f.shape), f.numpy_dtype)
            self._extra[name][self._ids] = np.asarray(value).reshape(len(self._ids), *self._extra[name].shape[1:])
        return self.vecenv.send(actions)

    def reset(self, seed=42):
        """PufferLib's synchronous reset: ``async_reset`` then ``recv``; returns ``(obs, infos)``."""
        self.async_reset(seed)
        obs, _r, _d, _t, _ta, infos, _ids, _m = self.recv()
        return obs, infos

    def step(self, actions, extra=None):
        """PufferLib's synchronous step: ``send`` then ``recv``; returns ``(obs, rewards, terminals, truncations,
        infos)``."""
        self.send(actions, extra)
        obs, rewards, terminals, truncations, _ta, infos, _ids, _m = self.recv()
        return obs, rewards, terminals, truncations, infos

    def close(self):
        """Releases the env ids and closes the vecenv."""
        self.pusher.close()
        return self.vecenv.close()

    def __getattr__(self, name):
        if name == "vecenv":  # not set yet: __init__ failed
            raise AttributeError(name)
        return getattr(self.vecenv, name)
