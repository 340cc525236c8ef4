"""Checkpoints from Python (lib/python/bind_checkpoint.cpp): save and load keep every part a run needs (steps,
priorities, episode records, the rate limiter, the learner's counters), a 1.0 file loads with a note, differences are
refused unless allow_mismatch, and chains are incremental. The Checkpointer: test_checkpointer.py."""
import os
import pathlib

import numpy as np
import pytest

import shmreplay
from checkpoint_helpers import make_buffer, push_steps

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORMAT_1_0 = ROOT / "tests" / "checkpoint" / "data" / "format-1.0.shmrckpt"


def stored(buf):
    """{env: (first step, {field: array})} of every stored step."""
    return {e: buf.read_steps(e, 0, int(buf.heads()[e])) for e in range(buf.num_envs)}


def assert_same_steps(a, b):
    sa, sb = stored(a), stored(b)
    for e in sa:
        assert sa[e][0] == sb[e][0], f"env {e}: first step {sa[e][0]} vs {sb[e][0]}"
        for field, array in sa[e][1].items():
            np.testing.assert_array_equal(array, sb[e][1][field], err_msg=f"env {e} field {field}")


def learner_view(buf, seed):
    """What a new learner of buf sees: priority weights of the stored steps, waiting episodes, a seeded sample."""
    steps = stored(buf)
    env_ids = np.concatenate([np.full(len(d["act"]), e) for e, (_, d) in steps.items()])
    step_ids = np.concatenate([first + np.arange(len(d["act"])) for e, (first, d) in steps.items()])
    with shmreplay.Sampler(buf, seed=seed) as s:
        weights = s.priority_weights(env_ids, step_ids)
        episodes = [(r.env, r.first_step, r.length, r.episode_return, r.end) for r in s.pop_episodes()]
        batch = s.sample("replay", 16, 2, prioritized=True, beta=0.4)
        sample = {k: batch[k].copy() for k in batch.keys()}
        sample.update(starts=batch.starts.copy(), env_ids=batch.env_ids.copy(), weights=batch.weights.copy())
    return weights, episodes, sample


@pytest.mark.parametrize("target", ["new", "existing"])
def test_a_loaded_buffer_has_the_steps_priorities_limiter_episodes_and_counters_that_were_saved(
        name, copy_name, tmp_path, target):
    buf = make_buffer(name)
    with shmreplay.Writer(buf, [0, 1]) as w, shmreplay.Sampler(buf, seed=1) as s:
        push_steps(w, [0, 1], 0, 5)
        push_steps(w, [0], 5, 6)  # env 0 wraps its ring of 8
        s.sample("replay", 4, 1, prioritized=True)
        s.update_priorities([0, 1], [9, 2], [0.25, 7.0])
        assert len(s.pop_episodes(max=1)) == 1  # one record popped, the others wait in the queues
        info = shmreplay.save(buf, tmp_path / "a.shmrckpt")
    assert (info.format, info.holds_state, info.self_contained) == ("2.4", True, True)
    assert (info.source_name, info.num_envs, info.capacity, info.total_steps) == (name, 2, 8, 8 + 5)
    assert info.priority_exponent == pytest.approx(0.6)
    assert info.episode_fields == {"done": "done", "reward": "reward"}
    assert info.limiter.limit == buf.rate_limit
    assert (info.learner.sample_calls, info.learner.rows_sampled, info.learner.priority_updates) == (1, 4, 2)
    assert [(e.first_step, e.head, e.data_from) for e in info.envs] == [(3, 11, 3), (0, 5, 0)]
    assert sum(e.queued for e in info.envs) == 2  # env 0's episodes ended at steps 3 and 7, env 1's at 3; 1 popped
    assert os.path.getsize(tmp_path / "a.shmrckpt") == info.file_bytes

    if target == "existing":
        make_buffer(copy_name)
    r = shmreplay.load(tmp_path / "a.shmrckpt", copy_name)
    assert (r.name, r.created, r.notes) == (copy_name, target == "new", [])
    assert r.info.total_steps == info.total_steps
    copy = shmreplay.Buffer.open(copy_name)
    np.testing.assert_array_equal(copy.heads(), buf.heads())
    assert_same_steps(buf, copy)
    mine, theirs = buf.rate_limit_state(), copy.rate_limit_state()
    assert (theirs.limit, theirs.inserts, theirs.samples, theirs.error) == (
        mine.limit, mine.inserts, mine.samples, mine.error)
    # what only a checkpoint shows: the copy saved again holds the same counters, limiter and queues
    again = shmreplay.save(copy, tmp_path / "b.shmrckpt")
    assert again.learner == info.learner
    assert again.limiter == info.limiter
    assert again.max_priority == info.max_priority
    fields = ("first_step", "head", "claimed", "online_start", "weights", "queue_head", "queue_tail", "queued")
    assert [[getattr(e, f) for f in fields] for e in again.envs] == [[getattr(e, f) for f in fields]
                                                                      for e in info.envs]
    weights, episodes, sample = learner_view(buf, seed=7)
    weights_copy, episodes_copy, sample_copy = learner_view(copy, seed=7)
    np.testing.assert_array_equal(weights_copy, weights)
    assert len(set(weights.tolist())) > 2  # the priorities differ step to step
    assert episodes_copy == episodes and len(episodes) == 2
    for key in sample:
        np.testing.assert_array_equal(sample_copy[key], sample[key], err_msg=key)


