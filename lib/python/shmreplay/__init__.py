"""shmreplay: a replay buffer for reinforcement learning that lives in POSIX shared memory.

Env worker processes push steps with a :class:`Writer`; learner processes sample sequences with a
:class:`Sampler`, one per learner slot (``max_learners`` of :meth:`Buffer.create`, 1 by default); all attach to the
same named :class:`Buffer`. Arrays go in and out as NumPy arrays::

    import numpy as np, shmreplay

    buf = shmreplay.Buffer.create("demo", num_envs=4, capacity=1024,
                                  schema="obs:f32[4] action:i32 reward:f32 done:bool")
    with shmreplay.Writer(buf, [0, 1, 2, 3]) as w:           # an env worker
        w.push(np.array([2, 0]), {"obs": np.zeros((2, 4), np.float32), "action": np.array([1, 0]),
                                  "reward": np.ones(2, np.float32), "done": np.zeros(2, bool)})
    with shmreplay.Sampler(buf, seed=0) as s:                 # the learner
        batch = s.sample("replay", batch_size=8, sequence_length=1)
        batch["obs"].shape, batch.mask, batch.env_ids, batch.starts
    shmreplay.Buffer.remove("demo")

dtypes: u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 map to NumPy's types of the same name, bool to ``numpy.bool_``,
f16 to numpy.float16, and bf16 to numpy.uint16 holding the bfloat16 bits (NumPy has no bfloat16; in PyTorch,
``torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)``).

Checkpoints: :func:`save` a buffer to a file and :func:`load` it back (into a new buffer or an existing one), with
its priorities, episode records, rate limiter and learner counters; :func:`save_link` and :class:`Checkpointer`
keep a chain of incremental checkpoints in a directory, which :func:`load` restores after a crash or a reboot.

Errors are subclasses of :class:`Error` named after the C++ error codes (``AlreadyExists``, ``SchemaMismatch``,
``EnvOutOfRange``, ``LeaseHeld``, ``Timeout``, ...), each also derived from the matching built-in exception.
"""

from ._errors import *  # noqa: F401,F403  (the exception classes)
from ._errors import __all__ as _error_names
from ._checkpointer import Checkpointer  # noqa: F401
from ._shmreplay import (  # noqa: F401
    Batch,
    Buffer,
    ChainLink,
    CheckpointEnv,
    CheckpointInfo,
    CheckpointLearner,
    CheckpointLimiter,
    EnvSizes,
    EpisodeRecord,
    Field,
    Journal,
    LinkResult,
    LoadResult,
    RateLimit,
    RateLimitState,
    ReanalyseChunk,
    Reanalyser,
    Sampler,
    Schema,
    StepSlot,
    VerifyResult,
    Writer,
    __version__,
    list_links,
    load,
    save,
    save_link,
    verify,
)

REPLAY = "replay"
"""The view of every stored step."""
ONLINE = "online"
"""The view of the steps published since the learner last called ``reset_online_queue()``."""

__all__ = [
    "Batch",
    "Buffer",
    "ChainLink",
    "CheckpointEnv",
    "CheckpointInfo",
    "CheckpointLearner",
    "CheckpointLimiter",
    "Checkpointer",
    "EnvSizes",
    "EpisodeRecord",
    "Field",
    "Journal",
    "LinkResult",
    "LoadResult",
    "RateLimit",
    "RateLimitState",
    "ReanalyseChunk",
    "Reanalyser",
    "Sampler",
    "Schema",
    "StepSlot",
    "VerifyResult",
    "Writer",
    "save",
    "load",
    "verify",
    "save_link",
    "list_links",
    "REPLAY",
    "ONLINE",
    "__version__",
] + list(_error_names)
