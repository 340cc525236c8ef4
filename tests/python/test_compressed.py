"""Compressed fields from Python (issue 45): a field declared NAME:DTYPE[SHAPE]:lz4 or :zstd=LEVEL (stacked or not)
is pushed and sampled as always, and every step any sampling mode, peek, read_steps, a checkpoint, PyTorch or JAX
gives back is the pushed one, byte for byte; the byte budget is sized by create's compressed_bytes= or
expected_compression=; in-place updates rewrite the other fields and refuse the compressed one with its reason.
The envs are stamped.py's (continuing stacks, resets padded with zeros, repeats or random frames, jumps without a
flag), on frames large enough for the codecs to shrink."""
import numpy as np
import pytest

import shmreplay
from stamped import Model, push_steps

# `obs` stacked on its first axis (lz4), `aux` on its last (zstd 1), `pix` an unstacked compressed field (zstd 3), and
# plain fields beside them. 32x32 u8 frames of stamped.py's pattern repeat every 251 bytes: the codecs shrink them.
SCHEMA = ("obs:u8[4,32,32]:stack=0:lz4 aux:u16[16,16,2]:stack=-1:zstd=1 pix:u8[8,8,3]:zstd=3 id:u64[2] rew:f32 "
          "done:bool")
BUDGET = 64 << 20  # holds every frame the descriptors hold: only the frame rings' rule cuts the views


def fill(name, path, steps, *, num_envs=4, capacity=16, p_done=0.1, p_jump=0.05, seed=0, priorities=False,
         compressed_bytes=BUDGET):
    extra = {"priority_exponent": 1.0} if priorities else {}
    buf = shmreplay.Buffer.create(name, num_envs, capacity, SCHEMA, done="done", compressed_bytes=compressed_bytes,
                                  **extra)
    model = Model(buf, seed=seed)
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


def test_a_field_declares_its_codec_and_the_schema_text_and_repr_show_it():
    f = shmreplay.Field("obs", "u8", (4, 84, 84), stack_axis=0, codec="lz4")
    assert (f.codec, f.codec_level, f.stack_depth) == ("lz4", 0, 4)
    assert str(f) == "obs:u8[4,84,84]:stack=0:lz4" and repr(f) == "shmreplay.Field('obs:u8[4,84,84]:stack=0:lz4')"
    z = shmreplay.Field("pix", "u8", (64, 64, 3), codec="zstd=5")
    assert (z.codec, z.codec_level) == ("zstd", 5)
    assert shmreplay.Field("pix", "u8", (64, 64, 3), codec="zstd").codec_level == 3
    plain = shmreplay.Field("pix", "u8", (64, 64, 3))
    assert (plain.codec, plain.codec_level) == (None, 0) and plain != z
    schema = shmreplay.Schema.parse(SCHEMA)
    assert [(x.name, x.codec, x.codec_level) for x in schema] == [
        ("obs", "lz4", 0), ("aux", "zstd", 1), ("pix", "zstd", 3), ("id", None, 0), ("rew", None, 0),
        ("done", None, 0)]
    assert str(schema) == SCHEMA.replace("stack=-1", "stack=2") and shmreplay.Schema([f, z]).fields[1] == z
    with pytest.raises(shmreplay.InvalidSchema, match="zstd level"):
        shmreplay.Field("pix", "u8", (8,), codec="zstd=40")
    with pytest.raises(shmreplay.InvalidSchema, match="gzip"):
        shmreplay.Field("pix", "u8", (8,), codec="gzip")


def test_create_takes_a_byte_budget_or_an_expected_ratio_and_only_with_a_compressed_field(name):
    # The budget's bytes go to the envs' rings (with their descriptors and index words besides): a bigger budget
    # is a bigger segment, by about the difference.
    small = shmreplay.Buffer.create(name, 2, 64, "obs:u8[4,32,32]:stack=0:lz4", compressed_bytes=1 << 20)
    small_bytes = small.total_bytes
    shmreplay.Buffer.remove(name)
    big = shmreplay.Buffer.create(name, 2, 64, "obs:u8[4,32,32]:stack=0:lz4", compressed_bytes=4 << 20)
    assert big.total_bytes - small_bytes == pytest.approx(3 << 20, abs=4096)
    shmreplay.Buffer.remove(name)
    # expected_compression: the frames' bytes as pushed over the ratio (default 4)
    by_default = shmreplay.Buffer.create(name, 2, 64, "obs:u8[4,32,32]:stack=0:lz4").total_bytes
    shmreplay.Buffer.remove(name)
    halved = shmreplay.Buffer.create(name, 2, 64, "obs:u8[4,32,32]:stack=0:lz4", expected_compression=8.0)
    assert halved.total_bytes < by_default
    shmreplay.Buffer.remove(name)
    with pytest.raises(shmreplay.InvalidArgument, match="compressed_bytes"):
        shmreplay.Buffer.create(name, 2, 64, "obs:u8[4,32,32]:stack=0", compressed_bytes=1 << 20)
    with pytest.raises(shmreplay.InvalidArgument, match="expected_compression is 0.5"):
        shmreplay.Buffer.create(name, 2, 64, "obs:u8[4,32,32]:stack=0:lz4", expected_compression=0.5)
    with pytest.raises(shmreplay.InvalidArgument, match="fewer than the"):
        shmreplay.Buffer.create(name, 2, 64, "obs:u8[4,32,32]:stack=0:lz4", compressed_bytes=1024)
    assert not shmreplay.Buffer.exists(name)


