"""The type stubs (shmreplay/_shmreplay.pyi) name exactly what the extension module defines."""
import ast
import inspect
import os

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
