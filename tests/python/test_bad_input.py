"""Bad input to the Python API: an integer argument out of range is one InvalidArgument naming the argument, its
value and the range (lib/python/int_arg.hpp), never pybind11's list of signatures; the Checkpointer checks its
period and reports whatever ends its thread; a chain directory of another user is refused unless
allow_other_owner=True, and the files a save does not take are in LinkResult.notes."""
import os
import time

import numpy as np
import pytest

import shmreplay

U64_MAX = 2 ** 64 - 1


@pytest.fixture
def objects(name, tmp_path):
    """A buffer of 2 learner slots, a Writer of env 0 and a Sampler of rank 0, closed afterwards."""
    buf = shmreplay.Buffer.create(name, 2, 8, "o:u8", max_learners=2)
    w = shmreplay.Writer(buf, [0])
    s = shmreplay.Sampler(buf, seed=0, rank=0)
    file = tmp_path / "one.shmrckpt"
    shmreplay.save(buf, file)
    yield dict(name=name, buf=buf, w=w, s=s, file=file, dir=tmp_path / "chain")
    s.close()
    w.close()


CASES = [
    ("Buffer.create(): num_envs is -1, expected 0 to 18446744073709551615",
     lambda o: shmreplay.Buffer.create(o["name"] + "-x", -1, 8, "o:u8")),
    ("Buffer.create(): capacity is 18446744073709551616, expected 0 to 18446744073709551615",
     lambda o: shmreplay.Buffer.create(o["name"] + "-x", 1, 2 ** 64, "o:u8")),
    ("Buffer.create(): mode is -1, expected 0 to 4294967295",
     lambda o: shmreplay.Buffer.create(o["name"] + "-x", 1, 8, "o:u8", mode=-1)),
    ("Buffer.create(): max_learners is -1, expected 1 to 64",
     lambda o: shmreplay.Buffer.create(o["name"] + "-x", 1, 8, "o:u8", max_learners=-1)),
    ("Buffer.create(): stack_restarts is -1, expected 0 to 18446744073709551615",
     lambda o: shmreplay.Buffer.create(o["name"] + "-x", 1, 8, "o:u8[2,2]:stack=0", stack_restarts=-1)),
    ("Buffer.create(): episode_queue_capacity is -3",
     lambda o: shmreplay.Buffer.create(o["name"] + "-x", 1, 8, "o:u8 d:bool", done="d", episode_queue_capacity=-3)),
    ("Buffer.read_steps(): env is -1", lambda o: o["buf"].read_steps(-1, 0, 1)),
    ("Sampler(): rank is -1, expected 0 to 63", lambda o: shmreplay.Sampler(o["buf"], rank=-1)),
    ("Sampler(): rank is 18446744073709551616", lambda o: shmreplay.Sampler(o["buf"], rank=2 ** 64)),
    ("Sampler(): seed is -1, expected 0 to 18446744073709551615",
     lambda o: shmreplay.Sampler(o["buf"], seed=-1, rank=1)),
    ("Sampler(): seed is 18446744073709551616", lambda o: shmreplay.Sampler(o["buf"], seed=2 ** 64, rank=1)),
    ("Sampler(): max_retry_rounds is -1", lambda o: shmreplay.Sampler(o["buf"], max_retry_rounds=-1, rank=1)),
    ("Sampler.seed(): seed is -5", lambda o: o["s"].seed(-5)),
    ("Sampler.sizes(): env is -1", lambda o: o["s"].sizes(-1)),
    ("Sampler.try_update(): step is -2", lambda o: o["s"].try_update(0, -2, {})),
    ("Sampler.wait(): min_steps is -1", lambda o: o["s"].wait("replay", -1, 0.0)),
    ("Sampler.new_batch(): rows is -4", lambda o: o["s"].new_batch(-4, 1)),
    ("Writer.head(): env is -1", lambda o: o["w"].head(-1)),
    ("Writer.range(): first is -1", lambda o: shmreplay.Writer.range(o["buf"], -1, 1)),
    ("Writer.reserve(): env is 1180591620717411303424", lambda o: o["w"].reserve(2 ** 70)),
    ("Field(): shape is -2", lambda o: shmreplay.Field("o", "u8", (3, -2))),
    ("Field(): stack_axis is 100000000000000000000", lambda o: shmreplay.Field("o", "u8", (3,), stack_axis=10 ** 20)),
    ("RateLimit(): min_size_to_sample is -1", lambda o: shmreplay.RateLimit(min_size_to_sample=-1)),
    ("save_link(): keep is 0, expected 1 to 4294967295",
     lambda o: shmreplay.save_link(o["buf"], o["dir"], keep=0)),
    ("save_link(): keep is 4294967296", lambda o: shmreplay.save_link(o["buf"], o["dir"], keep=2 ** 32)),
    ("load(): mode is -1", lambda o: shmreplay.load(o["file"], o["name"] + "-x", mode=-1)),
]


