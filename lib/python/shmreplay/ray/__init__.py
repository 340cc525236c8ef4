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
    pending = learner.sample_async("replay", 256, 16)       # sent now; pending.result() is the batch
    for batch in learner.batches("replay", 256, 16, prefetch=2):  # two batches in flight while this one trains
        ...

Sampling: the client splits the rows among the nodes by one multinomial draw over their views' total weights for
the request (``Sampler.total_weight``: the sum of min(steps left, L)**power, of 1 for episodes="within", or of
priority**alpha), asks every node for its share in parallel, and concatenates. A row is then (node k, start p) with
probability w(k, p) / sum_j T_j: the distribution of one buffer holding every node's steps. One round trip per
batch: each node's answer carries its total after its draw, and the next batch is split by those totals (so is a
batch after ``update_priorities`` or ``reset_online_queue``, whose answers carry them too); the first batch of a
request, and any batch while a node has no total yet (it just came back), asks for the totals first. Exact on a
quiescent buffer; while writers push, a node's share drifts by about the fraction of its view rewritten since the
totals were read (docs/design/ray.md). ``ClusterSampler(..., exact_split=True)`` asks for the totals before every
batch (two round trips; the drift of one round trip).

Pipelining: :meth:`ClusterSampler.sample_async` sends a batch's calls and returns a :class:`PendingBatch` at once;
:meth:`ClusterSampler.batches` keeps ``prefetch`` of them in flight. A batch sees every priority update and online
reset the learner made before it was requested, and none made after.

A node whose actor dies drops out of the draw with a :class:`NodeLostWarning`; the rows it owed are redrawn among
the others by their totals (which leaves every row distributed as w / sum over the live nodes: sampling
conditioned on the live nodes), and the learner goes on. A lost node is looked up again (by its actor name, or
through the same handle when Ray restarts the actor) at most every ``retry_interval`` seconds and rejoins the draw
when it answers.

Transfer: a node's part of up to 4 MiB comes back in pieces of 96 KiB, each under Ray's limit for a value carried
inside the call's reply (``max_direct_call_object_size``, 100 KiB by default), so that it bypasses the object
stores; a larger part comes back as one object through them, and ray.get maps its arrays without a copy. The one
copy on the learner's side is the concatenation of the nodes' parts into the batch.

Prioritized batches: ``weights`` are the global importance weights (N P)**-beta over the batch's largest, N the
steps in every node's view and P = priority**alpha / (sum of the totals), from each row's weight as its node reads
it right after the draw (``Sampler.priority_weights``): what one buffer holding every node's steps would give.
"""
from __future__ import annotations

import ray

from shmreplay.ray._cluster_batch import ClusterBatch
from shmreplay.ray._cluster_sampler import ClusterSampler, NodeLostWarning
from shmreplay.ray._node_server import NodeServerImpl
from shmreplay.ray._pending_batch import PendingBatch

__all__ = ["ClusterBatch", "ClusterSampler", "NodeLostWarning", "NodeServer", "NodeServerImpl", "PendingBatch"]

NodeServer = ray.remote(num_cpus=0)(NodeServerImpl)
"""The Ray actor class of :class:`NodeServerImpl` (``NodeServer.options(...).remote(...)``). It asks for no CPU,
so that it fits beside a node's env actors; pin it to its node with a custom resource or a scheduling strategy."""
