"""The package's modules import in any order: each one, imported first in a fresh interpreter, loads (an import
circle such as jax.py -> _jax_uniform.py -> jax.py fails only for the module a program happens to import first)."""
import importlib.util
import os
import pkgutil
import subprocess
import sys

import pytest

import shmreplay

# The framework each optional module needs; a module whose framework is not installed is skipped.
NEEDS = {"jax": "jax", "_jax_arrays": "jax", "_jax_uniform": "jax", "_jax_functional": "jax", "_pytree": "jax",
         "torch": "torch",
         "ray": "ray", "sb3": "stable_baselines3", "gymnasium": "gymnasium", "pufferlib": "pufferlib",
         "torchrl": "torchrl"}


def package_modules():
    names = []
    for info in pkgutil.walk_packages(shmreplay.__path__, "shmreplay."):
        if info.name != "shmreplay.__main__":
            names.append(info.name)
    return names


@pytest.mark.parametrize("module", package_modules())
def test_every_module_of_the_package_imports_first_in_a_fresh_interpreter(module):
    framework = NEEDS.get(module.split(".")[1])
    if framework and importlib.util.find_spec(framework) is None:
        pytest.skip(f"{module} needs {framework}, which is not installed")
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
                              os.path.dirname(os.path.dirname(shmreplay.__file__)), os.environ.get("PYTHONPATH")]))))
    assert done.returncode == 0, f"import {module} as the first import of a fresh interpreter failed:\n{done.stderr}"


def test_the_ray_package_keeps_its_public_names():
    pytest.importorskip("ray")
    import shmreplay.ray as sr
    from shmreplay.ray import ClusterBatch, ClusterSampler, NodeLostWarning, NodeServer, NodeServerImpl, PendingBatch
    assert sorted(sr.__all__) == ["ClusterBatch", "ClusterSampler", "NodeLostWarning", "NodeServer",
                                  "NodeServerImpl", "PendingBatch"]
    assert (ClusterBatch, ClusterSampler, NodeLostWarning, NodeServerImpl, PendingBatch) == (
        sr.ClusterBatch, sr.ClusterSampler, sr.NodeLostWarning, sr.NodeServerImpl, sr.PendingBatch)
    assert hasattr(NodeServer, "remote")
