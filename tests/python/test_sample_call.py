"""Sampler.sample, sample_mixed, sample_transitions and total_weight as vectorcall methods (lib/python/sample_call.cpp):
their signatures, Python's argument rules (keyword-only options), pybind11's conversions, the defaults, and out=.
The options come from one table (lib/python/sample_options.hpp), which the module shows as _sample_options(): the
tests read it, so a new option is checked without a line here."""
import ast
import inspect
import os
import types

import numpy as np
import pytest

import shmreplay
from shmreplay import _shmreplay
from conftest import check_batch, payload

OPTIONS = _shmreplay._sample_options()  # (keyword, calls, default as Python writes it, doc)
LEADING = {
    "sample": ["view", "batch_size", "sequence_length", "power"],
    "sample_mixed": ["replay_batch", "online_batch", "sequence_length", "power"],
    "sample_transitions": ["view", "batch_size"],
    "total_weight": ["view", "sequence_length", "power"],
}


def options_of(method):
    return [(name, default) for name, calls, default, _doc in OPTIONS if f"Sampler.{method}" in calls]


def parameters(method):
    return ["self"] + LEADING[method] + [n for n, _ in options_of(method)] + (["out"] if method != "total_weight"
                                                                               else [])


def test_the_option_table_names_only_the_sampling_calls_and_documents_each_option():
    assert OPTIONS
    for name, calls, default, doc in OPTIONS:
        assert calls and set(calls) <= {f"Sampler.{m}" for m in LEADING}, name
        if default != "inf":
            ast.literal_eval(default)  # a Python literal (None: an option that is off unless given)
        assert doc.endswith("."), name
@pytest.fixture
def filled(buffer):
    w = shmreplay.Writer(buffer, [0, 1, 2, 3])
    for step in range(12):
        w.push([0, 1, 2, 3], payload([0, 1, 2, 3], [step] * 4))
    return buffer


def test_the_sampling_calls_are_method_descriptors_with_their_signatures():
    for name in LEADING:
        assert isinstance(shmreplay.Sampler.__dict__[name], types.MethodDescriptorType), name
        sig = inspect.signature(getattr(shmreplay.Sampler, name))
        assert list(sig.parameters) == parameters(name), name
        keyword_only = [p for p, v in sig.parameters.items() if v.kind is inspect.Parameter.KEYWORD_ONLY]
        assert keyword_only == [p for p in parameters(name) if p not in LEADING[name] + ["self"]], name


def test_every_option_has_the_tables_default_and_line_in_the_signature_and_docstring():
    for method in LEADING:
        fn = getattr(shmreplay.Sampler, method)
        sig = inspect.signature(fn)
        for option, default in options_of(method):
            expected = float(default) if default == "inf" else ast.literal_eval(default)
            assert sig.parameters[option].default == expected, (method, option)
            assert f"``{option}={default}``: " in fn.__doc__, (method, option)


def test_every_option_given_its_default_samples_what_the_call_without_it_does(filled):
    for method, call in (("sample", lambda s, **kw: s.sample("replay", 8, 4, **kw)),
                         ("sample_mixed", lambda s, **kw: s.sample_mixed(4, 2, 3, **kw)),
                         ("sample_transitions", lambda s, **kw: s.sample_transitions("replay", 8, **kw))):
        defaults = {o: float(d) if d == "inf" else ast.literal_eval(d) for o, d in options_of(method)}
        runs = []
        for kw in ({}, defaults):
            with shmreplay.Sampler(filled, seed=5) as s:
                b = call(s, **kw)
            runs.append((b.env_ids.tolist(), b.starts.tolist()))
        assert runs[0] == runs[1], method
    with shmreplay.Sampler(filled) as s:
        defaults = {o: ast.literal_eval(d) for o, d in options_of("total_weight")}
        assert s.total_weight("replay", 3, **defaults) == s.total_weight("replay", 3) > 0


