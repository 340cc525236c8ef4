"""Node buffers served to a remote learner through Ray (``pip install shmreplay[ray]``).

Each machine keeps its own buffer in shared memory: its env actors push there and never leave the machine. One
:class:`NodeServer` Ray actor per machine is that buffer's learner-side :class:`shmreplay.Sampler`; the learner
holds a :class:`ClusterSampler`, which samples every node's buffer as if it were one::

    import ray, shmreplay.ray as sr
    servers = {f"node{i}": sr.NodeServer.options(name=f"shmreplay-node{i}", resources={f"node{i}": 1})
                                        .remote("replay", shm_dir=None) for i in range(3)}
    learner = sr.ClusterSampler(servers, seed=0)
    batch = learner.sample("replay", 256, 16, power=1.0)   # batch["obs"], batch.mask, batch.node_ids, ...
    learner.update_priorities(batch.node_ids, batch.env_ids, batch.starts, new_priorities)
    for batch in learner.batches("replay", 256, 16):        # the next batch is in flight while this one trains
        ...

Sampling stays exact: for each batch the client asks every node for its view's total weight for the request
(``Sampler.total_weight``: the sum of min(steps left, L)**power, of 1 for episodes="within", or of
priority**alpha), splits the rows among the nodes by one multinomial draw over those totals, asks every node for
its share in parallel, and concatenates. A row is then (node k, start p) with probability w(k, p) / sum_j T_j: the
distribution of one buffer holding every node's steps. Each node draws from its own snapshot, taken a moment after
its total; docs/design/ray.md ("Past one machine") says what that drift is while writers push.

A node whose actor dies drops out of the draw with a :class:`NodeLostWarning`; the rows it owed are redrawn among
the others by their totals (which leaves every row distributed as w / sum over the live nodes: sampling
conditioned on the live nodes), and the learner goes on. A lost node is looked up again (by its actor name, or
through the same handle when Ray restarts the actor) at most every ``retry_interval`` seconds and rejoins the draw
when it answers.

Batches travel as NumPy arrays through Ray's object store: ray.get hands the learner read-only arrays over the
store's memory, and the one copy on the learner's side is the concatenation of the nodes' parts.

Prioritized batches: ``weights`` are the global importance weights (N P)**-beta over the batch's largest, N the
steps in every node's view and P = priority**alpha / (sum of the totals), from each row's weight as its node reads
it right after the draw (``Sampler.priority_weights``): what one buffer holding every node's steps would give.
"""
from __future__ import annotations

import concurrent.futures
import os
import threading
import time
import warnings
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import ray

import shmreplay

__all__ = ["ClusterBatch", "ClusterSampler", "NodeLostWarning", "NodeServer", "NodeServerImpl"]


class NodeLostWarning(RuntimeWarning):
    """A node's server stopped answering; it is out of the draw until it answers again."""


class NodeServerImpl:
    """The learner side of one node's buffer (wrapped as the Ray actor :data:`NodeServer`).

    ``shm_dir`` sets ``SHMREPLAY_SHM_DIR`` in the actor's process before the buffer is opened (each node of a test
    cluster on one machine gets its own directory). ``create`` makes the buffer first (keyword arguments of
    ``shmreplay.Buffer.create``) unless it exists; otherwise the buffer must exist. The server takes the buffer's
    learner lease (a server that died leaves a dead lease, which its replacement takes over)."""

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
        """``batch_size`` rows as a dict of arrays (the fields, then "mask", "env_ids", "starts", "weights"); None
        when the view has become empty since its total was read (the client redraws those rows elsewhere)."""
        key = (batch_size, sequence_length)
        out = self._out.get(key)
        if out is None:
            out = self._out[key] = self._sampler.new_batch(batch_size, sequence_length)
        try:
            b = self._sampler.sample(view, batch_size, sequence_length, power, out=out, **options)
        except shmreplay.EmptyView:
            return None
        # Ray copies the arrays into its object store as this call returns, so `out` is free again after it.
        part = dict(b.fields)
        part["mask"] = b.mask
        part["env_ids"] = b.env_ids
        part["starts"] = b.starts
        part["weights"] = b.weights
        if options.get("prioritized"):  # each row's priority**alpha, for the client's global importance weights
            part["priority_weights"] = self._sampler.priority_weights(b.env_ids, b.starts)
        return part

    def update_priorities(self, env_ids: np.ndarray, steps: np.ndarray, priorities: np.ndarray) -> Tuple[int, int]:
        """``Sampler.update_priorities`` of this node's buffer: (updated, dropped)."""
        return self._sampler.update_priorities(env_ids, steps, priorities)

    def reset_online_queue(self) -> None:
        """``Sampler.reset_online_queue`` of this node's buffer."""
        self._sampler.reset_online_queue()

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


