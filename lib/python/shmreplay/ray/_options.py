"""The sample options a ClusterSampler takes and passes on to the nodes, read from the binding's own table
(lib/python/sample_options.hpp, as the module's ``_sample_options()``): a new sample option reaches the nodes with
no edit in this package."""
from __future__ import annotations

import ast
import inspect
from typing import Any, Callable, Dict, Mapping, Tuple

from shmreplay import _shmreplay


def _value(text: str) -> Any:
    """A default as the table writes it (Python's text: 'cross', 1, False, 0.4, inf) as a value."""
    try:
        return ast.literal_eval(text)
    except ValueError:
        return float(text)  # inf, nan


def _table() -> Tuple[Dict[str, Any], Tuple[str, ...], Dict[str, str]]:
    defaults: Dict[str, Any] = {}
    weighed = []
    docs: Dict[str, str] = {}
    for name, calls, default, doc in _shmreplay._sample_options():
        if "Sampler.sample" not in calls:
            continue
        defaults[name] = _value(default)
        docs[name] = doc
        if "Sampler.total_weight" in calls:
            weighed.append(name)
    return defaults, tuple(weighed), docs


#: Every keyword option of ``Sampler.sample``, in the table's order, with its default.
SAMPLE_DEFAULTS, _WEIGHED, _DOCS = _table()
#: The options ``Sampler.total_weight`` takes too: a request's totals (and so its split) depend on them.
WEIGH_OPTIONS: Tuple[str, ...] = _WEIGHED


def request_options(function: str, options: Mapping[str, Any]) -> Dict[str, Any]:
    """Every sample option of a call of ``function``: the given ones, the table's defaults for the others; a
    TypeError naming the keyword for one the table does not have (as the binding's calls raise it)."""
    unknown = [k for k in options if k not in SAMPLE_DEFAULTS]
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument '{unknown[0]}' (its sample options: "
                        f"{', '.join(SAMPLE_DEFAULTS)})")
    return {k: options.get(k, default) for k, default in SAMPLE_DEFAULTS.items()}


def weigh_options(options: Mapping[str, Any]) -> Dict[str, Any]:
    """The options of ``options`` that ``Sampler.total_weight`` takes."""
    return {k: options[k] for k in WEIGH_OPTIONS if k in options}


def with_sample_options(method: Callable) -> Callable:
    """``method`` (whose sample options arrive as ``**options``) with a signature that lists them, keyword-only
    with the table's defaults (what ``help`` and the API reference show), and a line per option in its docstring."""
    sig = inspect.signature(method)
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in SAMPLE_DEFAULTS.items()]
    method.__signature__ = sig.replace(parameters=params)
    lines = "\n".join(f"        - ``{k}``: {doc}" for k, doc in _DOCS.items())
    method.__doc__ = f"{method.__doc__}\n\n        Sample options (``Sampler.sample``'s):\n\n{lines}"
    return method
