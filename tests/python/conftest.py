"""Shared fixtures of the Python tests: unique buffer names, removed after each test whatever happens."""
import itertools
import os

import numpy as np
import pytest

import shmreplay

_counter = itertools.count()

# A self-checking step: env id, step index and a checksum of the rest, as the C++ tests' payload.
PAYLOAD_SCHEMA = "head:u64[3] body:f32[5] flag:bool half:f16[2] brain:bf16"


def payload(env_ids, steps, salt=0):
    """The payload dict of the steps (env_ids[i], steps[i]): every field is a function of env, step and salt."""
    env_ids = np.asarray(env_ids, dtype=np.uint64)
    steps = np.asarray(steps, dtype=np.uint64)
    n = len(env_ids)
    body = ((env_ids[:, None] * 1000 + steps[:, None] * 7 + np.arange(5)[None, :] + salt) % 4093).astype(np.float32)
    half = ((steps[:, None] + np.arange(2)[None, :]) % 2048).astype(np.float16)
    brain = (steps % 60000).astype(np.uint16)
    flag = (steps % 3) == 0
    head = np.stack([env_ids, steps, np.zeros(n, dtype=np.uint64)], axis=1)
    head[:, 2] = checksum(head, body, flag, half, brain)
    return {"head": head, "body": body, "flag": flag, "half": half, "brain": brain}


def checksum(head, body, flag, half, brain):
    """A checksum over every field's bytes of each step (vectorised over the leading dimensions)."""
    lead = head.shape[:-1]
    cells = int(np.prod(lead)) if lead else 1
    parts = [head[..., :2], body, flag, half, brain]
    raw = np.concatenate([np.ascontiguousarray(p).reshape(cells, -1).view(np.uint8) for p in parts], axis=1)
    h = np.full(cells, 1469598103934665603, dtype=np.uint64)
    for column in raw.T:
        h = (h ^ column.astype(np.uint64)) * np.uint64(1099511628211)
    return h.reshape(lead)


def check_batch(batch, heads=None):
    """Every valid step of every row is whole (checksum), belongs to the row's env, has step index start + t;
    the mask is a prefix; with heads, no row passes its env's head. Returns a list of problems (empty: fine)."""
    problems = []
    mask = batch.mask
    length = mask.shape[1]
    head = batch["head"]
    steps = batch.starts[:, None].astype(np.uint64) + np.arange(length, dtype=np.uint64)[None, :]
    sums = checksum(head, batch["body"], batch["flag"], batch["half"], batch["brain"])
    for name, bad in (("env", head[..., 0] != batch.env_ids[:, None].astype(np.uint64)),
                      ("step", head[..., 1] != steps), ("checksum", head[..., 2] != sums)):
        if np.any(bad & mask):
            r, t = np.argwhere(bad & mask)[0]
            problems.append(f"{name} wrong at row {r} t {t}: head {head[r, t]}, env {batch.env_ids[r]}, "
                            f"start {batch.starts[r]}")
    valid = mask.sum(axis=1)
    if np.any(mask != (np.arange(length)[None, :] < valid[:, None])):
        problems.append("a mask is not a prefix")
    if heads is not None and np.any(batch.starts + valid > heads[batch.env_ids]):
        problems.append("a row passes its env's head")
    return problems


@pytest.fixture
def closing():
    """A list whose objects are closed after the test (envs, writers, samplers), whatever happens."""
    made = []
    yield made
    for x in made:
        x.close()


@pytest.fixture
def name():
    """A buffer name unique to this test; the buffer is removed afterwards if it exists."""
    n = f"shmreplay-pytest-{os.getpid()}-{next(_counter)}"
    yield n
    if shmreplay.Buffer.exists(n):
        shmreplay.Buffer.remove(n)


@pytest.fixture
def buffer(name):
    """A payload buffer of 4 envs x 16 steps."""
    return shmreplay.Buffer.create(name, 4, 16, PAYLOAD_SCHEMA)


@pytest.fixture
def copy_name(name):
    """A second unique buffer name (the load's target), removed afterwards."""
    n = name + "-copy"
    yield n
    if shmreplay.Buffer.exists(n):
        shmreplay.Buffer.remove(n)
