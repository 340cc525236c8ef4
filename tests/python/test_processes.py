"""Writer processes in Python, pushing at full speed while this process samples and checks every byte; one is
SIGKILLed and replaced mid-run."""
import os
import signal
import subprocess
import sys
import time

import numpy as np

import shmreplay
from conftest import check_batch

HERE = os.path.dirname(os.path.abspath(__file__))

WRITER = r"""
import sys, numpy as np, shmreplay
sys.path.insert(0, {here!r})
from conftest import payload
buf = shmreplay.Buffer.open({name!r})
envs = {envs!r}
w = shmreplay.Writer(buf, envs)
print("leased", w.takeovers, flush=True)
rng = np.random.default_rng({seed})
heads = {{e: w.head(e) for e in envs}}
while True:
    ids = [e for e in envs if rng.random() < 0.3 + 0.2 * (e % 3)]  # uneven rates per env
    if not ids:
        continue
    rng.shuffle(ids)
    if rng.random() < 0.2:
        e = ids[0]
        with w.reserve(e) as slot:
            for k, v in payload([e], [heads[e]]).items():
                slot[k][...] = v[0]
        heads[e] += 1
    else:
        w.push(np.array(ids), payload(ids, [heads[e] for e in ids]))
        for e in ids:
            heads[e] += 1
"""


def start_writer(name, envs, seed):
    code = WRITER.format(here=HERE, name=name, envs=envs, seed=seed)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ)
    line = p.stdout.readline()
    assert line.startswith("leased"), f"writer did not start: {line!r}"
    return p, int(line.split()[1])


def test_writer_processes_killed_mid_run_never_expose_a_torn_or_misplaced_step(name):
    buf = shmreplay.Buffer.create(name, 6, 64, "head:u64[3] body:f32[5] flag:bool half:f16[2] brain:bf16")
    writers = []
    try:
        writers = [start_writer(name, [0, 1, 2], 1)[0], start_writer(name, [3, 4, 5], 2)[0]]
        s = shmreplay.Sampler(buf, seed=7)
        assert s.wait("replay", 64, timeout=30.0)
        problems, rows, calls = [], 0, 0
        killed = replaced = False
        seconds = float(os.environ.get("SHMREPLAY_SOAK_SECONDS", "3"))
        start = time.monotonic()
        last_heads = buf.heads()
        outs = {}
        while time.monotonic() - start < seconds:
            heads_before = buf.heads()
            assert np.all(heads_before >= last_heads), "a head went backwards"
            last_heads = heads_before
            length = 1 + calls % 16
            kind = calls % 3
            if kind == 0:
                b = s.sample("replay", 64, length, calls % 3, out=outs.get((64, length)))
            elif kind == 1:
                if not s.wait("online", 1, timeout=5.0):
                    continue
                b = s.sample_mixed(32, 16, length, 1.0, out=outs.get((48, length)))
            else:
                b = s.peek()
            outs[(b.rows, b.sequence_length)] = b
            rows += b.rows
            problems += check_batch(b, buf.heads())
            if kind == 2:
                assert np.all(b["head"][b.mask[:, 0], 0, 1] >= heads_before[b.mask[:, 0]] - 1)
            if calls % 5 == 0:
                s.reset_online_queue()
            calls += 1
            if not killed and time.monotonic() - start > seconds / 3:
                writers[0].send_signal(signal.SIGKILL)
                writers[0].wait()
                killed = True
                frozen = buf.heads()[:3].copy()
                p, takeovers = start_writer(name, [0, 1, 2], 3)  # takes the dead process's leases over
                writers[0] = p
                assert takeovers == 3
                replaced = True
                assert np.all(buf.heads()[:3] >= frozen)
        assert killed and replaced
        assert problems == [], problems[:5]
        print(f"{calls} sample calls, {rows} rows checked, {int(buf.heads().sum())} pushes, {s.retries} retries")
        assert rows > 1000
    finally:
        for p in writers:
            p.kill()
            p.wait()
