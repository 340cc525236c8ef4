"""Stacked fields from Python (issue 32): a field declared NAME:DTYPE[SHAPE]:stack=AXIS is pushed and sampled whole,
and the buffer keeps one frame per step. Envs push stamped stacks (every frame's bytes name its env and serial:
stamped.py) through push, push_one and reserve, over episode resets padded with zeros, repeats or random frames,
resets whose stack continues, stacks that do not continue with no flag, and wrap-around of the frame rings; every
step that a sample of any mode, a peek or read_steps gives back is the pushed one, byte for byte, and the replay view
holds exactly the steps whose frames are still stored (the model counts them as the writer does)."""
import subprocess
import sys
import threading

import numpy as np
import pytest

import shmreplay
from stamped import SCHEMA, Model, push_steps

ATARI = "obs:u8[4,84,84]:stack=0 action:i32 reward:f32 done:bool"


def fill(name, path, steps, *, num_envs=4, capacity=16, p_done=0.1, p_jump=0.05, seed=0, priorities=False,
         stack_restarts=0):
    """A buffer of SCHEMA with `steps` rounds of pushes (each env in about 70% of them) through `path`, and its
    model."""
    extra = {"priority_exponent": 1.0} if priorities else {}
    buf = shmreplay.Buffer.create(name, num_envs, capacity, SCHEMA, done="done", stack_restarts=stack_restarts,
                                  **extra)
    model = Model(buf, stack_restarts=stack_restarts, seed=seed)
    rng = np.random.default_rng(seed)
    with shmreplay.Writer(buf, list(range(num_envs))) as w:
        for _ in range(steps):
            envs = [e for e in range(num_envs) if rng.random() < 0.7]
            if envs:
                push_steps(w, model, envs, path, rng, p_done=p_done, p_jump=p_jump, priorities=priorities)
    return buf, model


def sizes_of(sampler, model):
    return [(sampler.sizes(e).head, sampler.sizes(e).replay) for e in range(model.buffer.num_envs)]


def model_sizes(model):
    return [(h, h - model.lowest(e)) for e, h in enumerate(model.heads())]


# ----- the declaration


def test_a_field_is_stacked_on_an_axis_counted_from_the_first_or_from_the_last():
    f = shmreplay.Field("obs", "u8", (4, 84, 84), stack_axis=0)
    assert (f.stack_axis, f.stack_depth, f.frame_bytes, f.bytes) == (0, 4, 84 * 84, 4 * 84 * 84)
    last = shmreplay.Field("obs", "f32", (84, 84, 3), stack_axis=-1)  # stored normalised
    assert (last.stack_axis, last.stack_depth, last.frame_bytes) == (2, 3, 84 * 84 * 4)
    plain = shmreplay.Field("obs", "u8", (4, 84, 84))
    assert (plain.stack_axis, plain.stack_depth, plain.frame_bytes) == (None, 1, plain.bytes)
    assert f != plain and f == shmreplay.Field("obs", "u8", (4, 84, 84), stack_axis=-3)
    for axis in (3, -4):
        with pytest.raises(shmreplay.InvalidSchema, match=f"stack_axis {axis} is not an axis of shape \\[4,84,84\\]"):
            shmreplay.Field("obs", "u8", (4, 84, 84), stack_axis=axis)
    with pytest.raises(shmreplay.InvalidSchema, match="is not an axis of shape scalar"):
        shmreplay.Field("r", "f32", (), stack_axis=0)
    with pytest.raises(shmreplay.InvalidSchema, match="stacks 1 frame; a stacked axis needs at least 2"):
        shmreplay.Schema([shmreplay.Field("obs", "u8", (1, 84), stack_axis=0)])