def test_buffer_save_and_save_by_name_write_the_same_checkpoint_as_save(name, tmp_path):
    buf = make_buffer(name, rate_limit=None)
    with shmreplay.Writer(buf, [0, 1]) as w:
        push_steps(w, [0, 1], 0, 3)
    a = buf.save(tmp_path / "a.shmrckpt")
    b = shmreplay.save(name, str(tmp_path / "b.shmrckpt"))  # opened read-only by name
    assert [(e.first_step, e.head, e.data_crc) for e in a.envs] == [(e.first_step, e.head, e.data_crc) for e in b.envs]
    assert a.path == str(tmp_path / "a.shmrckpt")
    v = shmreplay.verify(tmp_path / "a.shmrckpt")
    assert (v.info.total_steps, v.info.file_bytes, v.notes) == (6, a.file_bytes, [])


def test_a_format_1_0_file_loads_with_a_note_naming_what_it_lacks(copy_name):
    assert shmreplay.verify(FORMAT_1_0).info.format == "1.0"
    r = shmreplay.load(FORMAT_1_0, copy_name)
    assert r.created and r.info.format == "1.0" and not r.info.holds_state
    assert r.info.priority_exponent is None
    assert len(r.notes) == 1
    assert "format 1.0" in r.notes[0] and "priorities" in r.notes[0] and "episode records" in r.notes[0], r.notes
    copy = shmreplay.Buffer.open(copy_name)
    np.testing.assert_array_equal(copy.heads(), [11, 5])
    for env, (first, head) in enumerate([(3, 11), (0, 5)]):
        start, data = copy.read_steps(env, 0, head)
        assert start == first
        steps = np.arange(first, head)
        np.testing.assert_array_equal(data["obs"], np.stack([np.full(len(steps), env), steps, steps * 0.5], 1))
        np.testing.assert_array_equal(data["act"], steps * 10 + env)
        np.testing.assert_array_equal(data["done"], steps % 4 == 3)
        np.testing.assert_array_equal(data["reward"], steps)


