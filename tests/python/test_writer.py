"""Writer: leases, batched pushes shaped like envpool's recv, single pushes, zero-copy reservations, errors."""
import gc
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import shmreplay
from conftest import check_batch, payload


def peek_all(buffer):
    with shmreplay.Sampler(buffer) as s:
        return s.peek()


def test_a_push_writes_one_step_for_each_listed_env_in_any_order(buffer):
    w = shmreplay.Writer(buffer, [0, 1, 2, 3])
    w.push(np.array([2, 0, 3], dtype=np.int32), payload([2, 0, 3], [0, 0, 0]))  # envpool's int32 env ids
    w.push([3], payload([3], [1]))
    w.push(np.array([1, 3], dtype=np.int64), payload([1, 3], [0, 2]))
    assert list(buffer.heads()) == [1, 1, 1, 3]
    assert [w.head(e) for e in range(4)] == [1, 1, 1, 3]
    p = peek_all(buffer)
    assert p.mask.all()
    assert list(p["head"][:, 0, 1]) == [0, 0, 0, 2]
    assert check_batch(p) == []


def test_non_contiguous_and_castable_arrays_are_accepted(buffer):
    w = shmreplay.Writer(buffer, [0, 1])
    d = payload([0, 1], [0, 0])
    wide = np.zeros((2, 10), dtype=np.float32)
    wide[:, ::2] = d["body"]
    d["body"] = wide[:, ::2]  # a strided view
    assert not d["body"].flags.c_contiguous
    d["half"] = d["half"].astype(np.float64)  # same kind: converted
    w.push([0, 1], d)
    assert check_batch(peek_all(buffer)) == []


def test_push_one_takes_scalars_and_lists(name):
    buf = shmreplay.Buffer.create(name, 2, 8, "obs:f32[3] action:i32 done:bool mark:u16[2]")
    w = shmreplay.Writer(buf, [1])
    w.push_one(1, {"obs": [1.5, 2.5, 3.5], "action": 7, "done": True, "mark": [1, 2]})
    p = peek_all(buf)
    assert list(p.mask[:, 0]) == [False, True]
    assert p["obs"][1, 0].tolist() == [1.5, 2.5, 3.5]
    assert p["action"][1, 0] == 7 and p["done"][1, 0] and p["mark"][1, 0].tolist() == [1, 2]


def test_wrong_arrays_are_refused_with_field_expected_and_actual(buffer):
    w = shmreplay.Writer(buffer, [0, 1])
    good = payload([0, 1], [0, 0])
    with pytest.raises(shmreplay.SizeMismatch, match=r"'body'.*shape \(2, 5\).*\(2, 4\)"):
        w.push([0, 1], {**good, "body": np.zeros((2, 4), np.float32)})
    with pytest.raises(shmreplay.SizeMismatch, match=r"'head'.*uint64.*float64"):
        w.push([0, 1], {**good, "head": np.zeros((2, 3))})
    with pytest.raises(shmreplay.SizeMismatch, match=r"'brain'.*bfloat16 bits"):
        w.push([0, 1], {**good, "brain": np.zeros(2, np.float32)})
    with pytest.raises(shmreplay.SizeMismatch, match="no data for field 'flag'"):
        w.push([0, 1], {k: v for k, v in good.items() if k != "flag"})
    with pytest.raises(shmreplay.InvalidArgument, match="'extra' is not a field"):
        w.push([0, 1], {**good, "extra": np.zeros(2)})
    with pytest.raises(shmreplay.InvalidArgument, match="env ids must be"):
        w.push(np.array([0.0, 1.0]), good)
    assert list(buffer.heads()) == [0, 0, 0, 0]  # nothing was written


def test_env_ids_out_of_range_or_not_leased_are_refused(buffer):
    w = shmreplay.Writer(buffer, [0, 1])
    with pytest.raises(shmreplay.EnvOutOfRange, match="env id 9 at position 1"):
        w.push([0, 9], payload([0, 0], [0, 0]))
    with pytest.raises(IndexError):
        w.push([-1], payload([0], [0]))
    with pytest.raises(shmreplay.EnvOutOfRange, match="env id 18446744073709551615 at position 0"):
        w.push(np.array([2**64 - 1], np.uint64), payload([0], [0]))  # reported as given, not as -1
    with pytest.raises(shmreplay.NotLeased, match="2"):
        w.push([2], payload([2], [0]))
    with pytest.raises(shmreplay.EnvOutOfRange):
        shmreplay.Writer(buffer, [4])
    assert list(buffer.heads()) == [0, 0, 0, 0]


