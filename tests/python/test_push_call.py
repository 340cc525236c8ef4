"""Writer.push and push_one as vectorcall methods (lib/python/push_call.cpp): Python's argument rules, any mapping
as data, keys found by pointer or by value, push_one's scalars stored as the general conversion stores them, and
the GIL kept for small pushes without losing a step when threads share a Writer."""
import inspect
import threading
import types
from collections.abc import Mapping

import numpy as np
import pytest

import shmreplay
from conftest import check_batch, payload


def peek_all(buffer):
    with shmreplay.Sampler(buffer) as s:
        return s.peek()


def test_push_and_push_one_are_method_descriptors_with_their_signatures():
    # the fast entry is what a call reaches: a pybind11 method would be an instancemethod
    assert isinstance(shmreplay.Writer.__dict__["push"], types.MethodDescriptorType)
    assert isinstance(shmreplay.Writer.__dict__["push_one"], types.MethodDescriptorType)
    assert list(inspect.signature(shmreplay.Writer.push).parameters) == ["self", "env_ids", "data", "priorities"]
    assert list(inspect.signature(shmreplay.Writer.push_one).parameters) == ["self", "env", "data"]
    assert "envpool's recv" in shmreplay.Writer.push.__doc__


def test_arguments_bind_by_position_or_keyword_with_pythons_type_errors(buffer):
    w = shmreplay.Writer(buffer, [0, 1])
    w.push([0], payload([0], [0]))
    w.push(env_ids=[0], data=payload([0], [1]))
    w.push([0], data=payload([0], [2]), priorities=None)
    w.push_one(env=1, data={k: v[0] for k, v in payload([1], [0]).items()})
    assert list(buffer.heads())[:2] == [3, 1]
    with pytest.raises(TypeError, match=r"push\(\) missing required argument 'data' \(pos 2\)"):
        w.push([0])
    with pytest.raises(TypeError, match=r"push\(\) takes at most 3 arguments \(4 given\)"):
        w.push([0], payload([0], [3]), None, None)
    with pytest.raises(TypeError, match=r"push\(\) got an unexpected keyword argument 'envs'"):
        w.push(envs=[0], data=payload([0], [3]))
    with pytest.raises(TypeError, match=r"push\(\) got multiple values for argument 'env_ids'"):
        w.push([0], payload([0], [3]), env_ids=[0])
    with pytest.raises(TypeError, match=r"push_one\(\) missing required argument 'env'"):
        w.push_one(data={})
    with pytest.raises(TypeError, match="push: data must be a dict"):
        w.push([0], [1, 2])
    with pytest.raises(TypeError, match="Writer"):
        shmreplay.Writer.push(object(), [0], payload([0], [3]))
    assert list(buffer.heads())[:2] == [3, 1]  # nothing written by a refused call


def test_a_subclass_that_skips_writer_init_is_refused_before_it_can_push():
    class Lazy(shmreplay.Writer):
        def __init__(self):
            pass

    with pytest.raises(TypeError, match=r"Writer.__init__\(\) must be called"):
        Lazy()


class FrozenMapping(Mapping):
    def __init__(self, d):
        self._d = dict(d)

    def __getitem__(self, key):
        return self._d[key]

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)


def test_data_may_be_any_mapping_with_keys_in_any_order_made_at_run_time(buffer):
    w = shmreplay.Writer(buffer, [0, 1, 2, 3])
    w.push([0], FrozenMapping(payload([0], [0])))
    w.push([1], types.MappingProxyType(payload([1], [0])))
    reordered = dict(reversed(list(payload([2], [0]).items())))
    w.push([2], reordered)
    built = {"".join(["he", "ad"]) if k == "head" else k: v for k, v in payload([3], [0]).items()}
    key = next(iter(built))
    assert key == "head" and key is not next(iter(payload([0], [0])))  # equal to the name, not the same object
    for step in range(3):  # the same run-time keys again (remembered), then fresh ones
        w.push([3], built if step < 2 else {str(k): v for k, v in payload([3], [step]).items()})
        built = {k: v for k, v in zip(built, payload([3], [step + 1]).values())}

    class Name(str):
        pass

    w.push([0], {Name(k): v for k, v in payload([0], [1]).items()})  # a str subclass: found by value
    assert list(buffer.heads()) == [2, 1, 1, 3]
    assert check_batch(peek_all(buffer)) == []
    with pytest.raises(shmreplay.InvalidArgument, match="'bogus' is not a field"):
        w.push([0], {**payload([0], [2]), "bogus": np.zeros(1)})
    with pytest.raises(shmreplay.InvalidArgument, match="field names must be str"):
        w.push([0], {**payload([0], [2]), 7: np.zeros(1)})
    missing = payload([0], [2])
    del missing["half"]
    with pytest.raises(shmreplay.SizeMismatch, match="no data for field 'half'"):
        w.push([0], missing)
    assert list(buffer.heads()) == [2, 1, 1, 3]


