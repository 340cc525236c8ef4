"""shmreplay.ray on Ray's own multi-node test cluster (issue 21): three Ray nodes on this machine, each with its own
buffer directory (SHMREPLAY_SHM_DIR), so that the nodes share nothing but Ray. Writer actors pinned to each node
push self-checking steps into that node's buffer; the learner samples every node through a ClusterSampler: rows come
from every node and every start in proportion to its weight (chi-square over all cells, which rejects a wrong
power), every row's payload is checked against its node, priority updates and online resets reach the nodes that
own the rows, and a node server killed while writers push drops out with a warning while the learner goes on, then
rejoins when a replacement server starts. Buffers with stacked fields (one frame per step) give the learner every
node's stacks byte for byte.

Short by default (about a minute, most of it starting Ray's nodes); SHMREPLAY_RAY_LONG=1 samples ten times as many
rows and runs the writers longer. Skipped where Ray is not installed, and under the sanitizer pass (Ray's own
binaries would start with ASan's runtime preloaded)."""
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import pytest

if "asan" in os.environ.get("LD_PRELOAD", ""):
    pytest.skip("the sanitizer pass preloads ASan, which Ray's own binaries (gcs_server, raylet) would then load too",
                allow_module_level=True)
ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'shmreplay[ray]' (tools/setup.sh puts it "
                                        "into .venv)")
stats = pytest.importorskip("scipy.stats")
cluster_utils = pytest.importorskip("ray.cluster_utils")

import conftest  # noqa: E402
import shmreplay  # noqa: E402
import shmreplay.ray as sr  # noqa: E402
from conftest import PAYLOAD_SCHEMA, check_batch, payload  # noqa: E402
import stamped  # noqa: E402

# Ray pickles the writer functions for its workers, which cannot import this directory's modules: send them by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(conftest)

LONG = os.environ.get("SHMREPLAY_RAY_LONG", "") not in ("", "0")
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