def test_a_target_whose_priorities_differ_is_refused_unless_allow_mismatch_which_converts_the_weights(
        name, copy_name, tmp_path):
    buf = make_buffer(name, rate_limit=None)
    with shmreplay.Writer(buf, [0, 1]) as w:
        push_steps(w, [0, 1], 0, 4)
    shmreplay.save(buf, tmp_path / "a.shmrckpt")
    target = make_buffer(copy_name, rate_limit=None, priority_exponent=0.8)
    with pytest.raises(shmreplay.SchemaMismatch, match="0.8"):
        shmreplay.load(tmp_path / "a.shmrckpt", copy_name)
    np.testing.assert_array_equal(target.heads(), [0, 0])  # refused before anything was written
    r = shmreplay.load(tmp_path / "a.shmrckpt", copy_name, allow_mismatch=True)
    assert not r.created
    assert any("allow_mismatch" in n for n in r.notes), r.notes
    with shmreplay.Sampler(target) as s:
        weights = s.priority_weights([0, 0, 0, 0], [0, 1, 2, 3])
    np.testing.assert_allclose(weights, (np.arange(4) + 1.0) ** 0.8, rtol=1e-5)  # (p^0.6)^(0.8 / 0.6)


def test_a_load_into_a_buffer_with_a_live_writer_is_refused_and_leaves_it_as_it_was(name, copy_name, tmp_path):
    buf = make_buffer(name)
    with shmreplay.Writer(buf, [0, 1]) as w:
        push_steps(w, [0, 1], 0, 4)
    shmreplay.save(buf, tmp_path / "a.shmrckpt")
    target = make_buffer(copy_name)
    with shmreplay.Writer(target, [1]) as w:
        push_steps(w, [1], 0, 2)
        with pytest.raises(shmreplay.LeaseHeld):
            shmreplay.load(tmp_path / "a.shmrckpt", copy_name)
    np.testing.assert_array_equal(target.heads(), [0, 2])


def test_save_replaces_only_a_checkpoint_unless_force(name, tmp_path):
    buf = make_buffer(name)
    other = tmp_path / "notes.txt"
    other.write_text("not a checkpoint")
    with pytest.raises(shmreplay.AlreadyExists, match="notes.txt"):
        shmreplay.save(buf, other)
    assert other.read_text() == "not a checkpoint"
    assert shmreplay.save(buf, other, force=True).total_steps == 0
    assert shmreplay.save(buf, other).total_steps == 0  # now a checkpoint: replaced
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]  # no temporary file left


