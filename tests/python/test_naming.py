"""docs/naming.md against the module: every public class, member and keyword of the Python module (read from its
stub, shmreplay/_shmreplay.pyi, which test_stubs.py ties to the module) has a row in the naming table, so that the
table cannot drift; every Python alias of the alias table is rejected with the message naming the right name; and
the module's own alias table (lib/python/aliases.cpp) is the doc's."""
import ast
import inspect
import os
import re

import numpy as np

import pytest

import shmreplay
from shmreplay import _shmreplay

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "naming.md")
STUB = os.path.join(ROOT, "lib", "python", "shmreplay", "_shmreplay.pyi")
PACKAGE = os.path.join(ROOT, "lib", "python", "shmreplay")


def tables(text):
    """Every Markdown table of `text` as (header cells, rows of cells)."""
    out, current = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if current is None:
            current = (cells, [])
            out.append(current)
        elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
            current[1].append(cells)
    return out


def table(header_start):
    text = open(DOC).read()
    for header, rows in tables(text):
        if header[0] == header_start:
            return header, rows
    raise AssertionError(f"docs/naming.md has no table starting with '{header_start}'")


def python_names():
    """The backticked names of the naming table's Python column."""
    header, rows = table("Concept")
    column = header.index("Python")
    names = set()
    for row in rows:
        for span in re.findall(r"`([^`]*)`", row[column]):
            names.add(span)
    return names


def aliases(interface):
    header, rows = table("Interface")
    assert header == ["Interface", "Where", "Alias", "Decision", "Use instead"]
    return [[re.sub(r"^`|`$", "", c) for c in row[1:]] for row in rows if row[0] == interface]


def stub_api():
    """(members as 'Class.member', keywords as 'name=') of the stub's public classes; setters are their property's."""
    tree = ast.parse(open(STUB).read())
    members, keywords = set(), set()
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not isinstance(item, ast.FunctionDef):
                continue
            setter = any(isinstance(d, ast.Attribute) and d.attr == "setter" for d in item.decorator_list)
            if setter:
                continue
            if not item.name.startswith("__") or item.name in ("__len__", "__iter__", "__getitem__", "__contains__",
                                                                 "__eq__"):
                members.add(f"{node.name}.{item.name}")
            if item.name.startswith("__") and item.name != "__init__":
                continue  # a protocol's parameters are not keywords anyone passes
            args = item.args
            for a in args.posonlyargs + args.args + args.kwonlyargs:
                if a.arg not in ("self", "cls"):
                    keywords.add(f"{a.arg}=")
    return members, keywords


def test_the_table_has_a_row_for_every_public_member_and_keyword_of_the_module():
    names = python_names()
    members, keywords = stub_api()
    assert members, "read nothing from the stub"
    mentioned = " ".join(names)
    missing = sorted(m for m in members if not re.search(r"(?<![\w.])" + re.escape(m) + r"(?!\w)", mentioned))
    assert not missing, f"docs/naming.md's table has no row for {missing}"
    missing = sorted(k for k in keywords if k not in names)
    assert not missing, f"docs/naming.md's table has no row for the keywords {missing}"
    # and every class of the module (the stub's classes are the module's: test_stubs.py)
    for cls in vars(_shmreplay).values():
        if isinstance(cls, type):
            assert cls.__name__ in mentioned or f"{cls.__name__}." in mentioned, cls.__name__


def test_the_table_has_a_row_for_every_name_the_adapters_export():
    mentioned = " ".join(python_names())
    for module in ("torch", "jax", "ray"):
        path = os.path.join(PACKAGE, f"{module}.py")
        if not os.path.exists(path):  # a package (shmreplay/ray/): its __init__.py exports the names
            path = os.path.join(PACKAGE, module, "__init__.py")
        source = open(path).read()
        exported = None
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                exported = ast.literal_eval(node.value)
        assert exported, module
        missing = [n for n in exported if f"{module}.{n}" not in mentioned]
        assert not missing, f"docs/naming.md's table has no row for shmreplay.{module}'s {missing}"


