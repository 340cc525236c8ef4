"""Pytrees as shmreplay schemas: one field per leaf, named after the leaf's path in the tree.

A prototype item (any nesting of dicts, tuples, lists, NamedTuples or dataclasses registered with JAX, of arrays
or scalars) gives a Schema with one field per leaf, in JAX's flattening order, named by the path:
``{"obs": x, "info": {"ret": y}}`` gives the fields ``obs`` and ``info.ret``; a NamedTuple's attribute is its
name, a tuple's element its index (``act.0``); a path that would start with a digit gets a leading ``_``."""
import re

import jax
import numpy as np

from ._dtypes import DTYPES
from ._shmreplay import Field, Schema


def _key_text(key):
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def field_name(path):
    """The field name of a leaf's key path: its parts joined by '.', made of [A-Za-z0-9_.-]."""
    name = ".".join(_key_text(k) for k in path) or "item"
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
    return name if re.match(r"[A-Za-z_]", name) else "_" + name


def shm_dtype(dtype):
    """The shmreplay dtype text of a NumPy/JAX dtype (bfloat16 included), or a clear error."""
    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16":
        return "bf16"
    if dtype not in DTYPES:
        raise TypeError(f"a leaf of dtype {dtype} cannot be stored: shmreplay stores u8 i8 u16 i16 u32 i32 u64 i64 "
                        "f16 bf16 f32 f64 and bool")
    return DTYPES[dtype]


class TreeSchema:
    """A prototype pytree's structure and the shmreplay Schema of its leaves. ``stack_axes``: ``{field name:
    axis}`` of the leaves that are stacks of frames along that axis, newest last (stacked fields, stored one frame
    per step; every other leaf is stored as pushed)."""

    def __init__(self, prototype, stack_axes=None):
        stack_axes = dict(stack_axes or {})
        with_path, self.treedef = jax.tree_util.tree_flatten_with_path(prototype)
        if not with_path:
            raise ValueError("the item prototype has no leaves")
        fields, self.names = [], []
        for path, leaf in with_path:
            a = np.asarray(leaf)
            name = field_name(path)
            if name in self.names:
                raise ValueError(f"two leaves of the item prototype would both be the field '{name}'")
            self.names.append(name)
            fields.append(Field(name, shm_dtype(a.dtype), list(a.shape), stack_axis=stack_axes.pop(name, None)))
        if stack_axes:
            raise ValueError(f"stack_axes names {sorted(stack_axes)}, which the item prototype has no leaf for (its "
                             f"fields: {', '.join(self.names)})")
        self.schema = Schema(fields)
        self.bf16 = {f.name for f in fields if f.dtype == "bf16"}

    def flatten(self, tree, what="the update"):
        """``{field name: leaf}`` of a tree of this structure (an error naming both structures if it differs)."""
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        if treedef != self.treedef:
            raise ValueError(f"{what} has the structure {treedef}, the buffer's items have {self.treedef}")
        return dict(zip(self.names, leaves))

    def unflatten(self, by_name):
        """The tree of this structure whose leaves are ``by_name[field name]``."""
        return jax.tree_util.tree_unflatten(self.treedef, [by_name[n] for n in self.names])
