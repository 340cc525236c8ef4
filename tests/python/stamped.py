"""Stamped stacks for the tests of stacked fields (test_stacks.py and the hand-over, reuse and Ray tests): envs whose
observations are stacks of K frames, newest last, as envpool and gymnasium's frame-stack wrappers give them, with
every frame's bytes naming its env and its serial number; a reference model of what each env pushed; and the check
that every sampled, peeked or read step is the pushed one, byte for byte.

The envs do what real ones do and what they should not: continuing stacks (one new frame per step), episode resets
whose stack is padded with zeros, with the first frame repeated, or with frames that were never pushed as steps of
their own, resets flagged `done` whose stack continues anyway, and stacks that do not continue their previous step's
with no flag at all. The buffer trusts none of it (it compares bytes), so the model needs none of it either: it
keeps the pushed stacks and, to know which steps the buffer can still rebuild, counts the frames each step needs the
way the writer does (docs/design/stacks.md)."""
import numpy as np

# Two stacked fields: `obs` stacked on its first axis (4 frames of 6x5 u8, copied whole), `aux` on its last (2 frames
# of 3 u16, interleaved), and plain fields beside them: `id` = (env, step), a reward and the episode flag.
SCHEMA = "obs:u8[4,6,5]:stack=0 aux:u16[3,2]:stack=-1 id:u64[2] rew:f32 done:bool"
STACKED = ("obs", "aux")


def stacked_fields(schema):
    """{name: (axis, depth, frame shape)} of the schema's stacked fields."""
    out = {}
    for f in schema.fields:
        if f.stack_axis is not None:
            shape = tuple(d for i, d in enumerate(f.shape) if i != f.stack_axis)
            out[f.name] = (f.stack_axis, f.stack_depth, shape)
    return out


