"""SharedStorage: TorchRL's Storage on a shmreplay segment (the package docstring says what it promises).

An item's index is its ring slot, ``env * capacity + step % capacity``: stable for as long as the step is stored,
so TorchRL's index-keyed machinery (``data["index"]``, priority updates) names one step. ``len()`` is the number
of stored steps. Each TensorDict leaf is one field of the segment, its nested key joined with "." (("next",
"observation") is the field "next.observation").
"""
import os
import pathlib
import tempfile

import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data.replay_buffers.checkpointers import StorageCheckpointerBase
from torchrl.data.replay_buffers.storages import StoreStorage

import shmreplay

_DTYPES = {torch.uint8: "u8", torch.int8: "i8", torch.uint16: "u16", torch.int16: "i16", torch.uint32: "u32",
           torch.int32: "i32", torch.uint64: "u64", torch.int64: "i64", torch.float16: "f16",
           torch.bfloat16: "bf16", torch.float32: "f32", torch.float64: "f64", torch.bool: "bool"}
_NOT_STORED = ("index", "priority_weight")  # what TorchRL's writers and samplers add: the index is the ring slot


def schema_of(item):
    """The segment schema of one item (a TensorDict with batch size []): a field per leaf."""
    fields = []
    for key, value in item.items(include_nested=True, leaves_only=True):
        name = ".".join(key) if isinstance(key, tuple) else key
        if name in _NOT_STORED:
            continue
        if value.dtype not in _DTYPES:
            raise TypeError(f"shmreplay.torchrl: entry {key!r} has dtype {value.dtype}, expected one of "
                            f"{', '.join(str(d) for d in _DTYPES)}")
        fields.append(shmreplay.Field(name, _DTYPES[value.dtype], tuple(value.shape)))
    return shmreplay.Schema(fields)


def roles_of(schema):
    """Episode roles from TorchRL's flags: ("next", "terminated"/"truncated") or ("next", "done")."""
    names = set(schema.names)
    if "next.terminated" in names and "next.truncated" in names:
        return {"terminated": "next.terminated", "truncated": "next.truncated"}
    return {"done": "next.done"} if "next.done" in names else {}


class SharedCheckpointer(StorageCheckpointerBase):
    """``ReplayBuffer.dumps(path)`` / ``loads(path)`` for a SharedStorage: a shmreplay checkpoint
    (``shmreplay.save``) in ``path``, loaded back into the storage's buffer (``shmreplay.load``)."""

    FILE = "shmreplay.shmrckpt"

    def dumps(self, storage, path):
        """Saves the storage's buffer as ``path``/shmreplay.shmrckpt (a folder, made if missing)."""
        os.makedirs(path, exist_ok=True)
        shmreplay.save(storage.buffer, os.path.join(path, self.FILE), force=True)

    def loads(self, storage, path):
        """Loads ``path``/shmreplay.shmrckpt into the storage's buffer."""
        storage._load_checkpoint(os.path.join(path, self.FILE))


