"""The writer and samplers a SharedStorage works with: SharedWriter (rows appended to env streams, their ring-slot
indices returned), PrioritizedSampler (the buffer's own priorities) and SliceSampler (sequences within episodes)."""
import numpy as np
import torch
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.writers import Writer


class _Stateless:
    """What TorchRL's writers and samplers keep and save: nothing here (the buffer holds the state, and a
    storage's checkpoint carries it)."""

    def _empty(self, *args, **kwargs):
        pass

    def dumps(self, path):
        """Nothing to save (the storage's checkpoint carries the state)."""

    def loads(self, path):
        """Nothing to load (the storage's checkpoint carries the state)."""

    def state_dict(self):
        return {}

    def load_state_dict(self, state_dict):
        pass


class SharedWriter(_Stateless, Writer):
    """TorchRL's Writer for a SharedStorage: ``add``/``extend`` append the rows to the storage's env streams and
    return their indices (ring slots), also written into a TensorDict's ``"index"`` as TorchRL's TensorDict
    writers do."""

    def add(self, data):
        return self.extend(data.unsqueeze(0) if hasattr(data, "unsqueeze") else data)[0]

    def extend(self, data):
        index = self._storage.set(None, data)
        self._mark_update_entities(index)
        return index

    def _mark_update_entities(self, index):
        for entity in self._storage._attached_entities_iter():
            if hasattr(entity, "mark_update"):
                entity.mark_update(index)


class _SharedSampler(_Stateless, Sampler):
    pass


class PrioritizedSampler(_SharedSampler):
    """Prioritized replay with the buffer's own priorities (a buffer made with ``priority_exponent=alpha``: every
    process's pushes get the running maximum, every learner's updates apply): draws steps with probability
    ``priority**alpha / total``, ``info["priority_weight"]`` the importance weights ``(N P)**-beta`` normalised by
    their maximum; ``update_priority(index, priority)`` (what ``TensorDictReplayBuffer.update_tensordict_priority``
    calls) sets the priorities of the steps at those indices that are still stored."""

    def __init__(self, beta=0.4):
        super().__init__()
        self.beta = float(beta)

    def sample(self, storage, batch_size):
        """``(index, info)``: ``batch_size`` steps drawn by priority, ``info["priority_weight"]`` their weights."""
        batch = storage.learner().sample_transitions("replay", int(batch_size), prioritized=True, beta=self.beta)
        index = storage.stash(batch.env_ids, batch.starts, {k: v[:, 0] for k, v in batch.fields.items()})
        self._last = (index, np.array(batch.env_ids), np.array(batch.starts))
        return index, {"priority_weight": torch.from_numpy(np.array(batch.weights))}

    def update_priority(self, index, priority, *, storage=None):
        """Sets the priorities of the steps at ``index`` (one priority, or one per index) that are still stored."""
        storage = storage or self._storage_of(index)
        index = torch.as_tensor(index).reshape(-1).cpu().numpy().astype(np.int64)
        priority = torch.as_tensor(priority, dtype=torch.float32).reshape(-1).expand(len(index)).cpu().numpy()
        env_ids, slots = np.divmod(index, storage.buffer.capacity)
        heads = storage.buffer.heads()[env_ids].astype(np.int64)
        steps = heads - 1 - ((heads - 1 - slots) % storage.buffer.capacity)
        return storage.learner().update_priorities(env_ids.astype(np.int32), steps.astype(np.int64),
                                                   np.ascontiguousarray(priority, np.float32))

    def _storage_of(self, index):
        storage = getattr(self, "storage", None)
        if storage is None:
            raise RuntimeError("shmreplay.torchrl.PrioritizedSampler: register it with a ReplayBuffer first")
        return storage

    def mark_update(self, index, *, storage=None):
        """Nothing to do: the buffer gives new steps its running maximum priority when they are pushed."""
        pass  # new steps get the buffer's running maximum priority when pushed


class SliceSampler(_SharedSampler):
    """Sequences of ``slice_len`` consecutive steps of one env within one episode (the buffer's episode roles,
    TorchRL's ("next", "done") / ("next", "terminated") and ("next", "truncated")), drawn uniformly over their
    starts, as TorchRL's SliceSampler with ``strict_length=True``: a sample of ``batch_size`` steps is
    ``batch_size // slice_len`` slices, flat, one after another."""

    def __init__(self, slice_len):
        super().__init__()
        self.slice_len = int(slice_len)

    def sample(self, storage, batch_size):
        """``(index, info)``: ``batch_size // slice_len`` slices of ``slice_len`` steps, flat; ``info`` has no
        entries."""
        if batch_size % self.slice_len:
            raise ValueError(f"shmreplay.torchrl.SliceSampler: batch_size {batch_size} is not a multiple of "
                             f"slice_len {self.slice_len}")
        rows, n = batch_size // self.slice_len, self.slice_len
        batch = storage.learner().sample("replay", rows, n, 0.0, episodes="within")
        if not batch.mask.all():
            raise RuntimeError("shmreplay.torchrl.SliceSampler: the buffer holds no slice of "
                               f"{n} steps inside one episode")
        env_ids = np.repeat(np.asarray(batch.env_ids), n)
        steps = (np.asarray(batch.starts)[:, None] + np.arange(n)[None, :]).reshape(-1)
        fields = {k: np.asarray(v).reshape(rows * n, *v.shape[2:]) for k, v in batch.fields.items()}
        index = storage.stash(env_ids, steps, fields)
        return index, {}
