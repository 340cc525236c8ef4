"""Gymnasium's vector envs as shmreplay actors: ``ReplayWriter`` wraps a ``gymnasium.vector.SyncVectorEnv`` or
``AsyncVectorEnv`` (any ``VectorEnv``) and pushes every step it returns into a shared buffer, in each autoreset
mode (next-step, same-step, disabled)::

    import gymnasium as gym, shmreplay, shmreplay.gymnasium as sg
    envs = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="async")
    buf = sg.create_buffer("cartpole", envs, capacity=100_000)   # or Buffer.open: another process made it
    envs = sg.ReplayWriter(envs, buf, first_env=0)               # env i pushes as env id first_env + i
    obs, info = envs.reset(seed=0)
    obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())   # pushed
    batch = sg.Transitions(buf).sample(256)    # in the learner: obs, action, reward, next_obs, terminated, ...

What is stored (``shmreplay._env_steps``): a reset step holds each episode's first observation; every later step the
observation the action led to, with the action, reward, ``terminated`` and ``truncated`` (the buffer's episode
roles). The step that ends an episode holds its final observation, whatever the autoreset mode: the observation
returned at the end (next-step, disabled) or ``info["final_obs"]`` (same-step); the reset observation that
next-step mode returns one step later (reward 0, action ignored) becomes the next episode's reset step, never a
next observation. Each observation is stored once.
"""
import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorWrapper

from . import _env_steps
from ._env_steps import Transitions

__all__ = ["ReplayWriter", "Transitions", "create_buffer", "schema"]


def schema(envs, *, stack_axis=None, extra=()):
    """The step schema of a vector env's single observation and action spaces (``stack_axis``: a frame-stacked
    observation's stack axis, each frame then stored once; ``extra``: Fields or "name:dtype[shape]" strings that
    ``ReplayWriter.step(..., extra=)`` fills)."""
    return _env_steps.schema(envs.single_observation_space, envs.single_action_space, stack_axis=stack_axis,
                             extra=extra)


def create_buffer(name, envs, capacity, *, num_envs=None, stack_axis=None, extra=(), **create_kwargs):
    """A buffer for ``envs``: ``num_envs`` env ids (default ``envs.num_envs``; more when several actor processes
    share it, each with its ``first_env``), ``capacity`` steps per env (episode first observations included);
    other keywords go to ``shmreplay.Buffer.create``."""
    return _env_steps.create_buffer(name, int(num_envs or envs.num_envs), capacity,
                                    schema(envs, stack_axis=stack_axis, extra=extra), **create_kwargs)


def _mode(env):
    mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return mode if isinstance(mode, AutoresetMode) else AutoresetMode(mode)


class ReplayWriter(VectorWrapper):
    """A vector env that pushes what ``reset`` and ``step`` return into ``buffer`` (a ``shmreplay.Buffer`` of
    ``create_buffer``'s layout), sub-env i as env id ``first_env + i``; it returns what the env returns. Its
    ``step(actions, extra=None)`` also takes the extra fields of the schema (one row per env, e.g. the behaviour
    policy's log-probabilities), stored with the action. Other keywords go to ``shmreplay.Writer`` (for example
    ``wait_for_rate_limit=True``). ``close()`` releases the env ids and closes the env.

    Call ``reset`` and ``step`` (not ``step_async``/``step_wait``, which it does not see). In the disabled mode,
    reset the envs that ended with ``reset(options={"reset_mask": mask})`` as Gymnasium requires; each reset env
    gets a reset step. A reset of an env in the middle of an episode is stored as a new episode whose previous one
    has no flagged end: no transition crosses it.
    """

    def __init__(self, env, buffer, *, first_env=0, **writer_kwargs):
        super().__init__(env)
        self.mode = _mode(env)
        self.pusher = _env_steps.StepPusher(buffer, env.num_envs, first_env, **writer_kwargs)
        self._ended = np.zeros(env.num_envs, bool)  # next-step mode: the env's next step returns a reset observation
        self._started = False

    @property
    def buffer(self):
        """The ``shmreplay.Buffer`` the steps go to."""
        return self.pusher.buffer

    def reset(self, *, seed=None, options=None):
        mask = None if options is None else options.get("reset_mask")
        obs, info = self.env.reset(seed=seed, options=options)
        rows = np.arange(self.num_envs) if mask is None else np.flatnonzero(np.asarray(mask, bool))
        self.pusher.reset(rows, _rows(obs, rows))
        self._ended[rows] = False
        self._started = True
        return obs, info

    def step(self, actions, extra=None):
        if not self._started:
            raise gymnasium.error.ResetNeeded("shmreplay.gymnasium.ReplayWriter: reset() before step()")
        obs, reward, terminated, truncated, info = self.env.step(actions)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        actions = np.asarray(actions)
        if self.mode == AutoresetMode.NEXT_STEP:
            resets = np.flatnonzero(self._ended)
            steps = np.flatnonzero(~self._ended)
            self.pusher.reset(resets, _rows(obs, resets))
            self._push(steps, obs, actions, reward, terminated, truncated, extra)
            self._ended = terminated | truncated
        elif self.mode == AutoresetMode.SAME_STEP:
            ended = np.flatnonzero(terminated | truncated)
            final = np.array(obs, copy=True)
            for i in ended:
                final[i] = info["final_obs"][i]
            self._push(np.arange(self.num_envs), final, actions, reward, terminated, truncated, extra)
            self.pusher.reset(ended, _rows(obs, ended))
        else:  # DISABLED: the caller resets the ended envs with reset_mask
            self._push(np.arange(self.num_envs), obs, actions, reward, terminated, truncated, extra)
        return obs, reward, terminated, truncated, info

    def _push(self, rows, obs, actions, reward, terminated, truncated, extra):
        extra = None if extra is None else {k: np.asarray(v)[rows] for k, v in extra.items()}
        self.pusher.step(rows, _rows(obs, rows), actions[rows], np.asarray(reward)[rows], terminated[rows],
                         truncated[rows], extra)

    def close(self, **kwargs):
        self.pusher.close()
        return self.env.close(**kwargs)


def _rows(obs, rows):
    return np.asarray(obs)[rows]
