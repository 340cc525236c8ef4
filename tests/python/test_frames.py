"""The frame recorders (tools/frames/): real envpool Atari frames (and dm_control pixels where it is installed) into
frames files whose flags rebuild every step's stack exactly, made only where missing."""
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "frames"))
import frames_file  # noqa: E402

if os.environ.get("LD_PRELOAD"):  # the sanitizer pass: envpool does not load under ASan's runtime
    pytest.skip("the sanitizer pass (ASan preloaded): envpool is not run there", allow_module_level=True)


def test_every_stack_envpool_observed_is_the_one_the_recorded_frames_rebuild(tmp_path):
    pytest.importorskip("envpool")
    import record_atari
    observed = []
    frames, flags = record_atari.record("Breakout", envs=2, steps=240, seed=3,
                                        on_step=lambda t, obs: observed.append(np.array(obs)))
    path = str(tmp_path / "Breakout.frames")
    frames_file.write(path, "Breakout-v5", frames, flags, record_atari.DEPTH)
    got = frames_file.read(path)
    assert (got.name, got.envs, got.steps, got.depth) == ("Breakout-v5", 2, 240, 4)
    assert got.frames.shape == (2, 240, 84, 84, 1) and np.array_equal(got.frames, frames)
    observed = np.stack(observed, axis=1)  # [envs, steps, 4, 84, 84]
    for env in range(2):
        assert np.array_equal(got.stacks(env)[..., 0], observed[env])
    assert (got.flags[:, 0] & frames_file.FIRST).all()
    # Breakout under a random policy loses a life every few dozen steps: episodic_life's DONEs within a game (the
    # stack goes on) and a game over's reset (a FIRST after step 0) both occur in 240 steps (seed 3), so both rules
    # were checked against envpool's own stacks.
    assert (got.flags & frames_file.DONE).sum() >= 2 and (got.flags[:, 1:] & frames_file.FIRST).any()
    assert got.frames.std() > 0


def test_ensure_keeps_a_file_of_the_same_size_and_records_one_of_another(tmp_path):
    pytest.importorskip("envpool")
    import record_atari
    lines = []
    (path,) = record_atari.ensure(str(tmp_path), ["Pong"], envs=1, steps=32, log=lines.append)
    assert len(lines) == 1 and frames_file.header(path)["steps"] == 32
    before = os.stat(path).st_mtime_ns
    record_atari.ensure(str(tmp_path), ["Pong"], envs=1, steps=32, log=lines.append)
    assert len(lines) == 1 and os.stat(path).st_mtime_ns == before
    record_atari.ensure(str(tmp_path), ["Pong"], envs=1, steps=40, log=lines.append)
    assert len(lines) == 2 and frames_file.header(path)["steps"] == 40


def test_a_truncated_or_foreign_file_is_refused_with_its_path(tmp_path):
    frames = np.arange(2 * 3 * 4 * 5 * 1, dtype=np.uint8).reshape(2, 3, 4, 5, 1)
    flags = np.array([[1, 0, 2], [1, 2, 1]], np.uint8)
    path = str(tmp_path / "x.frames")
    frames_file.write(path, "x", frames, flags, 4)
    assert frames_file.header(path)["envs"] == 2
    assert np.array_equal(frames_file.read(path).frames, frames)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 1)
    assert frames_file.header(path) is None
    with pytest.raises(ValueError, match="x.frames: not a whole frames file"):
        frames_file.read(path)
    with open(path, "wb") as f:
        f.write(b"NOTFRAME" + bytes(100))
    assert frames_file.header(path) is None
    with pytest.raises(ValueError, match="every env's step 0 must be a FIRST"):
        frames_file.write(path, "x", frames, np.zeros((2, 3), np.uint8), 4)


def test_a_stack_restarts_at_a_first_and_goes_on_across_a_done():
    frames = np.arange(6, dtype=np.uint8).reshape(6, 1, 1, 1)
    flags = np.array([1, 0, 2, 0, 1, 0], np.uint8)  # FIRST, -, DONE (a life lost: the stack goes on), -, FIRST, -
    got = frames_file.stacks(frames, flags, 4)[..., 0, 0, 0]
    assert got.tolist() == [[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 2], [0, 1, 2, 3], [4, 4, 4, 4], [4, 4, 4, 5]]


def test_the_dmc_recorder_writes_rgb_pixels_with_its_episode_ends(tmp_path):
    pytest.importorskip("dm_control")  # not in .venv: tools/setup.sh --bench makes .venv-dmc with it
    import record_dmc
    (path,) = record_dmc.ensure(str(tmp_path), ["cartpole-swingup"], steps=130)
    got = frames_file.read(path)
    assert got.frames.shape == (1, 130, 64, 64, 3) and got.depth == 1
    # cartpole's episodes are 1000 physics steps at action repeat 8: a DONE at step 125, the reset a FIRST at 126
    assert got.flags[0, 125] == frames_file.DONE and got.flags[0, 126] == frames_file.FIRST
    assert got.frames.std() > 0
