"""Atari throughput on real envpool (no learning): K actor processes run Pong-v5 (observations u8[4,84,84], the
last 4 frames of 84x84) in envpool's async mode with random actions and push every step they receive into one
shmreplay buffer whose obs is a stacked field (obs:u8[4,84,84]:stack=0: one frame stored per step, whole stacks
pushed and sampled); a learner process samples replay + online rows of 16 steps into one preallocated batch and
hands each batch to PyTorch (no copy), as a training step would take it. Prints every process's figures (env
steps/s and bytes pushed/s per actor, rows sampled/s, bytes/s and batches/s for the learner, and each one's
resident memory) and the buffer's: bytes per step as pushed and as stored, the segment's size and resident pages,
and how many stored steps can be sampled. --layout pushed stores obs as pushed (the layout before stacked
fields); --layout both runs the two one after the other. --compress lz4 or --compress zstd=LEVEL keeps obs's frames
compressed (obs:u8[4,84,84]:stack=0:lz4; docs/design/compression.md): pushed and sampled as before, byte-exact.

    .venv/bin/python examples/envpool/throughput.py --seconds 30 --layout both
    .venv/bin/python examples/envpool/throughput.py --seconds 30 --compress zstd=3
"""
import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np

import shmreplay
from common import StopFlag

SCHEMAS = {"stacked": "obs:u8[4,84,84]:stack=0 action:i32 reward:f32 done:bool",
           "pushed": "obs:u8[4,84,84] action:i32 reward:f32 done:bool"}
stop = False  # a StopFlag once main() runs


def schema(layout, compress):
    """The buffer's schema: SCHEMAS[layout], obs compressed with `compress` ("lz4", "zstd=LEVEL") unless None."""
    if not compress:
        return SCHEMAS[layout]
    obs, rest = SCHEMAS[layout].split(" ", 1)
    return f"{obs}:{compress} {rest}"


def codec_option(text):
    """--compress's value, checked: lz4, zstd, or zstd=LEVEL (an integer; the library checks its range)."""
    codec, _, level = text.partition("=")
    if text == "lz4" or (codec == "zstd" and (not level or level.lstrip("-").isdigit())):
        return text
    raise argparse.ArgumentTypeError(f"expected lz4, zstd or zstd=LEVEL, got {text!r}")