def test_an_option_of_the_wrong_type_is_a_type_error_naming_the_call_and_the_option(filled):
    with shmreplay.Sampler(filled, seed=1) as s:
        for method, call in (("sample", lambda **kw: s.sample("replay", 8, 4, **kw)),
                             ("total_weight", lambda **kw: s.total_weight("replay", 4, **kw))):
            for option, _ in options_of(method):
                with pytest.raises(TypeError, match=rf"{method}\(\): argument '{option}' must be "):
                    call(**{option: object()})


def test_defaults_are_the_signatures_and_keywords_bind_like_positions(filled):
    runs = []
    for call in (lambda s: s.sample("replay", 8, 4),
                 lambda s: s.sample(view="replay", batch_size=8, sequence_length=4, power=0.0),
                 lambda s: s.sample("replay", 8, 4, 0.0, episodes="cross", period=1, min_steps=0, prioritized=False,
                                    beta=0.4, rate_limit_timeout=10.0, out=None),
                 lambda s: s.sample("".join(["re", "play"]), np.int64(8), 4)):  # a view made at run time
        with shmreplay.Sampler(filled, seed=7) as s:
            b = call(s)
        assert check_batch(b) == []
        runs.append((b.env_ids.tolist(), b.starts.tolist()))
    assert all(r == runs[0] for r in runs)
    with shmreplay.Sampler(filled, seed=7) as s:
        a = s.sample_mixed(4, 2, 3)
        b = s.sample_mixed(replay_batch=4, online_batch=2, sequence_length=3, power=0.0, rate_limit_timeout=10.0)
        t = s.sample_transitions("online", 5, beta=0.4)
    assert a.rows == b.rows == 6 and a.sequence_length == 3 and t.rows == 5 and t.sequence_length == 1
    assert check_batch(a) == [] and check_batch(t) == []


def test_out_is_filled_in_place_and_returned(filled):
    with shmreplay.Sampler(filled, seed=1) as s:
        out = s.new_batch(16, 1)
        assert s.sample_transitions("replay", 16, out=out) is out
        assert s.sample("replay", 16, 1, out=out) is out
        assert s.sample_mixed(8, 8, 1, out=out) is out
        assert check_batch(out) == []
        with pytest.raises(shmreplay.SizeMismatch, match="out= holds 16 rows x 1 steps, this call needs 8 x 1"):
            s.sample_transitions("replay", 8, out=out)
        with pytest.raises(shmreplay.InvalidArgument, match="out= takes a shmreplay.Batch"):
            s.sample("replay", 16, 1, out=np.zeros(3))


def test_wrong_arguments_get_pythons_type_errors_or_the_librarys(filled):
    with shmreplay.Sampler(filled, seed=1) as s:
        with pytest.raises(TypeError, match=r"sample\(\) missing required argument 'sequence_length' \(pos 3\)"):
            s.sample("replay", 8)
        with pytest.raises(TypeError, match=r"sample\(\) takes at most 4 positional arguments \(5 given\)"):
            s.sample("replay", 8, 4, 0.0, "cross")
        with pytest.raises(TypeError, match=r"sample_transitions\(\) takes at most 2 positional arguments"):
            s.sample_transitions("replay", 8, True)
        with pytest.raises(TypeError, match=r"sample\(\) got an unexpected keyword argument 'length'"):
            s.sample("replay", 8, length=4)
        with pytest.raises(TypeError, match=r"sample_mixed\(\) got multiple values for argument 'replay_batch'"):
            s.sample_mixed(4, 2, 3, replay_batch=4)
        with pytest.raises(TypeError, match=r"sample\(\): argument 'batch_size' must be an int >= 0, got -1"):
            s.sample("replay", -1, 4)
        with pytest.raises(TypeError, match=r"argument 'power' must be a number, got 'high' \(str\)"):
            s.sample("replay", 8, 4, "high")
        with pytest.raises(TypeError, match=r"argument 'episodes' must be a str, got 3 \(int\)"):
            s.sample("replay", 8, 4, episodes=3)
        with pytest.raises(shmreplay.InvalidArgument, match="unknown view 'replays'"):
            s.sample_transitions("replays", 8)
        with pytest.raises(shmreplay.InvalidArgument, match="unknown episodes mode 'across'"):
            s.sample("replay", 8, 4, episodes="across")
        with pytest.raises(TypeError, match="Sampler"):
            shmreplay.Sampler.sample(object(), "replay", 8, 4)
        assert check_batch(s.sample("replay", 8, 4)) == []  # still usable


