"""A sample without out= fills again a batch this Sampler made earlier once nothing else refers to it or to any of
its arrays (no fresh memory, so no page faults), and never one that is still in use."""
import resource
import sys

import numpy as np
import pytest

import shmreplay
from conftest import check_batch, payload
from stamped import SCHEMA as STACKED_SCHEMA, Model, push_steps


def fill(buffer, steps):
    with shmreplay.Writer(buffer, list(range(buffer.num_envs))) as w:
        for t in range(steps):
            ids = np.arange(buffer.num_envs)
            w.push(ids, payload(ids, [t] * buffer.num_envs))


def data_address(array):
    return array.__array_interface__["data"][0]


def test_a_batch_dropped_before_the_next_call_is_filled_again_with_the_new_rows(buffer):
    fill(buffer, 12)
    s = shmreplay.Sampler(buffer, seed=1)
    b = s.sample("replay", 32, 4, power=1.0)
    first_id, first_obs = id(b), data_address(b["body"])
    first_rows = (b.env_ids.copy(), b.starts.copy())
    del b
    again = s.sample("replay", 32, 4, power=1.0)
    assert id(again) == first_id and data_address(again["body"]) == first_obs  # the same batch, its arrays reused
    assert not check_batch(again)  # holds this call's rows, whole
    assert not (np.array_equal(again.env_ids, first_rows[0]) and np.array_equal(again.starts, first_rows[1]))


def test_a_loop_that_rebinds_its_batch_alternates_between_two_batches(buffer):
    fill(buffer, 12)
    s = shmreplay.Sampler(buffer, seed=2)
    seen = set()
    batch = None
    for _ in range(10):
        batch = s.sample("replay", 16, 2)  # the previous batch is still bound while this call runs
        seen.add(id(batch))
        assert not check_batch(batch)
    assert len(seen) == 2


def test_a_loop_that_drops_each_batch_gets_the_same_batch_every_call(buffer):
    # Two batches were made (a rebinding loop); a loop that drops each batch before its next call then gets the
    # newest one again every time (its lines may still be in the cache), not the two in turn.
    fill(buffer, 12)
    s = shmreplay.Sampler(buffer, seed=10)
    a = s.sample("replay", 16, 2)
    b = s.sample("replay", 16, 2)
    newest = id(b)
    del a, b
    for _ in range(4):
        assert id(s.sample("replay", 16, 2)) == newest


def test_a_batch_or_an_array_still_in_use_is_never_filled_again(buffer):
    fill(buffer, 12)
    s = shmreplay.Sampler(buffer, seed=3)
    kept = s.sample("replay", 8, 4)  # the batch itself is held
    kept_copy = {k: kept[k].copy() for k in kept.keys()}
    body = s.sample("replay", 8, 4)["body"]  # only one array of the batch is held
    body_copy = body.copy()
    view = s.sample("replay", 8, 4).mask[1:]  # a view of one array
    view_copy = view.copy()
    fields = s.sample("replay", 8, 4).fields  # the dict of its arrays
    fields_copy = {k: v.copy() for k, v in fields.items()}
    exported = memoryview(s.sample("replay", 8, 4).starts)  # a buffer export of one array
    exported_copy = bytes(exported)
    for _ in range(20):
        s.sample("replay", 8, 4)
        s.sample_transitions("replay", 8)
    assert all(np.array_equal(kept[k], kept_copy[k]) for k in kept.keys())
    assert np.array_equal(body, body_copy) and np.array_equal(view, view_copy)
    assert all(np.array_equal(fields[k], fields_copy[k]) for k in fields)
    assert bytes(exported) == exported_copy


def test_a_batch_handed_to_torch_is_not_filled_while_the_tensors_live(buffer):
    torch = pytest.importorskip("torch")
    import shmreplay.torch as st
    fill(buffer, 12)
    s = shmreplay.Sampler(buffer, seed=4)
    tensors = st.as_tensors(s.sample("replay", 8, 4))
    copies = {k: v.clone() for k, v in tensors.fields.items()}
    mask, starts = tensors.mask.clone(), tensors.starts.clone()
    for _ in range(20):
        s.sample("replay", 8, 4)
    assert copies and all(torch.equal(tensors.fields[k], copies[k]) for k in copies)
    assert torch.equal(tensors.mask, mask) and torch.equal(tensors.starts, starts)


