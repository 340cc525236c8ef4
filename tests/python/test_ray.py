"""shmreplay.ray on Ray's own multi-node test cluster (issue 21): three Ray nodes on this machine, each with its own
buffer directory (SHMREPLAY_SHM_DIR), so that the nodes share nothing but Ray. Writer actors pinned to each node
push self-checking steps into that node's buffer; the learner samples every node through a ClusterSampler: rows come
from every node and every start in proportion to its weight (chi-square over all cells, which rejects a wrong
power), every row's payload is checked against its node, priority updates and online resets reach the nodes that
own the rows, and a node server killed while writers push drops out with a warning while the learner goes on, then
rejoins when a replacement server starts. Buffers with stacked fields (one frame per step) give the learner every
node's stacks byte for byte. Servers that count their calls show that a batch costs one call per node once the
totals are known (both splits exact on a quiescent buffer), that priority updates and online resets bring fresh
totals back, that a batch requested ahead (sample_async, batches(prefetch=)) is the one a synchronous call would
have drawn and misses the priority updates made after its request, and that a node lost while such batches are in
flight drops out of them.

Short by default (about a minute, most of it starting Ray's nodes); SHMREPLAY_RAY_LONG=1 samples ten times as many
rows and runs the writers longer. Skipped where Ray is not installed, and under the sanitizer pass (Ray's own
binaries would start with ASan's runtime preloaded)."""
import ast
import inspect
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
import stamped  # noqa: E402
import ray_nodes  # noqa: E402
from ray_nodes import (FIRST_PUSH, L, NODES, calls_since, cells_of, check_rows, close_all, counting_nodes,  # noqa: E402
                       push_steps, same_batch, start_server)

# Ray pickles the writer functions for its workers, which cannot import this directory's modules: send them by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(conftest)
ray.cloudpickle.register_pickle_by_value(ray_nodes)

LONG = os.environ.get("SHMREPLAY_RAY_LONG", "") not in ("", "0")


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


def check_totals(learner, heads):
    """Each node's total is the sum of its starts' weights, for uniform, length^power and priority sampling."""
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


def check_exact_draws(learner, servers, name, heads):
    """Every (node, env, start) cell is drawn in proportion to its weight over all nodes (chi-square); the
    same counts reject the distribution of another power, so the test can fail. Both splits: by the totals the last
    answers brought (the default: one round trip per batch) and by totals read before each batch."""
    power = 1.0
    cells, w = cells_of(heads, power)
    index = {cell: i for i, cell in enumerate(cells)}
    exact = sr.ClusterSampler({n: f"{name}-{n}" for n in servers}, seed=11, exact_split=True)
    for sampler in (learner, exact):
        counts = np.zeros(len(cells))
        batches = 200 if LONG else 24
        for _ in range(batches):
            batch = sampler.sample("replay", 1000, L, power)
            check_rows(batch, heads)
            for k, e, p in zip(batch.node_ids, batch.env_ids, batch.starts):
                counts[index[(int(k), int(e), int(p))]] += 1
        n = counts.sum()
        assert stats.chisquare(counts, w / w.sum() * n).pvalue > 1e-4, sampler.exact_split
        _, w0 = cells_of(heads, 0.0)
        assert stats.chisquare(counts, w0 / w0.sum() * n).pvalue < 1e-6
        per_node = np.array([counts[[c[0] == k for c in cells]].sum() for k in range(NODES)])
        node_w = np.array([w[[c[0] == k for c in cells]].sum() for k in range(NODES)])
        assert np.all(per_node > 0)
        assert stats.chisquare(per_node, node_w / node_w.sum() * n).pvalue > 1e-4, sampler.exact_split
    exact.close()


def check_priority_updates(learner, heads):
    """Priority updates go to the nodes that own the rows: afterwards each node's prioritized total is its
    model's; importance weights are the global ones, (N P)**-beta over the batch's largest, as one buffer holding
    every node's steps gives them (not each node's own)."""
    batch = learner.sample("replay", 300, L, prioritized=True)
    check_rows(batch, heads)
    assert set(batch.node_ids.tolist()) == {0, 1, 2}
    applied, dropped = learner.update_priorities(batch.node_ids, batch.env_ids, batch.starts,
                                                 np.full(batch.rows, 7.0, np.float32))
    assert (applied, dropped) == (300, 0)
    prio_cells, _ = cells_of(heads, 0.0)
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