def pascal(errc):
    return "".join(part.capitalize() for part in errc.split("_"))


def test_the_exception_classes_follow_the_table_rule():
    """C8: each class is its Errc name in PascalCase, except system (SystemFailure), as the table says."""
    from shmreplay import _errors
    for name, errc, _bases, _doc in _errors._TABLE:
        expected = "SystemFailure" if errc == "system" else pascal(errc)
        assert name == expected, (name, errc)
    assert "`SystemFailure`" in open(DOC).read()


def test_the_module_rejects_exactly_the_aliases_the_doc_lists():
    doc = set()
    for where, alias, decision, right in aliases("Python"):
        assert decision == "rejected", (where, alias)
        if alias.startswith("."):
            doc.add(("attribute", where, alias[1:], right[1:]))
        else:
            assert alias.endswith("=") and right.endswith("="), (where, alias, right)
            doc.add(("keyword", where, alias[:-1], right[:-1]))
    module = set(_shmreplay._aliases())
    assert module == doc, (sorted(module - doc), sorted(doc - module))


def test_each_alias_names_a_parameter_or_member_the_python_call_has():
    members, keywords = stub_api()
    tree = ast.parse(open(STUB).read())
    params = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    a = item.args
                    key = node.name if item.name == "__init__" else f"{node.name}.{item.name}"
                    params[key] = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    for kind, where, alias, right in _shmreplay._aliases():
        if kind == "keyword":
            assert right in params[where], (where, right)
            assert alias not in params[where], f"{where} takes {alias}: it cannot be an alias there"
        else:
            assert hasattr(getattr(_shmreplay, where), right), (where, right)
            assert not hasattr(getattr(_shmreplay, where), alias), (where, alias)


@pytest.fixture
def objects(name):
    schema = "obs:f32[2] reward:f32 done:bool"
    buf = shmreplay.Buffer.create(name, 2, 8, schema)
    writer = shmreplay.Writer(buf, [0, 1])
    writer.push([0, 1], {"obs": np.zeros((2, 2), np.float32), "reward": np.zeros(2, np.float32),
                         "done": np.zeros(2, bool)})
    sampler = shmreplay.Sampler(buf, seed=0)
    yield {"name": name, "buffer": buf, "writer": writer, "sampler": sampler, "schema": schema}
    sampler.close()
    writer.close()


def call(objects, where, **kw):
    """Calls `where` with valid arguments plus `kw`."""
    b, w, s, name = objects["buffer"], objects["writer"], objects["sampler"], objects["name"]
    step = {"obs": np.zeros(2, np.float32), "reward": 0.0, "done": False}
    calls = {
        "Sampler.sample": lambda: s.sample("replay", 1, 1, **kw),
        "Sampler.sample_mixed": lambda: s.sample_mixed(1, 0, 1, **kw),
        "Sampler.sample_transitions": lambda: s.sample_transitions("replay", 1, **kw),
        "Sampler.total_weight": lambda: s.total_weight("replay", 1, **kw),
        "Sampler.wait": lambda: s.wait("replay", 1, **kw),
        "Buffer.open": lambda: shmreplay.Buffer.open(name, **kw),
        "Buffer.create": lambda: shmreplay.Buffer.create(name + "-new", 1, 4, objects["schema"], **kw),
        "Writer": lambda: shmreplay.Writer(b, [], **kw),
        "Writer.range": lambda: shmreplay.Writer.range(b, 0, 0, **kw),
        "Writer.push": lambda: w.push(np.array([0]), **kw),
        "Writer.push_one": lambda: w.push_one(**kw),
    }
    return calls[where]()


