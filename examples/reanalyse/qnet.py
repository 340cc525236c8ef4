"""What the reanalyse example's processes share: the step schema, the Q-network (a 4-64-64-2 MLP; its forward pass
in NumPy for the actors and the reanalyse workers, who need no JAX), the target every worker computes, and the
parameter file the learner publishes with a version.

The parameters travel in a file, not in the segment: they are a few thousand floats that change every K updates,
the segment has no area for bulk data that is not a step, and a file written to a temporary name and renamed over
the published one (rename is atomic on one file system) gives every reader one whole version or the previous one,
never a mix, with no lock. The version is stored inside the file, so a reader knows which version it loaded."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "envpool"))
from common import Status, StopFlag  # noqa: E402,F401  (the envpool example's worker plumbing, reused)

# target_version 0: never reanalysed (the actors push 0; the learner's versions start at 1).
SCHEMA = ("obs:f32[4] action:i32 reward:f32 done:bool truncated:bool episode_return:f32 "
          "value_target:f32:derived target_version:u32:derived")
GAMMA = 0.99
HIDDEN = 64
AGE_BUCKETS = ("0", "1", "2-3", "4-7", "8+")


def init_params(seed):
    """Glorot-uniform weights, zero biases (float32 NumPy arrays by name)."""
    rng = np.random.default_rng(seed)
    sizes = [(4, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, 2)]
    params = {}
    for i, (n_in, n_out) in enumerate(sizes):
        bound = np.sqrt(6.0 / (n_in + n_out))
        params[f"w{i}"] = rng.uniform(-bound, bound, (n_in, n_out)).astype(np.float32)
        params[f"b{i}"] = np.zeros(n_out, np.float32)
    return params


def q_values(params, obs):
    """Q(s, .) for a batch of observations [N, 4] -> [N, 2] (NumPy; the learner's JAX forward is the same)."""
    h = np.maximum(np.asarray(obs, np.float32) @ params["w0"] + params["b0"], 0)
    h = np.maximum(h @ params["w1"] + params["b1"], 0)
    return h @ params["w2"] + params["b2"]


def one_step_targets(params, steps, next_obs):
    """The value targets of steps (dict of arrays, as read_steps returns) whose next observations are next_obs:
    r + gamma * max_a Q(s', a), and r alone on a terminal step. A step cut by the time limit (truncated) has no
    stored successor of its episode (the next stored step starts a new one): its target bootstraps from its own
    state, max_a Q(s, a), which for a pole still up at the limit is close to the successor's."""
    reward = steps["reward"].astype(np.float32)
    bootstrap = q_values(params, np.where(steps["truncated"][:, None], steps["obs"], next_obs)).max(axis=1)
    terminal = steps["done"] & ~steps["truncated"]
    return np.where(terminal, reward, reward + GAMMA * bootstrap).astype(np.float32)


def age_bucket_counts(ages):
    """Counts of ages (learner version - target version) in the buckets 0, 1, 2-3, 4-7, 8+."""
    ages = np.asarray(ages)
    edges = [(0, 0), (1, 1), (2, 3), (4, 7), (8, np.iinfo(np.int64).max)]
    return [int(((ages >= lo) & (ages <= hi)).sum()) for lo, hi in edges]


def params_path(buffer):
    return os.path.join(tempfile.gettempdir(), f"shmreplay-{buffer}.q.npz")


def publish(path, params, version):
    """Write the parameters and their version to a temporary file and rename it over `path` (atomic)."""
    tmp = f"{path}.tmp-{os.getpid()}.npz"
    np.savez(tmp, version=np.uint32(version), **{k: np.asarray(v, np.float32) for k, v in params.items()})
    os.replace(tmp, path)


class ParamsFile:
    """A reader of the published parameters: load() returns (params, version), reloading only when the file
    changed (its inode and mtime: every publish renames a new file over it), and the last ones while it is not there yet."""

    def __init__(self, path):
        self.path, self.ino, self.params, self.version = path, None, None, 0

    def load(self):
        try:
            st = os.stat(self.path)
            ino = (st.st_ino, st.st_mtime_ns)
            if ino != self.ino:
                with np.load(self.path) as f:
                    self.params = {k: f[k] for k in f.files if k != "version"}
                    self.version = int(f["version"])
                self.ino = ino
        except (FileNotFoundError, ValueError, EOFError, OSError):
            pass
        return self.params, self.version
