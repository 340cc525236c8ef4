"""What shmreplay.torch and shmreplay.jax share: a sampled Batch as one framework's arrays."""
from typing import Any, Dict, NamedTuple


class Sample(NamedTuple):
    """A sampled :class:`shmreplay.Batch` as one framework's arrays (a NamedTuple, so also a JAX pytree).

    fields: ``{name: array [rows, length, *shape]}`` in schema order; mask: bool ``[rows, length]`` (True where a
    step is valid); env_ids and starts: int64 ``[rows]`` (the row's env and the step index of its first step).
    ``sample["obs"]`` is ``sample.fields["obs"]``."""

    fields: Dict[str, Any]
    mask: Any
    env_ids: Any
    starts: Any

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.fields[key]
        return tuple.__getitem__(self, key)


def bf16_fields(schema):
    """The names of the schema's bf16 fields: NumPy holds their bits as uint16; a framework views them as bfloat16."""
    return {f.name for f in schema.fields if f.dtype == "bf16"}
