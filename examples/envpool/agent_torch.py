"""The envpool learner's agent in PyTorch: the linear actor-critic (the C++ CartPole example's agent) as a module,
its V-trace loss with autograd, and Adam. With several learner ranks (--learners K) the module is wrapped in
DistributedDataParallel, which all-reduces (averages) the gradients in backward(); every rank then takes the same
Adam step, so the parameters stay equal. (torch.optim's first use imports torch._dynamo, which takes many seconds
on a busy 2-core machine; a learner that must start fast does without it.)"""
import numpy as np
import torch

from common import NUM_PARAMS, POLICY_FEATURES, VALUE_SCALE, policy_features, value_features
from vtrace import vtrace_targets


class LinearActorCritic(torch.nn.Module):
    """The policy logit and the value of each step: one float64 parameter vector (policy weights, then value
    weights), the features computed in NumPy by common.py."""

    def __init__(self):
        super().__init__()
        self.params = torch.nn.Parameter(torch.zeros(NUM_PARAMS, dtype=torch.float64))

    def forward(self, f, psi):
        logit = (f @ self.params[:POLICY_FEATURES]).clamp(-30, 30)
        v = VALUE_SCALE * (psi @ self.params[POLICY_FEATURES:])
        return logit, v


class Agent:
    """distributed: this process is one rank of an initialised torch.distributed group; update() then needs
    `total`, a function of this rank's count of trained steps that returns the count over all ranks (a collective
    every rank calls once per update) or None when the ranks agreed to stop."""

    def __init__(self, lr, entropy, distributed=False):
        torch.set_num_threads(1)
        self.model = LinearActorCritic()
        self.params = self.model.params
        self.world_size = 1
        self.net = self.model
        if distributed:
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel
            self.world_size = dist.get_world_size()
            self.net = DistributedDataParallel(self.model)  # broadcasts rank 0's parameters to every rank
        self.lr, self.entropy, self.t = lr, entropy, 0
        self.m, self.v = torch.zeros(NUM_PARAMS, dtype=torch.float64), torch.zeros(NUM_PARAMS, dtype=torch.float64)

    def numpy_params(self):
        return self.params.detach().numpy()

    def update(self, b, total=None):
        """One Adam step on the V-trace loss of batch `b`; returns the mean squared V-trace error of this rank's
        rows, or None (no step taken) when `total` says the ranks stop. The loss is the mean over the trained steps
        of every rank's rows: each rank weighs its steps by 1 / (the count over all ranks), times the world size
        that DistributedDataParallel's average divides by, so ranks with more rows (K not dividing the batch) or
        more trained steps count for more, as those steps would in one learner's batch."""
        mask = b.mask
        f = torch.from_numpy(policy_features(b["obs"]))            # [B, L, 5]
        psi = torch.from_numpy(value_features(b["obs"]))           # [B, L, 15]
        logit, v = self.net(f, psi)
        action = torch.from_numpy(b["action"] == 1)
        logpi = torch.nn.functional.logsigmoid(torch.where(action, logit, -logit))
        vs, advantage, trained = vtrace_targets(logpi.detach().numpy(), b["logprob"].astype(np.float64),
                                                v.detach().numpy(), b["reward"].astype(np.float64),
                                                b["done"] & mask, mask)
        n = max(1, int(trained.sum()))
        if total is None:
            w = torch.from_numpy(trained.astype(np.float64)) / n
        else:
            everyone = total(int(trained.sum()))
            if everyone is None:
                return None
            w = torch.from_numpy(trained.astype(np.float64)) * (self.world_size / max(1, everyone))
        value_loss = (((torch.from_numpy(vs) - v) / VALUE_SCALE) ** 2 * w).sum()
        p = torch.sigmoid(logit)
        entropy = -(p * torch.log(p + 1e-12) + (1 - p) * torch.log(1 - p + 1e-12))
        policy_loss = -((torch.from_numpy(advantage / VALUE_SCALE) * logpi + self.entropy * entropy) * w).sum()
        (value_loss + policy_loss).backward()                      # DistributedDataParallel: all-reduces the grad
        with torch.no_grad():
            g = self.params.grad
            self.t += 1
            self.m.mul_(0.9).add_(g, alpha=0.1)
            self.v.mul_(0.999).addcmul_(g, g, value=0.001)
            m_hat, v_hat = self.m / (1 - 0.9 ** self.t), self.v / (1 - 0.999 ** self.t)
            self.params.sub_(self.lr * m_hat / (v_hat.sqrt() + 1e-8))
            self.params.grad = None
        return float(((vs - v.detach().numpy()) ** 2 * trained).sum() / n)
