# docs/api/conf.py: Sphinx's configuration of the Python API reference (tools/docs.sh runs sphinx-build on this
# folder). autodoc reads the docstrings of the installed or built package `shmreplay`: the extension module's
# (lib/python/bind_*.cpp) and the pure-Python modules' (lib/python/shmreplay/*.py). Two checks of our own turn into
# warnings, so that `sphinx-build -W -n` (the api_reference test) fails on them:
# - a public name autodoc documents whose docstring is empty (autodoc itself documents it silently);
# - with -n (nitpicky), a reference that does not resolve, in a docstring or a signature.
import importlib
import os
import sys

from sphinx.util import logging

project = "shmreplay"
author = "the shmreplay authors"
extensions = ["sphinx.ext.autodoc"]
root_doc = "index"
exclude_patterns = ["Doxyfile", "*.dox", "cpp_mainpage.md"]
html_theme = "alabaster"
html_title = "shmreplay: the Python API"
html_static_path = []
templates_path = []

# The optional-dependency modules (shmreplay.torch, .jax, .ray, .sb3, .gymnasium, .pufferlib, .torchrl) are
# documented from the real module; only one whose framework does not import here is mocked (its docstrings are then
# still read).
_FRAMEWORKS = ("torch", "jax", "ml_dtypes", "ray", "stable_baselines3", "gymnasium", "pufferlib", "torchrl",
               "tensordict")
autodoc_mock_imports = [m for m in _FRAMEWORKS if importlib.util.find_spec(m) is None]
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True,
                           "member-order": "bysource"}
autodoc_typehints = "signature"
# pybind11 writes each call's signature as the first line of its docstring.
autodoc_docstring_signature = True

# Names outside this package: there is no intersphinx (the build runs offline, in CI too), so references to
# NumPy's, the frameworks' and the standard library's classes are not resolved; every name of shmreplay is.
nitpick_ignore_regex = [
    ("py:class", r"(numpy|np|npt|torch|jax|jaxlib|ml_dtypes|ray|typing|collections\.abc|concurrent\.futures)(\..*)?"),
    ("py:class", r"(stable_baselines3|gymnasium|pufferlib|torchrl|tensordict)(\..*)?"),
    # a class's private base (shmreplay.torchrl._parts._SharedSampler): not part of the reference
    ("py:class", r"shmreplay(\.\w+)*\._\w+"),
    ("py:class", r"(Any|Callable|Dict|Iterator|List|Mapping|Optional|Sequence|Tuple|Union|NamedTuple)"),
    ("py:class", r"(int|float|str|bool|bytes|object|dict|list|tuple|type|None|ndarray|os\.PathLike)"),
    ("py:class", r"(Exception|ValueError|TimeoutError|FileExistsError|FileNotFoundError|IndexError|PermissionError)"),
    ("py:class", r"(RuntimeWarning|pybind11_object|pybind11_builtins\.pybind11_object)"),
    ("py:obj", r"(typing|numpy|np)\..*"),
]

_log = logging.getLogger("shmreplay.apiref")
_EXTENSION = "shmreplay._shmreplay."


def _public(name):
    return not any(part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
                   for part in name.split("."))


def _check_docstring(app, what, name, obj, options, lines):
    """Warns about a public name whose docstring is empty (after its pybind11 signature line)."""
    if what == "module" or not _public(name):
        return
    if not any(line.strip() for line in lines):
        _log.warning("undocumented public name: %s (%s)", name, what, type="apiref", subtype="undocumented")


def _fix_signature(app, what, name, obj, options, signature, return_annotation):
    """The extension's classes are documented where users import them, shmreplay.X, not shmreplay._shmreplay.X."""
    fix = lambda s: s.replace(_EXTENSION, "shmreplay.") if s else s  # noqa: E731
    return fix(signature), fix(return_annotation)


def setup(app):
    app.connect("autodoc-process-docstring", _check_docstring)
    app.connect("autodoc-process-signature", _fix_signature)