def sample_through_a_lost_node(learner, servers, dirs, name):
    """Writers push on every node while the learner samples; node1's server is killed mid-run. The learner
    warns and goes on with the other two; a replacement server under the same name brings node1 back into the draw.
    Returns what the writers pushed, the warnings' messages, and the rows per node after the kill and after the return."""
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
            batch = learner.sample("online", 500, L, 1.0)
            check_rows(batch)
            rows = np.bincount(batch.node_ids, minlength=NODES)
            seen += rows
            if replaced:
                after_back += rows
            elif killed and "node1" not in learner.live_nodes():
                after_kill += rows
    return ray.get(writers), [str(w.message) for w in caught if issubclass(w.category, sr.NodeLostWarning)], after_kill, after_back


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

    check_totals(learner, heads)
    check_exact_draws(learner, servers, name, heads)
    check_priority_updates(learner, heads)

    # Online resets go to every node: the online view is empty everywhere, then fills again as writers push.
    learner.reset_online_queue()
    assert learner.size("online") == 0
    with pytest.raises(shmreplay.EmptyView):
        learner.sample("online", 10, L)

    pushed, messages, after_kill, after_back = sample_through_a_lost_node(learner, servers, dirs, name)
    assert all(sum(p) > 0 for p in pushed)
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


@pytest.mark.parametrize("codec", ["", ":lz4"])
def test_a_learner_samples_stacked_fields_of_every_node_byte_for_byte(cluster, codec):
    # Each node's buffer keeps one frame per step (compressed, with `codec`); its server rebuilds the stacks and the
    # learner gets them whole: every row's every step is the stack pushed on its node (the nodes' frames are stamped
    # apart), and every step each node's replay view holds is drawn.
    c, dirs = cluster
    name = f"shmreplay-ray-stacks{codec[1:]}-{os.getpid()}"
    nodes = (0, 1)
    schema = stamped.SCHEMA.replace(":stack=0", ":stack=0" + codec)
    create = {"num_envs": 2, "capacity": 16, "schema": schema, "done": "done"}
    if codec:
        create["compressed_bytes"] = 2 * 4096  # 128 records of a 30-byte frame per env: no step leaves for the budget
    servers = {f"node{k}": sr.NodeServer.options(name=f"{name}-node{k}", resources={f"node{k}": 1}).remote(
        name, shm_dir=dirs[k], seed=k, create=create)
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


def test_the_cluster_sampler_takes_every_sample_option_of_the_bindings_table_and_hands_each_to_the_nodes(cluster):
    """The options come from the binding's table (lib/python/sample_options.hpp): a new one needs no edit in
    shmreplay.ray. Each is in the signatures with the table's default, and given to sample or sample_async it
    reaches every node's draw with its value."""
    table = {n: default for n, calls, default, _ in shmreplay._shmreplay._sample_options() if "Sampler.sample" in calls}
    assert {"episodes", "prioritized", "beta"} <= set(table)
    for method in (sr.ClusterSampler.sample, sr.ClusterSampler.sample_async):
        params = inspect.signature(method).parameters
        assert {n: repr(params[n].default) for n in table if n in params} == table, method.__name__
    _, servers = counting_nodes(cluster, "options")
    learner = sr.ClusterSampler(servers, seed=5)
    try:
        defaults = {n: ast.literal_eval(d) if d not in ("inf", "nan") else float(d) for n, d in table.items()}
        for name, value in defaults.items():
            for call in (learner.sample, lambda *a, **k: learner.sample_async(*a, **k).result()):
                check_rows(call("replay", 60, L, 0.0, **{name: value}), FIRST_PUSH)
                seen = ray.get([h.last_draw_options.remote() for h in servers.values()])
                assert all(s == defaults for s in seen), (name, seen)
        check_rows(learner.sample("replay", 60, L, 0.0, min_steps=1, beta=0.7, period=2), FIRST_PUSH)
        seen = ray.get([h.last_draw_options.remote() for h in servers.values()])
        assert all(s == {**defaults, "min_steps": 1, "beta": 0.7, "period": 2} for s in seen), seen
        with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_option'"):
            learner.sample("replay", 60, L, no_such_option=1)
        for call in (learner.sample, learner.sample_async):  # refused before any node is asked
            with pytest.raises(shmreplay.InvalidArgument, match="a ClusterSampler does not consume"):
                call("replay", 60, L, consume="fifo")
    finally:
        learner.close()
        close_all(servers)


def test_a_batch_costs_one_call_per_node_once_the_totals_are_known_and_updates_and_resets_bring_fresh_ones(cluster):
    name, servers = counting_nodes(cluster, "calls")
    learner = sr.ClusterSampler(servers, seed=3)
    exact = sr.ClusterSampler(servers, seed=4, exact_split=True)
    try:
        # A request's first batch reads the totals first (one weigh per node); every later batch is one call per
        # node, whose answer brings the node's total for the next split.
        before = calls_since(servers)
        learner.sample("replay", 200, L, 1.0)
        assert all(d["weigh"] == 1 and d["draw"] == 1 for d in calls_since(servers, before).values())
        before = calls_since(servers)
        for _ in range(5):
            check_rows(learner.sample("replay", 200, L, 1.0), FIRST_PUSH)
        assert all(d["weigh"] == 0 and d["draw"] == 5 for d in calls_since(servers, before).values())
        # exact_split reads them before every batch.
        before = calls_since(servers)
        for _ in range(3):
            exact.sample("replay", 200, L, 1.0)
        assert all(d["weigh"] == 3 and d["draw"] == 3 for d in calls_since(servers, before).values())

        # A priority update's answer brings its node's totals after the update (a weigh sent behind it, in the same
        # wait), and the next batch is split by them without a round trip of its own: raising node0's priorities
        # moves most rows to node0 at once, as the totals after the update say (and against the ones before it).
        batch = learner.sample("replay", 300, L, prioritized=True)
        old = learner.total_weights("replay", L, prioritized=True)
        mine = batch.node_ids == 0
        before = calls_since(servers)
        assert learner.update_priorities(batch.node_ids[mine], batch.env_ids[mine], batch.starts[mine],
                                         np.full(mine.sum(), 20.0, np.float32)) == (mine.sum(), 0)
        batch = learner.sample("replay", 2000, L, prioritized=True)
        d = calls_since(servers, before)
        assert d["node0"]["update"] == 1 and d["node0"]["weigh"] == 2  # both requests' totals, after the update
        assert d["node1"]["weigh"] == d["node2"]["weigh"] == 0  # no rows of theirs: their totals did not change
        assert all(d[n]["draw"] == 1 for n in servers)
        new = learner.total_weights("replay", L, prioritized=True)
        assert new["node0"] > 4 * old["node0"]
        per_node = np.bincount(batch.node_ids, minlength=NODES)
        for totals, ok in ((new, True), (old, False)):
            t = np.array([totals[n] for n in servers])
            p = stats.chisquare(per_node, t / t.sum() * per_node.sum()).pvalue
            assert (p > 1e-4) if ok else (p < 1e-6), (per_node, totals)

        # An online reset's answers bring every node's total after it (0), so a batch of the online view once
        # node2 has new steps asks node0 and node1 for no rows (it reads the totals afresh, as all it holds are 0).
        learner.sample("online", 100, L)
        learner.reset_online_queue()
        _, dirs = cluster
        ray.get(ray.remote(push_steps).options(resources={"node2": 1}, num_cpus=0).remote(dirs[2], name, 2, [3, 3]))
        before = calls_since(servers)
        batch = learner.sample("online", 100, L)
        d = calls_since(servers, before)
        assert set(batch.node_ids.tolist()) == {2}
        assert (d["node0"]["rows"], d["node1"]["rows"], d["node2"]["rows"]) == (0, 0, 100)
    finally:
        learner.close()
        exact.close()
        close_all(servers)


def test_a_batch_requested_ahead_is_the_one_a_synchronous_call_draws_and_misses_later_priority_updates(cluster):
    _, servers = counting_nodes(cluster, "ahead")

    def fresh(exact_split):  # a learner, and node servers seeded as for every other one
        ray.get([h.reseed.remote(10 + k) for k, h in enumerate(servers.values())])
        return sr.ClusterSampler(servers, seed=7, exact_split=exact_split)
    try:
        for exact_split in (False, True):
            sync = fresh(exact_split)
            expected = [sync.sample("replay", 300, L, 1.0) for _ in range(3)]
            sync.close()
            ahead = fresh(exact_split)
            pending = [ahead.sample_async("replay", 300, L, 1.0) for _ in range(3)]
            for e, p in zip(expected, pending):
                same_batch(e, p.result())
                assert p.done()
            ahead.close()
            ahead = fresh(exact_split)
            batches = ahead.batches("replay", 300, L, 1.0, prefetch=2)
            for e in expected:
                b = next(batches)
                same_batch(e, b)
                check_rows(b, FIRST_PUSH)
            ahead.close()

            # A priority update made after a batch was requested is not in that batch (its split, its rows and
            # their importance weights), whether the totals come from the last answers or are read first (there,
            # on a thread; the update waits until the batch's calls are sent).
            sync = fresh(exact_split)
            expected = sync.sample("replay", 300, L, prioritized=True, beta=0.5)
            sync.close()
            ahead = fresh(exact_split)
            pending = ahead.sample_async("replay", 300, L, prioritized=True, beta=0.5)
            applied, _ = ahead.update_priorities(expected.node_ids, expected.env_ids, expected.starts,
                                                 np.full(expected.rows, 20.0 + 30.0 * exact_split, np.float32))
            assert applied == expected.rows
            same_batch(expected, pending.result())
            ahead.close()
    finally:
        close_all(servers)


def test_a_node_lost_while_batches_are_in_flight_drops_out_and_the_others_give_its_rows(cluster):
    name, servers = counting_nodes(cluster, "inflight")
    learner = sr.ClusterSampler({n: f"{name}-{n}" for n in servers}, seed=5, retry_interval=60.0)
    try:
        learner.sample("replay", 200, L, 1.0)  # the totals are known: the next batches are sent at once
        servers["node1"].stall.remote(5.0)  # node1 is busy, so the two batches' calls wait there until it dies
        pending = [learner.sample_async("replay", 500, L, 1.0) for _ in range(2)]
        ray.kill(servers["node1"], no_restart=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", sr.NodeLostWarning)
            batches = [p.result() for p in pending] + [learner.sample("replay", 500, L, 1.0)]
        messages = [str(w.message) for w in caught if issubclass(w.category, sr.NodeLostWarning)]
        assert len(messages) == 1 and "'node1' is out of the draw" in messages[0], messages
        for b in batches:
            assert b.rows == 500
            assert set(b.node_ids.tolist()) == {0, 2}
            check_rows(b, FIRST_PUSH)
        assert learner.live_nodes() == ["node0", "node2"]
    finally:
        learner.close()
        del servers["node1"]
        close_all(servers)


def push_versions(shm_dir, buffer_name, versions):
    """A writer on a node: one step per version into env 0 (its step index beside it)."""
    os.environ["SHMREPLAY_SHM_DIR"] = shm_dir
    buf = shmreplay.Buffer.open(buffer_name)
    with shmreplay.Writer(buf, [0]) as w:
        for v in versions:
            w.push_one(0, {"version": np.uint32(v), "step": np.uint64(w.head(0))})


def test_a_learner_publishes_its_policy_window_on_every_node_and_draws_only_inside_it(cluster):
    _, dirs = cluster
    name = "policy"
    create = {"num_envs": 1, "capacity": 64, "schema": "version:u32 step:u64", "policy_version": "version"}
    servers = {f"node{k}": sr.NodeServer.options(name=f"{name}-node{k}", resources={f"node{k}": 1}).remote(
        name, shm_dir=dirs[k], seed=k, create=create) for k in range(NODES)}
    ray.get([h.ping.remote() for h in servers.values()])
    # Node k's step s carries version s // (k + 1): versions >= 10 are node 0's steps 10..29 and node 1's 20..29.
    writer = ray.remote(push_versions)
    ray.get([writer.options(resources={f"node{k}": 1}).remote(dirs[k], name, [s // (k + 1) for s in range(30)])
             for k in range(NODES)])
    learner = sr.ClusterSampler({n: f"{name}-{n}" for n in servers}, seed=3)
    try:
        states = learner.publish_policy(12, 2)
        assert states == {n: {"version": 12, "max_staleness": 2, "publishes": 1} for n in servers}
        b = learner.sample("replay", 3000, 1, 0.0)
        assert b["version"].min() >= 10
        drawn = {(int(k), int(s)) for k, s in zip(b.node_ids, b["step"][:, 0])}
        assert drawn == {(0, s) for s in range(10, 30)} | {(1, s) for s in range(20, 30)}
        wide = learner.sample("replay", 3000, 1, 0.0, max_staleness=12)  # a call looks further back: every step
        assert len({(int(k), int(s)) for k, s in zip(wide.node_ids, wide["step"][:, 0])}) == 90
    finally:
        learner.close()
        close_all(servers)
