"""The envpool learner's agent in PyTorch: the linear actor-critic (the C++ CartPole example's agent), its V-trace
loss with autograd, and Adam. (torch.optim's first use imports torch._dynamo, which takes many seconds on a busy
2-core machine; a learner that must start fast does without it.)"""
import numpy as np
import torch

from common import NUM_PARAMS, POLICY_FEATURES, VALUE_SCALE, policy_features, value_features
from vtrace import vtrace_targets


class Agent:
    def __init__(self, lr, entropy):
        torch.set_num_threads(1)
        self.params = torch.zeros(NUM_PARAMS, dtype=torch.float64, requires_grad=True)
        self.lr, self.entropy, self.t = lr, entropy, 0
        self.m, self.v = torch.zeros(NUM_PARAMS, dtype=torch.float64), torch.zeros(NUM_PARAMS, dtype=torch.float64)

    def numpy_params(self):
        return self.params.detach().numpy()

    def update(self, b):
        """One Adam step on the V-trace loss of batch `b`; returns the mean squared V-trace error."""
        mask, params = b.mask, self.params
        f = torch.from_numpy(policy_features(b["obs"]))            # [B, L, 5]
        psi = torch.from_numpy(value_features(b["obs"]))           # [B, L, 15]
        logit = (f @ params[:POLICY_FEATURES]).clamp(-30, 30)
        v = VALUE_SCALE * (psi @ params[POLICY_FEATURES:])
        action = torch.from_numpy(b["action"] == 1)
        logpi = torch.nn.functional.logsigmoid(torch.where(action, logit, -logit))
        vs, advantage, trained = vtrace_targets(logpi.detach().numpy(), b["logprob"].astype(np.float64),
                                                v.detach().numpy(), b["reward"].astype(np.float64),
                                                b["done"] & mask, mask)
        n = max(1, int(trained.sum()))
        w = torch.from_numpy(trained.astype(np.float64)) / n
        value_loss = (((torch.from_numpy(vs) - v) / VALUE_SCALE) ** 2 * w).sum()
        p = torch.sigmoid(logit)
        entropy = -(p * torch.log(p + 1e-12) + (1 - p) * torch.log(1 - p + 1e-12))
        policy_loss = -((torch.from_numpy(advantage / VALUE_SCALE) * logpi + self.entropy * entropy) * w).sum()
        (value_loss + policy_loss).backward()
        with torch.no_grad():
            g = params.grad
            self.t += 1
            self.m.mul_(0.9).add_(g, alpha=0.1)
            self.v.mul_(0.999).addcmul_(g, g, value=0.001)
            m_hat, v_hat = self.m / (1 - 0.9 ** self.t), self.v / (1 - 0.999 ** self.t)
            params.sub_(self.lr * m_hat / (v_hat.sqrt() + 1e-8))
            params.grad = None
        return float(((vs - v.detach().numpy()) ** 2 * trained).sum() / n)