def test_a_second_writer_for_a_leased_env_gets_the_owners_pid(buffer, name):
    w = shmreplay.Writer.range(buffer, 0, 2)
    assert list(w.env_ids) == [0, 1]
    code = (f"import shmreplay\nb = shmreplay.Buffer.open('{name}')\n"
            "try:\n    shmreplay.Writer(b, [1])\nexcept shmreplay.LeaseHeld as e:\n    print('LeaseHeld', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "LeaseHeld" in out.stdout and str(os.getpid()) in out.stdout
    w.close()  # released: another process may lease now
    code = f"import shmreplay\nb = shmreplay.Buffer.open('{name}')\nshmreplay.Writer(b, [1])\nprint('leased')\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=60)
    assert out.returncode == 0 and "leased" in out.stdout, out.stderr


def test_a_closed_writer_says_so(buffer):
    with shmreplay.Writer(buffer, [0]) as w:
        pass
    with pytest.raises(shmreplay.InvalidArgument, match="closed"):
        w.push([0], payload([0], [0]))
    shmreplay.Writer(buffer, [0])  # the lease was released by the with block


def test_a_reserved_step_is_filled_in_place_and_published_at_commit(buffer):
    w = shmreplay.Writer(buffer, [2])
    d = payload([2], [0])
    with w.reserve(2) as slot:
        assert (slot.env, slot.step) == (2, 0)
        for k, v in d.items():
            slot[k][...] = v[0]
        assert buffer.heads()[2] == 0  # not yet visible
    assert slot.state == "committed" and buffer.heads()[2] == 1
    assert check_batch(peek_all(buffer)) == []
    with pytest.raises(shmreplay.InvalidArgument, match="committed or abandoned"):
        slot.commit()


def test_a_reservation_abandoned_by_an_exception_is_never_published(buffer):
    w = shmreplay.Writer(buffer, [1])
    with pytest.raises(RuntimeError):
        with w.reserve(1) as slot:
            slot["body"][...] = 1
            raise RuntimeError("the env crashed mid-step")
    assert slot.state == "abandoned" and buffer.heads()[1] == 0
    w.push([1], payload([1], [0]))  # the next step takes index 0
    p = peek_all(buffer)
    assert p.mask[1, 0] and p["head"][1, 0, 1] == 0 and check_batch(p) == []


def test_closing_a_writer_abandons_its_open_reservations(buffer):
    w = shmreplay.Writer(buffer, [0])
    slot = w.reserve(0)
    slot["body"][...] = 5
    w.close()
    assert slot.state == "abandoned"
    with pytest.raises(shmreplay.InvalidArgument, match="committed or abandoned"):
        slot.commit()
    del slot
    assert buffer.heads()[0] == 0
    w2 = shmreplay.Writer(buffer, [0])
    w2.push([0], payload([0], [0]))
    assert check_batch(peek_all(buffer)) == []


def test_env_ids_must_be_a_one_dimensional_integer_array(buffer):
    w = shmreplay.Writer(buffer, [0])
    with pytest.raises(shmreplay.InvalidArgument, match="1-d array"):
        w.push(0, payload([0], [0]))
    with pytest.raises(shmreplay.InvalidArgument, match="1-d array"):
        w.push([[0]], payload([0], [0]))


def test_python_ints_go_into_any_integer_field_but_only_in_range(name):
    buf = shmreplay.Buffer.create(name, 1, 8, "mark:u8[2]")
    w = shmreplay.Writer(buf, [0])
    w.push_one(0, {"mark": [1, 255]})
    with pytest.raises(shmreplay.InvalidArgument, match=r"'mark'.*out of the range of uint8"):
        w.push_one(0, {"mark": [1, 256]})
    with pytest.raises(shmreplay.InvalidArgument, match="out of the range"):
        w.push_one(0, {"mark": [-1, 0]})
    assert list(buf.heads()) == [1]


@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called")  # JAX, imported by another test, warns; the child never uses it
def test_a_writer_inherited_through_fork_refuses_to_push_and_the_parent_keeps_its_lease(buffer):
    w = shmreplay.Writer(buffer, [0])
    w.push([0], payload([0], [0]))
    pid = os.fork()
    if pid == 0:  # the child: the Writer's lease is the parent's
        code = 1
        try:
            w.push([0], payload([0], [1]))
        except shmreplay.NotLeased as e:
            code = 0 if "fork" in str(e) else 2
        except BaseException:
            code = 3
        w.close()  # must not release the parent's lease
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    w.push([0], payload([0], [1]))  # still ours
    assert buffer.heads()[0] == 2
    assert lease_refused_to_another_process(buffer.name, 0)


def lease_refused_to_another_process(name, env):
    """Whether a new Python process gets LeaseHeld for `env` of buffer `name`."""
    code = (f"import shmreplay\ntry:\n    shmreplay.Writer(shmreplay.Buffer.open({name!r}), [{env}])\n"
            "except shmreplay.LeaseHeld:\n    raise SystemExit(7)\n")
    return subprocess.run([sys.executable, "-c", code], env=os.environ, timeout=60).returncode == 7


def test_integers_out_of_a_fields_range_are_refused_by_every_push_path_and_nothing_is_written(name):
    buf = shmreplay.Buffer.create(name, 2, 4, "a:i32 b:u8")
    w = shmreplay.Writer(buf, [0, 1])
    big = np.array([2**40 + 5, 1], dtype=np.int64)
    for call in (lambda: w.push([0, 1], {"a": big, "b": np.array([1, 2], np.uint8)}),
                 lambda: w.push([0, 1], {"a": [2**40 + 5, 1], "b": [1, 2]}),
                 lambda: w.push([0, 1], {"a": np.array([1, 2]), "b": np.array([-1, 2], np.int16)}),
                 lambda: w.push_one(0, {"a": 2**40 + 5, "b": 1}),
                 lambda: w.push_one(0, {"a": np.int64(2**40 + 5), "b": 1}),
                 lambda: w.push_one(0, {"a": 1, "b": np.array(256, np.int64)})):
        with pytest.raises(shmreplay.InvalidArgument, match=r"out of the range of (int32|uint8)"):
            call()
    assert list(buf.heads()) == [0, 0]
    w.push([0, 1], {"a": np.array([-2**31, 2**31 - 1], np.int64), "b": np.array([0, 255], np.int64)})  # in range
    b = shmreplay.Sampler(buf).peek()
    assert b["a"][:, 0].tolist() == [-2**31, 2**31 - 1] and b["b"][:, 0].tolist() == [0, 255]
    with shmreplay.Sampler(buf) as s:  # the learner's in-place update follows the same rule
        with pytest.raises(shmreplay.InvalidArgument, match=r"out of the range of int32"):
            s.update([0], [0], {"a": np.array([2**40 + 5])})
        assert s.peek()["a"][0, 0] == -2**31



# The child's main thread holds the GIL (a long switch interval, busy loops) from the moment the parent removes
# the rate limiter that holds the reserve back: the reserve, woken, takes the step and waits for the GIL, and the
# main thread's close() runs in that window.
RESERVE_RACING_CLOSE = r"""
import sys, threading, time, shmreplay
buf = shmreplay.Buffer.open({name!r})
w = shmreplay.Writer(buf, [0], wait_for_rate_limit=True, rate_limit_timeout=60)
outcome = []

def reserve():
    try:
        slot = w.reserve(0)
    except shmreplay.InvalidArgument as e:
        outcome.append(str(e))
        return
    outcome.append(slot.state)
    for field in ("a", "b", "c", "d"):
        slot[field][...] = 7  # views of the ring slot, in the mapping (the Buffer outlives the slot)

sys.setswitchinterval(100)
t = threading.Thread(target=reserve)
t.start()
while buf.rate_limit_state().writer_waiters == 0:
    time.sleep(0.001)
print("waiting", flush=True)
while buf.rate_limit is not None:  # the GIL held from here to t.join()
    pass
start = time.monotonic()
while time.monotonic() - start < 0.05:
    pass
w.close()
t.join()
print("outcome", outcome, flush=True)
"""


def test_a_reserve_that_close_overtakes_says_the_writer_is_closed(name):
    # close() could run between the reservation (made without the GIL) and the making of the slot's arrays, which
    # then read the destroyed StepSlot and its freed Writer: writing them crashed the interpreter (hence a child
    # process), or the slot came back already abandoned.
    for _ in range(3):
        buf = shmreplay.Buffer.create(name, 2, 8, "a:u64 b:f32[3] c:u8[5] d:i16",
                                      rate_limit=shmreplay.RateLimit.ratio(1.0, 2, 4.0))
        with shmreplay.Writer(buf, [0, 1]) as w:
            for _ in range(3):
                w.push([0, 1], {"a": np.zeros(2, np.uint64), "b": np.zeros((2, 3), np.float32),
                                "c": np.zeros((2, 5), np.uint8), "d": np.zeros(2, np.int16)})
        child = subprocess.Popen([sys.executable, "-c", RESERVE_RACING_CLOSE.format(name=name)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ)
        try:
            assert child.stdout.readline() == "waiting\n"
            buf.rate_limit = None  # wakes the reserve
            out, err = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == 0, (child.returncode, out, err[-3000:])
        # closed first (the window was hit), or the slot was made before close(): never a slot closed under it
        assert ("outcome ['reserve: this Writer is closed']" in out or "outcome ['open']" in out), (out, err)
        del buf
        shmreplay.Buffer.remove(name)


@pytest.mark.parametrize("dtype,change", [(np.int32, "ids"), (np.int64, "ids"), (np.int64, "priorities")])
def test_a_push_uses_the_env_ids_and_priorities_it_checked_when_another_thread_changes_them(name, dtype, change):
    # The push waits for the rate limiter (the GIL released) while this thread changes its arrays (int32 and int64
    # ids are read in place): it used to read them again after the wait, and wrote its step into env 1's slot
    # while publishing env 0's (an id of 10**9: outside the mapping), or put the NaN priority into the tree.
    buf = shmreplay.Buffer.create(name, 2, 8, "x:u64", priority_exponent=0.5,
                                  rate_limit=shmreplay.RateLimit.ratio(1.0, 2, 4.0))
    w = shmreplay.Writer(buf, [0, 1], wait_for_rate_limit=True, rate_limit_timeout=60)
    for _ in range(3):
        w.push([0, 1], {"x": np.zeros(2, np.uint64)})
    ids = np.array([0], dtype)
    priorities = np.array([4.0], np.float32)
    errors = []

    def waiting_push():
        try:
            w.push(ids, {"x": np.array([77], np.uint64)}, priorities=priorities)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    pusher = threading.Thread(target=waiting_push)
    pusher.start()
    deadline = time.monotonic() + 30
    while buf.rate_limit_state().writer_waiters == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    if change == "ids":
        ids[0] = 1
    else:
        priorities[0] = np.nan
    with shmreplay.Sampler(buf, seed=1) as s:
        s.sample_transitions("replay", 4, rate_limit_timeout=0)  # lets the push in
        pusher.join()
        assert errors == []
        assert list(buf.heads()) == [4, 3]
        newest = s.peek()
        assert newest.starts.tolist() == [3, 2]
        # env 0's step 3 holds what was pushed, with priority 4 (weight 4 ** 0.5); no NaN in either env's tree
        assert (newest["x"][:, 0].tolist(), s.priority_weights([0], [3]).tolist()) == ([77, 0], [2.0])
        assert np.isfinite(s.total_weight("replay", 1))


def test_a_writer_that_reserved_steps_is_freed_with_its_leases_once_unreferenced(buffer):
    # A StepSlot kept its arrays, whose base was the StepSlot: a cycle the garbage collector never sees (pybind11
    # objects are not tracked), so every reservation kept its Writer, and the Writer its leases, to the end of
    # the process.
    w = shmreplay.Writer(buffer, [0, 1])
    with w.reserve(0) as slot:
        slot["body"][...] = 1
        body = slot["body"]
    abandoned = w.reserve(1)
    assert abandoned.fields["body"].shape == (5,)
    del w, slot, abandoned
    assert body.base is not None  # a view: it keeps the mapping (and the Writer) alive while it lives
    del body
    gc.collect()
    w2 = shmreplay.Writer(buffer, [0, 1])  # the leases were released: LeaseHeld before
    assert list(buffer.heads()) == [1, 0, 0, 0]
    w2.close()
