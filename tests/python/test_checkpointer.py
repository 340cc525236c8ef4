"""The Checkpointer (shmreplay/_checkpointer.py): it saves links in the background while a writer pushes, surfaces its
failures and stops safely from any thread, at a lowered CPU priority, and a program that exits with it running lets
the save in progress finish."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import shmreplay
from checkpoint_helpers import make_buffer, push_steps, wait_until
from conftest import PAYLOAD_SCHEMA, checksum, payload


def pusher(buf, stop, env_ids):
    """A writer thread's loop: payload steps into env_ids until `stop` is set; returns the steps pushed per env."""
    pushed = {}

    def run():
        with shmreplay.Writer(buf, env_ids) as w:
            step = 0
            while not stop.is_set():
                w.push(np.array(env_ids), payload(env_ids, [step] * len(env_ids)))
                step += 1
            pushed.update({e: step for e in env_ids})

    thread = threading.Thread(target=run)
    thread.start()
    return thread, pushed


def test_a_checkpointer_saves_links_while_a_writer_pushes_and_load_dir_restores_whole_steps(
        name, copy_name, tmp_path):
    buf = shmreplay.Buffer.create(name, 2, 256, PAYLOAD_SCHEMA)
    chain = tmp_path / "chain"
    stop = threading.Event()
    thread, pushed = pusher(buf, stop, [0, 1])
    try:
        with shmreplay.Checkpointer(buf, chain, every=0.2, keep=2) as c:
            wait_until(lambda: c.saves >= 4, "4 links")
            assert c.running and c.error is None and c.failures == 0
            assert c.last.info.link_seq >= 4
    finally:
        stop.set()
        thread.join()
    assert not c.running
    assert not any(t.name == f"shmreplay-checkpointer {chain}" for t in threading.enumerate())
    with pytest.raises(shmreplay.InvalidArgument, match="closed"):
        c.start()
    last = c.last
    r = shmreplay.load(chain, copy_name)
    assert r.info.link_seq == last.info.link_seq  # the newest link, which stop() let finish
    copy = shmreplay.Buffer.open(copy_name)
    heads = copy.heads()
    for env in (0, 1):
        assert 0 < heads[env] <= pushed[env]
        first, data = copy.read_steps(env, 0, int(heads[env]))
        # A save that met the writer writing step `head` holds claimed = head + 1: the slot being rewritten then
        # (that of step head - 256) is outside the window, in the source and in the loaded copy.
        claimed = r.info.envs[env].claimed
        assert claimed in (heads[env], heads[env] + 1)
        assert first == max(0, claimed - 256)
        steps = np.arange(first, heads[env], dtype=np.uint64)
        np.testing.assert_array_equal(data["head"][:, 0], env)
        np.testing.assert_array_equal(data["head"][:, 1], steps)
        np.testing.assert_array_equal(data["head"][:, 2], checksum(data["head"], data["body"], data["flag"],
                                                                   data["half"], data["brain"]))


def test_a_checkpointer_that_cannot_write_raises_its_failure_at_stop_once(name, tmp_path):
    buf = make_buffer(name)
    blocker = tmp_path / "file"
    blocker.write_text("a file where the chain's parent directory should be")
    c = shmreplay.Checkpointer(buf, blocker / "chain", every=0.05)
    c.start()
    wait_until(lambda: c.failures >= 2, "two failed saves")  # the schedule goes on after a failure
    assert isinstance(c.error, shmreplay.Error) and str(blocker) in str(c.error)
    with pytest.raises(shmreplay.Error) as raised:
        c.stop()
    assert raised.value is c.error
    c.stop()  # raised once: nothing left to raise
    with pytest.raises(shmreplay.Error):
        c.save_now()  # on demand, raised at once
    c.close()


def test_a_checkpointer_with_on_error_reports_each_failure_there_and_stop_raises_nothing(name, tmp_path):
    buf = make_buffer(name)
    blocker = tmp_path / "file"
    blocker.write_text("")
    seen = []
    with shmreplay.Checkpointer(buf, blocker / "chain", every=0.05, on_error=seen.append) as c:
        wait_until(lambda: len(seen) >= 2, "two reported failures")
    assert all(isinstance(e, shmreplay.Error) for e in seen)
    assert c.failures >= 2 and c.saves == 0


