"""Stacked fields from Python, issue 43's cases: SB3's reset observation on the done step under the episodes rule,
and a checkpoint loaded into a buffer with a smaller restart reserve (docs/design/stacks.md)."""
import numpy as np
import pytest

import shmreplay


def test_the_episodes_rule_stores_an_sb3_reset_on_the_done_step_exactly_and_counts_no_flagless_restart(name):
    # SB3's VecEnv returns the next episode's reset observation with done=True: both sides of the flag are compared.
    buf = shmreplay.Buffer.create(name, 1, 64, "obs:u8[4,16]:stack=0 done:bool", done="done",
                                  stack_continuity="episodes", stack_restarts=63)
    cur = np.zeros((4, 16), np.uint8)
    pushed = []
    with shmreplay.Writer(buf, [0]) as w:
        for t in range(40):
            done = t % 9 == 8
            cur = np.stack([np.full(16, 100 + t, np.uint8)] * 4) if done else np.concatenate(
                [cur[1:], np.full((1, 16), t, np.uint8)])
            w.push_one(0, {"obs": cur, "done": done})
            pushed.append(cur.copy())
        assert w.stack_flagless_restarts == 0
    first, data = buf.read_steps(0, 0, 40)
    assert first == 0
    assert all(np.array_equal(data["obs"][i], pushed[i]) for i in range(40))


def test_a_load_into_a_smaller_restart_reserve_needs_allow_mismatch_and_counts_the_steps_it_keeps(name, tmp_path):
    src = shmreplay.Buffer.create(name, 1, 16, "obs:u8[4,3]:stack=0", stack_restarts=15)
    with shmreplay.Writer(src, [0]) as w:
        for t in range(16):  # no stack continues the one before: 4 frames each
            w.push_one(0, {"obs": np.arange(12, dtype=np.uint8).reshape(4, 3) + 12 * t})
    path = str(tmp_path / "rsv.shmrckpt")
    src.save(path)
    shmreplay.Buffer.create(name + "-dst", 1, 16, "obs:u8[4,3]:stack=0")  # the default reserve: 5 such steps
    try:
        with pytest.raises(shmreplay.SchemaMismatch, match="stack restart reserve: the segment holds 1 restart"):
            shmreplay.load(path, name + "-dst")
        r = shmreplay.load(path, name + "-dst", allow_mismatch=True)
        assert r.steps_restored == 5
        assert any("11 of the checkpoint's 16 steps were left out" in n for n in r.notes)
        assert shmreplay.load(path, name + "-new").steps_restored == 16  # a new buffer gets the file's reserve
    finally:
        for n in (name + "-dst", name + "-new"):
            if shmreplay.Buffer.exists(n):
                shmreplay.Buffer.remove(n)
