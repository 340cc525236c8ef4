"""shmreplay.torchrl: TorchRL's ReplayBuffer and TensorDictReplayBuffer on a SharedStorage. Every sampled item is
compared with what was added for it (each added step names its env and time step), with TorchRL's RandomSampler,
the shared PrioritizedSampler and SliceSampler, after wrap-around, and after state_dict / dumps round trips."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrl", reason="shmreplay.torchrl needs torchrl and tensordict (the torchrl extra)")
from tensordict import TensorDict  # noqa: E402
from torchrl.data import RandomSampler, ReplayBuffer, TensorDictReplayBuffer  # noqa: E402

import shmreplay  # noqa: E402
import shmreplay.torchrl as st  # noqa: E402


def episode_end(env, t):
    return (t + env) % (5 + env) == 4


def steps(envs, t0, t1):
    """[envs, t1 - t0] steps: observation [env, t, 7], action, ("next", ...) with done at episode ends."""
    e = torch.arange(envs)[:, None].expand(envs, t1 - t0)
    t = torch.arange(t0, t1)[None, :].expand(envs, t1 - t0)
    obs = torch.stack([e.float(), t.float(), torch.full_like(t, 7).float()], -1)
    done = torch.tensor([[episode_end(i, j) for j in range(t0, t1)] for i in range(envs)])
    return TensorDict({"observation": obs, "action": (t * 3 + e) % 5,
                       ("next", "observation"): obs + torch.tensor([0.0, 1.0, 0.0]),
                       ("next", "reward"): (t * 10 + e).float(), ("next", "done"): done,
                       ("next", "terminated"): done, ("next", "truncated"): torch.zeros_like(done)},
                      [envs, t1 - t0])


def check(sample, capacity=None, newest=None):
    """Problems (empty: none): every row is the step its observation names, and its index is that step's slot."""
    problems = []
    for r in range(sample.shape[0]):
        e, t = int(sample["observation"][r, 0]), int(sample["observation"][r, 1])
        want = steps(e + 1, t, t + 1)[e, 0]
        for key in want.keys(include_nested=True, leaves_only=True):
            if not torch.equal(sample[key][r], want[key]):
                problems.append(f"row {r}: {key} of step (env {e}, t {t}) is {sample[key][r]}, added {want[key]}")
        if capacity is not None and "index" in sample.keys() and int(sample["index"][r]) != e * capacity + t % capacity:
            problems.append(f"row {r}: index {int(sample['index'][r])} of step (env {e}, t {t})")
        if newest is not None and t <= newest[e] - capacity:
            problems.append(f"row {r}: step (env {e}, t {t}) is no longer stored")
    return problems


@pytest.mark.parametrize("cls", [ReplayBuffer, TensorDictReplayBuffer])
def test_every_sampled_item_is_the_step_added_also_after_wrap_around(closing, cls):
    s = st.SharedStorage(3 * 16, num_envs=3)
    closing.append(s)
    rb = cls(storage=s, writer=st.SharedWriter(), sampler=RandomSampler(), batch_size=64)
    for t0 in range(0, 40, 4):
        index = rb.extend(steps(3, t0, t0 + 4))
    assert len(s) == 3 * 16 and index.shape == (3, 4)
    seen = set()
    for _ in range(10):
        sample = rb.sample()
        assert check(sample, 16, newest=[39, 39, 39]) == []
        seen |= {(int(o[0]), int(o[1])) for o in sample["observation"]}
    assert {(e, 39) for e in range(3)} <= seen, "the newest steps were never drawn"
    kept = rb.sample()
    copy = kept.clone()
    for _ in range(4):
        rb.sample()   # a sample shares the buffer's batch arrays: later draws must not fill the ones it holds
    assert (kept == copy).all()
    assert check(rb[index].reshape(-1), 16) == []   # reading by index, as TorchRL's rb[index] does


