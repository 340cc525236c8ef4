"""The segment under an SB3 buffer: its schema (from SB3's spaces), its creation, the description another process
attaches with, and its removal when the creating process ends (closed or not, killed or not).

One env's stream of steps: a *reset step* (``first`` True) holds an episode's first observation; each later step holds
the observation an action led to, with that action, its reward, ``done`` and ``timeout``. A transition is a pair of
consecutive steps of one env whose second is not a reset step, so each observation is stored once: the next
observation of one transition is the observation of the next. ``done`` is the segment's episode field, so
``episodes="within"`` keeps pairs from straddling a flagged end; a reset step without a flagged end before it (a
truncation that the caller did not flag, an env reset between ``learn`` calls) is caught by ``first``.
"""
import os
import pickle
import stat
import subprocess
import sys
import uuid

import shmreplay

from .. import _dtypes

DESCRIPTION_VERSION = 1


def field(name, dtype, shape, what, stack_axis=None):
    return shmreplay.Field(name, _dtypes.dtype_name(dtype, what, "shmreplay.sb3"), tuple(int(s) for s in shape),
                           stack_axis=stack_axis)


def schema(obs_fields, action_dtype, action_dim):
    """obs_fields: [(field name, dtype, shape, stack_axis)]; then action, reward, done, timeout and first."""
    fields = [field(n, d, s, f"observation field '{n}'", a) for n, d, s, a in obs_fields]
    fields += [field("action", action_dtype, (action_dim,), "the action space"),
               shmreplay.Field("reward", "f32", ()), shmreplay.Field("done", "bool", ()),
               shmreplay.Field("timeout", "bool", ()), shmreplay.Field("first", "bool", ())]
    return shmreplay.Schema(fields)


def private_name():
    return f"sb3-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def description_path(buffer_path):
    """Beside the segment file; '+' is not a character of segment names, so no segment can have this name."""
    return buffer_path + "+sb3"


def write_description(path, description):
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        pickle.dump(dict(description, version=DESCRIPTION_VERSION), f)
    os.replace(tmp, path)


def read_description(name, buffer_path):
    """The creator's description of the buffer `name`, read only from a file of this user (it is a pickle)."""
    path = description_path(buffer_path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise shmreplay.NotFound(f"shmreplay.sb3: buffer '{name}' has no SB3 description ({path}): it was not "
                                 "made by shmreplay.sb3, or its creator has ended") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise shmreplay.PermissionDenied(f"shmreplay.sb3: {path} is not a regular file of this user "
                                             f"(uid {st.st_uid}, expected {os.getuid()})")
        description = pickle.load(f)
    if description.get("version") != DESCRIPTION_VERSION:
        raise shmreplay.VersionMismatch(f"shmreplay.sb3: {path} has description version "
                                        f"{description.get('version')}, expected {DESCRIPTION_VERSION}")
    return description


# The watcher: a process that waits for its stdin to close (the creator ended, however) and then removes the files,
# each only if it is still the file (inode) the creator made.
_WATCHER = """import os, sys
sys.stdin.buffer.read()
for arg in sys.argv[1:]:
    path, ino = arg.rsplit(":", 1)
    try:
        if os.lstat(path).st_ino == int(ino):
            os.unlink(path)
    except OSError:
        pass
"""


class Owner:
    """What the creating process holds: the segment's name and the watcher that removes it and its description when
    this process ends. ``release()`` removes them now (the creating process only: a forked child's exit does not)."""

    def __init__(self, name, paths):
        self.name = name
        self.pid = os.getpid()
        args = [f"{p}:{os.lstat(p).st_ino}" for p in paths]
        self.watcher = subprocess.Popen([sys.executable, "-c", _WATCHER, *args], stdin=subprocess.PIPE,
                                        start_new_session=True, close_fds=True)

    def release(self):
        if os.getpid() != self.pid or self.watcher is None:
            return
        watcher, self.watcher = self.watcher, None
        watcher.stdin.close()  # the watcher removes the files it was given
        try:
            watcher.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - an overloaded machine
            pass
