"""shmreplay.jax's conversions of NumPy arrays to JAX arrays (``array``, ``as_arrays``): a leaf module, so that
jax.py, _jax_uniform.py and _jax_functional.py all import it and none of them imports another (the package's
docstring in jax.py says what is shared and what is copied)."""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from ._sample import Sample, bf16_fields

__all__ = ["array", "as_arrays"]


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
    """A :class:`shmreplay.Batch` as a :class:`~shmreplay.torch.Sample` of JAX arrays (a pytree): on the CPU they
    share the batch's memory; on another ``device`` (a ``jax.Device``), or with ``copy=True``, each array is copied
    once."""
    bf16 = bf16_fields(batch.schema)
    conv = lambda a, b16=False: array(a, b16, device, copy)  # noqa: E731
    return Sample({name: conv(a, name in bf16) for name, a in batch.fields.items()}, conv(batch.mask),
                  conv(batch.env_ids), conv(batch.starts))
