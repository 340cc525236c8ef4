"""Buffer: create, open, remove, sizes, and the errors of each."""
import os

import numpy as np
import pytest

import shmreplay
from conftest import PAYLOAD_SCHEMA


def test_a_created_buffer_is_opened_by_name_with_its_schema_and_sizes(name):
    buf = shmreplay.Buffer.create(name, 3, 64, "obs:f32[4] action:i32", mode=0o640)
    assert shmreplay.Buffer.exists(name)
    other = shmreplay.Buffer.open(name, schema="obs:f32[4] action:i32")
    for b in (buf, other):
        assert (b.name, b.num_envs, b.capacity, b.step_bytes) == (name, 3, 64, 20)
        assert str(b.schema) == "obs:f32[4] action:i32"
        assert b.total_bytes >= 3 * 64 * 20
        assert not b.read_only and not b.has_episodes
        assert list(b.heads()) == [0, 0, 0]
    assert os.stat(buf.path).st_mode & 0o777 == 0o640
    assert name in repr(buf)
    shmreplay.Buffer.remove(name)
    assert not shmreplay.Buffer.exists(name)


def test_creating_a_name_that_exists_fails_unless_replace(name):
    shmreplay.Buffer.create(name, 1, 8, "a:u8")
    with pytest.raises(shmreplay.AlreadyExists, match="already exists"):
        shmreplay.Buffer.create(name, 1, 8, "a:u8")
    with pytest.raises(FileExistsError):
        shmreplay.Buffer.create(name, 1, 8, "a:u8")
    b = shmreplay.Buffer.create(name, 2, 8, "b:u16", replace=True)
    assert shmreplay.Buffer.open(name).num_envs == 2 and str(b.schema) == "b:u16"


def test_opening_with_another_schema_names_the_difference(name):
    shmreplay.Buffer.create(name, 1, 8, "obs:f32[4] action:i32")
    with pytest.raises(shmreplay.SchemaMismatch, match="obs") as info:
        shmreplay.Buffer.open(name, schema="obs:f32[5] action:i32")
    assert "f32[5]" in str(info.value) and "f32[4]" in str(info.value)


def test_a_missing_or_foreign_segment_is_a_clear_error(name):
    with pytest.raises(shmreplay.NotFound, match=name):
        shmreplay.Buffer.open(name)
    with pytest.raises(FileNotFoundError):
        shmreplay.Buffer.remove(name)
    with open(f"/dev/shm/{name}", "wb") as f:
        f.write(b"not a segment at all" * 100)
    with pytest.raises(shmreplay.NotASegment):
        shmreplay.Buffer.open(name)
    os.unlink(f"/dev/shm/{name}")


def test_a_buffer_of_another_user_is_refused_unless_allow_other_owner(name):
    created = shmreplay.Buffer.create(name, 2, 8, "a:u8", mode=0o666)
    assert created.owner_uid == os.geteuid()
    w = shmreplay.Writer(created, [0, 1])
    w.push([0, 1], {"a": np.array([5, 6], dtype=np.uint8)})
    w.close()
    try:
        os.chown(created.path, 65534, -1)
    except PermissionError:
        pytest.skip("chown needs root")
    for read_only in (False, True):
        with pytest.raises(shmreplay.PermissionDenied, match="uid 65534") as info:
            shmreplay.Buffer.open(name, read_only=read_only)
        assert f"uid {os.geteuid()}" in str(info.value) and "allow_other_owner=True" in str(info.value)
        with pytest.raises(PermissionError):
            shmreplay.Buffer.open(name, read_only=read_only)
        b = shmreplay.Buffer.open(name, read_only=read_only, allow_other_owner=True)
        assert b.owner_uid == 65534
        # read_steps reads this mapping; it does not open the name again (which would refuse it).
        first, steps = b.read_steps(1, 0, 1)
        assert first == 0 and steps["a"].tolist() == [6]


def test_a_read_only_buffer_refuses_a_writer(name):
    shmreplay.Buffer.create(name, 2, 8, "a:u8")
    ro = shmreplay.Buffer.open(name, read_only=True)
    assert ro.read_only
    with pytest.raises(shmreplay.ReadOnly):
        shmreplay.Writer(ro, [0])


def test_bad_sizes_are_invalid_arguments(name):
    with pytest.raises(shmreplay.InvalidArgument):
        shmreplay.Buffer.create(name, 0, 8, "a:u8")
    with pytest.raises(shmreplay.InvalidArgument):
        shmreplay.Buffer.create(name, 1, 0, "a:u8")
    assert not shmreplay.Buffer.exists(name)


def test_episode_fields_are_given_by_name(name):
    buf = shmreplay.Buffer.create(name, 2, 32, "obs:f32 reward:f32 done:bool", done="done", reward="reward",
                                  episode_queue_capacity=8)
    assert buf.has_episodes
    with pytest.raises(shmreplay.InvalidArgument, match="nope"):
        shmreplay.Buffer.create(name + "-x", 2, 32, "obs:f32 done:bool", done="nope")


def test_heads_count_published_steps_per_env(buffer):
    from conftest import payload
    w = shmreplay.Writer(buffer, [0, 1, 2, 3])
    w.push([3, 1], payload([3, 1], [0, 0]))
    w.push([3], payload([3], [1]))
    assert list(buffer.heads()) == [0, 1, 0, 2]
    assert PAYLOAD_SCHEMA == str(buffer.schema)