@pytest.mark.parametrize("message,call", CASES, ids=[m.split(" is ")[0] for m, _ in CASES])
def test_an_integer_argument_out_of_range_is_one_invalid_argument_naming_it_its_value_and_the_range(objects, message,
                                                                                                  call):
    with pytest.raises(shmreplay.InvalidArgument) as e:
        call(objects)
    assert message in str(e.value)
    assert "incompatible" not in str(e.value) and "\n" not in str(e.value)
    assert not shmreplay.Buffer.exists(objects["name"] + "-x")


def test_integers_in_range_still_go_through_as_any_int_numpy_ints_and_bools_and_a_float_is_still_a_type_error(
        objects):
    buf = objects["buf"]
    with shmreplay.Sampler(buf, seed=np.uint64(U64_MAX), rank=np.int64(1)) as s:
        assert s.rank == 1
        s.seed(U64_MAX)
    with shmreplay.Sampler(buf, rank=True) as s:
        assert s.rank == 1
    with pytest.raises(TypeError):
        shmreplay.Sampler(buf, rank=1.0)
    with pytest.raises(shmreplay.InvalidArgument) as e:
        shmreplay.Sampler(buf, seed=10 ** 100, rank=1)
    assert len(str(e.value)) < 200 and "(101 digits)" in str(e.value)


@pytest.mark.parametrize("kw,word", [(dict(every=1e300), "every is 1e+300 seconds, expected 0.001 to 86400"),
                                     (dict(every=1e-9), "every is 1e-09 seconds, expected 0.001 to 86400"),
                                     (dict(every=float("nan")), "every is nan seconds"),
                                     (dict(keep=2 ** 32), "keep is 4294967296, expected 1 to 4294967295")])
def test_the_checkpointer_refuses_a_period_or_keep_its_thread_cannot_run_with(objects, kw, word):
    with pytest.raises(shmreplay.InvalidArgument) as e:
        shmreplay.Checkpointer(objects["buf"], objects["dir"], **kw)
    assert word in str(e.value)


@pytest.mark.parametrize("with_on_error", [False, True])
def test_an_exception_that_ends_the_checkpointer_thread_outside_a_save_is_its_error_a_failure_and_raised_by_close(
        objects, monkeypatch, with_on_error):
    def refuse(increment):
        raise RuntimeError("no nice today")
    monkeypatch.setattr(shmreplay._checkpointer.os, "nice", refuse)  # the thread's first call
    seen = []
    c = shmreplay.Checkpointer(objects["buf"], objects["dir"], every=0.01,
                               on_error=seen.append if with_on_error else None)
    c.start()
    deadline = time.monotonic() + 30
    while c.error is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert isinstance(c.error, RuntimeError) and c.failures == 1 and c.saves == 0
    if with_on_error:
        assert seen == [c.error]
        c.close()
    else:
        with pytest.raises(RuntimeError, match="no nice today"):
            c.close()


def test_save_link_names_the_files_it_does_not_take_in_its_notes(objects):
    chain = objects["dir"]
    shmreplay.save_link(objects["buf"], chain)
    odd = chain / "link-10000000000000000000.shmrckpt"
    odd.write_bytes(b"")
    r = shmreplay.save_link(objects["buf"], chain)
    assert r.info.link_seq == 2
    assert len(r.notes) == 1 and str(odd) in r.notes[0]
    assert any(str(odd) in n for n in shmreplay.verify(chain).notes)


def test_a_chain_directory_of_another_user_is_refused_unless_allow_other_owner(objects):
    chain = objects["dir"]
    chain.mkdir()
    try:
        os.chown(chain, 65534, -1)
    except PermissionError:
        pytest.skip("chown needs root")
    for call in (lambda: shmreplay.save_link(objects["buf"], chain), lambda: shmreplay.list_links(chain),
                 lambda: shmreplay.Checkpointer(objects["buf"], chain).save_now()):
        with pytest.raises(shmreplay.PermissionDenied, match="uid 65534"):
            call()
    assert os.listdir(chain) == []
    c = shmreplay.Checkpointer(objects["buf"], chain, allow_other_owner=True)
    assert c.save_now().info.link_seq == 1
    assert shmreplay.save_link(objects["buf"], chain, allow_other_owner=True).info.link_seq == 2
    assert [l.seq for l in shmreplay.list_links(chain, allow_other_owner=True)] == [1, 2]
    assert shmreplay.verify(chain, allow_other_owner=True).info.link_seq == 2
    with pytest.raises(shmreplay.PermissionDenied):
        shmreplay.load(chain, objects["name"] + "-x")
    assert shmreplay.load(chain, objects["name"] + "-x", allow_other_owner=True).info.link_seq == 2
    shmreplay.Buffer.remove(objects["name"] + "-x")
