"""shmreplay batches and step slots as PyTorch tensors, without a copy on the CPU::

    import shmreplay, shmreplay.torch
    batch = sampler.sample("replay", 256, 16, out=batch)
    t = shmreplay.torch.as_tensors(batch)          # t.fields["obs"], t.mask, t.env_ids, t.starts
    loss = model(t["obs"])[t.mask].mean()

- On the CPU every tensor shares the batch's memory (``torch.from_numpy``): no byte is copied, and the next
  sample with ``out=batch`` changes what the tensors hold, so take a new batch (or alternate two) while the
  tensors of the last one are still in use.
- bf16 fields come out as ``torch.bfloat16`` tensors, still sharing the memory (NumPy holds their bits as uint16).
- ``device="cuda"`` (any device but the CPU) makes one copy per array, with ``non_blocking`` when the batch memory
  is pinned; nothing else can avoid that copy, since the batch lives in host memory.
- :func:`slot_tensors` gives the tensors of a reserved step (``Writer.reserve``): they are views of the ring slot in
  shared memory, so a policy can write its outputs straight into the buffer before ``commit()`` (a stacked field's
  tensor is memory of the slot's own, stored as frames at ``commit()``).
"""
import numpy as np
import torch

from ._sample import Sample, bf16_fields

__all__ = ["Sample", "as_tensors", "slot_tensors", "tensor"]


def tensor(array, bf16=False):
    """One NumPy array as a tensor sharing its memory; ``bf16=True`` views uint16 bits as ``torch.bfloat16``."""
    if bf16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def as_tensors(batch, device=None, non_blocking=False):
    """A :class:`shmreplay.Batch` as a :class:`Sample` of tensors: on the CPU (``device`` None or "cpu") they
    share the batch's memory; on another device each array is copied once (``tensor.to(device)``)."""
    bf16 = bf16_fields(batch.schema)
    fields = {name: tensor(array, name in bf16) for name, array in batch.fields.items()}
    out = Sample(fields, torch.from_numpy(batch.mask), torch.from_numpy(batch.env_ids),
                 torch.from_numpy(batch.starts))
    if device is None or torch.device(device).type == "cpu":
        return out
    move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
    return Sample({k: move(v) for k, v in out.fields.items()}, move(out.mask), move(out.env_ids), move(out.starts))


def slot_tensors(slot):
    """``{name: tensor}`` of a reserved step (``Writer.reserve``): views of the ring slot in shared memory (a stacked
    field's: of the slot's own memory, stored as frames at commit), written in place
    (``slot_tensors(slot)["action"].copy_(a)``); valid until the slot is committed or abandoned."""
    bf16 = bf16_fields(slot.schema)
    return {name: tensor(array, name in bf16) for name, array in slot.fields.items()}
