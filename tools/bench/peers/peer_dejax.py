"""dejax (JAX, one process), as its README uses it: `uniform_replay(max_size)`, `init_fn` with one step as the
prototype, jitted `add_fn` (one step per call) and `add_batch_fn` (256 per call, its `lax.scan` over `add_fn`),
with the state donated, and jitted `sample_fn` of 256 items. dejax has no sequence sampling.

dejax 0.1.3 (its latest) calls `jnp.alltrue`, which JAX deprecated as an alias of `jnp.all` and then removed;
with the JAX that flashbax pulls in here its sample fails with AttributeError. This adapter restores the alias
(`jnp.alltrue = jnp.all`, the same function) before importing dejax, and jits its sample under
`checkify.checkify` (its bounds check is a `checkify.check`, which JAX refuses to stage otherwise).
"""
import jax.numpy as jnp

if not hasattr(jnp, "alltrue"):
    jnp.alltrue = jnp.all
import importlib.metadata

import dejax
import jax
from jax.experimental import checkify

import jax_common
import workloads


class _Writer:
    def __init__(self, owner, rows):
        self.owner, self.rows = owner, rows
        fn = owner.buffer.add_fn if rows == 1 else owner.buffer.add_batch_fn
        self.add_fn = jax.jit(fn, donate_argnums=0)

    def prepare(self, data):
        return jax_common.device(workloads.one(data) if self.rows == 1 else data)

    def add(self, data):
        self.owner.state = jax.block_until_ready(self.add_fn(self.owner.state, data))

    def close(self):
        pass


class Adapter:
    name = "dejax uniform_replay"
    form = "one process (functional state in JAX arrays)"
    multi_process = False
    mp_context = "fork"
    no_kind = {"seq": "no sequence sampling", "prioritized": "no prioritized sampling"}

    def __init__(self):
        self.buffer = self.state = None

    @staticmethod
    def version():
        return f"dejax {importlib.metadata.version('dejax')}, jax {jax.__version__}"

    def create(self, step, capacity):
        self.buffer = dejax.uniform_replay(max_size=capacity)
        self.state = self.buffer.init_fn(jax_common.device(workloads.one(workloads.batch(step, 1))))

    def writer(self, step, rows, widx):
        return _Writer(self, rows)

    def sampler_fn(self, kind):
        if kind != "flat":
            return None
        # its index check (checkify.check) must be functionalised to run under jit; the error is returned, not raised
        sample = jax.jit(checkify.checkify(lambda state, key: self.buffer.sample_fn(state, key, workloads.FLAT_BATCH)))
        return jax_common.Cycle(sample, lambda: self.state)

    def close(self):
        self.buffer = self.state = None