def test_a_batch_handed_to_jax_is_not_filled_while_the_arrays_live(buffer):
    pytest.importorskip("jax")
    import shmreplay.jax as sj
    fill(buffer, 12)
    s = shmreplay.Sampler(buffer, seed=8)
    arrays = sj.as_arrays(s.sample("replay", 8, 4))  # shares the batch's memory on the CPU
    copies = {k: np.array(v) for k, v in arrays.fields.items()}
    for _ in range(20):
        s.sample("replay", 8, 4)
    assert copies and all(np.array_equal(np.array(arrays.fields[k]), copies[k]) for k in copies)


def test_a_call_of_another_shape_gets_a_batch_of_its_own(buffer):
    fill(buffer, 12)
    s = shmreplay.Sampler(buffer, seed=5)
    a = s.sample("replay", 8, 4)
    a_body = data_address(a["body"])
    del a
    b = s.sample("replay", 8, 2)
    assert b.sequence_length == 2 and b.rows == 8 and b["body"].shape[1] == 2 and data_address(b["body"]) != a_body
    assert not check_batch(b)


def test_a_dropped_batch_of_stacked_rows_is_filled_again_with_the_new_rows_byte_for_byte(name):
    # Stacked fields come out as ordinary arrays: the reuse is the same, and the refilled stacks are exact.
    buffer = shmreplay.Buffer.create(name, 4, 16, STACKED_SCHEMA)
    model = Model(buffer)
    rng = np.random.default_rng(9)
    with shmreplay.Writer(buffer, [0, 1, 2, 3]) as w:
        for _ in range(40):
            push_steps(w, model, [0, 1, 2, 3], "push", rng, p_done=0.1, p_jump=0.05)
    s = shmreplay.Sampler(buffer, seed=9)
    seen = set()
    batch = None
    for _ in range(8):
        batch = s.sample("replay", 32, 4, power=1.0)
        seen.add((id(batch), data_address(batch["obs"])))
        assert model.check(batch) == []
    assert len(seen) == 2
    b = s.sample_transitions("replay", 64)
    first = (id(b), data_address(b["obs"]), data_address(b["aux"]))
    del b
    again = s.sample_transitions("replay", 64)
    assert (id(again), data_address(again["obs"]), data_address(again["aux"])) == first
    assert model.check(again) == []
    s.close()


@pytest.mark.parametrize("schema", ["obs:u8[4,84,84] done:bool", "obs:u8[4,84,84]:stack=0 done:bool"])
def test_repeated_samples_of_a_large_batch_without_out_fault_in_no_fresh_pages(name, schema):
    # A 40 MB batch is over glibc's 32 MiB mmap threshold: made afresh, each call would map and fault in ~10,000
    # pages. Reused, the calls after the first two fault in none (a bound far below one batch's pages), stacked or
    # not.
    buffer = shmreplay.Buffer.create(name, num_envs=2, capacity=64, schema=schema)
    with shmreplay.Writer(buffer, [0, 1]) as w:
        for _ in range(64):
            w.push([0, 1], {"obs": np.zeros((2, 4, 84, 84), np.uint8), "done": np.zeros(2, bool)})
    s = shmreplay.Sampler(buffer, seed=6)
    batch = s.sample("replay", 1400, 1)
    batch = s.sample("replay", 1400, 1)
    pages = batch["obs"].nbytes // 4096
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(6):
        batch = s.sample("replay", 1400, 1)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < pages // 4, f"{faults} page faults in 6 calls; one batch has {pages} pages"
    s.close()


def test_close_lets_the_kept_batches_go(buffer):
    fill(buffer, 12)
    s = shmreplay.Sampler(buffer, seed=7)
    b = s.sample("replay", 8, 4)
    held = sys.getrefcount(b)  # the sampler's list, b, getrefcount's argument
    s.close()
    assert sys.getrefcount(b) == held - 1
