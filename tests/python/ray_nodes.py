"""What test_ray.py's cases share: the cluster's shape, the writer function Ray runs on a node, node servers (plain,
and counting their calls), and the checks of a batch's rows against the node each says it came from. Ray pickles
this module by value (test_ray.py registers it): its workers cannot import this directory."""
import collections
import os
import time

import numpy as np
import ray

import shmreplay
import shmreplay.ray as sr
from conftest import PAYLOAD_SCHEMA, check_batch, payload

NODES = 3
CAPACITY = 64
L = 4
# Steps each env of each node holds (per node: two envs); some wrap the ring, and the nodes differ in size.
FIRST_PUSH = [[40, 84], [10, 30], [100, 5]]


def body_of(env_ids, steps, node):
    """The body field of steps pushed by `node`: payload() salted with the node, so a row's payload names its node."""
    return payload(env_ids, steps, salt=1000 * node)["body"]


def push_steps(shm_dir, buffer_name, node, counts, seconds=0.0):
    """A writer on a node: pushes counts[e] steps to env e (priority 1 + step % 3), then, for `seconds`, one step to
    every env at a time. Returns the steps pushed per env."""
    os.environ["SHMREPLAY_SHM_DIR"] = shm_dir
    buf = shmreplay.Buffer.open(buffer_name)
    pushed = [0] * len(counts)
    with shmreplay.Writer(buf, list(range(len(counts)))) as w:
        def one(envs):
            steps = [w.head(e) for e in envs]
            data = payload(envs, steps, salt=1000 * node)
            w.push(envs, data, priorities=np.array([1 + s % 3 for s in steps], np.float32))
            for e in envs:
                pushed[e] += 1
        for e, c in enumerate(counts):
            for _ in range(c):
                one([e])
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            one(list(range(len(counts))))
            time.sleep(0.001)
    return pushed


def start_server(dirs, name, k, create=True, wait=True):
    handle = sr.NodeServer.options(name=f"{name}-node{k}", resources={f"node{k}": 1}).remote(
        name, shm_dir=dirs[k], seed=k,
        create={"num_envs": 2, "capacity": CAPACITY, "schema": PAYLOAD_SCHEMA, "priority_exponent": 1.0}
        if create else None)
    if wait:
        ray.get(handle.ping.remote())
    return handle


def cells_of(heads, power):
    """Every start of the replay view of every node's envs, (node, env, start), with its weight min(r, L)**power."""
    cells, weights = [], []
    for k, node_heads in enumerate(heads):
        for e, h in enumerate(node_heads):
            for p in range(max(0, h - CAPACITY), h):
                cells.append((k, e, p))
                weights.append(min(h - p, L) ** power)
    return cells, np.array(weights, float)


def check_rows(batch, heads=None):
    """Every row's payload: whole, its env's, steps start.., and salted with the node it says it came from."""
    assert check_batch(batch) == []
    for k in np.unique(batch.node_ids):
        rows = np.flatnonzero(batch.node_ids == k)
        steps = batch.starts[rows, None] + np.arange(L)[None, :]
        env = np.repeat(batch.env_ids[rows, None], L, axis=1)
        expected = body_of(env.ravel(), steps.ravel(), int(k)).reshape(len(rows), L, -1)
        mask = batch.mask[rows]
        assert np.array_equal(batch["body"][rows][mask], expected[mask]), f"node {k}: a row's body is not its node's"
        if heads is not None:
            h = np.array(heads[int(k)])[batch.env_ids[rows]]
            assert np.all(batch.starts[rows] + mask.sum(axis=1) <= h)


class CountingServerImpl(sr.NodeServerImpl):
    """A node server that counts its calls and the rows its draws are asked for, keeps the options of its last draw,
    can be reseeded, and can be kept busy (the calls sent after a stall wait behind it: Ray runs an actor's calls one at a time)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = collections.Counter()
        self.options_seen = None

    def weigh(self, *args, **kwargs):
        self.calls["weigh"] += 1
        return super().weigh(*args, **kwargs)

    def draw(self, view, batch_size, sequence_length, power, options, beta, *args, **kwargs):
        self.calls["draw"] += 1
        self.calls["rows"] += batch_size
        self.options_seen = {**options, "beta": beta}
        return super().draw(view, batch_size, sequence_length, power, options, beta, *args, **kwargs)

    def update_priorities(self, *args, **kwargs):
        self.calls["update"] += 1
        return super().update_priorities(*args, **kwargs)

    def counts(self):
        return dict(self.calls)

    def last_draw_options(self):
        """The sample options of the last draw (beta included)."""
        return self.options_seen

    def reseed(self, seed):
        self._sampler.seed(seed)

    def stall(self, seconds):
        time.sleep(seconds)
        return True


CountingServer = ray.remote(num_cpus=0)(CountingServerImpl)


def counting_nodes(cluster, suffix):
    """A counting server on each node over a fresh buffer that writers fill with FIRST_PUSH (then quiescent):
    (buffer name, {node name: handle})."""
    _, dirs = cluster
    name = f"shmreplay-ray-{suffix}-{os.getpid()}"
    servers = {f"node{k}": CountingServer.options(name=f"{name}-node{k}", resources={f"node{k}": 1}).remote(
        name, shm_dir=dirs[k], seed=k,
        create={"num_envs": 2, "capacity": CAPACITY, "schema": PAYLOAD_SCHEMA, "priority_exponent": 1.0})
        for k in range(NODES)}
    ray.get([h.ping.remote() for h in servers.values()])
    assert ray.get([ray.remote(push_steps).options(resources={f"node{k}": 1}, num_cpus=0).remote(
        dirs[k], name, k, FIRST_PUSH[k]) for k in range(NODES)]) == FIRST_PUSH
    return name, servers


def calls_since(servers, before=None):
    """Each server's call counts, less `before`'s."""
    now = {n: collections.Counter(c) for n, c in zip(servers, ray.get([h.counts.remote() for h in servers.values()]))}
    if before is None:
        return now
    return {n: {key: now[n][key] - before[n][key] for key in ("weigh", "draw", "rows", "update")} for n in servers}


def close_all(servers):
    ray.get([h.close.remote(remove=True) for h in servers.values()])
    for h in servers.values():
        ray.kill(h)


def same_batch(a, b):
    assert a.keys() == b.keys()
    for key in a.keys():
        assert np.array_equal(a[key], b[key]), key
    for key in ("mask", "env_ids", "starts", "weights", "node_ids"):
        assert np.array_equal(getattr(a, key), getattr(b, key)), key
