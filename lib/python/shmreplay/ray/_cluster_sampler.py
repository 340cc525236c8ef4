"""ClusterSampler: the learner's sampler over every node's buffer (the package's docstring says how it draws)."""
from __future__ import annotations

import collections
import concurrent.futures
import math
import threading
import time
import warnings
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import ray

import shmreplay
from shmreplay.ray import _options
from shmreplay.ray._cluster_batch import _ROW_KEYS, ClusterBatch
from shmreplay.ray._pending_batch import PendingBatch, _Request


# A part of at most _INLINE_PART_BYTES travels as pieces of at most _PIECE_BYTES: each under Ray's
# max_direct_call_object_size (100 KiB by default), so Ray carries it inside the call's reply instead of putting it
# into the node's object store for the learner's store to pull (which costs a put, a location lookup and a pull per
# object: about 3x the time of a 0.4 MB reply on the benchmark's machine). Ray inlines at most
# task_rpc_inlined_bytes_limit (10 MiB by default) per reply; past a few MB one object through the stores is faster.
_PIECE_BYTES = 96 << 10
_INLINE_PART_BYTES = 4 << 20


class NodeLostWarning(RuntimeWarning):
    """A node's server stopped answering; it is out of the draw until it answers again."""



class _Node:
    __slots__ = ("name", "handle", "actor_name", "namespace", "alive", "next_probe")

    def __init__(self, name, handle, actor_name, namespace):
        self.name = name
        self.handle = handle
        self.actor_name = actor_name
        self.namespace = namespace
        self.alive = True
        self.next_probe = 0.0



