"""JAX on shmreplay batches: arrays handed over through DLPack without a copy on the CPU (pointers compared),
bf16 as bfloat16, a copy when asked for, and a jitted function taking the Sample pytree."""
import numpy as np
import pytest

import shmreplay

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
import shmreplay.jax  # noqa: E402  (needs jax)

SCHEMA = "obs:u8[6,5] act:i32 rew:f32 w:bf16[3] h:f16[2] d:bool"


def filled_batch(name, rows=8, length=4):
    buf = shmreplay.Buffer.create(name, 2, 16, SCHEMA)
    w = shmreplay.Writer(buf, [0, 1])
    for step in range(10):
        env = np.array([0, 1])
        w.push(env, {"obs": np.full((2, 6, 5), step, np.uint8) + env[:, None, None].astype(np.uint8),
                     "act": env * 100 + step, "rew": np.float32(step) + env,
                     "w": np.full((2, 3), 0x3F80 + step, np.uint16),  # bfloat16 1.0, 1.0078125, ...
                     "h": np.full((2, 2), step, np.float16), "d": np.array([step % 2 == 0] * 2)})
    s = shmreplay.Sampler(buf, seed=3)
    return s, s.sample("replay", rows, length)


def pointer(x):
    return x.unsafe_buffer_pointer()


def test_every_array_of_a_batch_reaches_jax_without_a_copy(name):
    _, batch = filled_batch(name)
    x = shmreplay.jax.as_arrays(batch)
    for field, a in batch.fields.items():
        assert pointer(x.fields[field]) == a.ctypes.data, field
    assert pointer(x.mask) == batch.mask.ctypes.data
    # int64 env ids and starts: shared when JAX has 64-bit types on, converted to int32 (a copy) when not
    x64 = jax.config.jax_enable_x64
    for member in ("env_ids", "starts"):
        assert (pointer(getattr(x, member)) == getattr(batch, member).ctypes.data) == x64, member
        np.testing.assert_array_equal(np.asarray(getattr(x, member)), getattr(batch, member))
    np.testing.assert_array_equal(np.asarray(x["obs"]), batch["obs"])
    np.testing.assert_array_equal(np.asarray(x.mask), batch.mask)
    assert x["w"].dtype == jnp.bfloat16 and x["h"].dtype == jnp.float16 and x.mask.dtype == jnp.bool_
    np.testing.assert_array_equal(np.asarray(x["w"].astype(jnp.float32)),
                                  (batch["w"].astype(np.uint32) << 16).view(np.float32))


def test_a_copy_when_asked_for_has_its_own_memory_and_the_same_values(name):
    _, batch = filled_batch(name)
    x = shmreplay.jax.as_arrays(batch, copy=True)
    for field, a in batch.fields.items():
        assert pointer(x.fields[field]) != a.ctypes.data, field
        np.testing.assert_array_equal(np.asarray(x.fields[field]).view(a.dtype), a)


def test_a_jitted_function_takes_the_sample_as_a_pytree(name):
    _, batch = filled_batch(name)
    x = shmreplay.jax.as_arrays(batch)

    @jax.jit
    def masked_reward(sample):
        return jnp.sum(jnp.where(sample.mask, sample.fields["rew"], 0.0))

    assert float(masked_reward(x)) == pytest.approx(float(batch["rew"][batch.mask].sum()))