@pytest.mark.parametrize("path", ["push", "push_one", "reserve", "mixed"])
def test_every_step_sampled_from_compressed_stacks_is_the_pushed_one_byte_for_byte(name, path):
    buf, model = fill(name, path, 150, priorities=True)
    assert list(buf.heads()) == model.heads()
    s = shmreplay.Sampler(buf, seed=1)
    assert sizes_of(s, model) == model_sizes(model)
    everything = model.sampleable()
    seen = set()
    for batch in (s.sample_transitions("replay", 1000), s.sample_transitions("replay", 1000, out=s.new_batch(1000, 1)),
                  s.sample_transitions("replay", 1000, prioritized=True, beta=0.5)):
        assert model.check(batch) == []
        seen |= set(zip(batch.env_ids.tolist(), batch.starts.tolist()))
    assert seen == everything
    out = s.new_batch(64, 5)
    for kwargs in ({}, {"power": 2.0}, {"episodes": "stop"}, {"episodes": "within"}, {"prioritized": True},
                   {"period": 2}):
        for o in (None, out):
            batch = s.sample("replay", 64, 5, out=o, **kwargs)
            assert model.check(batch) == [], kwargs
            assert set(zip(batch.env_ids.tolist(), batch.starts.tolist())) <= everything
    # priorities of sampled steps, then prioritized draws again
    batch = s.sample_transitions("replay", 64, prioritized=True)
    s.update_priorities(batch.env_ids, batch.starts, np.linspace(0.1, 5.0, 64, dtype=np.float32))
    assert model.check(s.sample("replay", 32, 3, prioritized=True)) == []
    for e in range(4):
        first, data = buf.read_steps(e, 0, 10**6)
        assert first == model.lowest(e)
        n = model.heads()[e] - first
        fields = {k: v[:, None] for k, v in data.items()}
        assert model.check_rows(fields, np.ones((n, 1), bool), [e] * n, range(first, first + n)) == []
    # mixed after an online reset: the online rows are the steps pushed since (a new Writer's first step of an env
    # stores all K frames of a compressed stack, which the model does not count: the views are not compared after)
    s.reset_online_queue()
    rng = np.random.default_rng(5)
    with shmreplay.Writer(buf, [0, 1, 2, 3]) as w:
        since = {e: model.heads()[e] for e in range(4)}
        for _ in range(6):
            push_steps(w, model, [0, 1, 2, 3], path, rng, p_done=0.2, p_jump=0.1, priorities=True)
    batch = s.sample_mixed(32, 16, 3)
    assert model.check(batch) == []
    assert all(st >= since[int(e)] for e, st in zip(batch.env_ids[32:], batch.starts[32:]))
    for o in (None, s.new_batch(4, 1)):
        p = s.peek(out=o)
        assert p.mask.all() and p.starts.tolist() == [h - 1 for h in model.heads()]
        assert model.check(p) == []
    s.close()


def test_a_byte_budget_the_frames_overflow_keeps_fewer_steps_each_exact(name):
    # Noise frames (the codec cannot shrink them) in the least budget create allows (two steps' frames as pushed per
    # env, about 8 frames): continuing stacks, one new frame a step, so an env holds about 5 of its 64 slots' steps,
    # and every one sampled or read is the pushed stack.
    buf = shmreplay.Buffer.create(name, 2, 64, "obs:u8[4,32,32]:stack=0:lz4 n:u32", compressed_bytes=2 * 16448)
    rng = np.random.default_rng(3)
    frames = rng.integers(0, 256, (2, 203, 32, 32), dtype=np.uint8)  # env e's step s shows frames s .. s+3
    with shmreplay.Writer(buf, [0, 1]) as w:
        for t in range(200):
            w.push([0, 1], {"obs": frames[:, t:t + 4], "n": np.full(2, t, np.uint32)})
    with shmreplay.Sampler(buf, seed=2) as s:
        held = [s.sizes(e).replay for e in range(2)]
        assert all(2 <= h < 16 for h in held), held
        batch = s.sample("replay", 64, 2)
        for r, t in zip(*np.nonzero(batch.mask)):
            e, step = int(batch.env_ids[r]), int(batch.starts[r]) + int(t)
            assert step >= 200 - held[e] and batch["n"][r, t] == step
            assert np.array_equal(batch["obs"][r, t], frames[e, step:step + 4])
    for e in range(2):
        first, data = buf.read_steps(e, 0, 200)
        assert first == 200 - held[e]
        assert all(np.array_equal(data["obs"][i], frames[e, first + i:first + i + 4]) for i in range(held[e]))


