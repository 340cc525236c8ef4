"""shmreplay batches as JAX arrays, without a copy on the CPU::

    import shmreplay, shmreplay.jax
    batch = sampler.sample("replay", 256, 16)
    x = shmreplay.jax.as_arrays(batch)            # a Sample (a pytree): x.fields["obs"], x.mask, ...
    loss = jitted_loss(params, x)

- On the CPU each array reaches JAX through DLPack (``jax.numpy.from_dlpack``) without a copy: JAX's CPU client
  takes foreign memory only when it starts on a 64-byte boundary, and every array of a Batch does (the batch
  storage guarantees it). bf16 fields (uint16 bits in NumPy) are viewed as ``ml_dtypes.bfloat16``, which NumPy's
  DLPack cannot export, and handed over by ``jax.device_put``, also without a copy on the CPU.
- 64-bit arrays (i64, u64 and f64 fields, env_ids and starts) are shared only with ``jax_enable_x64`` on; by
  default JAX converts them to 32 bits, which is a copy.
- JAX arrays are immutable, but these share the batch's memory: sampling again into the same batch (``out=``)
  changes them. Take a new batch per step, or alternate two batches and let the step that reads one finish
  (``block_until_ready``) before sampling into it again; ``copy=True`` gives arrays of their own instead.
- ``device=`` another device (a GPU) makes one copy per array (``jax.device_put``).
- JAX cannot write into shared memory: to push from JAX, pass the arrays to ``Writer.push`` (one copy into the
  ring, through ``numpy.asarray``).
"""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from ._sample import Sample, bf16_fields

__all__ = ["ReplayBuffer", "Sample", "State", "UniformBuffer", "array", "as_arrays", "key_seed", "uniform_replay"]


def array(a, bf16=False, device=None, copy=False):
    """One NumPy array as a JAX array: shared on the CPU (DLPack; bf16 via ``device_put`` of an ``ml_dtypes``
    view), copied once onto another ``device``, or copied with ``copy=True``."""
    if bf16:
        a = a.view(ml_dtypes.bfloat16)
    if copy:
        return jnp.array(a) if device is None else jax.device_put(np.array(a), device)
    if device is not None and device.platform != "cpu":
        return jax.device_put(a, device)
    if bf16:
        return jax.device_put(a, device)
    return jnp.from_dlpack(a)


def as_arrays(batch, device=None, copy=False):
    """A :class:`shmreplay.Batch` as a :class:`~shmreplay.torch.Sample` of JAX arrays (a pytree): on the CPU they share the batch's
    memory; on another ``device`` (a ``jax.Device``), or with ``copy=True``, each array is copied once."""
    bf16 = bf16_fields(batch.schema)
    conv = lambda a, b16=False: array(a, b16, device, copy)  # noqa: E731
    return Sample({name: conv(a, name in bf16) for name, a in batch.fields.items()}, conv(batch.mask),
                  conv(batch.env_ids), conv(batch.starts))


from ._jax_uniform import UniformBuffer, key_seed  # noqa: E402  (it uses array() above)
from ._jax_functional import ReplayBuffer, State, uniform_replay  # noqa: E402