@pytest.mark.parametrize("where,alias,decision,right", aliases("Python"),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_every_python_alias_is_rejected_with_a_message_naming_the_right_name(objects, where, alias, decision,
                                                                               right):
    assert decision == "rejected"
    if alias.startswith("."):  # an attribute
        obj = {"Batch": lambda: objects["sampler"].sample("replay", 1, 1),
               "RateLimitState": lambda: objects["buffer"].rate_limit_state(),
               "Schema": lambda: objects["buffer"].schema,
               "Field": lambda: objects["buffer"].schema[0]}[where]()
        with pytest.raises(AttributeError) as e:
            getattr(obj, alias[1:])
        message = str(e.value)
        assert f"has no attribute '{alias[1:]}'" in message
        assert e.value.name == alias[1:] and e.value.obj is obj
        if right.startswith(".__"):  # a protocol: the builtin that calls it
            builtin = {".__len__": "len(", ".__str__": "str("}[right]
            assert builtin in message, message
        else:
            assert f"'{right[1:]}'" in message or f"{right[1:]} (" in message or f": {right[1:]}" in message, message
        return
    kw = {alias[:-1]: 1}
    if where == "Writer.push":
        kw["data"] = {}
    if where == "Writer.push_one" and alias == "fields=":
        kw["env"] = 0
    if where == "Writer.push_one" and alias == "env_id=":
        kw["data"] = {}
    with pytest.raises(TypeError) as e:
        call(objects, where, **kw)
    message = str(e.value)
    assert f"unexpected keyword argument '{alias[:-1]}'" in message, message
    assert right in message or f"'{right[:-1]}'" in message, message
    assert "Python" in message, message


def test_the_messages_read_as_the_doc_shows(objects):
    s = objects["sampler"]
    with pytest.raises(TypeError, match=re.escape(
            "sample() got an unexpected keyword argument 'importance_exponent'; shmreplay's Python name for it is "
            "'beta' (C++: SampleOptions::importance_exponent)")):
        s.sample("replay", 1, 1, importance_exponent=0.4)
    with pytest.raises(TypeError, match=re.escape(
            "Sampler.wait() got an unexpected keyword argument 'timeout_ms'; Python takes seconds: timeout=... "
            "(C++: Sampler::wait's timeout_ms is in milliseconds)")):
        s.wait("replay", 1, timeout_ms=5)
    with pytest.raises(TypeError, match=re.escape(
            "Buffer.create() got an unexpected keyword argument 'envs'; shmreplay's Python name for it is "
            "'num_envs' (CLI: create --envs)")):
        shmreplay.Buffer.create(objects["name"] + "-new", capacity=4, schema="a:f32", envs=2)
    assert not shmreplay.Buffer.exists(objects["name"] + "-new")


def test_other_unknown_keywords_and_attributes_keep_pythons_errors(objects):
    s = objects["sampler"]
    with pytest.raises(TypeError, match=r"^sample\(\) got an unexpected keyword argument 'bogus'$"):
        s.sample("replay", 1, 1, bogus=1)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        s.wait("replay", 1, bogus=1)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        shmreplay.Buffer.open(objects["name"], bogus=1)
    batch = s.sample("replay", 1, 1)
    with pytest.raises(AttributeError, match=r"^'shmreplay\._shmreplay\.Batch' object has no attribute 'bogus'$"):
        batch.bogus
    assert not hasattr(batch, "start_steps") and hasattr(batch, "starts")
    # a keyword the call takes still works through the wrappers, and their docstrings are pybind11's
    assert s.wait("replay", 1, timeout=0.0) is True
    assert shmreplay.Buffer.open(objects["name"], ready_timeout=0.5).name == objects["name"]
    assert shmreplay.Sampler.wait.__doc__.startswith("wait(self")
    # Buffer.create is a vectorcall function (create_call.cpp): its text signature lists the option table's rows
    assert list(inspect.signature(shmreplay.Buffer.create).parameters)[:5] == ["name", "num_envs", "capacity",
                                                                             "schema", "mode"]
    assert shmreplay.Sampler.wait.__name__ == "wait"


def test_the_writer_and_sampler_keep_the_method_fast_path():
    """No __getattr__ on the classes whose methods are called per step (aliases.hpp)."""
    for cls in (shmreplay.Writer, shmreplay.Sampler):
        assert "__getattr__" not in vars(cls), cls
