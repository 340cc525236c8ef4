"""The frames file: consecutive observation frames of a few envs, with the flags that rebuild each step's stack.
Written by record_atari.py and record_dmc.py; read by tools/bench/codecs.cpp (frames_file.hpp) and the tests.

Layout (little-endian; the frames are plain bytes, so the file can be mapped and read with numpy.fromfile):

    offset  size               what
    0       8                  magic b"SHMRFRM1"
    8       u32                header bytes (64): where the flags start
    12      u32                height
    16      u32                width
    20      u32                channels (1: gray, 3: RGB, the channel last)
    24      u32                envs
    28      u32                steps per env
    32      u32                stack depth (4 for envpool's Atari, 1 where observations are single frames)
    36      u32                0 (reserved)
    40      24 bytes           the source's name (envpool task, DMC domain-task), UTF-8, NUL-padded
    64      u8[envs*steps]     flags, env-major (env 0's steps, then env 1's ...): FIRST | DONE
    64+envs*steps  u8[envs, steps, height, width, channels]   the frames, env-major, each the step's newest frame

FIRST (bit 0): the env's stack restarts at this step (a reset: envpool's elapsed_step is 0), so that every earlier
slot of its stack is a copy of this frame. DONE (bit 1): the env reported terminated or truncated at this step (an
episode or, with envpool's episodic_life, a life ended; the next step is either a FIRST or, after a lost life, goes
on with the same stack). Step t's stack is then frames[max(t - depth + 1 + k, s)] for k in 0..depth-1, where s is
the last FIRST step at or before t (stacks()); every env's step 0 is a FIRST.
"""
import os
import struct

import numpy as np

MAGIC = b"SHMRFRM1"
HEADER_BYTES = 64
FIRST = 1
DONE = 2
_HEADER = struct.Struct("<8sIIIIIIII24s")
assert _HEADER.size == HEADER_BYTES


class Frames:
    """A frames file's contents: frames u8[envs, steps, height, width, channels], flags u8[envs, steps]."""

    def __init__(self, name, frames, flags, depth):
        self.name, self.frames, self.flags, self.depth = name, frames, flags, depth

    @property
    def envs(self):
        return self.frames.shape[0]

    @property
    def steps(self):
        return self.frames.shape[1]

    def stacks(self, env):
        """Every step's stack of `env`, rebuilt from its frames and FIRST flags: u8[steps, depth, h, w, c]."""
        return stacks(self.frames[env], self.flags[env], self.depth)


def stacks(frames, flags, depth):
    """The stacks of one env's consecutive frames (u8[steps, h, w, c]) with their flags: u8[steps, depth, h, w, c],
    step t's slot k the frame of step max(t - depth + 1 + k, last FIRST at or before t)."""
    steps = frames.shape[0]
    first = np.zeros(steps, np.int64)
    last = 0
    for t in range(steps):
        if flags[t] & FIRST:
            last = t
        first[t] = last
    t = np.arange(steps)[:, None]
    k = np.arange(depth)[None, :]
    return frames[np.maximum(t - depth + 1 + k, first[:, None])]


def write(path, name, frames, flags, depth):
    """Writes frames (u8[envs, steps, h, w, c]) and flags (u8[envs, steps]) to `path`, atomically (a temporary
    file renamed over it: a reader never sees half a file)."""
    frames = np.ascontiguousarray(frames, np.uint8)
    flags = np.ascontiguousarray(flags, np.uint8)
    envs, steps, h, w, c = frames.shape
    if flags.shape != (envs, steps):
        raise ValueError(f"frames file {path}: flags of shape {flags.shape}, expected {(envs, steps)}")
    if not (flags[:, 0] & FIRST).all():
        raise ValueError(f"frames file {path}: every env's step 0 must be a FIRST")
    encoded = name.encode()
    if len(encoded) > 24:
        raise ValueError(f"frames file {path}: name {name!r} is {len(encoded)} bytes, at most 24")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(_HEADER.pack(MAGIC, HEADER_BYTES, h, w, c, envs, steps, depth, 0, encoded))
        f.write(flags.tobytes())
        f.write(frames.tobytes())
    os.replace(tmp, path)


def header(path):
    """The header of a frames file as a dict (name, height, width, channels, envs, steps, depth), or None when the
    file is missing, short or not a frames file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except FileNotFoundError:
        return None
    if len(raw) != HEADER_BYTES:
        return None
    magic, hb, h, w, c, envs, steps, depth, _, name = _HEADER.unpack(raw)
    if magic != MAGIC or hb != HEADER_BYTES:
        return None
    expected = HEADER_BYTES + envs * steps * (1 + h * w * c)
    if os.path.getsize(path) != expected:
        return None
    return {"name": name.rstrip(b"\0").decode(), "height": h, "width": w, "channels": c, "envs": envs,
            "steps": steps, "depth": depth}


def read(path):
    """The Frames of `path`; ValueError (what and where) when it is not a whole frames file."""
    head = header(path)
    if head is None:
        raise ValueError(f"{path}: not a whole frames file (magic {MAGIC!r}, header and size as frames_file.py says)")
    envs, steps = head["envs"], head["steps"]
    flags = np.fromfile(path, np.uint8, envs * steps, offset=HEADER_BYTES).reshape(envs, steps)
    frames = np.fromfile(path, np.uint8, offset=HEADER_BYTES + envs * steps)
    frames = frames.reshape(envs, steps, head["height"], head["width"], head["channels"])
    return Frames(head["name"], frames, flags, head["depth"])