def test_try_update_rewrites_the_other_fields_and_refuses_data_for_a_compressed_one_with_its_reason(name):
    buf, model = fill(name, "push", 20, p_done=0.0)
    with shmreplay.Sampler(buf, seed=4) as s:
        e, step = 0, model.heads()[0] - 2
        assert s.try_update(e, step, {"rew": np.float32(42.5)}) is True
        model.steps[e][step]["rew"] = np.float32(42.5)
        with pytest.raises(shmreplay.InvalidArgument,
                           match=r"field 'pix' \(pix:u8\[8,8,3\]:zstd=3\) is compressed: its frames are records of "
                                 "their own size"):
            s.try_update(e, step, {"pix": np.zeros((8, 8, 3), np.uint8), "rew": np.float32(1.0)})
        with pytest.raises(shmreplay.InvalidArgument, match="field 'obs'"):
            s.update([1], [model.heads()[1] - 1], {"obs": np.zeros((1, 4, 32, 32), np.uint8)})
        assert s.update([1], [model.heads()[1] - 1], {"rew": np.float32([7.0])}).tolist() == [True]
        model.steps[1][-1]["rew"] = np.float32(7.0)
        assert model.check(s.sample_transitions("replay", 500)) == []
        assert model.check(s.peek()) == []


@pytest.mark.parametrize("decode", [False, True], ids=["as-records", "decoded"])
def test_a_checkpoint_of_a_compressed_buffer_loads_back_every_step_byte_for_byte(name, tmp_path, decode):
    buf, model = fill(name, "mixed", 80)
    info = shmreplay.save(buf, tmp_path / "c.shmrckpt", decode_compressed=decode)
    assert info.total_steps == sum(h - model.lowest(e) for e, h in enumerate(model.heads()))
    # Saved as records, the file is about the records' bytes; decoded, it holds every step's 4x32x32 obs stack whole.
    whole_obs = info.total_steps * 4 * 32 * 32
    assert (info.file_bytes > whole_obs) == decode, (info.file_bytes, whole_obs)
    copy = f"{name}-copy"
    try:
        shmreplay.load(tmp_path / "c.shmrckpt", copy)
        loaded = shmreplay.Buffer.open(copy)
        assert loaded.schema == buf.schema
        for e in range(4):
            # A new buffer made by load gets each field at least the source's ring (CheckpointInfo.
            # expected_compression): it holds every saved step, each exact.
            first, data = loaded.read_steps(e, 0, 10**6)
            assert first == model.lowest(e)
            n = model.heads()[e] - first
            fields = {k: v[:, None] for k, v in data.items()}
            assert model.check_rows(fields, np.ones((n, 1), bool), [e] * n, range(first, first + n)) == []
        with shmreplay.Sampler(loaded, seed=3) as s:
            assert model.check(s.sample("replay", 32, 4)) == []
    finally:
        if shmreplay.Buffer.exists(copy):
            shmreplay.Buffer.remove(copy)


def test_torch_and_jax_batches_of_a_compressed_buffer_hold_the_pushed_stacks(name):
    buf, model = fill(name, "mixed", 60)
    with shmreplay.Sampler(buf, seed=6) as s:
        torch = pytest.importorskip("torch")
        import shmreplay.torch as st
        batch = s.sample("replay", 32, 4)
        t = st.as_tensors(batch)
        assert t["obs"].dtype == torch.uint8 and t["obs"].data_ptr() == batch["obs"].ctypes.data
        assert model.check_rows({k: v.numpy() for k, v in t.fields.items()}, t.mask.numpy(), t.env_ids.numpy(),
                                t.starts.numpy()) == []
        pytest.importorskip("jax")
        import shmreplay.jax as sj
        batch = s.sample("replay", 32, 4)
        x = sj.as_arrays(batch)
        assert model.check_rows({k: np.asarray(v) for k, v in x.fields.items()}, np.asarray(x.mask),
                                batch.env_ids, batch.starts) == []