class SharedStorage(StoreStorage):
    """A TorchRL ``Storage`` whose items are the steps of a shmreplay buffer, so ``ReplayBuffer(storage=...)`` and
    ``TensorDictReplayBuffer`` keep their data in shared memory, where other processes push and sample too.

    ``SharedStorage(max_size, name=None, num_envs=1, **create_kwargs)`` makes the buffer at the first write, from
    the first TensorDict's entries (``max_size`` steps in all, ``max_size // num_envs`` per env; ``name``: a
    private one when None); ``SharedStorage.open(name, first_env=0, num_envs=None)`` uses a buffer that exists
    (made by another process's storage or by ``shmreplay.Buffer.create``), writing to env ids
    ``[first_env, first_env + num_envs)``. Written rows go to this storage's env ids: a ``[N]`` batch row by row in
    turn (a vector env's step: row i to env i), a ``[num_envs, T]`` batch env by env in time order.
    """

    _default_checkpointer = SharedCheckpointer

    def __init__(self, max_size, *, name=None, num_envs=1, first_env=0, device="cpu", **create_kwargs):
        torch_storage_init(self, max_size)
        self._name, self._num_envs, self._first_env = name, int(num_envs), int(first_env)
        self._create_kwargs = create_kwargs
        self.device = device
        self.buffer = None
        self._writer = self._sampler = None
        self._next_env = 0
        self._stash = None  # (index, data) of the last draw: get() of that index hands it over without a read
        self._owned = False

    @classmethod
    def open(cls, name, *, first_env=0, num_envs=None, device="cpu"):
        """A storage on the existing buffer ``name``, writing to env ids ``[first_env, first_env + num_envs)`` (all
        from ``first_env`` on when None)."""
        buf = shmreplay.Buffer.open(name)
        self = cls(buf.num_envs * buf.capacity, name=name, device=device, first_env=first_env,
                   num_envs=num_envs if num_envs is not None else buf.num_envs - first_env)
        self._opened(buf)
        return self

    def _opened(self, buf):
        self.buffer = buf
        self.initialized = True
        self._schema = buf.schema
        self._capacity = buf.capacity

    def _init(self, item):
        if not isinstance(item, TensorDict):
            raise TypeError(f"shmreplay.torchrl: SharedStorage holds TensorDicts, got {type(item).__name__}")
        schema = schema_of(item)
        name = self._name or f"torchrl-{os.getpid()}-{id(self):x}"
        per_env = max(self.max_size // self._num_envs, 2)
        buf = shmreplay.Buffer.create(name, self._num_envs, per_env, schema,
                                      **{**roles_of(schema), **self._create_kwargs})
        self._owned = True
        self._opened(buf)

    # -- writing ------------------------------------------------------------------------------------------------

    def set(self, cursor, data, *, set_cursor=True):
        """Pushes ``data`` (the cursor is TorchRL's round-robin position, which a stream of steps has no use for:
        rows are appended to the env streams). Returns the indices the rows got."""
        if not set_cursor:
            raise NotImplementedError("shmreplay.torchrl: stored steps are not rewritten in place "
                                      "(storage[index] = data); extend the buffer instead")
        if isinstance(data, TensorDict) and data.batch_dims == 0:
            data = data.unsqueeze(0)
        if not self.initialized:
            self._init(data[(0,) * data.batch_dims])
        return self.push(data)

    def push(self, data):
        """Appends the rows of ``data`` (a TensorDict ``[N]`` or ``[num_envs, T]``) to this storage's env streams;
        returns their indices (ring slots)."""
        writer = self._writer or self._lease()
        ids = np.arange(self._first_env, self._first_env + self._num_envs, dtype=np.int32)
        if data.batch_dims == 2:
            if data.shape[0] != self._num_envs:
                raise ValueError(f"shmreplay.torchrl: a [envs, time] batch of shape {tuple(data.shape)}, expected "
                                 f"{self._num_envs} envs (this storage's num_envs)")
            rows = [(ids, data[:, t]) for t in range(data.shape[1])]
        elif data.batch_dims == 1:
            order = (self._next_env + np.arange(len(data))) % self._num_envs
            self._next_env = int((self._next_env + len(data)) % self._num_envs)
            rows = [(ids[order[i:i + self._num_envs]], data[i:i + self._num_envs])
                    for i in range(0, len(data), self._num_envs)]
        else:
            raise ValueError(f"shmreplay.torchrl: data of batch size {tuple(data.shape)}, expected [N] or "
                             f"[num_envs, T]")
        index = []
        for env_ids, part in rows:
            fields = {".".join(k) if isinstance(k, tuple) else k: v.detach().cpu().numpy()
                      for k, v in part.items(include_nested=True, leaves_only=True)}
            fields = {k: v for k, v in fields.items() if k not in _NOT_STORED}
            heads = self.buffer.heads()[env_ids]
            writer.push(env_ids, fields)
            index.append(torch.as_tensor(env_ids.astype(np.int64) * self._capacity + heads % self._capacity))
        self._bump_mutation_revision()
        if not index:
            return torch.empty(0, dtype=torch.int64)
        return torch.stack(index, dim=1) if data.batch_dims == 2 else torch.cat(index)  # shaped like the data

    def _lease(self):
        self._writer = shmreplay.Writer.range(self.buffer, self._first_env, self._num_envs)
        return self._writer

    # -- reading ------------------------------------------------------------------------------------------------

    def learner(self):
        """This process's shmreplay.Sampler on the buffer (one learner slot, taken at the first draw)."""
        if self._sampler is None:
            self._sampler = shmreplay.Sampler(self.buffer, seed=int(torch.randint(0, 2**62, ()).item()))
        return self._sampler

    def __len__(self):
        if self.buffer is None:
            return 0
        return int(np.minimum(self.buffer.heads(), self._capacity).sum())

    def _rand_given_ndim(self, batch_size):
        """TorchRL's RandomSampler: ``batch_size`` steps drawn uniformly over the stored ones (by the buffer's
        own sampler, whose rows are kept for the ``get`` that follows)."""
        batch = self.learner().sample_transitions("replay", int(batch_size))
        return self.stash(batch.env_ids, batch.starts, {k: v[:, 0] for k, v in batch.fields.items()})

    def stash(self, env_ids, steps, fields, shape=None):
        """Keeps rows drawn by a sampler (fields: arrays [rows, ...]) for the get() of their index; returns it."""
        index = torch.as_tensor(np.asarray(env_ids, np.int64) * self._capacity + np.asarray(steps) % self._capacity)
        self._stash = (index, self._tensordict(fields, shape or (len(index),)))
        return index

    def _tensordict(self, fields, shape):
        """The rows as a TensorDict of tensors sharing the arrays (no copy: a Batch's arrays that a tensor holds
        are never filled again by the Sampler, which makes a new batch while anything refers to them)."""
        flat = {}
        for name, value in fields.items():
            flat[tuple(name.split(".")) if "." in name else name] = torch.from_numpy(
                np.ascontiguousarray(value).reshape(*shape, *np.shape(value)[1:]))
        td = TensorDict({}, batch_size=shape)
        for key, value in flat.items():
            td.set(key, value)
        return td.to(self.device) if self.device not in (None, "cpu") else td

    def get(self, index):
        """The steps at ``index`` (ring slots, as ``sample`` and ``push`` return them), as a TensorDict."""
        if self.buffer is None:
            raise RuntimeError("shmreplay.torchrl: the storage holds nothing yet")
        stash, self._stash = self._stash, None
        if stash is not None and isinstance(index, torch.Tensor) and index.shape == stash[0].shape and bool(
                torch.equal(index.cpu().reshape(-1), stash[0].reshape(-1))):
            return stash[1]
        return self._read(index)

    def _read(self, index):
        """Reads the steps stored at ring slots ``index`` (the newest step of each slot), one read per item."""
        scalar = isinstance(index, int) or (isinstance(index, torch.Tensor) and index.ndim == 0)
        flat = torch.as_tensor(index).reshape(-1).cpu().numpy().astype(np.int64)
        heads = self.buffer.heads()
        rows = []
        for i in flat:
            env, slot = divmod(int(i), self._capacity)
            head = int(heads[env])
            step = head - 1 - ((head - 1 - slot) % self._capacity)
            if step < 0:
                raise IndexError(f"shmreplay.torchrl: index {i} (env {env}, slot {slot}) holds no step yet")
            _, data = self.buffer.read_steps(env, step, 1)
            rows.append(data)
        fields = {k: np.concatenate([r[k] for r in rows]) for k in self._schema.names}
        td = self._tensordict(fields, (len(flat),))
        return td[0] if scalar else td.reshape(torch.as_tensor(index).shape)

    # -- state ---------------------------------------------------------------------------------------------------

    def state_dict(self):
        """The buffer's steps as a shmreplay checkpoint (its bytes), its name and this storage's env ids."""
        if self.buffer is None:
            return {"checkpoint": None}
        with tempfile.TemporaryDirectory(prefix="shmreplay-torchrl-") as work:
            path = os.path.join(work, "buffer.shmrckpt")
            shmreplay.save(self.buffer, path)
            return {"checkpoint": pathlib.Path(path).read_bytes(), "name": self.buffer.name}

    def load_state_dict(self, state_dict):
        """Loads the checkpoint into this storage's buffer (made from it when there is none yet)."""
        if state_dict.get("checkpoint") is None:
            return
        with tempfile.TemporaryDirectory(prefix="shmreplay-torchrl-") as work:
            path = os.path.join(work, "buffer.shmrckpt")
            pathlib.Path(path).write_bytes(state_dict["checkpoint"])
            self._load_checkpoint(path)

    def _load_checkpoint(self, path):
        self._release()
        if self.buffer is None:
            loaded = shmreplay.load(path, self._name or f"torchrl-{os.getpid()}-{id(self):x}")
            self._owned = True
            self._opened(shmreplay.Buffer.open(loaded.name))
        else:
            shmreplay.load(path, self.buffer.name)
        self._bump_mutation_revision()

    def _release(self):
        for role in (self._writer, self._sampler):
            if role is not None:
                role.close()
        self._writer = self._sampler = None
        self._stash = None

    def _empty(self):
        raise NotImplementedError("shmreplay.torchrl: a shared buffer is not emptied; close() it and make a new one")

    def close(self):
        """Releases this process's env ids and learner slot; removes the buffer if this storage made it."""
        self._release()
        if self._owned and self.buffer is not None and shmreplay.Buffer.exists(self.buffer.name):
            shmreplay.Buffer.remove(self.buffer.name)
        self._owned = False

    def __getstate__(self):
        raise TypeError("shmreplay.torchrl: a SharedStorage is not pickled; another process opens it with "
                        "SharedStorage.open(name)")

    def __repr__(self):
        name = self.buffer.name if self.buffer is not None else "<not made yet>"
        return f"SharedStorage(name={name!r}, len={len(self)}, max_size={self.max_size})"


def torch_storage_init(storage, max_size):
    """Storage.__init__ (StoreStorage's own needs a Redis client, which this storage does not)."""
    from torchrl.data.replay_buffers.storages import Storage
    Storage.__init__(storage, max_size=max_size)
    storage.initialized = False
    storage._last_cursor = None