def test_bad_arguments_and_bad_files_raise_the_packages_exceptions(name, tmp_path):
    buf = make_buffer(name)
    with shmreplay.Writer(buf, [0, 1]) as w:
        push_steps(w, [0, 1], 0, 8)
    with pytest.raises(shmreplay.NotFound):
        shmreplay.save(name + "-missing", tmp_path / "a.shmrckpt")
    with pytest.raises(shmreplay.InvalidArgument, match="Buffer or a buffer's name"):
        shmreplay.save(42, tmp_path / "a.shmrckpt")
    with pytest.raises(shmreplay.InvalidArgument, match="progress"):
        shmreplay.save(buf, tmp_path / "a.shmrckpt", progress=3)
    with pytest.raises(shmreplay.InvalidArgument, match="keep"):
        shmreplay.save_link(buf, tmp_path / "chain", keep=0)
    with pytest.raises(shmreplay.NotFound):
        shmreplay.verify(tmp_path / "missing.shmrckpt")
    with pytest.raises(shmreplay.NotFound):
        shmreplay.list_links(tmp_path / "missing")
    info = shmreplay.save(buf, tmp_path / "a.shmrckpt")
    data = bytearray((tmp_path / "a.shmrckpt").read_bytes())
    data[info.file_bytes // 2] ^= 0xFF
    (tmp_path / "bad.shmrckpt").write_bytes(bytes(data))
    with pytest.raises(shmreplay.Corrupt, match="bad.shmrckpt"):
        shmreplay.verify(tmp_path / "bad.shmrckpt")
    (tmp_path / "short.shmrckpt").write_bytes(bytes(data[:100]))
    with pytest.raises(shmreplay.Truncated):
        shmreplay.load(tmp_path / "short.shmrckpt", name + "-never")
    assert not shmreplay.Buffer.exists(name + "-never")


def test_a_progress_callable_sees_each_phase_and_what_it_raises_ends_a_save_without_a_trace(name, copy_name,
                                                                                            tmp_path):
    buf = make_buffer(name)
    with shmreplay.Writer(buf, [0, 1]) as w:
        push_steps(w, [0, 1], 0, 6)
    seen = []
    shmreplay.save(buf, tmp_path / "a.shmrckpt", progress=lambda *a: seen.append(a))
    assert seen[-1][0] == "saving" and seen[-1][1] == seen[-1][2] > 0

    def stop(phase, done, total):
        raise RuntimeError(f"stopped while {phase}")

    with pytest.raises(RuntimeError, match="stopped while saving"):
        shmreplay.save(buf, tmp_path / "b.shmrckpt", progress=stop)
    assert sorted(os.listdir(tmp_path)) == ["a.shmrckpt"]
    with pytest.raises(RuntimeError, match="stopped while verifying"):
        shmreplay.load(tmp_path / "a.shmrckpt", copy_name, progress=stop)
    assert not shmreplay.Buffer.exists(copy_name)
    # while a load writes an existing buffer, the callable's exception waits until the load is complete
    target = make_buffer(copy_name)
    phases = []

    def stop_loading(phase, done, total):
        phases.append(phase)
        if phase == "loading":
            raise RuntimeError("stopped while loading")

    with pytest.raises(RuntimeError, match="stopped while loading"):
        shmreplay.load(tmp_path / "a.shmrckpt", copy_name, progress=stop_loading)
    assert phases.count("loading") == 1  # not called again once it raised
    np.testing.assert_array_equal(target.heads(), buf.heads())
    assert_same_steps(buf, target)


def test_the_second_link_of_a_chain_holds_only_the_new_steps_and_load_dir_restores_the_newest(
        name, copy_name, tmp_path):
    chain = tmp_path / "chain"
    buf = make_buffer(name)
    with shmreplay.Writer(buf, [0, 1]) as w:
        push_steps(w, [0, 1], 0, 3)
        first = shmreplay.save_link(buf, chain)
        push_steps(w, [0], 3, 4)
        second = shmreplay.save_link(name, chain)
    assert first.whole and first.info.link_seq == 1 and first.info.self_contained
    assert [e.data_from for e in first.info.envs] == [0, 0]
    assert not second.whole and second.info.link_seq == 2 and not second.info.self_contained
    assert second.info.chain_id == first.info.chain_id != 0
    assert [(e.first_step, e.data_from, e.head) for e in second.info.envs] == [(0, 3, 7), (0, 3, 3)]
    assert second.record_bytes == 4 * buf.step_bytes
    assert second.removed == []
    links = shmreplay.list_links(chain)
    assert [(l.seq, l.chain_id, l.error) for l in links] == [(1, first.info.chain_id, None),
                                                               (2, first.info.chain_id, None)]
    assert second.chain_bytes == sum(l.file_bytes for l in links)
    v = shmreplay.verify(chain)
    assert (v.info.link_seq, v.notes) == (2, [])
    r = shmreplay.load(chain, copy_name)
    assert r.created and r.info.link_seq == 2
    copy = shmreplay.Buffer.open(copy_name)
    np.testing.assert_array_equal(copy.heads(), [7, 3])
    assert_same_steps(buf, copy)


def test_a_chain_keeps_the_newest_links_it_needs_and_skips_a_damaged_newest_link(name, copy_name, tmp_path):
    chain = tmp_path / "chain"
    buf = make_buffer(name, rate_limit=None)
    with shmreplay.Writer(buf, [0, 1]) as w:
        for n in range(5):
            push_steps(w, [0, 1], 20 * n, 20)  # each link: the whole window (the rings wrapped)
            shmreplay.save_link(buf, chain, keep=2)
    links = shmreplay.list_links(chain)
    assert [l.seq for l in links] == [4, 5]
    pathlib.Path(links[-1].path).write_bytes(b"SHMRCKPT damaged")
    v = shmreplay.verify(chain)
    assert v.info.link_seq == 4 and len(v.notes) == 1 and "link 5" in v.notes[0], v.notes
    r = shmreplay.load(chain, copy_name)
    assert r.info.link_seq == 4 and r.notes == v.notes
