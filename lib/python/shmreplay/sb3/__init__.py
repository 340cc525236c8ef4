"""Stable-Baselines3's replay buffers on a shmreplay segment: ``replay_buffer_class=shmreplay.sb3.ReplayBuffer``
(SAC, TD3 and the other off-policy algorithms alike; CleanRL and SBX, which import SB3's ``ReplayBuffer``, import
this one instead)::

    from stable_baselines3 import DQN
    import shmreplay.sb3
    model = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=shmreplay.sb3.ReplayBuffer,
                replay_buffer_kwargs=dict(name="cartpole"))        # name: optional
    actor_side = shmreplay.sb3.ReplayBuffer.attach("cartpole")     # in another process: its add() fills it

- :class:`ReplayBuffer`, :class:`NStepReplayBuffer` (``n_steps=``, ``gamma=``, as SB3 2.7+'s) and
  :class:`DictReplayBuffer` take SB3's constructor arguments and return SB3's ``ReplayBufferSamples`` /
  ``DictReplayBufferSamples``; ``name=`` names the segment (a private name when omitted), ``writers=`` admits more
  processes that ``add``, ``stack_axis=`` stores a frame-stacked observation one frame per step.
- Each observation is stored once: the next observation of a transition is the observation of the next step of its
  env, and an episode's last one (SB3's ``terminal_observation``, CleanRL's ``final_observation``) is a step of its
  own, so next observations are right at every end, flagged or not, with or without ``optimize_memory_usage``.
- The newest transition can be drawn as soon as ``add`` returns; draws are uniform over the stored transitions.
- ``save_replay_buffer`` / ``load_replay_buffer`` carry the data (a checkpoint inside the pickle); the segment and
  its description are removed when the creating process ends, closed or not.
"""
from ._buffers import ReplayBuffer
from ._variants import DictReplayBuffer, NStepReplayBuffer

__all__ = ["ReplayBuffer", "NStepReplayBuffer", "DictReplayBuffer"]