class ClusterSampler:
    """The learner's sampler over every node's buffer (see the top of this module).

    ``servers`` maps node names to :data:`NodeServer` actor names (strings, looked up with ``ray.get_actor`` in
    ``namespace``) or handles. A node given by name is looked up again by that name after it is lost, so a
    replacement server started under the same name is found; a node given by handle comes back only through that
    handle (an actor Ray restarts, ``max_restarts``). ``timeout`` bounds each wait for a node (seconds); a node
    that has not answered by then counts as lost. ``retry_interval``: seconds between two probes of a lost node.
    ``seed`` seeds the split of each batch among the nodes (each node's own draw is seeded where it is made).
    ``exact_split``: ask every node for its total before each batch (two round trips per batch) instead of
    splitting by the totals that came back with the previous answers (one round trip; docs/design/ray.md says what
    that drifts by while writers push). Calls from several threads take turns."""

    def __init__(self, servers: Mapping[str, Any], *, seed: Optional[int] = None, timeout: float = 60.0,
                 retry_interval: float = 5.0, namespace: Optional[str] = None, exact_split: bool = False):
        if not servers:
            raise ValueError("ClusterSampler needs at least one node server")
        self._nodes: List[_Node] = []
        for name, server in servers.items():
            if isinstance(server, str):
                self._nodes.append(_Node(name, ray.get_actor(server, namespace=namespace), server, namespace))
            else:
                self._nodes.append(_Node(name, server, None, namespace))
        self.nodes: Tuple[str, ...] = tuple(n.name for n in self._nodes)
        self._index = {name: i for i, name in enumerate(self.nodes)}
        self._by_name = {n.name: n for n in self._nodes}
        self._rng = np.random.default_rng(seed)
        self._timeout = timeout
        self._retry_interval = retry_interval
        self.exact_split: bool = bool(exact_split)
        # Each request's latest totals per node: key -> {node: (seq, total, size)}. seq orders the calls: Ray runs
        # one node's calls in the order they were sent, so the answer to the later call is the fresher total.
        self._totals: Dict[tuple, Dict[str, Tuple[int, float, int]]] = {}
        self._row_bytes: Dict[tuple, float] = {}  # key -> bytes per row, from an answer (to size the pieces)
        self._seq = 0
        self._unsent: set = set()  # exact_split requests whose totals are still being read on the executor
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._lock = threading.RLock()  # the split's generator, the totals, the nodes' states

    # ----- nodes

    def live_nodes(self) -> List[str]:
        """The nodes in the draw now."""
        return [n.name for n in self._nodes if n.alive]

    def _lose(self, node: _Node, error: BaseException) -> None:
        with self._lock:
            if node.alive:
                node.alive = False
                for totals in self._totals.values():
                    totals.pop(node.name, None)
                first_line = str(error).splitlines()[0] if str(error) else ""
                warnings.warn(f"shmreplay.ray: node '{node.name}' is out of the draw: its server did not answer "
                              f"({type(error).__name__}: {first_line}); sampling goes on over the "
                              f"{len(self.live_nodes())} other live node(s), and it is probed again every "
                              f"{self._retry_interval} s", NodeLostWarning, stacklevel=5)
            node.next_probe = time.monotonic() + self._retry_interval

    def _probe_lost(self) -> None:
        now = time.monotonic()
        for node in self._nodes:
            if node.alive or now < node.next_probe:
                continue
            node.next_probe = now + self._retry_interval
            handle = node.handle
            if node.actor_name is not None:
                try:
                    handle = ray.get_actor(node.actor_name, namespace=node.namespace)
                except ValueError:  # no actor of that name (yet)
                    continue
            try:
                ray.get(handle.ping.remote(), timeout=min(self._timeout, 10.0))
            except (ray.exceptions.RayError, TimeoutError):
                continue
            with self._lock:
                node.handle = handle
                node.alive = True  # with no totals: the next batch of every request asks for them first
            warnings.warn(f"shmreplay.ray: node '{node.name}' answers again and is back in the draw",
                          NodeLostWarning, stacklevel=5)

    def _gather(self, calls: Sequence[Tuple[_Node, Sequence[Any]]]) -> List[Tuple[_Node, List[Any]]]:
        """ray.get of each (node, object refs); a node whose call failed is lost and left out of the result. An
        exception raised by the server's own code (a bad argument) is raised here."""
        if not calls:
            return []
        flat = [ref for _, refs in calls for ref in refs]
        try:  # the usual case: every node answers (one wait for all of them)
            values = ray.get(flat, timeout=self._timeout)
            out, at = [], 0
            for node, refs in calls:
                out.append((node, values[at:at + len(refs)]))
                at += len(refs)
            return out
        except (ray.exceptions.RayError, TimeoutError):
            pass  # find out which, below
        out = []
        for node, refs in calls:
            try:
                out.append((node, ray.get(list(refs), timeout=self._timeout)))
            except ray.exceptions.RayTaskError as e:
                if isinstance(e, ray.exceptions.RayActorError):
                    self._lose(node, e)
                else:
                    raise e.as_instanceof_cause() from None
            except (ray.exceptions.RayError, TimeoutError) as e:
                self._lose(node, e)
        return out

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _remember(self, key: tuple, node: _Node, seq: int, total: float, size: int) -> None:
        """Keep (total, size) as node's total for the request unless a later call's answer is already kept."""
        with self._lock:
            if not node.alive:
                return
            mine = self._totals.setdefault(key, {})
            if node.name not in mine or mine[node.name][0] < seq:
                mine[node.name] = (seq, float(total), int(size))

    # ----- sampling

    def total_weights(self, view: str, sequence_length: int, power: float = 0.0, **options: Any) -> Dict[str, float]:
        """Each live node's total weight for the request (``Sampler.total_weight``)."""
        return {name: t for name, (t, _) in self._weigh(view, sequence_length, power, options).items()}

    def _weigh(self, view, sequence_length, power, options, key=None) -> Dict[str, Tuple[float, int]]:
        """One round trip: every live node's (total, size) for the request, kept for the next splits under key."""
        self._probe_lost()
        with self._lock:
            calls = [(n, self._next_seq(), n.handle.weigh.remote(view, sequence_length, power, **options))
                     for n in self._nodes if n.alive]
        seq_of = {n.name: seq for n, seq, _ in calls}
        out = {}
        for n, ((total, size),) in self._gather([(n, [ref]) for n, _, ref in calls]):
            out[n.name] = (float(total), int(size))
            if key is not None:
                self._remember(key, n, seq_of[n.name], total, size)
        return out

    @_options.with_sample_options
    def sample(self, view: str, batch_size: int, sequence_length: int, power: float = 0.0,
               **options: Any) -> ClusterBatch:
        """``batch_size`` rows drawn as ``Sampler.sample`` draws them from one buffer holding every live node's
        steps, with its sample options (min_steps applies to each node's view: a node below it weighs 0). Raises
        shmreplay.EmptyView when no live node has a start with a positive weight."""
        return self._request("ClusterSampler.sample", view, batch_size, sequence_length, power, options,
                             background=False).result()

    @_options.with_sample_options
    def sample_async(self, view: str, batch_size: int, sequence_length: int, power: float = 0.0,
                     **options: Any) -> PendingBatch:
        """:meth:`sample`, sent now and returned as a :class:`PendingBatch` whose ``result()`` is the batch: the
        learner trains on one batch while the next ones travel. The batch is drawn as :meth:`sample` would draw it
        at this moment: it reflects every ``update_priorities`` and ``reset_online_queue`` made before this call
        and none made after it (Ray runs a node's calls in the order they were sent; with ``exact_split`` the
        totals are read on a background thread, and those two calls wait until every earlier request has been
        sent). Rows a node cannot give are redrawn when ``result()`` finds that out (docs/design/ray.md)."""
        return self._request("ClusterSampler.sample_async", view, batch_size, sequence_length, power, options,
                             background=True)

    def batches(self, view: str, batch_size: int, sequence_length: int, power: float = 0.0, *, prefetch: int = 1,
                **options: Any) -> Iterator[ClusterBatch]:
        """Endless :meth:`sample` results (the same arguments), with ``prefetch`` more requests in flight (sent
        with :meth:`sample_async`) while the learner holds each batch; 0: each batch is requested when the
        previous one has been handed out."""
        if prefetch < 0:
            raise ValueError(f"prefetch must be 0 or more, got {prefetch}")
        pending = collections.deque(self.sample_async(view, batch_size, sequence_length, power, **options)
                                    for _ in range(prefetch))
        while True:
            if not pending:
                yield self.sample(view, batch_size, sequence_length, power, **options)
                continue
            batch = pending.popleft().result()
            pending.append(self.sample_async(view, batch_size, sequence_length, power, **options))
            yield batch

    def _request(self, function, view, batch_size, sequence_length, power, options, background) -> PendingBatch:
        options = _options.request_options(function, options)
        if options["consume"] is not None:
            # A queue's steps go to one learner each, and a node's call may return fewer rows than its share (a
            # partial batch): the split across nodes assumes neither. Learners consume on each node instead.
            raise shmreplay.InvalidArgument(
                f"{function}: consume={options['consume']!r} is refused: a ClusterSampler does not consume (each "
                "node's consuming queue delivers a step once, to a Sampler on that node; docs/design/"
                "consuming_queue.md)")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        beta = options.pop("beta")  # the client's: the global importance weights (each node's draw gets it too)
        r = _Request(view, batch_size, sequence_length, power, options, beta)
        if self.exact_split:
            with self._lock:
                queued = bool(self._unsent)
                if background or queued:  # in order behind the requests already on the executor
                    if self._executor is None:
                        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="shmreplay-ray")
                    self._unsent.add(r)
                    r.job = self._executor.submit(self._send, r)
                    return PendingBatch(self, r)
        self._send(r)
        return PendingBatch(self, r)

    def _send(self, r: _Request) -> None:
        """Split r's rows among the live nodes and send each its call (cached totals, or weighed first)."""
        try:
            self._probe_lost()
            with self._lock:
                live = [n for n in self._nodes if n.alive]
            if len(live) == 1:
                r.single = True
                with self._lock:
                    self._call(r, live[0], r.batch_size)
                return
            known = self._totals.get(r.key, {})
            weighed_now = False
            if self.exact_split or any(n.name not in known for n in live):
                self._weigh(r.view, r.sequence_length, r.power, r.weigh_options, key=r.key)
                weighed_now = True
            with self._lock:
                known = self._totals.get(r.key, {})
                live = [n for n in self._nodes if n.alive and n.name in known]
                if not weighed_now and not any(known[n.name][1] > 0 for n in live):
                    live = None  # every kept total is 0: read them afresh before calling the view empty
            if live is None:
                self._weigh(r.view, r.sequence_length, r.power, r.weigh_options, key=r.key)
                with self._lock:
                    known = self._totals.get(r.key, {})
                    live = [n for n in self._nodes if n.alive and n.name in known]
            with self._lock:
                r.split = {n.name: (known[n.name][1], known[n.name][2]) for n in live}
                counts = self._split(r, r.batch_size, {name: t for name, (t, _) in r.split.items()})
                for n in live:
                    # Without exact_split every live node is called, with 0 rows too: its answer brings its fresh
                    # total for the next batch.
                    if counts.get(n.name, 0) > 0 or not self.exact_split:
                        self._call(r, n, counts.get(n.name, 0))
        except BaseException as e:  # raised by result()
            r.error = e
        finally:
            with self._lock:
                self._unsent.discard(r)
            r.sent.set()

    def _split(self, r: _Request, rows: int, totals: Mapping[str, float]) -> Dict[str, int]:
        """One multinomial draw of rows over the nodes with a positive total (under the lock)."""
        names = [name for name, t in totals.items() if t > 0 and self._by_name[name].alive]
        if not names:
            raise shmreplay.EmptyView(
                f"cannot sample the {r.view} view across {len(self.nodes)} node(s): no live node holds a start with a "
                f"positive weight (live: {self.live_nodes()}, totals: {dict(totals)})")
        weights = np.array([totals[name] for name in names])
        return dict(zip(names, self._rng.multinomial(rows, weights / weights.sum()).tolist()))

    def _call(self, r: _Request, node: _Node, rows: int) -> None:
        """Send node its draw of rows for r (under the lock), in pieces Ray carries inside the reply where the
        part is small enough."""
        part_bytes = rows * self._row_bytes.get(r.key, math.inf)
        pieces = max(1, math.ceil(part_bytes / _PIECE_BYTES)) if part_bytes <= _INLINE_PART_BYTES else 1
        method = node.handle.draw if pieces == 1 else node.handle.draw.options(num_returns=pieces + 1)
        refs = method.remote(r.view, rows, r.sequence_length, r.power, r.options, r.beta, pieces)
        r.calls.append((node, rows, self._next_seq(), [refs] if pieces == 1 else list(refs)))

    @staticmethod
    def _unpack(values: List[Any]) -> Tuple[Dict[str, Any], Optional[Dict[str, np.ndarray]]]:
        header = values[0]
        if len(values) == 1:
            return header, header["part"]
        if header["layout"] is None:
            return header, None
        blob = b"".join(values[1:])
        return header, {name: np.frombuffer(blob, np.dtype(dtype), int(np.prod(shape)), at).reshape(shape)
                        for name, dtype, shape, at in header["layout"]}

    def _finish(self, r: _Request) -> ClusterBatch:
        """result() of r: gather the answers, keep their totals, redraw rows a node could not give, concatenate."""
        if r.job is not None:
            r.job.result()
        r.sent.wait()
        if r.error is not None:
            raise r.error
        totals = {name: t for name, (t, _) in r.split.items()}
        weighed = dict(r.split)
        parts: List[Tuple[int, Dict[str, np.ndarray]]] = []
        calls = r.calls
        while True:
            owed = 0
            got = {node.name: values for node, values in self._gather([(node, refs) for node, _, _, refs in calls])}
            for node, rows, seq, _ in calls:  # one call per node and round
                values = got.get(node.name)
                if values is None:  # lost during the call
                    totals[node.name] = 0.0
                    weighed.pop(node.name, None)
                    owed += rows
                    continue
                header, part = self._unpack(values)
                self._remember(r.key, node, seq, header["total"], header["size"])
                if rows == 0:
                    continue
                if part is None:  # its view emptied since its total (an online reset): it weighs 0 now
                    totals[node.name] = 0.0
                    owed += rows
                else:
                    parts.append((self._index[node.name], part))
                    with self._lock:
                        self._row_bytes[r.key] = header["bytes"] / rows
            if owed == 0:
                break
            if r.single:
                raise shmreplay.EmptyView(
                    f"cannot sample the {r.view} view across {len(self.nodes)} node(s): the one live node gave no "
                    f"rows (live: {self.live_nodes()})")
            # Rows a node could not give are drawn again among the others by the totals the batch was split by,
            # which keeps every row distributed as w / (sum of the totals of the nodes that answered).
            with self._lock:
                counts = self._split(r, owed, totals)
                r.calls = []
                for name, c in counts.items():
                    if c > 0:
                        self._call(r, self._by_name[name], c)
                calls = r.calls
        batch = self._concatenate(parts)
        if r.options["prioritized"] and not r.single:
            self._importance_weights(batch, parts, weighed, totals, r.beta)
        return batch

    def _concatenate(self, parts: List[Tuple[int, Dict[str, np.ndarray]]]) -> ClusterBatch:
        # The one copy on the learner's side: ray.get gave read-only arrays over the object store or the reply.
        arrays = {key: np.concatenate([p[key] for _, p in parts]) for key in parts[0][1]}
        node_ids = np.concatenate([np.full(len(p["starts"]), i, np.int32) for i, p in parts])
        arrays.pop("priority_weights", None)
        fields = {k: v for k, v in arrays.items() if k not in _ROW_KEYS}
        return ClusterBatch(fields, arrays["mask"], arrays["env_ids"], arrays["starts"], arrays["weights"], node_ids,
                            self.nodes)

    @staticmethod
    def _importance_weights(batch, parts, weighed, totals, beta) -> None:
        """batch.weights = (N P)**-beta over the batch's largest, with P = w / T over the nodes in the draw (T the
        sum of their totals, N of their views' sizes) and w each row's priority**alpha as its node read it right
        after the draw: what one buffer holding all their steps would give. A row whose step was overwritten in
        between (w = -1) gets its node's mean weight T_k / N_k. Computed as (smallest N P / N P)**beta, a ratio in
        (0, 1] to the power beta: finite for any beta (as a quotient of powers, beta = 1e9 gave inf / inf)."""
        total = sum(totals.values())
        starts = sum(size for name, (_, size) in weighed.items() if name in totals)
        node_mean = {i: totals[name] / max(weighed[name][1], 1) for name, i in
                     ((name, batch.nodes.index(name)) for name in weighed)}
        w = np.concatenate([np.where(p["priority_weights"] > 0, p["priority_weights"], node_mean[i])
                            for i, p in parts])
        n_p = starts * w / total
        smallest = n_p.min()
        with np.errstate(divide="ignore", invalid="ignore"):
            batch.weights = np.where(n_p <= smallest, 1.0, (smallest / n_p) ** beta).astype(np.float32)

    # ----- routed back to the owners

    def _drain(self) -> None:
        """Wait until every request made so far has sent its calls (exact_split: its totals are read on the
        executor), so that a call sent now reaches each node after them."""
        while True:
            with self._lock:
                pending = list(self._unsent)
            if not pending:
                return
            for r in pending:
                r.sent.wait()

    def _reweigh_after(self, calls: List[Tuple[_Node, Any]]) -> List[Tuple[_Node, List[Any]]]:
        """Send, behind each node's call in calls, a weigh of every request whose totals are kept (Ray runs them in
        that order, so they read the totals after the call), and gather both in one wait: the next batch is split
        by totals that include the call, without a round trip of its own."""
        with self._lock:
            keys = [] if self.exact_split else [k for k, totals in self._totals.items() if totals]
            sent = []
            for node, ref in calls:
                weighs = [(k, self._next_seq(), node.handle.weigh.remote(
                    k[0], k[1], k[2], **dict(zip(_options.WEIGH_OPTIONS, k[3:])))) for k in keys]
                sent.append((node, ref, weighs))
        got = self._gather([(node, [ref, *(w for _, _, w in weighs)]) for node, ref, weighs in sent])
        answers = dict((node.name, values) for node, values in got)
        for node, _, weighs in sent:
            values = answers.get(node.name)
            if values is None:
                continue
            for (k, seq, _), (total, size) in zip(weighs, values[1:]):
                self._remember(k, node, seq, total, size)
        return [(node, values[0]) for node, values in got]

    def update_priorities(self, node_ids: Any, env_ids: Any, steps: Any, priorities: Any) -> Tuple[int, int]:
        """``Sampler.update_priorities`` on the nodes that own the rows (``batch.node_ids``, ``batch.env_ids``,
        ``batch.starts``), the nodes in parallel. Returns (applied, dropped) over all nodes; the rows of a lost node
        count as dropped. The nodes' answers carry their totals after the update, which the next batch is split
        by."""
        node_ids = np.asarray(node_ids)
        env_ids = np.asarray(env_ids)
        steps = np.asarray(steps)
        priorities = np.asarray(priorities, np.float32)
        if not (len(node_ids) == len(env_ids) == len(steps) == len(priorities)):
            raise ValueError(f"update_priorities: {len(node_ids)} node ids, {len(env_ids)} env ids, {len(steps)} "
                             f"steps and {len(priorities)} priorities; expected one of each per row")
        self._drain()
        calls, rows_of, dropped = [], {}, 0
        with self._lock:
            for i, node in enumerate(self._nodes):
                rows = np.flatnonzero(node_ids == i)
                if len(rows) == 0:
                    continue
                if not node.alive:
                    dropped += len(rows)
                    continue
                rows_of[node.name] = len(rows)
                calls.append((node, node.handle.update_priorities.remote(env_ids[rows], steps[rows],
                                                                         priorities[rows])))
        applied = 0
        answered = set()
        for node, (a, d) in self._reweigh_after(calls):
            answered.add(node.name)
            applied += a
            dropped += d
        dropped += sum(k for name, k in rows_of.items() if name not in answered)
        return applied, dropped

    def reset_online_queue(self) -> None:
        """Empty the online view of every live node's buffer (in parallel). The nodes' answers carry their totals
        after the reset, which the next batch is split by."""
        self._drain()
        with self._lock:
            calls = [(n, n.handle.reset_online_queue.remote()) for n in self._nodes if n.alive]
        self._reweigh_after(calls)

    def publish_policy(self, version: int, max_staleness: Optional[int] = None, **pacing: Any) -> Dict[str, Any]:
        """``Sampler.publish_policy`` on every live node (in parallel; ``pace``, ``pace_timeout``, ``max_lag`` as
        there): the version and window each node's buffer has now, by node. The next batch is split by totals that
        include the window."""
        self._drain()
        with self._lock:
            calls = [(n, n.handle.publish_policy.remote(version, max_staleness, **pacing))
                     for n in self._nodes if n.alive]
        return {node.name: state for node, state in self._reweigh_after(calls)}

    def size(self, view: str) -> int:
        """Steps in the view over every live node."""
        calls = [(n, [n.handle.size.remote(view)]) for n in self._nodes if n.alive]
        return sum(s for _, (s,) in self._gather(calls))

    def close(self) -> None:
        """Stop the exact_split executor thread (the nodes' servers are left running)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