def test_a_vector_step_goes_one_row_per_env(closing):
    s = st.SharedStorage(2 * 32, num_envs=2)
    closing.append(s)
    rb = TensorDictReplayBuffer(storage=s, writer=st.SharedWriter(), batch_size=32)
    for t in range(10):
        rb.extend(steps(2, t, t + 1)[:, 0])
    assert list(s.buffer.heads()) == [10, 10]
    assert check(rb.sample(), 32) == []


def test_slices_are_consecutive_steps_of_one_env_inside_one_episode(closing):
    s = st.SharedStorage(2 * 64, num_envs=2)
    closing.append(s)
    rb = TensorDictReplayBuffer(storage=s, writer=st.SharedWriter(), sampler=st.SliceSampler(slice_len=3),
                                batch_size=30)
    rb.extend(steps(2, 0, 50))
    for _ in range(10):
        sample = rb.sample()
        assert check(sample, 64) == []
        obs = sample["observation"].reshape(10, 3, 3)
        assert torch.all(obs[:, 1:, 0] == obs[:, :1, 0]) and torch.all(obs[:, 1:, 1] - obs[:, :-1, 1] == 1)
        assert not sample["next", "done"].reshape(10, 3)[:, :-1].any(), "a slice crosses an episode end"


def test_prioritized_draws_follow_updated_priorities_with_importance_weights(closing):
    s = st.SharedStorage(2 * 64, num_envs=2, priority_exponent=1.0)
    closing.append(s)
    sampler = st.PrioritizedSampler(beta=1.0)
    rb = TensorDictReplayBuffer(storage=s, writer=st.SharedWriter(), sampler=sampler, batch_size=256,
                                priority_key="td_error")
    index = rb.extend(steps(2, 0, 20)).reshape(-1)
    sampler.update_priority(index, torch.full((40,), 1e-3), storage=s)
    favourite = index[7]
    sampler.update_priority(favourite[None], torch.tensor([0.05]), storage=s)
    sample, info = rb.sample(return_info=True)
    assert check(sample, 64) == []
    hits = (sample["index"] == favourite).float().mean().item()
    assert abs(hits - 0.05 / (0.05 + 39e-3)) < 0.12   # P = priority / total (alpha 1)
    weights = info["priority_weight"]
    assert torch.all(weights[sample["index"] == favourite] < weights[sample["index"] != favourite].min())


def test_state_dict_and_dumps_carry_the_steps_to_another_storage(closing, tmp_path):
    s = st.SharedStorage(2 * 32, num_envs=2)
    closing.append(s)
    rb = TensorDictReplayBuffer(storage=s, writer=st.SharedWriter(), batch_size=64)
    rb.extend(steps(2, 0, 12))
    state = rb.state_dict()
    rb.dumps(tmp_path / "rb")
    for restore in ("state_dict", "dumps"):
        other = st.SharedStorage(2 * 32, num_envs=2)
        closing.append(other)
        rb2 = TensorDictReplayBuffer(storage=other, writer=st.SharedWriter(), batch_size=64)
        if restore == "state_dict":
            rb2.load_state_dict(state)
        else:
            rb2.extend(steps(2, 100, 101))   # made, then overwritten by the load
            rb2.loads(tmp_path / "rb")
        assert other.buffer.name != s.buffer.name and list(other.buffer.heads()) == [12, 12]
        assert check(rb2.sample(), 32, newest=[11, 11]) == []


def test_a_second_storage_opened_by_name_writes_its_own_env_ids(closing):
    s = st.SharedStorage(4 * 16, num_envs=2, name=f"torchrl-test-{id(closing)}")
    closing.append(s)
    rb = TensorDictReplayBuffer(storage=s, writer=st.SharedWriter(), batch_size=64)
    rb.extend(steps(2, 0, 5))
    with pytest.raises(shmreplay.LeaseHeld):
        TensorDictReplayBuffer(storage=st.SharedStorage.open(s.buffer.name, num_envs=2),
                               writer=st.SharedWriter()).extend(steps(2, 5, 6))
