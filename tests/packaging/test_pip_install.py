"""The Python package as a user gets it: pip installs this source tree into a fresh virtual environment, then a
writer process and a learner process run from that environment (not the build tree) against one buffer, and the
environment's `shmreplay` CLI and `python -m shmreplay` see that buffer.

Run by ctest as test_pip_install (SHMREPLAY_SOURCE_DIR: the clone; SHMREPLAY_PIP_WORK_DIR: a scratch folder).
SHMREPLAY_PIP_WHEEL, when set, names the wheel that pip already built from this clone (tools/test.sh builds it
with `pip wheel` first): the fresh environment installs that file instead of building the source a second time,
which is the same `pip install` split in two steps."""
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

SOURCE = os.environ.get("SHMREPLAY_SOURCE_DIR")
pytestmark = pytest.mark.skipif(not SOURCE, reason="SHMREPLAY_SOURCE_DIR (the source tree to install) is not set")

WRITER = textwrap.dedent('''
    import os, sys, time
    import numpy as np
    import shmreplay
    assert shmreplay.__file__.startswith(sys.prefix), shmreplay.__file__
    name, stop_file = sys.argv[1], sys.argv[2]
    buf = shmreplay.Buffer.create(name, num_envs=4, capacity=512, schema="obs:f32[3] step:u64", mode=0o600)
    rng = np.random.default_rng(0)
    steps = np.zeros(4, np.int64)
    with shmreplay.Writer(buf, range(4)) as w:
        deadline = time.monotonic() + 60
        while not os.path.exists(stop_file) and time.monotonic() < deadline:
            envs = rng.permutation(4)[: rng.integers(1, 5)].astype(np.int32)  # envpool's recv: any subset, any order
            s = steps[envs]
            obs = np.stack([envs, s, envs * 1000 + s], axis=1).astype(np.float32)
            w.push(envs, {"obs": obs, "step": s.astype(np.uint64)})
            steps[envs] += 1
            time.sleep(0.0005)
    print("writer pushed", int(steps.sum()), flush=True)
''')

LEARNER = textwrap.dedent('''
    import json, sys, time
    import numpy as np
    import shmreplay
    assert shmreplay.__file__.startswith(sys.prefix), shmreplay.__file__
    # The writer process creates the buffer; on a loaded machine it may still be importing NumPy.
    deadline = time.monotonic() + 60
    while not shmreplay.Buffer.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
    buf = shmreplay.Buffer.open(sys.argv[1], ready_timeout=30)
    rows = 0
    with shmreplay.Sampler(buf, seed=1) as s:
        s.wait("replay", 256, timeout=30)
        batch = s.new_batch(64, 8)
        for _ in range(50):
            s.sample("replay", 64, 8, out=batch)
            m = batch.mask
            t = batch.starts[:, None] + np.arange(8)[None, :]
            obs, step = batch["obs"], batch["step"].astype(np.int64)
            assert m[:, 0].all()
            assert (obs[..., 0] == batch.env_ids[:, None])[m].all()
            assert (obs[..., 1] == t)[m].all() and (step == t)[m].all()
            assert (obs[..., 2] == batch.env_ids[:, None] * 1000 + t)[m].all()
            rows += len(batch.env_ids)
    print(json.dumps({"rows": rows, "module": shmreplay.__file__}), flush=True)
''')


def run(args, **kw):
    out = subprocess.run(args, capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw)
    assert out.returncode == 0, f"{args} exited {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_pip_installs_the_clone_into_a_fresh_venv_whose_processes_and_cli_share_one_buffer(tmp_path):
    work = os.environ.get("SHMREPLAY_PIP_WORK_DIR") or str(tmp_path)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    venv = os.path.join(work, "venv")
    python, cli = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "shmreplay")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}

    run([sys.executable, "-m", "venv", venv], env=env)
    started = time.monotonic()
    what = os.environ.get("SHMREPLAY_PIP_WHEEL") or SOURCE
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", what], env=env, timeout=840)
    print(f"pip install {what}: {time.monotonic() - started:.1f} s")

    version = run([python, "-c", "import importlib.metadata as m, shmreplay; "
                   "assert m.version('shmreplay') == shmreplay.__version__, (m.version('shmreplay'), "
                   "shmreplay.__version__); print(shmreplay.__version__)"], env=env, cwd=work).strip()
    assert version in run([cli, "--version"], env=env, cwd=work)
    assert version in run([python, "-m", "shmreplay", "--version"], env=env, cwd=work)

    for script, text in (("writer.py", WRITER), ("learner.py", LEARNER)):
        with open(os.path.join(work, script), "w") as f:
            f.write(text)
    name = f"shmreplay-pip-{os.getpid()}"
    stop = os.path.join(work, "stop")
    writer = subprocess.Popen([python, "writer.py", name, stop], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        learned = json.loads(run([python, "learner.py", name], cwd=work, env=env, timeout=90))
        assert learned["rows"] == 50 * 64 and learned["module"].startswith(venv), learned

        listed = run([cli, "ls"], env=env, cwd=work)
        assert name in listed, listed
        info = run([python, "-m", "shmreplay", "info", name], env=env, cwd=work)
        assert "obs:f32[3] step:u64" in info and "capacity" in info, info
    finally:
        open(stop, "w").close()
        try:
            out, err = writer.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            writer.send_signal(signal.SIGKILL)
            out, err = writer.communicate()
        subprocess.run([cli, "rm", name], env=env, capture_output=True)
    assert writer.returncode == 0, out + err
    assert "writer pushed" in out
    assert name not in run([cli, "ls"], env=env, cwd=work)
