"""tools/bench/seed_uniform_bench.py puts the seed's lost indentation back: the seed's code (shared/seeds/, a web
page's text without indentation) becomes a module that compiles and has the seed's classes and methods where the
seed wrote them. Running it needs JAX and chex (the `bench` extra), which this test does not."""
import ast
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEED = os.path.join(ROOT, "..", "shared", "seeds", "muesli_uniform_buffer_jax.txt")


def load_script():
    spec = importlib.util.spec_from_file_location("seed_uniform_bench",
                                                  os.path.join(ROOT, "tools", "bench", "seed_uniform_bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reindent_nests_blocks_closes_them_after_return_and_keeps_docstrings():
    bench = load_script()
    lines = ['@chex.dataclass(frozen=True)', 'class A:', '"""Doc', 'Args:', 'x: y', '"""', 'n: int', '@jax.jit',
             'def f(self,', 'k: int):', 'def g(c):', 'return c', 'v = g(', '1)', 'return self.replace(', 'n=v,',
             ')', 'def h(self):', 'return 1', 'class B:', 'x: int']
    tree = ast.parse(bench.reindent(lines))
    a, b = tree.body
    assert [type(n).__name__ for n in a.body] == ["Expr", "AnnAssign", "FunctionDef", "FunctionDef"]
    f = a.body[2]
    assert [type(n).__name__ for n in f.body] == ["FunctionDef", "Assign", "Return"]
    assert b.name == "B" and len(b.body) == 1


@pytest.mark.skipif(not os.path.exists(SEED), reason="the seed's file (shared/seeds/) is not on this machine")
def test_the_seed_reindented_compiles_with_its_buffer_classes_and_methods():
    bench = load_script()
    text = open(SEED).read().splitlines()
    start = next(i for i, line in enumerate(text) if line.strip() == "IntScalar = chex.Array")
    end = next(i for i, line in enumerate(text) if line.startswith("Sign up for free"))
    tree = ast.parse(bench.reindent(text[start:end]))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    assert set(classes) == {"BoundaryPointer", "UniformBuffer", "Storage"}
    methods = {n.name for n in classes["UniformBuffer"].body if isinstance(n, ast.FunctionDef)}
    assert {"init", "push_env_updates", "_sample_sequence", "sample_rb_and_oq", "peek"} <= methods
    sample = next(n for n in classes["UniformBuffer"].body if getattr(n, "name", "") == "_sample_sequence")
    assert any(isinstance(n, ast.FunctionDef) and n.name == "compute_remaining_sequence_length" for n in sample.body)
    assert isinstance(sample.body[-1], ast.Return)
