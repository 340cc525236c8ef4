"""What a user does with an installed shmreplay package, checked: the package's version agrees with its metadata, the
environment's `shmreplay` CLI and `python -m shmreplay`; a writer process and a learner process run from the
environment (not a build tree) against one buffer, the learner checking every sampled step against what the writer
pushed; and the CLI lists, describes and removes that buffer.

Used two ways:
- imported by the packaging tests (test_pip_install.py, test_wheel_without_compiler.py): check_environment(python,
  cli, work, env) with the environment's interpreter and CLI;
- run as a script by the interpreter of the environment to check, `python installed_check.py [WORK_DIR]` (the CLI
  is the `shmreplay` next to that interpreter): cibuildwheel's test-command (pyproject.toml) and the
  no-compiler test, which runs it inside its mount namespace. Exit status 0 when every check passed.

Only the standard library here (the writer and learner scripts import NumPy in their own processes)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

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
    """Runs ARGS to the end; its stdout. A non-zero exit fails with the command, its status and both streams."""
    out = subprocess.run(args, capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw)
    assert out.returncode == 0, f"{args} exited {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def check_environment(python, cli, work, env):
    """Every check of the module's docstring, with the environment's PYTHON and CLI, in the folder WORK (which
    must exist), under the process environment ENV. Returns what the learner printed (rows sampled, the module's
    path). Raises AssertionError with the command and its output on the first failure."""
    prefix = run([python, "-c", "import sys; print(sys.prefix)"], env=env, cwd=work).strip()
    version = run([python, "-c", "import importlib.metadata as m, shmreplay; "
                   "assert m.version('shmreplay') == shmreplay.__version__, (m.version('shmreplay'), "
                   "shmreplay.__version__); print(shmreplay.__version__)"], env=env, cwd=work).strip()
    assert version in run([cli, "--version"], env=env, cwd=work)
    assert version in run([python, "-m", "shmreplay", "--version"], env=env, cwd=work)

    for script, text in (("writer.py", WRITER), ("learner.py", LEARNER)):
        with open(os.path.join(work, script), "w") as f:
            f.write(text)
    name = f"shmreplay-pip-{os.getpid()}-{time.monotonic_ns()}"
    stop = os.path.join(work, "stop")
    if os.path.exists(stop):
        os.remove(stop)
    writer = subprocess.Popen([python, "writer.py", name, stop], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        learned = json.loads(run([python, "learner.py", name], cwd=work, env=env, timeout=90))
        assert learned["rows"] == 50 * 64 and learned["module"].startswith(prefix), (learned, prefix)

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
    return learned


def main(argv):
    """The script: checks the environment of this interpreter, in WORK_DIR (default: a temporary folder)."""
    python = sys.executable
    cli = os.path.join(os.path.dirname(python), "shmreplay")
    if not os.access(cli, os.X_OK):
        cli = shutil.which("shmreplay") or cli
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    if len(argv) > 1:
        os.makedirs(argv[1], exist_ok=True)
        learned = check_environment(python, cli, argv[1], env)
    else:
        with tempfile.TemporaryDirectory(prefix="shmreplay-installed-") as work:
            learned = check_environment(python, cli, work, env)
    print(f"installed_check.py: shmreplay {learned['module']}: version, writer and learner processes "
          f"({learned['rows']} rows sampled and checked) and the CLI: all passed", flush=True)


if __name__ == "__main__":
    main(sys.argv)