def test_the_schema_text_carries_the_stacked_axis():
    s = shmreplay.Schema.parse("obs:u8[84,84,4]:stack=-1 action:i32")
    assert str(s) == "obs:u8[84,84,4]:stack=2 action:i32"
    assert s["obs"].stack_axis == 2 and s["action"].stack_axis is None
    assert shmreplay.Schema.parse(str(s)) == s
    assert s == shmreplay.Schema([shmreplay.Field("obs", "u8", (84, 84, 4), stack_axis=2),
                                  shmreplay.Field("action", "i32")])
    assert s != shmreplay.Schema.parse("obs:u8[84,84,4] action:i32")
    for bad, message in (("obs:u8[4,2]:stack=2", "stack axis 2 is not an axis of shape \\[4,2\\]"),
                         ("obs:u8[4,2]:stack=-3", "stack axis -3 is not an axis"),
                         ("obs:u8[4,2]:stak=0", "expected an option after ':'"),
                         ("obs:u8[4,2]:stack=x", "expected the stacked axis")):
        with pytest.raises(shmreplay.InvalidSchema, match=message):
            shmreplay.Schema.parse(bad)


def test_stack_restarts_needs_a_stacked_field_and_a_stacked_buffer_is_a_quarter_of_its_twin(name):
    with pytest.raises(shmreplay.InvalidArgument, match="stack_restarts is 3, but the schema has no stacked field"):
        shmreplay.Buffer.create(name, 2, 256, "obs:u8[4,84,84] action:i32", stack_restarts=3)
    assert not shmreplay.Buffer.exists(name)
    twin = shmreplay.Buffer.create(name, 2, 256, ATARI.replace(":stack=0", ""))
    plain = twin.total_bytes
    assert twin.stored_data_bytes == 2 * 256 * twin.step_bytes  # stored as pushed
    shmreplay.Buffer.remove(name)
    stacked = shmreplay.Buffer.create(name, 2, 256, ATARI)
    assert str(stacked.schema) == ATARI
    # the frame rings, one frame-index word per step slot, the other fields as pushed
    frames = 256 + 3 * (1 + 1 + 256 // 128)
    other = stacked.step_bytes - 4 * 84 * 84
    assert stacked.stored_data_bytes == 2 * frames * 84 * 84 + 2 * 256 * (8 + other)
    # 2 envs x (256 + 3 x (1 + 1 + 256 // 128)) frames of 7,056 bytes against 2 x 256 stacks of 28,224
    assert stacked.total_bytes < plain * 0.3, (stacked.total_bytes, plain)
    small = stacked.total_bytes
    shmreplay.Buffer.remove(name)
    more = shmreplay.Buffer.create(name, 2, 256, ATARI, stack_restarts=100).total_bytes
    assert more - small >= 2 * 3 * (100 - 3) * 84 * 84  # K - 1 frames per restart per env
    shmreplay.Buffer.remove(name)
    shmreplay.Buffer.create(name, 2, 256, ATARI)
    with pytest.raises(shmreplay.SchemaMismatch, match="stack"):
        shmreplay.Buffer.open(name, schema=ATARI.replace(":stack=0", ""))
    assert shmreplay.Buffer.open(name, schema=ATARI).schema["obs"].stack_depth == 4


# ----- every path in, every path out, byte for byte


@pytest.mark.parametrize("path", ["push", "push_one", "reserve", "mixed"])
def test_every_step_sampled_from_stamped_stacks_is_the_pushed_one_byte_for_byte(name, path):
    buf, model = fill(name, path, 150, priorities=True)
    assert list(buf.heads()) == model.heads()
    assert min(model.heads()) > 4 * buf.capacity  # the rings wrapped several times
    s = shmreplay.Sampler(buf, seed=1)
    # The replay view holds exactly the steps whose stacks can be rebuilt (some were lost to non-continuing stacks).
    assert sizes_of(s, model) == model_sizes(model)
    assert any(size < buf.capacity for _, size in model_sizes(model))
    everything = model.sampleable()
    # Flat transitions, with and without out=: every start is drawn, none outside the view.
    out = s.new_batch(1000, 1)
    seen = set()
    for batch in (s.sample_transitions("replay", 1000), s.sample_transitions("replay", 1000, out=out),
                  s.sample_transitions("replay", 1000, prioritized=True, beta=0.5)):
        assert model.check(batch) == []
        seen |= set(zip(batch.env_ids.tolist(), batch.starts.tolist()))
    assert seen == everything
    # Sequences with masks (rows run past the newest step and into the next episode), in each mode.
    out = s.new_batch(64, 5)
    for kwargs in ({}, {"power": 1.0}, {"episodes": "stop"}, {"episodes": "within"}, {"prioritized": True},
                   {"period": 2}):
        for o in (None, out):
            batch = s.sample("replay", 64, 5, out=o, **kwargs)
            assert model.check(batch) == [], kwargs
            assert set(zip(batch.env_ids.tolist(), batch.starts.tolist())) <= everything
            if kwargs.get("episodes") in ("stop", "within"):
                for r in range(batch.rows):  # no row runs past its episode's last step
                    done = batch["done"][r] & batch.mask[r]
                    if done.any():
                        assert batch.mask[r].sum() == np.argmax(done) + 1
                    if kwargs["episodes"] == "within":
                        assert batch.mask[r].all()
    # Mixed: the online view after a reset holds only what was pushed since.
    s.reset_online_queue()
    rng = np.random.default_rng(5)
    with shmreplay.Writer(buf, [0, 1, 2, 3]) as w:
        since = {e: model.heads()[e] for e in range(4)}
        for _ in range(6):
            push_steps(w, model, [0, 1, 2, 3], path, rng, p_done=0.2, p_jump=0.1, priorities=True)
    for o in (None, s.new_batch(48, 3)):
        batch = s.sample_mixed(32, 16, 3, out=o)
        assert model.check(batch) == []
        online = batch.starts[32:]
        assert all(st >= since[int(e)] for e, st in zip(batch.env_ids[32:], online))
    # Peek: each env's newest step, with and without out=.
    for o in (None, s.new_batch(4, 1)):
        p = s.peek(out=o)
        assert p.mask.all() and p.starts.tolist() == [h - 1 for h in model.heads()]
        assert model.check(p) == []
    p = s.peek([3, 1])
    assert p.env_ids.tolist() == [3, 1] and model.check(p) == []
    # read_steps (the Inspector's copy, as `shmreplay dump` and save): cut to the steps still whole.
    for e in range(4):
        first, data = buf.read_steps(e, 0, 10**6)
        assert first == model.lowest(e)
        n = model.heads()[e] - first
        assert data["obs"].shape == (n, 4, 6, 5) and data["aux"].shape == (n, 3, 2)
        fields = {k: v[:, None] for k, v in data.items()}
        assert model.check_rows(fields, np.ones((n, 1), bool), [e] * n, range(first, first + n)) == []
    s.close()


@pytest.mark.parametrize("restarts", [0, 5])
def test_stacks_that_never_continue_keep_only_the_steps_whose_frames_fit(name, restarts):
    # Every step pushes K new frames: of the ring's capacity + (K - 1) * (1 + stack_restarts) frames, the newest
    # steps whose K frames fit are whole. obs (K = 4) is the tighter field: 16 + 3 * 2 = 22 frames hold 5 steps
    # (stack_restarts 0: the default, 1 + 16 // 128 = 1); 16 + 3 * 6 = 34 hold 8.
    buf, model = fill(name, "push", 40, p_done=0.0, p_jump=1.0, stack_restarts=restarts)
    held = 5 if restarts == 0 else 8
    with shmreplay.Sampler(buf, seed=2) as s:
        assert sizes_of(s, model) == [(h, held) for h in model.heads()]
        assert model_sizes(model) == sizes_of(s, model)
        batch = s.sample_transitions("replay", 2000)
        assert model.check(batch) == []
        assert set(zip(batch.env_ids.tolist(), batch.starts.tolist())) == model.sampleable()


def test_continuing_stacks_lose_no_step_across_wrap_around_and_resets_within_stack_restarts(name):
    # Only continuing stacks after each env's first step (which stores K frames): the frame rings wrap ten times
    # and every step the ring slots hold can be sampled.
    buf, model = fill(name, "mixed", 200, p_done=0.0, p_jump=0.0)
    with shmreplay.Sampler(buf, seed=3) as s:
        assert [r for _, r in sizes_of(s, model)] == [buf.capacity] * 4
        batch = s.sample("replay", 256, 4, 1.0)
        assert model.check(batch) == []


def test_an_env_whose_stacked_field_is_a_view_on_any_axis_is_stored_as_its_bytes(name):
    # A stack given as a transposed view (the stacked axis last, as a wrapper that stacks on the channel axis)
    buf = shmreplay.Buffer.create(name, 1, 8, "obs:u8[3,4,2]:stack=-1")
    frames = [np.full((3, 4), k, np.uint8) + np.arange(12, dtype=np.uint8).reshape(3, 4) * 10 for k in range(6)]
    pushed = []
    with shmreplay.Writer(buf, [0]) as w:
        for t in range(5):
            stack = np.stack(frames[t:t + 2], axis=0).transpose(1, 2, 0)  # [3, 4, 2], not contiguous
            assert not stack.flags.c_contiguous
            w.push_one(0, {"obs": stack})
            pushed.append(stack.copy())
    with shmreplay.Sampler(buf) as s:
        b = s.sample("replay", 16, 5)
        for r in range(16):
            for t in range(5):
                if b.mask[r, t]:
                    assert np.array_equal(b["obs"][r, t], pushed[b.starts[r] + t])


# ----- updates


def test_try_update_rewrites_other_fields_and_refuses_data_for_a_stacked_one(name):
    buf, model = fill(name, "push", 20, p_done=0.0)
    with shmreplay.Sampler(buf, seed=4) as s:
        e, step = 0, model.heads()[0] - 2
        assert s.try_update(e, step, {"rew": np.float32(42.5)}) is True
        model.steps[e][step]["rew"] = np.float32(42.5)
        with pytest.raises(shmreplay.InvalidArgument,
                           match=f"cannot update step {step} of env 0 of '{name}': field 'obs' "
                                 r"\(obs:u8\[4,6,5\]:stack=0\) is stacked, and its frames are shared with the steps "
                                 "before and after it; pass no data for it"):
            s.try_update(e, step, {"obs": np.zeros((4, 6, 5), np.uint8), "rew": np.float32(1.0)})
        with pytest.raises(shmreplay.InvalidArgument, match="field 'aux'.* is stacked"):
            s.update([1, 2], [model.heads()[1] - 1, model.heads()[2] - 1], {"aux": np.zeros((2, 3, 2), np.uint16)})
        done = s.update([1], [model.heads()[1] - 1], {"rew": np.float32([7.0])})
        assert done.tolist() == [True]
        model.steps[1][-1]["rew"] = np.float32(7.0)
        # nothing else changed: the refused updates wrote nothing, the stacks around the updated steps are whole
        assert model.check(s.sample_transitions("replay", 500)) == []
        assert model.check(s.peek()) == []


# ----- threads and a writer's arrays


def test_a_thread_scribbling_on_the_pushed_array_during_pushes_corrupts_no_other_step(name):
    # A push of over 64 KiB reads the caller's arrays with the GIL released: another thread overwriting the array
    # meanwhile decides what that env's racing steps hold, but never crashes the push, never changes another env's
    # steps, and the env's steps pushed after the race are whole again.
    buf = shmreplay.Buffer.create(name, 2, 64, "obs:u8[4,128,128]:stack=0 id:u64[2]")
    model = Model(buf)
    racing = np.zeros((1, 4, 128, 128), np.uint8)
    stop = threading.Event()
    errors = []

    def scribble():
        noise = np.random.default_rng(1).integers(0, 256, (8, 128, 128), dtype=np.uint8)
        i = 0
        while not stop.is_set():
            racing[0, i % 4] = noise[i % 8]  # a whole frame at a time, or a part: NumPy copies without the GIL
            i += 1

    def push_racing(w):
        try:
            for t in range(300):
                w.push([0], {"obs": racing, "id": np.array([[0, t]], np.uint64)})
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    rng = np.random.default_rng(2)
    with shmreplay.Writer(buf, [0]) as racer, shmreplay.Writer(buf, [1]) as clean:
        threads = [threading.Thread(target=scribble), threading.Thread(target=push_racing, args=(racer,))]
        for t in threads:
            t.start()
        for _ in range(300):  # env 1 meanwhile: stamped stacks with resets and jumps, from this thread
            push_steps(clean, model, [1], "push", rng, p_done=0.05, p_jump=0.05)
        threads[1].join()
        stop.set()
        threads[0].join()
        assert errors == [] and list(buf.heads()) == [300, 300]
        # env 0 after the race: stamped stacks again (the first one continues nothing the model knows: all new)
        model.steps[0] = [None] * 300
        for _ in range(60):
            step = model.make_step(0, p_done=0.1, p_jump=0.1)
            racer.push_one(0, step)
            model.steps[0].append({k: np.array(v, copy=True) for k, v in step.items()})
    with shmreplay.Sampler(buf, seed=5) as s:
        batch = s.sample_transitions("replay", 2000)
        clean_rows = (batch.env_ids == 1) | (batch.starts >= 300)
        assert clean_rows.sum() > 500 and (batch.starts[batch.env_ids == 0] >= 300).any()
        assert model.check_rows({k: v[clean_rows] for k, v in batch.fields.items()}, batch.mask[clean_rows],
                                batch.env_ids[clean_rows], batch.starts[clean_rows]) == []
        racing_rows = ~clean_rows
        assert (batch["id"][racing_rows, 0, 0] == 0).all()  # env 0's plain field stays its own
        assert (batch["id"][racing_rows, 0, 1] == batch.starts[racing_rows]).all()


def test_a_stacked_field_of_a_reserved_step_is_the_slots_own_memory_and_outlives_the_writer(name):
    # The slot's array of a stacked field is filled in the slot and stored as frames at commit; an array kept
    # past the Writer's close (a `with` block's end) is still memory of its own. It pointed into the closed
    # Writer's freed staging area before: a 34 MiB stack (glibc maps and unmaps that) crashed the write below.
    script = f"""
import numpy as np, shmreplay
buf = shmreplay.Buffer.create({name!r}, 1, 2, "obs:u8[2,17825792]:stack=0")
with shmreplay.Writer(buf, [0]) as w:
    slot = w.reserve(0)
    obs = slot["obs"]
    obs[0], obs[1] = 1, 2
    slot.commit()
    kept = w.reserve(0)["obs"]  # abandoned with its slot by close()
obs[...] = 7
kept[...] = 9
with shmreplay.Sampler(buf) as s:
    p = s.peek()
    assert p.starts.tolist() == [0] and p["obs"][0, 0, 0, ::4096].tolist() == [1] * 4352, "stored"
    assert (p["obs"][0, 0, 1, ::4096] == 2).all(), "stored"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    if shmreplay.Buffer.exists(name):
        shmreplay.Buffer.remove(name)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stdout, out.stderr[-2000:])


def test_a_thread_writing_a_reserved_stack_through_its_commit_and_after_changes_no_stored_step(name):
    # Another thread copies frames into the slot's stacked array (NumPy releases the GIL for the copy) while this
    # thread commits, and goes on after the commit: the committed step holds some mix of the frames, and nothing
    # written after the commit reaches the buffer; the steps pushed next are whole.
    buf = shmreplay.Buffer.create(name, 1, 32, "obs:u8[4,128,128]:stack=0 id:u64[2]")
    model = Model(buf)
    noise = np.random.default_rng(3).integers(0, 256, (4, 4, 128, 128), dtype=np.uint8)
    with shmreplay.Writer(buf, [0]) as w:
        slot = w.reserve(0)
        obs = slot["obs"]
        slot["id"][...] = [0, 0]
        stop, started = threading.Event(), threading.Event()

        def scribble():
            i = 0
            while not stop.is_set():
                obs[...] = noise[i % 4]
                started.set()
                i += 1

        t = threading.Thread(target=scribble)
        t.start()
        started.wait()
        slot.commit()
        committed = buf.read_steps(0, 0, 1)[1]["obs"][0].copy()
        for _ in range(3):  # more writes after the commit
            started.clear()
            started.wait()
        stop.set()
        t.join()
        assert buf.read_steps(0, 0, 1)[1]["obs"][0].tobytes() == committed.tobytes()
        model.steps[0] = [None]
        for _ in range(40):  # wraps the 32-step ring: the racing step's frames are overwritten too
            step = model.make_step(0, p_done=0.1, p_jump=0.1)
            w.push_one(0, step)
            model.steps[0].append({k: np.array(v, copy=True) for k, v in step.items()})
    with shmreplay.Sampler(buf, seed=1) as s:
        assert model.check(s.sample("replay", 64, 3)) == []


def test_a_reserved_stack_starts_as_zeros_and_is_stored_at_commit_only(name):
    buf = shmreplay.Buffer.create(name, 1, 8, "obs:u8[3,2,2]:stack=0 a:i32")
    w = shmreplay.Writer(buf, [0])
    with w.reserve(0) as slot:
        assert slot["obs"].shape == (3, 2, 2) and not slot["obs"].any()  # zeros, not another step's stack
        slot["obs"][...] = np.arange(12, dtype=np.uint8).reshape(3, 2, 2)
        slot["a"][...] = 5
    slot = w.reserve(0)
    assert not slot["obs"].any()
    slot["obs"][:2] = np.arange(4, 12, dtype=np.uint8).reshape(2, 2, 2)  # continues the first: one new frame
    slot["obs"][2] = 99
    slot.commit()
    abandoned = w.reserve(0)
    abandoned["obs"][...] = 200
    abandoned.abandon()
    third = w.reserve(0)
    third["obs"][...] = 77  # does not continue: three new frames
    third.commit()
    w.close()
    first, data = buf.read_steps(0, 0, 8)
    assert first == 0 and data["a"].tolist() == [5, 0, 0]
    assert data["obs"].reshape(3, 12).tolist() == [list(range(12)), list(range(4, 12)) + [99] * 4, [77] * 12]


# ----- the hand-overs: PyTorch, JAX


def test_torch_tensors_of_a_stacked_batch_hold_the_pushed_stacks_and_a_slots_tensor_fills_a_stack(name):
    torch = pytest.importorskip("torch")
    import shmreplay.torch as st
    buf, model = fill(name, "mixed", 60)
    with shmreplay.Sampler(buf, seed=6) as s:
        for batch in (s.sample("replay", 32, 4, 1.0), s.sample_transitions("replay", 64), s.peek()):
            t = st.as_tensors(batch)
            assert t["obs"].data_ptr() == batch["obs"].ctypes.data  # shared, not copied
            assert t["obs"].shape == (batch.rows, batch.sequence_length, 4, 6, 5) and t["obs"].dtype == torch.uint8
            assert model.check_rows({k: v.numpy() for k, v in t.fields.items()}, t.mask.numpy(), t.env_ids.numpy(),
                                    t.starts.numpy()) == []
    # slot_tensors: a policy writes the stack through a tensor before the commit
    with shmreplay.Writer(buf, [0]) as w:
        step = model.make_step(0)
        with w.reserve(0) as slot:
            tensors = st.slot_tensors(slot)
            for k, v in step.items():
                tensors[k].copy_(torch.from_numpy(np.array(v)))
        model.pushed(0, step)
    with shmreplay.Sampler(buf, seed=7) as s:
        assert model.check(s.peek([0])) == []


def test_jax_arrays_of_a_stacked_batch_hold_the_pushed_stacks_and_a_uniform_buffer_attaches_to_one(name):
    jax = pytest.importorskip("jax")
    import shmreplay.jax as sj
    buf, model = fill(name, "push", 60)
    with shmreplay.Sampler(buf, seed=8) as s:
        batch = s.sample("replay", 32, 4, 1.0)
        x = sj.as_arrays(batch)
        assert x["obs"].unsafe_buffer_pointer() == batch["obs"].ctypes.data  # shared through DLPack
        assert model.check_rows({k: np.asarray(v) for k, v in x.fields.items()}, np.asarray(x.mask),
                                batch.env_ids, batch.starts) == []
        copied = sj.as_arrays(s.sample_transitions("replay", 64), copy=True)
        assert copied["obs"].shape == (64, 1, 4, 6, 5)
    # The seed's UniformBuffer calls on a stacked buffer (attached without a prototype: dicts by field name)
    ub = sj.UniformBuffer.attach(name)
    steps = [model.make_step(e) for e in range(4)]
    ub.push_env_updates({k: np.stack([s[k] for s in steps]) for k in steps[0]}, np.arange(4))
    for e, step in enumerate(steps):
        model.pushed(e, step)
    tree, mask = ub.sample_rb_and_oq(jax.random.PRNGKey(9), 16, 8, 3)
    assert tree["obs"].shape == (24, 3, 4, 6, 5)
    tree = {k: np.asarray(v) for k, v in tree.items()}
    ids = tree["id"][:, 0]  # each row's first step is there: (env, step)
    assert np.asarray(mask)[:, 0].all()
    assert model.check_rows(tree, np.asarray(mask), ids[:, 0], ids[:, 1]) == []
    ub.close()


def test_a_jax_pytree_buffer_declares_its_stacked_leaves_with_stack_axes_and_attaches_with_its_prototype(name):
    jax = pytest.importorskip("jax")
    import shmreplay.jax as sj
    proto = {"obs": np.zeros((4, 3, 5), np.uint8), "action": np.int32(0)}
    with pytest.raises(ValueError, match="no leaf for"):
        sj.UniformBuffer.init(proto, 2, 16, name=name, stack_axes={"pixels": 0})
    assert not shmreplay.Buffer.exists(name)
    ub = sj.UniformBuffer.init(proto, 2, 16, name=name, stack_axes={"obs": 0})
    assert ub.buffer.schema["obs"].stack_axis == 0
    # Two steps of env 0 whose stacks continue: frames f0..f3, then f1..f4.
    frames = np.arange(5 * 15, dtype=np.uint8).reshape(5, 3, 5)
    for t in range(2):
        ub.push_env_updates({"obs": frames[t:t + 4][None], "action": np.array([t], np.int32)}, np.array([0]))
    other = sj.UniformBuffer.attach(name, proto)  # the prototype's schema is the buffer's, stacking included
    tree, mask = other.sample_rb_and_oq(jax.random.PRNGKey(1), 16, 0, 2)
    obs, mask, action = np.asarray(tree["obs"]), np.asarray(mask), np.asarray(tree["action"])
    assert mask[:, 0].all() and set(action[:, 0].tolist()) == {0, 1}  # rows start at step 0 or 1 of env 0
    for r in range(16):
        for j in np.flatnonzero(mask[r]):
            t = int(action[r, j])  # the step's index, pushed as its action
            assert (obs[r, j] == frames[t:t + 4]).all()
    other.close()
    ub.close()


# ----- the episodes rule (stack_continuity="episodes")


def test_the_episodes_rule_gives_exact_stacks_when_the_flags_mark_every_restart_and_needs_episode_fields(name):
    buf = shmreplay.Buffer.create(name, 4, 16, SCHEMA, done="done", stack_continuity="episodes")
    assert buf.stack_continuity == "episodes"
    assert shmreplay.Buffer.open(name).stack_continuity == "episodes"
    model = Model(buf, seed=3)
    rng = np.random.default_rng(3)
    with shmreplay.Writer(buf, [0, 1, 2, 3]) as w:
        for _ in range(150):  # every restart follows a done step: no flagless jump
            push_steps(w, model, [e for e in range(4) if rng.random() < 0.7] or [0], "mixed", rng, p_done=0.1)
    s = shmreplay.Sampler(buf, seed=2)
    for batch in (s.sample_transitions("replay", 1000), s.sample("replay", 64, 5), s.peek()):
        assert model.check(batch) == []
    s.close()
    for bad, message in (({"stack_continuity": "sometimes"}, "expected 'compare' or 'episodes'"),
                         ({"stack_continuity": "episodes", "done": None}, "no episode fields")):
        kwargs = {"done": "done", **bad}
        with pytest.raises(shmreplay.InvalidArgument, match=message):
            shmreplay.Buffer.create(name + "-bad", 1, 8, SCHEMA, **kwargs)
    assert not shmreplay.Buffer.exists(name + "-bad")

