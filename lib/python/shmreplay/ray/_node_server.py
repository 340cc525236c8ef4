"""NodeServerImpl: the learner side of one node's buffer, which shmreplay.ray wraps as the Ray actor NodeServer."""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

import shmreplay
from shmreplay.ray import _options


class NodeServerImpl:
    """The learner side of one node's buffer (wrapped as the Ray actor :data:`NodeServer`).

    ``shm_dir`` sets ``SHMREPLAY_SHM_DIR`` in the actor's process before the buffer is opened (each node of a test
    cluster on one machine gets its own directory). ``create`` makes the buffer first (keyword arguments of
    ``shmreplay.Buffer.create``) unless it exists; otherwise the buffer must exist. The server takes the buffer's
    learner lease (a server that died leaves a dead lease, which its replacement takes over). Ray runs one actor's
    calls one at a time, in the order each caller sent them."""

    def __init__(self, buffer_name: str, *, shm_dir: Optional[str] = None, create: Optional[Mapping[str, Any]] = None,
                 seed: Optional[int] = None):
        if shm_dir is not None:
            os.environ["SHMREPLAY_SHM_DIR"] = shm_dir
        self._name = buffer_name
        if create is not None:
            try:
                self._buffer = shmreplay.Buffer.create(buffer_name, **create)
            except shmreplay.AlreadyExists:
                self._buffer = shmreplay.Buffer.open(buffer_name)
        else:
            self._buffer = shmreplay.Buffer.open(buffer_name)
        self._sampler = shmreplay.Sampler(self._buffer, seed=seed)
        self._out: Dict[Tuple[int, int], shmreplay.Batch] = {}

    def info(self) -> Dict[str, Any]:
        """The buffer's name, envs, capacity and schema, and this actor's pid and host."""
        return {"name": self._name, "num_envs": self._buffer.num_envs, "capacity": self._buffer.capacity,
                "schema": str(self._buffer.schema), "pid": os.getpid(), "host": os.uname().nodename}

    def total_weight(self, view: str, sequence_length: int, power: float = 0.0, **options: Any) -> float:
        """``Sampler.total_weight`` of this node's buffer."""
        return self._sampler.total_weight(view, sequence_length, power, **options)

    def weigh(self, view: str, sequence_length: int, power: float = 0.0, **options: Any) -> Tuple[float, int]:
        """(total_weight, size of the view): what the client splits a batch by, and N of importance weights."""
        return self._sampler.total_weight(view, sequence_length, power, **options), self._sampler.size(view)

    def sample(self, view: str, batch_size: int, sequence_length: int, power: float = 0.0,
               **options: Any) -> Optional[Dict[str, np.ndarray]]:
        """``batch_size`` rows as a dict of arrays (the fields, then "mask", "env_ids", "starts", "weights"; with
        ``prioritized``, "priority_weights": each row's priority**alpha); None when the view has become empty since
        its total was read (the client redraws those rows elsewhere)."""
        key = (batch_size, sequence_length)
        out = self._out.get(key)
        if out is None:
            out = self._out[key] = self._sampler.new_batch(batch_size, sequence_length)
        try:
            b = self._sampler.sample(view, batch_size, sequence_length, power, out=out, **options)
        except shmreplay.EmptyView:
            return None
        # Ray copies the arrays out (into the reply or the object store) as this call returns, so `out` is free
        # again after it.
        part = dict(b.fields)
        part["mask"] = b.mask
        part["env_ids"] = b.env_ids
        part["starts"] = b.starts
        part["weights"] = b.weights
        if options.get("prioritized"):  # each row's priority**alpha, for the client's global importance weights
            part["priority_weights"] = self._sampler.priority_weights(b.env_ids, b.starts)
        return part

    def draw(self, view: str, batch_size: int, sequence_length: int, power: float, options: Mapping[str, Any],
             beta: float, pieces: int = 1) -> Any:
        """The client's call for one node's part of a batch: :meth:`sample` of ``batch_size`` rows (none when 0),
        then this node's total and view size for the same request, read after the draw (the client splits its
        next batch by them). Returns a header dict (``total``, ``size``, ``bytes``: the part's bytes, ``part``:
        the arrays or None) when ``pieces`` is 1; otherwise the header (its ``layout``: name, dtype, shape and
        offset of each array) followed by the part's bytes cut into ``pieces`` pieces (``ClusterSampler`` asks for
        pieces small enough for Ray to carry inside the reply). ``options``: the sample options but ``beta`` (the
        total is read with those ``Sampler.total_weight`` takes)."""
        part = self.sample(view, batch_size, sequence_length, power, beta=beta, **options) if batch_size > 0 else None
        header: Dict[str, Any] = {"total": self._sampler.total_weight(view, sequence_length, power,
                                                                      **_options.weigh_options(options)),
                                  "size": self._sampler.size(view),
                                  "bytes": sum(a.nbytes for a in part.values()) if part is not None else 0}
        if pieces <= 1:
            header["part"] = part
            return header
        if part is None:
            header["layout"] = None
            return (header, *([b""] * pieces))
        layout, offset = [], 0
        for name, a in part.items():
            layout.append((name, a.dtype.str, a.shape, offset))
            offset += a.nbytes
        blob = np.empty(offset, np.uint8)
        for (name, _, _, at), a in zip(layout, part.values()):
            blob[at:at + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        header["layout"] = layout
        step = -(-offset // pieces)
        return (header, *(blob[i * step:(i + 1) * step].tobytes() for i in range(pieces)))

    def update_priorities(self, env_ids: np.ndarray, steps: np.ndarray, priorities: np.ndarray) -> Tuple[int, int]:
        """``Sampler.update_priorities`` of this node's buffer: (updated, dropped)."""
        return self._sampler.update_priorities(env_ids, steps, priorities)

    def reset_online_queue(self) -> None:
        """``Sampler.reset_online_queue`` of this node's buffer."""
        self._sampler.reset_online_queue()

    def publish_policy(self, version: int, max_staleness: Optional[int] = None, **pacing: Any) -> Dict[str, Any]:
        """``Sampler.publish_policy`` of this node's buffer (``pace``, ``pace_timeout``, ``max_lag`` as there)."""
        return self._sampler.publish_policy(version, max_staleness, **pacing)

    def size(self, view: str) -> int:
        """``Sampler.size``: the steps in this node's view."""
        return self._sampler.size(view)

    def ping(self) -> bool:
        """True: the client's liveness check of a node."""
        return True

    def close(self, remove: bool = False) -> None:
        """Release the learner lease; with ``remove`` also remove the buffer's segment."""
        self._sampler.close()
        if remove:
            shmreplay.Buffer.remove(self._name)