def memory():
    """This process's resident memory from /proc/self/status, in bytes: VmRSS, and its parts RssAnon (private)
    and RssShmem (shared memory pages it has mapped: the segment's, and envpool's own)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssShmem"):
                out[key] = int(value.split()[0]) * 1024
    return out


def resident_bytes(path):
    """Bytes of the file at `path` whose pages are in memory (mincore over a fresh read-only mapping of it): for a
    segment in /dev/shm, the memory it holds whoever maps it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
    finally:
        os.close(fd)
    if addr in (None, ctypes.c_void_p(-1).value):
        return None
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        pages = np.zeros((size + page - 1) // page, np.uint8)
        if libc.mincore(addr, size, pages.ctypes.data) != 0:
            return None
        return int(np.count_nonzero(pages & 1)) * page
    finally:
        libc.munmap(addr, size)


def actor(a):
    warnings.filterwarnings("ignore", category=UserWarning, module="gymnasium")
    import envpool
    env = envpool.make(a.task, env_type="gymnasium", num_envs=a.envs_per_worker, batch_size=a.batch_size,
                       seed=a.worker)
    buf = shmreplay.Buffer.open(a.buffer, ready_timeout=30)
    first = a.worker * a.envs_per_worker
    writer = shmreplay.Writer.range(buf, first, a.envs_per_worker)
    rng = np.random.default_rng(a.worker)
    n_actions = env.action_space.n
    env.async_reset()
    print("@ready", flush=True)
    pushed, episodes, started = 0, 0, time.monotonic()
    while not stop:
        obs, reward, terminated, truncated, info = env.recv()
        ids = np.asarray(info["env_id"])
        done = terminated | truncated
        writer.push(ids.astype(np.int32) + first, {"obs": obs, "action": np.zeros(len(ids), np.int32),
                                                   "reward": reward.astype(np.float32), "done": done})
        pushed += len(ids)
        episodes += int(np.count_nonzero(done))
        env.send(rng.integers(0, n_actions, len(ids)).astype(np.int32), ids)
    seconds = time.monotonic() - started
    writer.close()
    step_bytes = buf.step_bytes
    print("@report " + json.dumps({"role": f"actor {a.worker}", "seconds": seconds, "env_steps": pushed,
                                   "episodes": episodes, "env_steps_per_s": pushed / seconds,
                                   "MB_pushed_per_s": pushed * step_bytes / seconds / 1e6, "memory": memory()}),
          flush=True)


def learner(a):
    import shmreplay.torch as st  # imports torch
    buf = shmreplay.Buffer.open(a.buffer, ready_timeout=30)
    with shmreplay.Sampler(buf, seed=0) as s:
        print("@ready", flush=True)
        while not stop and not s.wait("replay", 64, timeout=0.5):
            pass
        batch = s.new_batch(a.replay_rows + a.online_rows, 16)
        batches = rows = 0
        started = time.monotonic()
        while not stop:
            if not s.wait("online", a.online_rows, timeout=0.5):
                continue
            s.sample_mixed(a.replay_rows, a.online_rows, 16, 1.0, out=batch)
            s.reset_online_queue(to="sampled")  # the steps pushed since the sample stay online
            t = st.as_tensors(batch)
            float(t["obs"][:, 0].float().mean())  # touch what a model's first layer would read
            batches += 1
            rows += batch.rows
        seconds = time.monotonic() - started
        row_bytes = 16 * buf.step_bytes
        # The stored steps (the last `capacity` of each env) and those the replay view holds: a stored step is
        # outside it when its stack's frames were overwritten (more episode starts than the rings' reserve).
        sizes = [s.sizes(e) for e in range(buf.num_envs)]
        print("@report " + json.dumps({"role": "learner", "seconds": seconds, "batches": batches,
                                       "batches_per_s": batches / seconds, "rows_per_s": rows / seconds,
                                       "MB_sampled_per_s": rows * row_bytes / seconds / 1e6,
                                       "retries": s.retries,
                                       "stored_steps": sum(min(z.head, buf.capacity) for z in sizes),
                                       "replay_steps": sum(z.replay for z in sizes), "memory": memory()}),
              flush=True)


def run(a, layout):
    envs = a.workers * a.envs_per_worker
    name = f"envpool-atari-{os.getpid()}"
    buf = shmreplay.Buffer.create(name, envs, a.capacity, schema(layout, a.compress), replace=True,
                                  stack_restarts=a.stack_restarts if layout == "stacked" else 0)
    me = [sys.executable, os.path.abspath(__file__), "--buffer", name, "--task", a.task,
          "--envs-per-worker", str(a.envs_per_worker), "--batch-size", str(a.batch_size),
          "--replay-rows", str(a.replay_rows), "--online-rows", str(a.online_rows)]
    procs = [subprocess.Popen(me + ["--role", "learner"], stdout=subprocess.PIPE, text=True)]
    procs += [subprocess.Popen(me + ["--role", "actor", "--worker", str(w)], stdout=subprocess.PIPE, text=True)
              for w in range(a.workers)]
    for p in procs:  # wait for every process to be ready, then run for --seconds
        while (line := p.stdout.readline()) and not line.startswith("@ready"):
            pass
    time.sleep(a.seconds)
    for p in procs[1:] + procs[:1]:
        p.send_signal(signal.SIGTERM)
    reports = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        reports += [json.loads(line[8:]) for line in out.splitlines() if line.startswith("@report ")]
    slots = envs * a.capacity
    reports.append({"role": "buffer", "schema": schema(layout, a.compress), "num_envs": envs, "capacity": a.capacity,
                    "step_bytes_pushed": buf.step_bytes, "segment_bytes": buf.total_bytes,
                    "segment_bytes_per_step": buf.total_bytes / slots, "resident_bytes": resident_bytes(buf.path),
                    "segment_bytes_as_pushed": buf.step_bytes * slots})
    for r in reports:
        r["layout"] = layout
    del buf
    shmreplay.Buffer.remove(name)
    return reports, len(procs)


def mb(n):
    return f"{n / 1e6:.1f} MB" if n is not None else "?"


def print_table(a, layout, reports):
    print(f"{a.task}, {layout}: {a.workers} envpool actors x {a.envs_per_worker} envs (batch {a.batch_size}), "
          f"{a.seconds:g} s, rows of 16 steps of {schema(layout, a.compress)}\n")
    print("| process | figure | resident memory |\n|---|---|---|")
    for r in reports:
        m = r.get("memory", {})
        rss = (f"{mb(m.get('VmRSS'))} ({mb(m.get('RssAnon'))} private, {mb(m.get('RssShmem'))} shared)"
               if m else "")
        if r["role"].startswith("actor"):
            print(f"| {r['role']} | {r['env_steps_per_s']:.0f} env steps/s, {r['MB_pushed_per_s']:.1f} MB/s pushed, "
                  f"{r['episodes']} episodes | {rss} |")
        elif r["role"] == "learner":
            print(f"| learner | {r['rows_per_s']:.0f} rows/s ({r['MB_sampled_per_s']:.1f} MB/s), "
                  f"{r['batches_per_s']:.1f} batches/s of {a.replay_rows} + {a.online_rows} rows, "
                  f"{r['retries']} retries; {r['replay_steps']} of {r['stored_steps']} stored steps sampleable "
                  f"| {rss} |")
        else:
            print(f"| buffer | {r['step_bytes_pushed']} bytes per step as pushed, "
                  f"{r['segment_bytes_per_step']:.0f} stored (segment / step slots); segment "
                  f"{mb(r['segment_bytes'])} for {r['num_envs']} x {r['capacity']} steps "
                  f"({mb(r['segment_bytes_as_pushed'])} as pushed) | {mb(r['resident_bytes'])} resident |")
    print()


def launch(a):
    layouts = ["stacked", "pushed"] if a.layout == "both" else [a.layout]
    reports, ok = [], True
    for layout in layouts:
        got, expected = run(a, layout)
        reports += got
        ok = ok and len(got) == expected + 1
        if not a.json:
            print_table(a, layout, got)
    if a.json:
        print(json.dumps(reports, indent=1))
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=["launch", "actor", "learner"], default="launch")
    p.add_argument("--buffer")
    p.add_argument("--task", default="Pong-v5")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--worker", type=int, default=0)
    p.add_argument("--envs-per-worker", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--capacity", type=int, default=1024, help="steps kept per env (about 7.3 KB each stacked)")
    p.add_argument("--layout", choices=["stacked", "pushed", "both"], default="stacked",
                   help="obs as a stacked field (one frame stored per step), as pushed, or one run of each")
    p.add_argument("--stack-restarts", type=int, default=0,
                   help="episode starts per env the frame rings hold at no loss (0: 1 + capacity / 128)")
    p.add_argument("--compress", type=codec_option, metavar="lz4|zstd=N",
                   help="keep obs's frames compressed with this codec (default: as the layout stores them)")
    p.add_argument("--replay-rows", type=int, default=16)
    p.add_argument("--online-rows", type=int, default=16)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    global stop
    stop = StopFlag()
    return {"launch": launch, "actor": actor, "learner": learner}[a.role](a) or 0


if __name__ == "__main__":
    sys.exit(main())