def stamp(dtype, shape, env, serial):
    """Frame `serial` of `env`: its first elements hold env and serial (u8: in base 256), the rest a pattern of
    both, so that two frames' bytes differ unless they are the same frame."""
    n = int(np.prod(shape))
    info = np.iinfo(dtype)
    modulus = int(info.max) + 1 - 5  # values < modulus: a prime-ish pattern that does not repeat across frames
    values = (np.arange(n, dtype=np.int64) * 7 + env * 131 + serial * 17) % modulus
    if dtype == np.uint8:
        head = [env, serial % 256, serial // 256 % 256]
    else:
        head = [env, serial % 65536]
    values[:len(head)] = head
    return values.astype(dtype).reshape(shape)


class StampedEnv:
    """One env's stacked observations: `next(reset, jump)` gives the stack of each stacked field for its next step.
    `reset` (None, "zeros", "repeat", "random", "continue"): the step starts an episode, its stack padded with zero
    frames, with its first frame repeated, or with random frames never pushed as steps, or continuing the last
    stack (an env that keeps its frames across a reset). `jump`: the stack does not continue the last one (K new
    frames), with no flag."""

    def __init__(self, env, fields, dtypes, rng):
        self.env = env
        self.fields = fields  # {name: (axis, depth, frame shape)}
        self.dtypes = dtypes
        self.rng = rng
        self.serial = 0
        self.frames = {name: None for name in fields}

    def _frame(self, name):
        self.serial += 1
        return stamp(self.dtypes[name], self.fields[name][2], self.env, self.serial)

    def next(self, reset=None, jump=False):
        stacks = {}
        for name, (axis, depth, shape) in self.fields.items():
            frames = self.frames[name]
            if frames is None or jump:
                frames = [self._frame(name) for _ in range(depth)]
            elif reset in (None, "continue"):
                frames = frames[1:] + [self._frame(name)]
            else:
                first = self._frame(name)
                if reset == "zeros":
                    pad = [np.zeros_like(first)] * (depth - 1)
                elif reset == "repeat":
                    pad = [first] * (depth - 1)
                elif reset == "random":
                    pad = [self.rng.integers(0, np.iinfo(self.dtypes[name]).max, shape, endpoint=True,
                                             dtype=self.dtypes[name]) for _ in range(depth - 1)]
                else:
                    raise ValueError(reset)
                frames = pad + [first]
            self.frames[name] = frames
            stacks[name] = np.stack(frames, axis=axis)
        return stacks


class Model:
    """What every env of a buffer was pushed, and which of its steps the buffer can still rebuild.

    `frames_of[name]`: the frames per ring of each stacked field, capacity + (K - 1) * (1 + stack_restarts). A step
    needs one new frame when its stack continues its env's previous step's (frames 1..K-1 of that one equal
    frames 0..K-2 of this one, byte for byte), else K; its stack is lost once a later step's frames overwrite its
    oldest."""

    def __init__(self, buffer, stack_restarts=None, seed=0):
        self.buffer = buffer
        self.schema = buffer.schema
        self.cap = buffer.capacity
        self.fields = stacked_fields(self.schema)
        self.dtypes = {f.name: f.numpy_dtype for f in self.schema.fields}
        restarts = stack_restarts if stack_restarts else 1 + self.cap // 128
        # one frame more where that is exactly K x capacity (create's rule, so that a 1.5 library refuses the segment)
        # A compressed field (docs/design/compression.md) codes each frame against the one before it, with a key frame
        # every 4: a step needs its frames back to the multiple of 4 at or below its oldest, and the field has 3
        # descriptors more than the frame ring's frames.
        codecs = {f.name: f.codec for f in self.schema.fields}
        self.key_every = {name: 4 if codecs[name] else 1 for name in self.fields}
        self.frames_of = {name: self.cap + (depth - 1) * (1 + restarts) + (restarts == self.cap - 1)
                          + self.key_every[name] - 1
                          for name, (_, depth, _) in self.fields.items()}
        self.rng = np.random.default_rng(seed)
        n = buffer.num_envs
        self.envs = [StampedEnv(e, self.fields, self.dtypes, self.rng) for e in range(n)]
        self.steps = [[] for _ in range(n)]  # per env, per step: {field: pushed array}
        self.newest = [{name: [] for name in self.fields} for _ in range(n)]  # per step: its newest frame's index
        self.done_next = [None] * n  # the reset style of an env's next step (after a done), or None

    def make_step(self, env, p_done=0.0, p_jump=0.0, styles=("zeros", "repeat", "random", "continue")):
        """The data of env's next step (not yet pushed: call `pushed` after), with random episode ends and jumps."""
        step = len(self.steps[env])
        reset = self.done_next[env]
        jump = reset is None and step > 0 and self.rng.random() < p_jump
        data = self.envs[env].next(reset=reset, jump=jump)
        done = bool(self.rng.random() < p_done)
        self.done_next[env] = styles[self.rng.integers(len(styles))] if done else None
        for f in self.schema.fields:
            if f.name in data:
                continue
            if f.name == "id":
                data["id"] = np.array([env, step], np.uint64)
            elif f.name == "done":
                data["done"] = np.bool_(done)
            else:  # any other plain field: a function of env and step
                data[f.name] = np.full(f.shape, (env * 1000 + step) % 251, f.numpy_dtype)
        return data

    def pushed(self, env, data):
        """Record that `data` was pushed as env's next step."""
        step = len(self.steps[env])
        for name, (axis, depth, _) in self.fields.items():
            stack = np.moveaxis(np.asarray(data[name]), axis, 0)
            index = self.newest[env][name]
            if step == 0:
                index.append(depth - 1)
            else:
                prev = np.moveaxis(np.asarray(self.steps[env][-1][name]), axis, 0)
                continues = prev[1:].tobytes() == stack[:-1].tobytes()
                index.append(index[-1] + (1 if continues else depth))
        self.steps[env].append({k: np.array(v, copy=True) for k, v in data.items()})

    def heads(self):
        return [len(s) for s in self.steps]

    def lowest(self, env):
        """The oldest step of env that the buffer can still give: in the ring, and with its oldest frame stored."""
        head = len(self.steps[env])
        lo = max(0, head - self.cap)
        for name, (_, depth, _) in self.fields.items():
            index = self.newest[env][name]
            if not index:
                continue
            end = index[-1] + 1  # frames stored so far
            first_kept = end - self.frames_of[name]
            k = self.key_every[name]
            while lo < head and (index[lo] - (depth - 1)) // k * k < first_kept:
                lo += 1
        return lo

    def sampleable(self):
        """{(env, start)}: every step the replay view holds."""
        return {(e, s) for e in range(len(self.steps)) for s in range(self.lowest(e), len(self.steps[e]))}

    def check_rows(self, fields, mask, env_ids, starts):
        """Every step of every row (mask True) is the pushed step, byte for byte; masked steps are zeros. `fields`:
        {name: array [rows, length, *shape]}. Returns a list of problems (empty: fine)."""
        problems = []
        mask = np.asarray(mask)
        for r in range(mask.shape[0]):
            env, start = int(env_ids[r]), int(starts[r])
            for t in range(mask.shape[1]):
                for name in self.dtypes:
                    got = np.asarray(fields[name][r, t])
                    if mask[r, t]:
                        if not 0 <= start + t < len(self.steps[env]):
                            problems.append(f"row {r}: env {env} step {start + t} was never pushed")
                            break
                        want = self.steps[env][start + t][name]
                        if got.tobytes() != np.asarray(want, got.dtype).tobytes():
                            problems.append(f"row {r} t {t}: field '{name}' of env {env} step {start + t} is not "
                                            f"the pushed one: {got.ravel()[:8]} vs {np.asarray(want).ravel()[:8]}")
                    elif got.any():
                        problems.append(f"row {r} t {t}: masked field '{name}' is not zero")
        return problems

    def check(self, batch):
        """check_rows of a shmreplay.Batch (or anything with fields, mask, env_ids and starts)."""
        return self.check_rows(batch.fields, batch.mask, batch.env_ids, batch.starts)


def push_steps(writer, model, envs, path, rng, p_done=0.0, p_jump=0.0, priorities=False):
    """One step of each env in `envs` through `path`: "push" (one Writer.push of all of them, its obs array
    sometimes not contiguous), "push_one", "reserve" (each field filled into the StepSlot's arrays, then commit) or
    "mixed" (one of them at random). Records them in the model."""
    if path == "mixed":
        path = ("push", "push_one", "reserve")[rng.integers(3)]
    steps = [model.make_step(e, p_done, p_jump) for e in envs]
    if path == "push":
        data = {k: np.stack([s[k] for s in steps]) for k in steps[0]}
        if rng.random() < 0.5:  # a strided view: converted by the binding, same bytes
            wide = np.zeros(data["obs"].shape[:-1] + (2 * data["obs"].shape[-1],), data["obs"].dtype)
            wide[..., ::2] = data["obs"]
            data["obs"] = wide[..., ::2]
            assert not data["obs"].flags.c_contiguous
        p = rng.uniform(0.5, 4.0, len(envs)).astype(np.float32) if priorities else None
        writer.push(np.array(envs, np.int32), data, priorities=p)
    elif path == "push_one":
        for e, s in zip(envs, steps):
            writer.push_one(e, s)
    elif path == "reserve":
        for e, s in zip(envs, steps):
            with writer.reserve(e) as slot:
                for k, v in s.items():
                    slot[k][...] = v
                if priorities:
                    slot.set_priority(float(rng.uniform(0.5, 4.0)))
    else:
        raise ValueError(path)
    for e, s in zip(envs, steps):
        model.pushed(e, s)
