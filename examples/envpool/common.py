"""What the envpool actors and the learner share: the step schema, the linear policy and value features (the
C++ CartPole example's agent, in NumPy), the self-check stamp of every step, and the parameter file the learner
publishes for the actors.

A pushed step is what the actor acted on and what came of it, as in the Muesli seed's Storage: obs, action,
logprob (of the behaviour policy), value (its estimate), reward and done (the outcome), truncated (cut by the
time limit), episode_return (on done steps) and stamp = [env id, step index, checksum of the other fields], so
the learner can check every step it samples.

Status is what a worker is doing (waiting for online steps, held back by the rate limiter, ...), printed as one
@state line when the launcher's watchdog asks for it (SIGUSR1)."""
import json
import os
import signal
import tempfile
import time

import numpy as np

SCHEMA = ("obs:f32[4] action:i32 logprob:f32 reward:f32 value:f32 done:bool truncated:bool episode_return:f32 "
          "stamp:u64[3]")
GAMMA = 0.98
VALUE_SCALE = 1.0 / (1.0 - GAMMA)  # V = VALUE_SCALE * u . psi keeps u of order 1
POLICY_FEATURES, VALUE_FEATURES = 5, 15
NUM_PARAMS = POLICY_FEATURES + VALUE_FEATURES
_SCALE = np.array([2.4, 3.0, 0.21, 3.0], np.float64)
_PAIRS = [(i, j) for i in range(4) for j in range(i, 4)]


def policy_features(obs):
    """[..., 5]: the scaled observation and a bias."""
    s = np.asarray(obs, np.float64) / _SCALE
    return np.concatenate([s, np.ones(s.shape[:-1] + (1,))], axis=-1)


def value_features(obs):
    """[..., 15]: a bias, the scaled observation and its 10 products."""
    s = np.asarray(obs, np.float64) / _SCALE
    prods = np.stack([s[..., i] * s[..., j] for i, j in _PAIRS], axis=-1)
    return np.concatenate([np.ones(s.shape[:-1] + (1,)), s, prods], axis=-1)


def act(params, obs, rng):
    """Actions (Bernoulli(sigmoid(logit)) for 'push right'), their log-probabilities and value estimates."""
    logit = np.clip(policy_features(obs) @ params[:POLICY_FEATURES], -30, 30)
    action = (rng.random(len(logit)) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int32)
    z = np.where(action == 1, logit, -logit)
    logprob = -np.log1p(np.exp(-z))
    value = VALUE_SCALE * (value_features(obs) @ params[POLICY_FEATURES:])
    return action, logprob.astype(np.float32), value.astype(np.float32)


def checksum(env, step, fields):
    """FNV-1a over each step's env id, step index and field bytes (vectorised over the leading dimensions)."""
    lead = np.shape(env)
    cells = int(np.prod(lead)) if lead else 1
    parts = [np.asarray(env, np.uint64), np.asarray(step, np.uint64)] + [
        np.asarray(fields[k]) for k in ("obs", "action", "logprob", "reward", "value", "done", "truncated",
                                          "episode_return")]
    raw = np.concatenate([np.ascontiguousarray(p).reshape(cells, -1).view(np.uint8) for p in parts], axis=1)
    h = np.full(cells, 1469598103934665603, dtype=np.uint64)
    prime = np.uint64(1099511628211)
    for column in raw.T:
        h = (h ^ column.astype(np.uint64)) * prime
    return h.reshape(lead)


def params_path(buffer):
    return os.path.join(tempfile.gettempdir(), f"shmreplay-{buffer}.params.npy")


def publish(path, params):
    """The learner: write the parameters to a temporary file and rename it over `path`, so a reader sees one
    whole version or the previous one, never a mix."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        np.save(f, np.asarray(params, np.float64))
    os.replace(tmp, path)


def read_params(path, last_mtime):
    """The actors: (params, mtime) when `path` changed since `last_mtime`, else (None, last_mtime)."""
    try:
        mtime = os.stat(path).st_mtime_ns
        if mtime == last_mtime:
            return None, last_mtime
        return np.load(path), mtime
    except (FileNotFoundError, ValueError, EOFError):
        return None, last_mtime


class StopFlag:
    """True once SIGTERM (the launcher's stop) or SIGINT (Ctrl-C) arrived: a worker's loops check it and end
    cleanly, releasing their leases. SIGPIPE is ignored, so a worker whose launcher died is not killed by its next
    line of output before it lets go of its leases."""

    def __init__(self):
        self.raised = False
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)

    def _on_signal(self, *_):
        self.raised = True

    def __bool__(self):
        return self.raised


class Status:
    """What this worker is doing, for the launcher's watchdog: set() records it (cheap: called every iteration),
    and answer(), called where the loops go round (at least every half second), prints one @state line when the
    launcher asked with SIGUSR1 since the last answer. The handler only sets a flag: a print from a signal handler
    could interrupt a print of the main loop. Made before the worker prints @ready, so the launcher's SIGUSR1
    (sent only to ready workers) never meets the default action, which would end the process."""

    def __init__(self, role):
        self.role, self.asked = role, False
        self.doing, self.detail, self.since = "starting", {}, time.monotonic()
        signal.signal(signal.SIGUSR1, self._on_signal)

    def _on_signal(self, *_):
        self.asked = True

    def set(self, doing, **detail):
        if doing != self.doing:
            self.doing, self.since = doing, time.monotonic()
        self.detail = detail

    def answer(self):
        if self.asked:
            self.asked = False
            print("@state " + json.dumps({"role": self.role, "pid": os.getpid(), "doing": self.doing,
                                          "for_s": round(time.monotonic() - self.since, 1), **self.detail}),
                  flush=True)
