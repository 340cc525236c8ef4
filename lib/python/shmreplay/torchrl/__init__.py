"""TorchRL's replay buffers on a shmreplay segment: ``SharedStorage`` is a TorchRL ``Storage`` whose items are the
steps of a shared buffer, so TorchRL's ``ReplayBuffer`` and ``TensorDictReplayBuffer`` take TensorDicts in and give
TensorDicts out while the data lives in shared memory, where actor processes push and learners sample::

    from torchrl.data import TensorDictReplayBuffer
    import shmreplay.torchrl as st
    rb = TensorDictReplayBuffer(storage=st.SharedStorage(1_000_000, name="rb", num_envs=8),
                                writer=st.SharedWriter(), batch_size=256)
    rb.extend(td)                      # td: [8] (one step per env) or [8, T]
    sample = rb.sample()               # a TensorDict of 256 stored steps, "index" their ring slots
    # another process: SharedStorage.open("rb", first_env=..., num_envs=...) and its own SharedWriter

- Samplers: TorchRL's ``RandomSampler`` (the default: uniform over the stored steps, drawn by the buffer's own
  sampler), :class:`PrioritizedSampler` (the buffer's priorities, ``priority_exponent=`` at creation) and
  :class:`SliceSampler` (``slice_len`` consecutive steps inside one episode).
- ``rb.state_dict()`` / ``load_state_dict`` and ``rb.dumps(path)`` / ``loads(path)`` carry a shmreplay checkpoint
  (``shmreplay.save`` / ``shmreplay.load``).
"""
from ._parts import PrioritizedSampler, SharedWriter, SliceSampler
from ._storage import SharedCheckpointer, SharedStorage

__all__ = ["SharedStorage", "SharedWriter", "PrioritizedSampler", "SliceSampler", "SharedCheckpointer"]
