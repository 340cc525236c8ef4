"""The correctness probe: writer processes push self-checking small steps and the learner counts sampled rows
that are not one whole step of one writer (torn: fields from two different pushes, or a field half written).

Every field of a step is filled from one stamp, `writer * 2^20 + counter % 2^20` (exact in float32): `obs`,
`action` and `reward` hold the stamp in every element, `done` its parity. A row whose elements disagree mixes
two steps. A row that is all zeros is a slot never written (stamp 0, counted as clean).
"""
import numpy as np

STAMP_MOD = 1 << 20


def stamped(rows, writer, counter):
    """A batch of `rows` small steps stamped (writer, counter + i)."""
    stamp = (writer * STAMP_MOD + (counter + np.arange(rows)) % STAMP_MOD).astype(np.float32)
    return {"obs": np.repeat(stamp[:, None], 17, axis=1), "action": np.repeat(stamp[:, None], 6, axis=1),
            "reward": stamp.copy(), "done": (stamp.astype(np.int64) & 1).astype(np.bool_)}


def torn_rows(rows):
    """How many rows of a sampled flat batch (dict of arrays with a leading row axis) are torn."""
    obs = np.asarray(rows["obs"], np.float32).reshape(len(rows["obs"]), -1)
    stamp = obs[:, 0]
    ok = (obs == stamp[:, None]).all(axis=1)
    ok &= (np.asarray(rows["action"], np.float32).reshape(len(stamp), -1) == stamp[:, None]).all(axis=1)
    ok &= np.asarray(rows["reward"], np.float32).reshape(len(stamp)) == stamp
    ok &= np.asarray(rows["done"]).reshape(len(stamp)).astype(np.int64) == (stamp.astype(np.int64) & 1)
    return int((~ok).sum())