def test_the_readmes_python_example_runs(name):
    """The README's example as a user runs it (a script, so its `if __name__ == "__main__":` part runs and its actors
    are processes), under this test's name; tests/python/test_docs.py runs every docs block the same way."""
    import re
    import subprocess
    import sys
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "shmreplay.Buffer.create" in b]
    assert blocks, "the README has no Python example"
    for block in blocks:
        assert '"quickstart"' in block, "the README's example no longer names its buffer 'quickstart'"
        run = subprocess.run([sys.executable, "-c", block.replace('"quickstart"', repr(name))], capture_output=True,
                             text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        assert "(32, 16, 4) (32, 16)" in run.stdout
    assert not shmreplay.Buffer.exists(name)


def test_a_mode_with_more_than_read_and_write_bits_is_refused_naming_it(name):
    for mode in (0o755, 0o4666, 0o1600):
        with pytest.raises(shmreplay.InvalidArgument, match=oct(mode)[2:]):
            shmreplay.Buffer.create(name, 1, 1, "x:u8", mode=mode)
        assert not shmreplay.Buffer.exists(name)
    assert shmreplay.Buffer.create(name, 1, 1, "x:u8", mode=0o640).name == name


def _resident_bytes_of(path):
    """Bytes of the file at `path` that are resident in this process's mappings of it (Rss in /proc/self/smaps,
    the mappings found by inode)."""
    inode = os.stat(path).st_ino
    rss = 0
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # "start-end perms offset dev inode [path]"
                inside = int(head[4]) == inode
            elif inside and head[0] == "Rss:":
                rss += int(head[1]) * 1024
    return rss


def test_populate_always_faults_every_page_in_and_reports_progress_never_leaves_them(name):
    schema = "obs:u8[1024] action:i32 done:bool"
    never = shmreplay.Buffer.create(name + "-never", 2, 4096, schema)  # the default is never
    try:
        assert _resident_bytes_of(never.path) < never.total_bytes // 2
        calls = []
        always = shmreplay.Buffer.create(name, 2, 4096, schema, populate="always",
                                         populate_progress=lambda done, total: calls.append((done, total)))
        assert _resident_bytes_of(always.path) >= always.total_bytes
        assert calls and calls[-1] == (always.total_bytes, always.total_bytes)
        assert all(total == always.total_bytes for _, total in calls)
        assert [d for d, _ in calls] == sorted({d for d, _ in calls})
        auto = shmreplay.Buffer.create(name + "-auto", 2, 4096, schema, populate="auto")
        assert auto.total_bytes == never.total_bytes == always.total_bytes
    finally:
        for n in (name + "-never", name + "-auto"):
            if shmreplay.Buffer.exists(n):
                shmreplay.Buffer.remove(n)


def test_a_populate_progress_callback_that_raises_aborts_create_and_leaves_nothing(name):
    class Cancelled(Exception):
        pass

    def cancel(done, total):
        raise Cancelled(f"stopped at {done} of {total}")

    with pytest.raises(Cancelled, match="stopped at"):
        shmreplay.Buffer.create(name, 2, 4096, "obs:u8[1024]", populate="always", populate_progress=cancel)
    assert not shmreplay.Buffer.exists(name)


def test_an_unknown_populate_mode_or_a_progress_that_is_not_callable_is_refused(name):
    with pytest.raises(shmreplay.InvalidArgument, match="unknown populate mode 'sometimes'"):
        shmreplay.Buffer.create(name, 1, 8, "a:u8", populate="sometimes")
    with pytest.raises(shmreplay.InvalidArgument, match="populate_progress must be a callable"):
        shmreplay.Buffer.create(name, 1, 8, "a:u8", populate="always", populate_progress=5)
    assert not shmreplay.Buffer.exists(name)


def test_the_defaults_buffer_create_shows_make_the_buffer_that_no_options_make(name):
    """Buffer.create's options are rows of a table (lib/python/create_options.hpp) whose defaults are written as
    Python text: passing each one explicitly must make what passing none makes (CreateOptions{}), segment for
    segment, or the signature and docstring would tell users a default the library does not use."""
    import inspect  # noqa: PLC0415
    import json  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    defaults = {p.name: p.default for p in inspect.signature(shmreplay.Buffer.create).parameters.values()
                if p.default is not inspect.Parameter.empty}
    assert len(defaults) > 15
    schema = "obs:u8[4,8,8]:stack=0 x:u8[16,16]:lz4 d:bool r:f32 v:u32"

    def described(buffer_name):
        out = subprocess.run([sys.executable, "-m", "shmreplay", "info", buffer_name, "--json"], capture_output=True,
                             text=True, check=True).stdout
        info = json.loads(out)
        for key in ("name", "path", "creation_time_ns", "age_s"):
            info.pop(key, None)
        return info, os.stat(f"/dev/shm/{buffer_name}").st_mode, os.path.getsize(f"/dev/shm/{buffer_name}")

    plain = shmreplay.Buffer.create(name, 2, 16, schema)
    explicit = shmreplay.Buffer.create(name + "-explicit", 2, 16, schema, **defaults)
    try:
        assert described(name + "-explicit") == described(name)
    finally:
        shmreplay.Buffer.remove(name + "-explicit")
    del plain, explicit