NodeServer = ray.remote(num_cpus=0)(NodeServerImpl)
"""The Ray actor class of :class:`NodeServerImpl` (``NodeServer.options(...).remote(...)``). It asks for no CPU,
so that it fits beside a node's env actors; pin it to its node with a custom resource or a scheduling strategy."""


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
    ``seed`` seeds the split of each batch among the nodes (each node's own draw is seeded where it is made)."""

    def __init__(self, servers: Mapping[str, Any], *, seed: Optional[int] = None, timeout: float = 60.0,
                 retry_interval: float = 5.0, namespace: Optional[str] = None):
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
        self._rng = np.random.default_rng(seed)
        self._timeout = timeout
        self._retry_interval = retry_interval
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._lock = threading.Lock()  # one sample at a time (the prefetch thread and the caller)

    # ----- nodes

    def live_nodes(self) -> List[str]:
        """The nodes in the draw now."""
        return [n.name for n in self._nodes if n.alive]

    def _lose(self, node: _Node, error: BaseException) -> None:
        if node.alive:
            node.alive = False
            first_line = str(error).splitlines()[0] if str(error) else ""
            warnings.warn(f"shmreplay.ray: node '{node.name}' is out of the draw: its server did not answer "
                          f"({type(error).__name__}: {first_line}); sampling goes on over the "
                          f"{len(self.live_nodes())} other live node(s), and it is probed again every "
                          f"{self._retry_interval} s", NodeLostWarning, stacklevel=4)
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
            node.handle = handle
            node.alive = True
            warnings.warn(f"shmreplay.ray: node '{node.name}' answers again and is back in the draw",
                          NodeLostWarning, stacklevel=4)

    def _gather(self, calls: Sequence[Tuple[_Node, Any]]) -> List[Tuple[_Node, Any]]:
        """ray.get of each (node, object ref); a node whose call failed is lost and left out of the result. An
        exception raised by the server's own code (a bad argument) is raised here."""
        if not calls:
            return []
        try:  # the usual case: every node answers (one wait for all of them)
            return list(zip([n for n, _ in calls], ray.get([r for _, r in calls], timeout=self._timeout)))
        except (ray.exceptions.RayError, TimeoutError):
            pass  # find out which, below
        out = []
        for node, ref in calls:
            try:
                out.append((node, ray.get(ref, timeout=self._timeout)))
            except ray.exceptions.RayTaskError as e:
                if isinstance(e, ray.exceptions.RayActorError):
                    self._lose(node, e)
                else:
                    raise e.as_instanceof_cause() from None
            except (ray.exceptions.RayError, TimeoutError) as e:
                self._lose(node, e)
        return out

    # ----- sampling

    def total_weights(self, view: str, sequence_length: int, power: float = 0.0, **options: Any) -> Dict[str, float]:
        """Each live node's total weight for the request (``Sampler.total_weight``)."""
        return {name: t for name, (t, _) in self._weigh(view, sequence_length, power, options).items()}

    def _weigh(self, view, sequence_length, power, options) -> Dict[str, Tuple[float, int]]:
        self._probe_lost()
        calls = [(n, n.handle.weigh.remote(view, sequence_length, power, **options)) for n in self._nodes if n.alive]
        return {n.name: (float(t), int(size)) for n, (t, size) in self._gather(calls)}

    def sample(self, view: str, batch_size: int, sequence_length: int, power: float = 0.0, *,
               episodes: str = "cross", period: int = 1, min_steps: int = 0, prioritized: bool = False,
               beta: float = 0.4) -> ClusterBatch:
        """``batch_size`` rows drawn as ``Sampler.sample`` draws them from one buffer holding every live node's
        steps (min_steps applies to each node's view: a node below it weighs 0). Raises shmreplay.EmptyView when
        no live node has a start with a positive weight."""
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        options = {"episodes": episodes, "period": period, "min_steps": min_steps, "prioritized": prioritized}
        with self._lock:
            return self._sample(view, batch_size, sequence_length, power, options, beta)

    def _sample(self, view, batch_size, sequence_length, power, options, beta) -> ClusterBatch:
        by_name = {n.name: n for n in self._nodes}
        self._probe_lost()
        live = [n for n in self._nodes if n.alive]
        if len(live) == 1:  # nothing to split: one round trip (the node's own importance weights are the global ones)
            got = self._gather([(live[0], live[0].handle.sample.remote(
                view, batch_size, sequence_length, power, beta=beta, **options))])
            if got and got[0][1] is not None:
                got[0][1].pop("priority_weights", None)
                return self._concatenate([(self._index[live[0].name], got[0][1])])
        weighed = self._weigh(view, sequence_length, power, options)
        totals = {name: t for name, (t, _) in weighed.items()}
        parts: List[Tuple[int, Dict[str, np.ndarray]]] = []
        owed = batch_size
        while owed > 0:
            # One multinomial draw over the totals; rows a node could not give (it died, or its view emptied since
            # its total) are drawn again among the others by theirs, which keeps every row distributed as
            # w / (sum of the totals of the nodes that answered).
            names = [name for name, t in totals.items() if t > 0 and by_name[name].alive]
            if not names:
                raise shmreplay.EmptyView(
                    f"cannot sample the {view} view across {len(self.nodes)} node(s): no live node holds a start "
                    f"with a positive weight (live: {self.live_nodes()}, totals: {totals})")
            weights = np.array([totals[name] for name in names])
            counts = dict(zip(names, self._rng.multinomial(owed, weights / weights.sum()).tolist()))
            calls = [(by_name[name], by_name[name].handle.sample.remote(
                         view, c, sequence_length, power, beta=beta, **options))
                     for name, c in counts.items() if c > 0]
            owed = 0
            missing = {n.name for n, _ in calls}
            for node, part in self._gather(calls):
                missing.discard(node.name)
                if part is None:  # its view emptied since the total (an online reset): it weighs 0 now
                    totals[node.name] = 0.0
                    owed += counts[node.name]
                else:
                    parts.append((self._index[node.name], part))
            for name in missing:  # lost during the call
                totals[name] = 0.0
                owed += counts[name]
                weighed.pop(name, None)
        batch = self._concatenate(parts)
        if options["prioritized"]:
            self._importance_weights(batch, parts, weighed, totals, beta)
        return batch

    def _concatenate(self, parts: List[Tuple[int, Dict[str, np.ndarray]]]) -> ClusterBatch:
        # The one copy on the learner's side: ray.get gave read-only arrays over the object store.
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

    def sample_async(self, *args: Any, **kwargs: Any) -> "concurrent.futures.Future[ClusterBatch]":
        """:meth:`sample` on a background thread: the learner trains on one batch while the next is fetched."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="shmreplay-ray")
        return self._executor.submit(self.sample, *args, **kwargs)

    def batches(self, *args: Any, **kwargs: Any) -> Iterator[ClusterBatch]:
        """Endless :meth:`sample` results (same arguments), the next one requested before the current one is
        handed out."""
        pending = self.sample_async(*args, **kwargs)
        while True:
            batch = pending.result()
            pending = self.sample_async(*args, **kwargs)
            yield batch

    # ----- routed back to the owners

    def update_priorities(self, node_ids: Any, env_ids: Any, steps: Any, priorities: Any) -> Tuple[int, int]:
        """``Sampler.update_priorities`` on the nodes that own the rows (``batch.node_ids``, ``batch.env_ids``,
        ``batch.starts``), the nodes in parallel. Returns (applied, dropped) over all nodes; the rows of a lost node
        count as dropped."""
        node_ids = np.asarray(node_ids)
        env_ids = np.asarray(env_ids)
        steps = np.asarray(steps)
        priorities = np.asarray(priorities, np.float32)
        if not (len(node_ids) == len(env_ids) == len(steps) == len(priorities)):
            raise ValueError(f"update_priorities: {len(node_ids)} node ids, {len(env_ids)} env ids, {len(steps)} "
                             f"steps and {len(priorities)} priorities; expected one of each per row")
        calls, rows_of, dropped = [], {}, 0
        for i, node in enumerate(self._nodes):
            rows = np.flatnonzero(node_ids == i)
            if len(rows) == 0:
                continue
            if not node.alive:
                dropped += len(rows)
                continue
            rows_of[node.name] = len(rows)
            calls.append((node, node.handle.update_priorities.remote(env_ids[rows], steps[rows], priorities[rows])))
        applied = 0
        answered = set()
        for node, (a, d) in self._gather(calls):
            answered.add(node.name)
            applied += a
            dropped += d
        dropped += sum(k for name, k in rows_of.items() if name not in answered)
        return applied, dropped

    def reset_online_queue(self) -> None:
        """Empty the online view of every live node's buffer (in parallel)."""
        self._gather([(n, n.handle.reset_online_queue.remote()) for n in self._nodes if n.alive])

    def size(self, view: str) -> int:
        """Steps in the view over every live node."""
        return sum(s for _, s in self._gather([(n, n.handle.size.remote(view)) for n in self._nodes if n.alive]))

    def close(self) -> None:
        """Stop the prefetch thread (the nodes' servers are left running)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
