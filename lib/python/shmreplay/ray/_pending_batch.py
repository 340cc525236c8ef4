"""PendingBatch: a batch on its way from the nodes, and the request (_Request) it waits on."""
from __future__ import annotations

import concurrent.futures
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import ray

from shmreplay.ray import _options
from shmreplay.ray._cluster_batch import ClusterBatch

if TYPE_CHECKING:
    from shmreplay.ray._cluster_sampler import ClusterSampler, _Node


class _Request:
    """One batch on its way: what was asked, the split, and the calls sent for it."""

    def __init__(self, view, batch_size, sequence_length, power, options, beta):
        self.view, self.batch_size, self.sequence_length, self.power = view, batch_size, sequence_length, power
        self.options, self.beta = options, beta  # options: every sample option but beta (the table's order)
        # the request's totals depend on these, not on beta or the other options of a draw only
        self.weigh_options = _options.weigh_options(options)
        self.key = (view, sequence_length, float(power), *self.weigh_options.values())
        self.sent = threading.Event()  # set once every first-round call is sent (or sending failed)
        self.job: Optional[concurrent.futures.Future] = None
        self.error: Optional[BaseException] = None
        self.single = False  # one live node: nothing to split, its own importance weights are the global ones
        self.split: Dict[str, Tuple[float, int]] = {}  # node -> (total, size) the rows were split by
        self.calls: List[Tuple[_Node, int, int, List[Any]]] = []  # (node, rows, seq, object refs)
        self.batch: Optional[ClusterBatch] = None


class PendingBatch:
    """A batch requested with :meth:`ClusterSampler.sample_async` (or kept in flight by
    :meth:`ClusterSampler.batches`): its calls are on their way to the nodes; :meth:`result` waits for them."""

    __slots__ = ("_sampler", "_request")

    def __init__(self, sampler: "ClusterSampler", request) -> None:  # request: a private _Request
        self._sampler = sampler
        self._request = request

    def result(self) -> ClusterBatch:
        """The batch, once every node has answered (each wait bounded by the sampler's ``timeout``; a node that
        does not answer is lost and its rows are redrawn among the others). Raises what sampling raised
        (shmreplay.EmptyView when no live node holds a start with a positive weight). Later calls return the same
        batch."""
        r = self._request
        if r.batch is None:
            if r.error is not None:
                raise r.error
            try:
                r.batch = self._sampler._finish(r)
            except BaseException as e:
                r.error = e
                raise
        return r.batch

    def done(self) -> bool:
        """Whether every node's answer has arrived (:meth:`result` then waits for nothing but a redraw, should a
        node have given fewer rows than asked)."""
        r = self._request
        if r.batch is not None or r.error is not None:
            return True
        if not r.sent.is_set():
            return False
        refs = [ref for _, _, _, refs in r.calls for ref in refs]
        return not refs or len(ray.wait(refs, num_returns=len(refs), timeout=0)[0]) == len(refs)