@pytest.fixture(scope="module")
def cluster():
    """Three Ray nodes, node k with the custom resource "node{k}" and its own buffer directory."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no report attempt from CI machines
    dirs = [tempfile.mkdtemp(prefix=f"shmreplay-ray-node{k}-", dir="/dev/shm") for k in range(NODES)]
    # Small object stores (Ray's default is 30% of the memory per node, in /dev/shm): the batches here are small.
    store = 150 * 2**20
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"node0": 100}, "include_dashboard": False, "object_store_memory": store})
    for k in range(1, NODES):
        c.add_node(num_cpus=1, resources={f"node{k}": 100}, object_store_memory=store)
    ray.init(address=c.address, namespace="shmreplay-test", log_to_driver=False)
    try:
        yield c, dirs
    finally:
        ray.shutdown()
        c.shutdown()
        for d in dirs:
            for f in os.listdir(d):
                os.unlink(os.path.join(d, f))
            os.rmdir(d)


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


def test_a_learner_samples_every_nodes_buffer_exactly_routes_updates_back_and_survives_a_lost_node(cluster):
    c, dirs = cluster
    name = f"shmreplay-ray-{os.getpid()}"
    servers = {f"node{k}": start_server(dirs, name, k, wait=False) for k in range(NODES)}  # they start in parallel
    ray.get([h.ping.remote() for h in servers.values()])
    # Writers on their own nodes fill the buffers; then the buffers are quiescent for the exactness checks.
    pushed = ray.get([ray.remote(push_steps).options(resources={f"node{k}": 1}, num_cpus=0).remote(
        dirs[k], name, k, FIRST_PUSH[k]) for k in range(NODES)])
    assert pushed == FIRST_PUSH
    # Nothing is shared: each node's buffer is a file in its own directory only.
    for k in range(NODES):
        assert os.listdir(dirs[k]) == [name]
    heads = [list(h) for h in FIRST_PUSH]

    learner = sr.ClusterSampler({n: f"{name}-{n}" for n in servers}, seed=1, retry_interval=0.0, timeout=60.0)
    assert learner.nodes == ("node0", "node1", "node2")

    # Totals: each node's is the sum of its starts' weights, for uniform, length^power and priority sampling.
    for power in (0.0, 1.0, 2.0):
        cells, w = cells_of(heads, power)
        totals = learner.total_weights("replay", L, power)
        for k in range(NODES):
            mine = np.array([cell[0] == k for cell in cells])
            assert totals[f"node{k}"] == pytest.approx(w[mine].sum(), rel=1e-12)
    prio_cells, _ = cells_of(heads, 0.0)
    prio_totals = learner.total_weights("replay", L, prioritized=True)
    for k in range(NODES):
        expected = sum(1 + p % 3 for (kk, _, p) in prio_cells if kk == k)  # alpha = 1
        assert prio_totals[f"node{k}"] == pytest.approx(expected, rel=1e-12)

    # Exactness: every (node, env, start) cell is drawn in proportion to its weight over all nodes (chi-square);
    # the same counts reject the distribution of another power, so the test can fail.
    power = 1.0
    cells, w = cells_of(heads, power)
    index = {cell: i for i, cell in enumerate(cells)}
    counts = np.zeros(len(cells))
    batches = 200 if LONG else 24
    for _ in range(batches):
        batch = learner.sample("replay", 1000, L, power)
        check_rows(batch, heads)
        for k, e, p in zip(batch.node_ids, batch.env_ids, batch.starts):
            counts[index[(int(k), int(e), int(p))]] += 1
    n = counts.sum()
    assert stats.chisquare(counts, w / w.sum() * n).pvalue > 1e-4
    _, w0 = cells_of(heads, 0.0)
    assert stats.chisquare(counts, w0 / w0.sum() * n).pvalue < 1e-6
    per_node = np.array([counts[[c[0] == k for c in cells]].sum() for k in range(NODES)])
    node_w = np.array([w[[c[0] == k for c in cells]].sum() for k in range(NODES)])
    assert np.all(per_node > 0)
    assert stats.chisquare(per_node, node_w / node_w.sum() * n).pvalue > 1e-4

    # Priority updates go to the nodes that own the rows: afterwards each node's prioritized total is its model's.
    batch = learner.sample("replay", 300, L, prioritized=True)
    check_rows(batch, heads)
    assert set(batch.node_ids.tolist()) == {0, 1, 2}
    applied, dropped = learner.update_priorities(batch.node_ids, batch.env_ids, batch.starts,
                                                 np.full(batch.rows, 7.0, np.float32))
    assert (applied, dropped) == (300, 0)
    model = {cell: 1 + cell[2] % 3 for cell in prio_cells}
    for k, e, p in zip(batch.node_ids, batch.env_ids, batch.starts):
        model[(int(k), int(e), int(p))] = 7
    prio_totals = learner.total_weights("replay", L, prioritized=True)
    for k in range(NODES):
        assert prio_totals[f"node{k}"] == pytest.approx(sum(v for cell, v in model.items() if cell[0] == k))
    # Importance weights are the global ones, (N P)**-beta over the batch's largest, as one buffer holding every
    # node's steps gives them (not each node's own).
    batch = learner.sample("replay", 500, L, prioritized=True, beta=0.5)
    w = np.array([model[(int(k), int(e), int(p))] for k, e, p in zip(batch.node_ids, batch.env_ids, batch.starts)])
    expected = (len(model) * w / sum(model.values())) ** -0.5
    np.testing.assert_allclose(batch.weights, expected / expected.max(), rtol=1e-5)

    # Online resets go to every node: the online view is empty everywhere, then fills again as writers push.
    learner.reset_online_queue()
    assert learner.size("online") == 0
    with pytest.raises(shmreplay.EmptyView):
        learner.sample("online", 10, L)

    # Writers push on every node while the learner samples; node1's server is killed mid-run. The learner warns and
    # goes on with the other two; a replacement server under the same name brings node1 back into the draw.
    seconds = 20.0 if LONG else 4.0
    writers = [ray.remote(push_steps).options(resources={f"node{k}": 1}, num_cpus=0).remote(
        dirs[k], name, k, [0, 0], seconds) for k in range(NODES)]
    start = time.monotonic()
    while learner.size("online") == 0 and time.monotonic() < start + 60:
        time.sleep(0.01)
    seen = np.zeros(NODES, int)
    start = time.monotonic()
    killed_at, back_at, give_up = start + seconds / 4, start + seconds / 2, start + seconds + 60
    killed = replaced = False
    after_kill, after_back = np.zeros(NODES, int), np.zeros(NODES, int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", sr.NodeLostWarning)
        while time.monotonic() < give_up and not (replaced and after_back.sum() >= 3000):
            now = time.monotonic()
            if not killed and now >= killed_at:
                ray.kill(servers["node1"], no_restart=True)
                killed = True
            if killed and not replaced and now >= back_at and after_kill.sum() >= 1000:
                servers["node1"] = start_server(dirs, name, 1, create=False)
                replaced = True
            batch = learner.sample("online", 500, L, power)
            check_rows(batch)
            rows = np.bincount(batch.node_ids, minlength=NODES)
            seen += rows
            if replaced:
                after_back += rows
            elif killed and "node1" not in learner.live_nodes():
                after_kill += rows
    pushed = ray.get(writers)
    assert all(sum(p) > 0 for p in pushed)
    messages = [str(w.message) for w in caught if issubclass(w.category, sr.NodeLostWarning)]
    assert any("'node1' is out of the draw" in m for m in messages), messages
    assert any("'node1' answers again" in m for m in messages), messages
    assert after_kill[1] == 0 and after_kill[0] > 0 and after_kill[2] > 0
    assert after_back[1] > 0, "node1 did not rejoin the draw"
    assert learner.live_nodes() == ["node0", "node1", "node2"]
    # A lost node's rows count as dropped when their priorities come back.
    ray.kill(servers["node2"], no_restart=True)
    with pytest.warns(sr.NodeLostWarning):
        applied, dropped = learner.update_priorities([0, 2], [0, 0], [int(pushed[0][0]) + heads[0][0] - 1, 0],
                                                     [2.0, 2.0])
    assert (applied, dropped) == (1, 1)
    learner.close()
    for k in (0, 1):
        ray.get(servers[f"node{k}"].close.remote(remove=True))


def test_a_learner_samples_stacked_fields_of_every_node_byte_for_byte(cluster):
    # Each node's buffer keeps one frame per step; its server rebuilds the stacks and the learner gets them whole:
    # every row's every step is the stack pushed on its node (the nodes' frames are stamped apart), and every
    # step each node's replay view holds is drawn.
    c, dirs = cluster
    name = f"shmreplay-ray-stacks-{os.getpid()}"
    nodes = (0, 1)
    servers = {f"node{k}": sr.NodeServer.options(name=f"{name}-node{k}", resources={f"node{k}": 1}).remote(
        name, shm_dir=dirs[k], seed=k, create={"num_envs": 2, "capacity": 16, "schema": stamped.SCHEMA, "done": "done"})
        for k in nodes}
    ray.get([h.ping.remote() for h in servers.values()])
    models = {}
    rng = np.random.default_rng(3)
    old_dir = os.environ.get("SHMREPLAY_SHM_DIR")
    try:
        for k in nodes:  # this process pushes into each node's buffer (all nodes are on this machine)
            os.environ["SHMREPLAY_SHM_DIR"] = dirs[k]
            buf = shmreplay.Buffer.open(name)
            models[k] = stamped.Model(buf, seed=k)
            for env in models[k].envs:
                env.serial = 5000 * k  # node k's frames: serials from 5000 k on
            with shmreplay.Writer(buf, [0, 1]) as w:
                for _ in range(40 + 10 * k):
                    stamped.push_steps(w, models[k], [0, 1], "mixed", rng, p_done=0.1, p_jump=0.05)
    finally:
        if old_dir is None:
            os.environ.pop("SHMREPLAY_SHM_DIR", None)
        else:
            os.environ["SHMREPLAY_SHM_DIR"] = old_dir
    learner = sr.ClusterSampler({n: f"{name}-{n}" for n in servers}, seed=2, retry_interval=0.0, timeout=60.0)
    seen = set()
    for length, power in ((4, 1.0), (1, 0.0), (1, 0.0), (1, 0.0)):
        batch = learner.sample("replay", 400, length, power)
        assert batch["obs"].shape == (400, length, 4, 6, 5)
        for i, k in enumerate(nodes):
            rows = batch.node_ids == i
            assert rows.any()
            assert models[k].check_rows({f: v[rows] for f, v in batch.fields.items()}, batch.mask[rows],
                                        batch.env_ids[rows], batch.starts[rows]) == [], f"node{k}"
            seen |= {(k, int(e), int(s)) for e, s in zip(batch.env_ids[rows], batch.starts[rows])}
    assert seen == {(k, e, s) for k in nodes for e, s in models[k].sampleable()}
    learner.close()
    ray.get([h.close.remote(remove=True) for h in servers.values()])
