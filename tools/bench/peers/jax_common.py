"""What the JAX peers (flashbax, dejax) share: they are functional buffers in one process, so the "writer" is
the measuring process itself, which keeps the buffer state and replaces it with what the jitted add returns
(state donated, as their documentation advises); every add and sample is waited for (`block_until_ready`), so
a figure is the work done, not the work queued. Data is put on the device once, before timing (a JAX user's
steps are already JAX arrays).
"""
import jax
import jax.numpy as jnp
import numpy as np


def device(data):
    return {k: jnp.asarray(v) for k, v in data.items()}


def keys(n=64, seed=0):
    return list(jax.random.split(jax.random.PRNGKey(seed), n))


class Cycle:
    """A sample call on a fresh key each time (cycling through `keys()`), waited for."""

    def __init__(self, fn, state_of):
        self.fn, self.state_of, self.keys, self.i = fn, state_of, keys(), 0

    def __call__(self):
        self.i = (self.i + 1) % len(self.keys)
        return jax.block_until_ready(self.fn(self.state_of(), self.keys[self.i]))


def numpy_rows(tree):
    return {k: np.asarray(v) for k, v in tree.items()}
