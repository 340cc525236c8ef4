"""The type stubs (shmreplay/_shmreplay.pyi) name exactly what the extension module defines."""
import ast
import inspect
import os
import re

import shmreplay
from shmreplay import _shmreplay

STUB = os.path.join(os.path.dirname(shmreplay.__file__), "_shmreplay.pyi")


def public(names):
    return {n for n in names if not n.startswith("_")}


def test_the_stubs_name_every_class_method_and_property_and_nothing_else():
    tree = ast.parse(open(STUB).read())
    stub_classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    module_classes = {name for name, obj in vars(_shmreplay).items() if inspect.isclass(obj)}
    assert set(stub_classes) == module_classes
    for name, node in stub_classes.items():
        stubbed = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
        actual = public(dir(getattr(_shmreplay, name)))
        assert public(stubbed) == actual, name
        for dunder in stubbed - public(stubbed):
            assert hasattr(getattr(_shmreplay, name), dunder), f"{name}.{dunder}"
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert functions == {n for n, o in vars(_shmreplay).items() if inspect.isbuiltin(o)}


def test_the_stubs_ship_with_the_package():
    package = os.path.dirname(shmreplay.__file__)
    assert os.path.exists(os.path.join(package, "py.typed"))


def stub_parameters(fn):
    """The parameter names of a stubbed function, without self."""
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args] + ([a.vararg.arg] if a.vararg else [])
    kwargs = ["**" + a.kwarg.arg] if a.kwarg else []  # pybind11 names a py::kwargs parameter **kwargs
    return [n for n in names + [x.arg for x in a.kwonlyargs] + kwargs if n != "self"]


def runtime_parameters(obj):
    """The parameter names of a function of the module, without self: inspect's (the vectorcall methods), else the
    first line of pybind11's docstring, `name(a: int, b: str = ...) -> ...`."""
    try:
        return [p for p in inspect.signature(obj).parameters if p != "self"]
    except (TypeError, ValueError):
        pass
    m = re.match(r"\w+\((.*)\)", (obj.__doc__ or "").strip().split("\n")[0])
    assert m, f"no signature in the docstring of {obj}"
    params, depth, current = [], 0, ""
    for ch in m.group(1) + ",":
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            params.append(current.split(":")[0].strip())
            current = ""
        else:
            current += ch
    return [p for p in params if p not in ("self", "*", "/", "")]


def test_the_stubs_give_every_method_the_modules_parameters():
    # e.g. Field(stack_axis=) and Buffer.create(stack_restarts=): a keyword missing from the stubs fails here
    tree = ast.parse(open(STUB).read())
    checked = 0
    for node in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        cls = getattr(_shmreplay, node.name)
        for item in (i for i in node.body if isinstance(i, ast.FunctionDef)):
            if item.decorator_list and not any(isinstance(d, ast.Name) and d.id == "staticmethod"
                                               for d in item.decorator_list):
                continue  # properties and their setters
            if item.name.startswith("__") and item.name != "__init__":
                continue
            assert stub_parameters(item) == runtime_parameters(getattr(cls, item.name)), f"{node.name}.{item.name}"
            checked += 1
    assert checked > 40
