"""shmreplay.Journal (shmreplay/journal.hpp): on its thread it keeps a buffer durable while a Python writer pushes,
stop() writes a last link that load restores whole, a second journal is refused, and a closed one gives its lease
back."""
import threading

import numpy as np
import pytest

import shmreplay
from conftest import PAYLOAD_SCHEMA, payload


def test_a_journal_thread_keeps_a_pushing_buffer_durable_and_load_restores_every_step_pushed_before_stop(
        name, copy_name, tmp_path):
    buf = shmreplay.Buffer.create(name, 2, 4096, PAYLOAD_SCHEMA)
    chain = tmp_path / "chain"
    journal = shmreplay.Journal(buf, chain, bound=0.2)
    assert journal.bound == pytest.approx(0.2)
    journal.start()
    assert journal.running
    pushed = 0
    with shmreplay.Writer(buf, [0, 1]) as w:
        stop = threading.Event()
        threading.Timer(0.6, stop.set).start()
        while not stop.is_set():
            w.push(np.array([0, 1]), payload([0, 1], [pushed, pushed]))
            pushed += 1
    journal.stop()
    stats = journal.stats()
    assert stats["links"] >= 2 and stats["failures"] == 0
    journal.close()
    result = shmreplay.load(chain, copy_name)
    assert [e.head for e in result.info.envs] == [pushed, pushed]
    copy = shmreplay.Buffer.open(copy_name)
    first, steps = copy.read_steps(1, 0, pushed)
    assert first == max(0, pushed - 4096)  # the ring's newest steps
    assert np.array_equal(steps["head"][:, 1], np.arange(first, pushed, dtype=np.uint64))


def test_a_second_journal_is_refused_while_the_first_holds_the_lease_and_taken_after_close(name, tmp_path):
    shmreplay.Buffer.create(name, 1, 16, PAYLOAD_SCHEMA)
    first = shmreplay.Journal(name, tmp_path / "a")
    with pytest.raises(shmreplay.LeaseHeld, match="a buffer has one journal at a time"):
        shmreplay.Journal(name, tmp_path / "b")
    first.close()
    with pytest.raises(shmreplay.InvalidArgument, match="is closed"):
        first.start()
    with shmreplay.Journal(name, tmp_path / "b", bound=0.5) as second:
        assert second.running
    assert not second.running


def test_write_link_returns_what_the_link_holds_and_a_bound_out_of_range_is_refused(name, tmp_path):
    buf = shmreplay.Buffer.create(name, 1, 16, PAYLOAD_SCHEMA)
    with pytest.raises(shmreplay.InvalidArgument, match="the bound is 0 s"):
        shmreplay.Journal(buf, tmp_path / "c", bound=0.0)
    with shmreplay.Writer(buf, [0]) as w:
        for s in range(5):
            w.push(np.array([0]), payload([0], [s]))
    j = shmreplay.Journal(buf, tmp_path / "c")
    link = j.write_link()
    assert link["link"] == 1 and link["steps"] == 5 and link["error"] == ""
    j.close()
