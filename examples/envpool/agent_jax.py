"""The envpool learner's agent in JAX: the same linear actor-critic and V-trace loss as agent_torch.py, its
gradient by jax.grad (jit-compiled once for the batch shape), and Adam, in float64 (jax_enable_x64) so that both
learners compute the same numbers."""
import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from common import NUM_PARAMS, POLICY_FEATURES, VALUE_SCALE, policy_features, value_features  # noqa: E402
from vtrace import vtrace_targets  # noqa: E402


def _forward(params, f, psi, action):
    logit = jnp.clip(f @ params[:POLICY_FEATURES], -30, 30)
    v = VALUE_SCALE * (psi @ params[POLICY_FEATURES:])
    logpi = jax.nn.log_sigmoid(jnp.where(action, logit, -logit))
    return logit, v, logpi


def _loss(params, f, psi, action, vs, advantage, w, entropy_coef):
    logit, v, logpi = _forward(params, f, psi, action)
    value_loss = (((vs - v) / VALUE_SCALE) ** 2 * w).sum()
    p = jax.nn.sigmoid(logit)
    entropy = -(p * jnp.log(p + 1e-12) + (1 - p) * jnp.log(1 - p + 1e-12))
    policy_loss = -((advantage / VALUE_SCALE * logpi + entropy_coef * entropy) * w).sum()
    return value_loss + policy_loss


class Agent:
    def __init__(self, lr, entropy):
        self.params = jnp.zeros(NUM_PARAMS, jnp.float64)
        self.lr, self.entropy, self.t = lr, entropy, 0
        self.m, self.v = jnp.zeros(NUM_PARAMS), jnp.zeros(NUM_PARAMS)
        self._forward = jax.jit(_forward)
        self._grad = jax.jit(jax.grad(_loss))

    def numpy_params(self):
        return np.asarray(self.params)

    def update(self, b):
        """One Adam step on the V-trace loss of batch `b`; returns the mean squared V-trace error."""
        mask = b.mask
        f, psi, action = policy_features(b["obs"]), value_features(b["obs"]), b["action"] == 1
        _, v, logpi = (np.asarray(x) for x in self._forward(self.params, f, psi, action))
        vs, advantage, trained = vtrace_targets(logpi, b["logprob"].astype(np.float64), v,
                                                b["reward"].astype(np.float64), b["done"] & mask, mask)
        n = max(1, int(trained.sum()))
        g = self._grad(self.params, f, psi, action, vs, advantage, trained / n, self.entropy)
        self.t += 1
        self.m = 0.9 * self.m + 0.1 * g
        self.v = 0.999 * self.v + 0.001 * g * g
        m_hat, v_hat = self.m / (1 - 0.9 ** self.t), self.v / (1 - 0.999 ** self.t)
        self.params = self.params - self.lr * m_hat / (jnp.sqrt(v_hat) + 1e-8)
        return float(((vs - v) ** 2 * trained).sum() / n)
