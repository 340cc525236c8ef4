"""ClusterBatch: a batch sampled across the nodes' buffers."""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np


class ClusterBatch:
    """A batch sampled across nodes: per field an array ``[rows, sequence_length, *shape]``, ``mask``, ``env_ids``,
    ``starts``, ``weights`` (as :class:`shmreplay.Batch`), and ``node_ids`` (int32 [rows], indices into
    ``nodes``, the node names)."""

    __slots__ = ("fields", "mask", "env_ids", "starts", "weights", "node_ids", "nodes")

    def __init__(self, fields, mask, env_ids, starts, weights, node_ids, nodes):
        #: ``{name: array [rows, sequence_length, *shape]}``, in schema order
        self.fields: Dict[str, np.ndarray] = fields
        #: bool ``[rows, sequence_length]``: True where the step exists
        self.mask: np.ndarray = mask
        #: int64 ``[rows]``: each row's env in its node's buffer
        self.env_ids: np.ndarray = env_ids
        #: int64 ``[rows]``: the global step index of each row's first step
        self.starts: np.ndarray = starts
        #: float32 ``[rows]``: the global importance weights of a prioritized sample; 1 otherwise
        self.weights: np.ndarray = weights
        #: int32 ``[rows]``: each row's node, an index into :attr:`nodes`
        self.node_ids: np.ndarray = node_ids
        #: the node names
        self.nodes: Tuple[str, ...] = nodes

    def __getitem__(self, name: str) -> np.ndarray:
        return self.fields[name]

    def keys(self) -> List[str]:
        """The field names, in schema order."""
        return list(self.fields)

    @property
    def rows(self) -> int:
        """Rows of the batch."""
        return int(self.mask.shape[0])

    def nbytes(self) -> int:
        """Bytes of every array of the batch."""
        return sum(a.nbytes for a in self.fields.values()) + sum(
            a.nbytes for a in (self.mask, self.env_ids, self.starts, self.weights, self.node_ids))

    def __repr__(self) -> str:
        return f"<shmreplay.ray.ClusterBatch {self.rows} rows from {len(self.nodes)} nodes: {', '.join(self.fields)}>"


_ROW_KEYS = ("mask", "env_ids", "starts", "weights")
