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
from ._jax_arrays import array, as_arrays
from ._jax_functional import ReplayBuffer, State, uniform_replay
from ._jax_uniform import UniformBuffer, key_seed
from ._sample import Sample

__all__ = ["ReplayBuffer", "Sample", "State", "UniformBuffer", "array", "as_arrays", "key_seed", "uniform_replay"]