DTYPES = ["u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f16", "bf16", "f32", "f64", "bool"]


def test_push_one_stores_every_kind_of_scalar_as_the_general_conversion_does(name):
    schema = shmreplay.Schema.parse(" ".join(f"v_{d}:{d}" for d in DTYPES))
    buf = shmreplay.Buffer.create(name, 2, 4, schema)
    w = shmreplay.Writer(buf, [0, 1])
    values = [0, 1, -1, 127, 128, 255, 256, -129, 2**31, 2**63 - 1, 2**63, -(2**63), 2**64, 0.5, -2.75, 1e300,
              True, False, np.float32(1.25), np.float64(1 / 3), np.int8(-5), np.uint16(65535), np.bool_(True),
              np.float16(0.1), np.int64(-7), np.uint64(2**64 - 1)]
    for field in schema.fields:
        for value in values:
            # env 0: push_one with the scalar (the scalar path where it applies); env 1: the same value as a
            # 1-element array through push (always the general conversion)
            def attempt(call):
                try:
                    with np.errstate(all="ignore"):
                        call()
                    return None
                except shmreplay.Error as e:
                    return type(e)

            base = {f.name: np.zeros(f.shape, f.numpy_dtype) for f in schema.fields}
            one = attempt(lambda: w.push_one(0, {**base, field.name: value}))
            batch = {k: v[None] for k, v in base.items()}
            arr = attempt(lambda: w.push([1], {**batch, field.name: np.asarray([value])}))
            assert one == arr, (field.name, value)
            if one is None:
                p = peek_all(buf)
                last = p[field.name][[0, 1], p.mask.sum(axis=1) - 1]
                assert last[0].tobytes() == last[1].tobytes(), (field.name, value, last)


def test_threads_sharing_a_writer_lose_no_step_whether_a_push_keeps_the_gil_or_not(name):
    # 16 envs x 8 KiB: a 16-env push (128 KiB) releases the GIL, push_one (8 KiB) keeps it unless the other
    # thread holds the Writer; every step is one byte value throughout, so a torn step would show
    num_envs, per_thread = 16, 300
    buf = shmreplay.Buffer.create(name, num_envs, 1024, "x:u8[8192] tag:u32")
    w = shmreplay.Writer(buf, list(range(num_envs)))
    ids = np.arange(num_envs, dtype=np.int32)
    errors = []

    def batched():
        try:
            for i in range(per_thread):
                x = np.full((num_envs, 8192), i % 251, np.uint8)
                w.push(ids, {"x": x, "tag": np.full(num_envs, i % 251, np.uint32)})
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    def single():
        try:
            for i in range(per_thread * num_envs):
                env = i % num_envs
                w.push_one(env, {"x": np.full(8192, i % 251, np.uint8), "tag": i % 251})
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=batched), threading.Thread(target=single)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert list(buf.heads()) == [2 * per_thread] * num_envs
    p = peek_all(buf)
    assert p.mask.all()
    x = p["x"]
    assert (x == x[..., :1]).all()  # no torn step
    assert (x[..., 0] == p["tag"]).all()


def test_push_repeated_the_cpp_baseline_pushes_count_steps(buffer):
    w = shmreplay.Writer(buffer, [0, 1, 2, 3])
    ids = np.array([1, 3], dtype=np.int64)
    shmreplay._shmreplay._push_repeated(w, ids, payload([1, 3], [0, 0]), 5)
    assert list(buffer.heads()) == [0, 5, 0, 5]


def test_two_keys_naming_one_field_leave_the_other_missing(buffer):
    class Distinct(str):  # equal to nothing else: two of them are two dict keys, both naming 'head'
        def __eq__(self, other):
            return self is other

        def __hash__(self):
            return id(self)

    w = shmreplay.Writer(buffer, [0])
    data = payload([0], [0])
    half = data.pop("half")
    data[Distinct("head")] = data["head"]
    assert len(data) == 5 and half is not None
    with pytest.raises(shmreplay.SizeMismatch, match="no data for field 'half'"):
        w.push([0], data)
    assert list(buffer.heads())[0] == 0