def test_a_batch_past_the_address_space_is_refused_before_its_arrays_are_made(filled):
    with shmreplay.Sampler(filled, seed=1) as s:
        with pytest.raises(shmreplay.InvalidArgument, match=r"sequence_length is 1152921504606846976, expected 1"):
            s.sample("replay", 4, 2**60)
        with pytest.raises(shmreplay.InvalidArgument, match=r"batch size is 4611686018427387904.*address space"):
            s.sample("replay", 2**62, 4)
        with pytest.raises(shmreplay.InvalidArgument, match=r"batch size is 0"):
            s.sample_transitions("replay", 0)
        # two halves whose sum wraps around: refused, not sampled as the small sum
        with pytest.raises(shmreplay.InvalidArgument, match=r"batch size is 18446744073709551615"):
            s.sample_mixed(2**64 - 1, 2, 1)
        with pytest.raises(shmreplay.InvalidArgument, match=r"batch size is 18446744073709551615"):
            s.sample_mixed(2**63, 2**63, 1)
        assert check_batch(s.sample("replay", 8, 4)) == []  # still usable


def test_a_batch_that_does_not_fit_in_memory_is_a_memory_error_naming_it(filled):
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("AddressSanitizer aborts on an allocation this size instead of failing it")
    with open("/proc/sys/vm/overcommit_memory") as f:
        if f.read().strip() == "1":
            pytest.skip("with vm.overcommit_memory = 1 the 75 TB batch would be made")
    with shmreplay.Sampler(filled, seed=1) as s:
        with pytest.raises(MemoryError, match=r"sample: no memory for a batch of 1099511627776 rows x 4 steps"):
            s.sample("replay", 2**40, 4)


def test_a_new_batch_that_does_not_fit_in_memory_is_a_memory_error_naming_it(name):
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("AddressSanitizer aborts on an allocation this size instead of failing it")
    with open("/proc/sys/vm/overcommit_memory") as f:
        if f.read().strip() == "1":
            pytest.skip("with vm.overcommit_memory = 1 the 4 TB batch would be made")
    buf = shmreplay.Buffer.create(name, 1, 64, "x:f32[16]")
    with shmreplay.Sampler(buf, seed=1) as s:
        with pytest.raises(MemoryError, match=r"new_batch: no memory for a batch of 1000000000 rows x 64 steps"):
            s.new_batch(10**9, 64)
        assert s.new_batch(2, 4).rows == 2  # still usable


@pytest.mark.parametrize("array", ["body", "mask", "env_ids", "starts", "weights"])
def test_a_read_only_out_array_is_refused_naming_it(filled, array):
    with shmreplay.Sampler(filled, seed=1) as s:
        out = s.new_batch(8, 2)
        s.sample("replay", 8, 2, out=out)  # lent to the library once already: the check is made every call
        target = out.fields[array] if array == "body" else getattr(out, array)
        target.flags.writeable = False
        what = f"field '{array}'" if array == "body" else f"'{array}'"
        for call in (lambda: s.sample("replay", 8, 2, out=out), lambda: s.sample_mixed(4, 4, 2, out=out)):
            with pytest.raises(shmreplay.InvalidArgument, match=f"out= {what} is read-only"):
                call()
        assert check_batch(s.sample("replay", 8, 2, out=s.new_batch(8, 2))) == []  # (the flag cannot go back on)
