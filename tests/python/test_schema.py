"""Schema and fields as Python objects, and the dtype mapping."""
import numpy as np
import pytest

import shmreplay


def test_a_schema_parses_from_its_text_form_and_prints_back():
    s = shmreplay.Schema.parse("obs:u8[84,84,4] action:i32 reward:f32 done:bool")
    assert len(s) == 4
    assert s.names == ["obs", "action", "reward", "done"]
    assert str(s) == "obs:u8[84,84,4] action:i32 reward:f32 done:bool"
    assert s.step_bytes == 84 * 84 * 4 + 4 + 4 + 1
    assert s["obs"].shape == (84, 84, 4) and s["obs"].dtype == "u8" and s["obs"].bytes == 84 * 84 * 4
    assert s["action"].shape == () and s[1].name == "action" and s[-1].name == "done"
    assert "reward" in s and "nope" not in s
    assert [f.name for f in s] == s.names
    assert s == shmreplay.Schema.parse(str(s))
    assert eval(repr(s), {"shmreplay": shmreplay}) == s


def test_a_schema_is_built_from_field_objects():
    s = shmreplay.Schema([shmreplay.Field("obs", "f32", [4]), shmreplay.Field("done", "bool")])
    assert str(s) == "obs:f32[4] done:bool"
    assert s == shmreplay.Schema.parse("obs:f32[4] done:bool")
    assert s.fields[0] == shmreplay.Field("obs", "f32", [4])


def test_every_dtype_maps_to_its_documented_numpy_dtype():
    expected = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16, "u32": np.uint32,
                "i32": np.int32, "u64": np.uint64, "i64": np.int64, "f16": np.float16, "bf16": np.uint16,
                "f32": np.float32, "f64": np.float64, "bool": np.bool_}
    for text, dt in expected.items():
        f = shmreplay.Field("x", text, [2])
        assert f.numpy_dtype == np.dtype(dt), text
        assert f.bytes == 2 * np.dtype(dt).itemsize


def test_bad_schemas_raise_invalid_schema_naming_the_problem():
    with pytest.raises(shmreplay.InvalidSchema, match="x"):
        shmreplay.Schema.parse("x:f33")
    with pytest.raises(ValueError, match="used by an earlier field"):  # InvalidSchema is also a ValueError
        shmreplay.Schema.parse("a:f32 a:f32")
    with pytest.raises(shmreplay.InvalidSchema, match="unknown dtype 'float'"):
        shmreplay.Field("obs", "float")
    with pytest.raises(KeyError, match="nope"):
        shmreplay.Schema.parse("a:f32")["nope"]
    with pytest.raises(IndexError):
        shmreplay.Schema.parse("a:f32")[3]


def test_every_error_code_raises_its_own_exception_class():
    names = ["invalid_argument", "invalid_schema", "already_exists", "not_found", "not_a_segment", "truncated",
             "version_mismatch", "not_ready", "corrupt", "schema_mismatch", "no_space", "permission_denied",
             "system", "env_out_of_range", "lease_held", "not_leased", "size_mismatch", "empty_view", "timeout",
             "contended", "read_only"]
    seen = set()
    for code, errc in enumerate(names, start=1):
        with pytest.raises(shmreplay.Error) as info:
            shmreplay._shmreplay._raise_errc(code, f"message {code}")
        assert info.value.errc == errc
        assert str(info.value) == f"message {code}"
        seen.add(type(info.value))
    assert len(seen) == len(names)
    assert issubclass(shmreplay.AlreadyExists, FileExistsError)
    assert issubclass(shmreplay.NotFound, FileNotFoundError)
    assert issubclass(shmreplay.Timeout, TimeoutError)
    assert issubclass(shmreplay.EnvOutOfRange, IndexError)


@pytest.mark.parametrize("call", [lambda: shmreplay.Schema.parse("é:f32"),
                                  lambda: shmreplay.Schema.parse("a:f32 b:f32[é]"),
                                  lambda: shmreplay.Buffer.create("é", 1, 1, "a:f32"),
                                  lambda: shmreplay.Buffer.create("ok-name-é", 1, 1, "a:f32")])
def test_errors_about_non_ascii_input_keep_their_whole_message(call):
    with pytest.raises(shmreplay.Error) as e:
        call()
    message = str(e.value)
    assert len(message) > 20 and ("not ASCII" in message or "é" in message), repr(message)
    message.encode("utf-8")  # valid text
