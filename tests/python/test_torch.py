"""PyTorch on shmreplay arrays: zero-copy tensors, bf16 through its uint16 bits, and the PyTorch learner example
trained on a buffer filled by the C++ CartPole actors."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import shmreplay

torch = pytest.importorskip("torch")
import shmreplay.torch  # noqa: E402  (needs torch)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bf16_travels_as_its_uint16_bits_and_tensors_share_the_batch_memory(name):
    buf = shmreplay.Buffer.create(name, 2, 8, "w:bf16[3] h:f16[3]")
    values = torch.tensor([[1.5, -2.0, 3.25], [0.5, 1024.0, -0.125]], dtype=torch.bfloat16)
    bits = values.view(torch.int16).numpy().view(np.uint16)
    shmreplay.Writer(buf, [0, 1]).push([0, 1], {"w": bits, "h": values.float().numpy().astype(np.float16)})
    s = shmreplay.Sampler(buf)
    b = s.peek()
    w = torch.from_numpy(b["w"].view(np.int16)).view(torch.bfloat16)
    assert torch.equal(w[:, 0], values)
    assert torch.equal(torch.from_numpy(b["h"])[:, 0].float(), values.float())
    t = torch.from_numpy(b["h"])  # no copy: the tensor sees what the next out= sample writes
    s.peek([1, 0], out=b)
    assert torch.equal(t[0, 0].float(), values[1].float())


def test_as_tensors_shares_every_array_of_the_batch_and_views_bf16_as_bfloat16(name):
    buf = shmreplay.Buffer.create(name, 2, 8, "obs:u8[4,3] w:bf16[2] r:f32 d:bool")
    w = shmreplay.Writer(buf, [0, 1])
    for step in range(5):
        w.push([0, 1], {"obs": np.full((2, 4, 3), step, np.uint8), "w": np.full((2, 2), 0x4000, np.uint16),
                        "r": np.array([step, -step], np.float32), "d": np.array([True, False])})
    batch = shmreplay.Sampler(buf, seed=1).sample("replay", 6, 3)
    t = shmreplay.torch.as_tensors(batch)
    for field, a in batch.fields.items():
        assert t[field].data_ptr() == a.ctypes.data, field
    for member in ("mask", "env_ids", "starts"):
        assert getattr(t, member).data_ptr() == getattr(batch, member).ctypes.data, member
    assert t["w"].dtype == torch.bfloat16 and torch.all(t["w"][t.mask] == 2.0)
    assert t.mask.dtype == torch.bool and t.env_ids.dtype == torch.int64
    assert torch.equal(t["r"], torch.from_numpy(batch["r"].copy()))


def test_slot_tensors_write_into_the_ring_slot_in_place(name):
    buf = shmreplay.Buffer.create(name, 1, 4, "act:f32[2] w:bf16")
    writer = shmreplay.Writer(buf, [0])
    with writer.reserve(0) as slot:
        tensors = shmreplay.torch.slot_tensors(slot)
        assert tensors["act"].data_ptr() == slot["act"].ctypes.data
        tensors["act"].copy_(torch.tensor([0.5, -1.5]))
        tensors["w"].fill_(3.0)
    b = shmreplay.Sampler(buf).peek()
    assert b["act"][0, 0].tolist() == [0.5, -1.5]
    assert shmreplay.torch.tensor(b["w"], bf16=True)[0, 0].item() == 3.0


CARTPOLE_RUN = os.environ.get("SHMREPLAY_CARTPOLE_RUN")


@pytest.mark.skipif(not CARTPOLE_RUN, reason="SHMREPLAY_CARTPOLE_RUN (the built cartpole_run) is not set")
def test_the_pytorch_learner_trains_on_what_the_cpp_actors_push(name):
    learner = f"{sys.executable} {os.path.join(ROOT, 'examples', 'python', 'torch_learner.py')} --eval-seconds 1"
    # 10 s; longer in the sanitizer build, where importing torch alone takes several seconds
    seconds = os.environ.get("SHMREPLAY_CARTPOLE_SECONDS", "10")
    out = subprocess.run([CARTPOLE_RUN, "--seconds", seconds, "--json", "--quiet", "--name", name, "--learner", learner],
                         capture_output=True, text=True, env=os.environ, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout)
    assert summary["ok"] and summary["learner_report"], summary
    assert summary["violations"] == 0
    assert summary["updates"] > 10 and summary["rows_sampled"] > 500
    assert summary["pushes"] > 1000 and summary["left_running"] == 0
    assert all(p["clean"] for p in summary["processes"])
    assert summary["eval_return_last"] > 0
    assert not shmreplay.Buffer.exists(name)
    print(f"{summary['updates']} updates, greedy return {summary['eval_return_first']:.1f} -> "
          f"{summary['eval_return_last']:.1f} (best {summary['eval_return_best']:.1f})")
