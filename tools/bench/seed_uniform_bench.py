"""The seed's own UniformBuffer (shared/seeds/muesli_uniform_buffer_jax.txt, JAX on the CPU) at the seed's run shape:
96 envs, 95% replay / 5% online sequences of 32 at length^2 weights (sample_rb_and_oq), at the largest max_size this
machine holds; batches per second, call latencies, and the process's memory. The counterpart of
`shmreplay_bench_compressed --seed-scale` (docs/benchmarks/seed_scale.md). By hand, never in CI.

The seed file is a web page's text whose indentation was lost; this script takes its code from the file as it is
(from `IntScalar = chex.Array` to the page's footer), puts the indentation back by the block structure (a line
ending in ':' opens a block, a completed `return` closes one, `class` and its decorators are at the top), adds the
imports the gist left out, and runs it unchanged otherwise but for one keyword JAX renamed since (PATCHES). The
buffer's items are the seed script's Storage (obs
u8[4,84,84], action, logprob, reward, value, done), obs from the recorded Atari frames (tools/frames/), stacks rebuilt
per env and replayed cyclically. The seed's push copies the whole buffer (a functional `.at[].set` without
donation), so the buffer is filled by building its arrays directly, and a few pushes are timed on their own.

    .venv-peers/bin/python tools/bench/seed_uniform_bench.py --frames build/frames

.venv-peers (tools/setup.sh --bench) has JAX and chex, on which the seed is written (the `bench` extra).
"""
import argparse
import json
import os
import re
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "frames"))

# The one change to the seed's code: jnp.clip's a_max keyword was renamed max (deprecated in JAX 0.4.27, removed since).
PATCHES = [("jnp.clip(corresponding_row - x, a_max=length_cutoff)",
            "jnp.clip(corresponding_row - x, max=length_cutoff)")]
HEADER = ("from __future__ import annotations\nfrom functools import partial\n"
          "import chex\nimport jax\nimport jax.numpy as jnp\n")


def reindent(lines):
    """The seed's code with its indentation put back (4 spaces a level), from its lines without any."""
    out, level, depth, in_doc, dedent_next, is_return = [], 0, 0, False, False, False
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if in_doc:  # a docstring's line: kept at its level
            out.append("    " * level + line)
            in_doc = line.count('"""') % 2 == 0
            continue
        starts = depth == 0  # the line starts a statement (else it continues one inside brackets)
        if starts:
            if line.startswith(("class ", "@chex.dataclass")):
                level = 0
            elif dedent_next:
                level = max(level - 1, 0)
            dedent_next = False
            is_return = line == "return" or line.startswith("return ")
        out.append("    " * (level + (0 if starts else 1)) + line)
        if starts and line.count('"""') % 2 == 1:
            in_doc = True
            continue
        code = re.sub(r"#.*$", "", re.sub(r"'[^']*'|\"[^\"]*\"", "", line))
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        if depth == 0:
            if code.rstrip().endswith(":") and not line.startswith("@"):
                level += 1
            dedent_next = is_return
    return "\n".join(out) + "\n"


def load_seed(path):
    """The seed's module (its UniformBuffer, BoundaryPointer, Storage), made from the text at `path`."""
    text = open(path).read().splitlines()
    start = next(i for i, l in enumerate(text) if l.strip() == "IntScalar = chex.Array")
    end = next(i for i, l in enumerate(text) if l.startswith("Sign up for free"))
    source = HEADER + reindent(text[start:end])
    for old, new in PATCHES:
        if old not in source:
            raise SystemExit(f"{path}: the seed's code no longer holds {old!r}: check PATCHES")
        source = source.replace(old, new)
    module = type(sys)("muesli_uniform_buffer")
    module.__dict__["__name__"] = "muesli_uniform_buffer"
    sys.modules["muesli_uniform_buffer"] = module
    exec(compile(source, "<the seed's UniformBuffer, reindented>", "exec"), module.__dict__)
    return module, source


def meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def recorded_obs(frames_dir, envs, size):
    """obs [envs, size, 4, 84, 84] u8, made in JAX (one allocation): env e replays recorded env e % sources of every
    Atari file cyclically."""
    import frames_file
    import jax
    import jax.numpy as jnp
    sources = []
    for name in sorted(os.listdir(frames_dir)):
        if name.endswith(".frames"):
            rec = frames_file.read(os.path.join(frames_dir, name))
            if rec.frames.shape[2:] == (84, 84, 1) and rec.depth == 4:  # Atari (not DMC's RGB)
                sources += [rec.stacks(e).reshape(rec.steps, 4, 84, 84) for e in range(rec.envs)]
    if not sources:
        raise SystemExit(f"no Atari frames file in {frames_dir}: "
                         f"python tools/frames/record_atari.py --out {frames_dir}")
    steps = min(s.shape[0] for s in sources)
    src = jnp.asarray(np.stack([s[:steps] for s in sources]))
    rows = jnp.arange(envs) % len(sources)
    return jax.jit(lambda s: s[rows[:, None], jnp.arange(size)[None, :] % steps])(src)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed-file", default=os.path.join(ROOT, "..", "shared", "seeds", "muesli_uniform_buffer_jax.txt"))
    p.add_argument("--frames", default=os.path.join(ROOT, "build", "frames"))
    p.add_argument("--envs", type=int, default=96)
    p.add_argument("--max-size", type=int, default=0,
                   help="steps per env (0: the largest whose two copies, a push's, fit in 40%% of MemAvailable)")
    p.add_argument("--online", type=int, default=64, help="steps per env in the online queue")
    p.add_argument("--calls", type=int, default=10, help="timed sample calls")
    p.add_argument("--pushes", type=int, default=3, help="timed pushes of 16 envs")
    p.add_argument("--print-source", action="store_true", help="print the seed's code as run, and exit")
    a = p.parse_args()
    seed, source = load_seed(a.seed_file)
    if a.print_source:
        print(source)
        return 0
    import jax
    import jax.numpy as jnp
    item_bytes = 4 * 84 * 84 + 4 * 4 + 1
    size = a.max_size or int(meminfo("MemAvailable") * 0.4 / 2 / (a.envs * item_bytes))
    rss0 = rss()
    obs = recorded_obs(a.frames, a.envs, size)
    rng = np.random.default_rng(0)
    data = seed.Storage(obs=obs, action=jnp.asarray(rng.integers(0, 18, (a.envs, size), np.int32)),
                        logprob=jnp.zeros((a.envs, size), jnp.float32), reward=jnp.zeros((a.envs, size), jnp.float32),
                        value=jnp.zeros((a.envs, size), jnp.float32), done=jnp.zeros((a.envs, size), jnp.bool_))
    del obs
    full = seed.BoundaryPointer(head=jnp.zeros(a.envs, jnp.int32), length=jnp.full(a.envs, size, jnp.int32),
                                max_size=size)
    online = seed.BoundaryPointer(head=jnp.zeros(a.envs, jnp.int32),
                                  length=jnp.full(a.envs, min(a.online, size), jnp.int32), max_size=size)
    # UniformBuffer.init would tile a prototype item into a third copy first: the buffer is made from the arrays
    buf = seed.UniformBuffer(data=data, online_queue_ind=online, full_buffer_ind=full, max_size=size)
    key = jax.random.PRNGKey(0)
    t0 = time.perf_counter()
    seqs, _ = buf.sample_rb_and_oq(key, 91, 5, 32, 2.0)
    jax.block_until_ready(seqs)
    first_s = time.perf_counter() - t0
    latencies = []
    for i in range(a.calls):
        t0 = time.perf_counter()
        seqs, mask = buf.sample_rb_and_oq(jax.random.PRNGKey(i + 1), 91, 5, 32, 2.0)
        jax.block_until_ready(seqs)
        latencies.append(time.perf_counter() - t0)
    push_s = []
    batch = jax.tree_util.tree_map(lambda t: t[:16, 0], buf.data)
    for i in range(a.pushes + 1):
        ids = jnp.asarray(rng.choice(a.envs, 16, replace=False).astype(np.int32))
        t0 = time.perf_counter()
        buf = buf.push_env_updates(batch, ids)
        jax.block_until_ready(buf.data.obs)
        push_s.append(time.perf_counter() - t0)
    lat = np.sort(np.asarray(latencies))
    report = {"envs": a.envs, "max_size": size, "steps": a.envs * size, "obs_bytes": a.envs * size * 4 * 84 * 84,
              "batch": [91, 5, 32], "first_call_s": first_s, "calls": a.calls,
              "batches_per_s": a.calls / float(lat.sum()), "p50_ms": 1e3 * float(np.percentile(lat, 50)),
              "p99_ms": 1e3 * float(np.percentile(lat, 99)), "push_16_envs_ms": 1e3 * float(np.median(push_s[1:])),
              "rss_bytes": rss(), "rss_before_bytes": rss0, "jax": jax.__version__,
              "devices": [str(d) for d in jax.devices()]}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