def test_stop_from_many_threads_at_once_waits_for_the_thread_and_raises_the_failure_once(name, tmp_path):
    buf = make_buffer(name)
    blocker = tmp_path / "file"
    blocker.write_text("")
    c = shmreplay.Checkpointer(buf, blocker / "chain", every=0.01)
    mine = f"shmreplay-checkpointer {blocker / 'chain'}"
    for round_ in range(3):  # and starts again after each stop
        c.start()
        wait_until(lambda: c.failures > round_, "a failed save")
        go = threading.Barrier(4)
        outcomes = []

        def stopper():
            go.wait()
            try:
                c.stop()
                outcomes.append(None)
            except shmreplay.Error as e:
                outcomes.append(e)
            outcomes.append(any(t.name == mine for t in threading.enumerate()))

        threads = [threading.Thread(target=stopper) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors = [o for o in outcomes if isinstance(o, shmreplay.Error)]
        alive = [o for o in outcomes if isinstance(o, bool)]
        assert len(errors) == 1, outcomes
        assert alive == [False] * 4  # every stop() returned after the thread ended
        assert not c.running
    c.close()


def test_stop_called_by_on_error_on_the_checkpointer_thread_ends_it(name, tmp_path):
    buf = make_buffer(name)
    blocker = tmp_path / "file"
    blocker.write_text("")
    c = shmreplay.Checkpointer(buf, blocker / "chain", every=0.01, on_error=lambda e: c.stop())
    c.start()
    wait_until(lambda: not any(t.name.startswith("shmreplay-checkpointer") for t in threading.enumerate()),
               "the thread to end")
    assert not c.running and c.failures == 1
    c.close()


def test_save_now_and_the_background_thread_take_turns_on_one_chain(name, tmp_path):
    buf = make_buffer(name)
    chain = tmp_path / "chain"
    with shmreplay.Writer(buf, [0, 1]) as w:
        push_steps(w, [0, 1], 0, 2)
    with shmreplay.Checkpointer(name, chain, every=0.01, keep=100) as c:
        results = [c.save_now() for _ in range(20)]
        wait_until(lambda: c.saves >= 25, "background links")
    seqs = [l.seq for l in shmreplay.list_links(chain)]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) == c.saves  # numbered in turn, none lost
    assert all(r.info.path in {l.path for l in shmreplay.list_links(chain)} for r in results)
    with pytest.raises(shmreplay.InvalidArgument, match="closed"):
        c.save_now()


def test_checkpointer_arguments_are_checked(name, tmp_path):
    buf = make_buffer(name)
    for kw, word in ((dict(every=0), "every"), (dict(every=float("inf")), "every"), (dict(keep=0), "keep"),
                     (dict(compact_ratio=0.5), "compact_ratio"), (dict(nice=-1), "nice"), (dict(nice=20), "nice"),
                     (dict(on_error=3), "on_error")):
        with pytest.raises(shmreplay.InvalidArgument, match=word):
            shmreplay.Checkpointer(buf, tmp_path, **kw)
    with pytest.raises(shmreplay.InvalidArgument, match="Buffer or a buffer's name"):
        shmreplay.Checkpointer(3, tmp_path)
    with pytest.raises(shmreplay.NotFound):
        shmreplay.Checkpointer(name + "-missing", tmp_path)
    c = shmreplay.Checkpointer(buf, tmp_path / "chain", every=3600)
    c.start()
    with pytest.raises(shmreplay.InvalidArgument, match="already running"):
        c.start()
    c.close()
    c.close()
    assert "closed" in repr(c)


@pytest.mark.parametrize("nice", [None, 4, 0])
def test_the_checkpointer_thread_lowers_its_own_cpu_priority_by_nice_and_no_other_thread_s(name, tmp_path, nice):
    buf = make_buffer(name)
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    seen = []

    def on_error(exc):  # not expected: the test fails below with it
        seen.append(exc)

    kw = {} if nice is None else dict(nice=nice)
    c = shmreplay.Checkpointer(buf, tmp_path / "chain", every=3600, on_error=on_error, **kw)
    assert c.nice == (10 if nice is None else nice)
    with c:
        deadline = time.monotonic() + 30
        while c.saves == 0 and not seen:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        (thread,) = [t for t in threading.enumerate() if t.name == f"shmreplay-checkpointer {tmp_path / 'chain'}"]
        thread_nice = os.getpriority(os.PRIO_PROCESS, thread.native_id)
    assert seen == []
    assert thread_nice == min(19, base + c.nice)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base  # the caller's thread keeps its own


def test_a_program_that_exits_with_its_checkpointer_running_lets_the_save_in_progress_finish(name, copy_name,
                                                                                           tmp_path):
    buf = make_buffer(name)
    with shmreplay.Writer(buf, [0, 1]) as w:
        push_steps(w, [0, 1], 0, 5)
    chain = tmp_path / "chain"
    script = (f"import shmreplay\n"
              f"c = shmreplay.Checkpointer({name!r}, {str(chain)!r}, every=0.001, keep=2).start()\n"
              f"while c.saves < 3:\n"
              f"    pass\n")  # and exits while its thread saves (or is about to)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    names = os.listdir(chain)
    assert not [n for n in names if ".tmp-" in n], names  # no temporary file left by a save cut off
    r = shmreplay.load(chain, copy_name)
    assert r.notes == [] and r.info.link_seq >= 3
    np.testing.assert_array_equal(shmreplay.Buffer.open(copy_name).heads(), [5, 5])
