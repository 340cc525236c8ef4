"""The reanalyse example's launcher: envpool CartPole actors, one JAX learner (a Q-network trained towards stored
value targets) and reanalyse worker processes that recompute those targets with the learner's newest parameters and
write them back into the stored steps (issue 48; docs/python.md, "Reanalyse: the example").

    python examples/reanalyse/run.py --seconds 120 [--reanalysers 2] [--actors 1] [--json]

It creates the buffer (obs, action, reward, done, truncated, episode_return and the derived fields value_target and
target_version; a walk of --chunk steps; a learner slot for the learner and one per worker), starts the processes,
forwards their lines, stops them with SIGTERM after --seconds (counted from when every process is ready), collects
each one's @report line, reads the buffer's write-back and walk counters (`shmreplay info --json`), removes the
buffer and prints a summary. Exit 0 only when every process exited cleanly and the learner saw no violation."""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

import shmreplay

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from qnet import SCHEMA, params_path  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", default=f"reanalyse-example-{os.getpid()}")
    p.add_argument("--seconds", type=float, default=120)
    p.add_argument("--actors", type=int, default=1)
    p.add_argument("--envs-per-actor", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=8, help="envpool's async batch")
    p.add_argument("--reanalysers", type=int, default=2)
    p.add_argument("--orders", default="oldest_version,sweep", help="the workers' orders, in turn")
    p.add_argument("--capacity", type=int, default=4096, help="steps per env")
    p.add_argument("--chunk", type=int, default=64, help="the walk's chunk (steps)")
    p.add_argument("--reanalysed", type=float, default=0.25, help="the learner's fraction of freshly reanalysed rows")
    p.add_argument("--publish-every", type=int, default=100)
    p.add_argument("--updates-per-step", type=float, default=0.25, help="the learner's bound (0: none)")
    p.add_argument("--max-steps-per-s", type=float, default=1000, help="per actor (0: unpaced)")
    p.add_argument("--explore-steps", type=int, default=20000, help="per actor")
    p.add_argument("--min-replay", type=int, default=1000)
    p.add_argument("--ready-timeout", type=float, default=120)
    p.add_argument("--json", action="store_true", help="the summary as JSON on stdout (the lines go to stderr)")
    p.add_argument("--quiet", action="store_true", help="forward only the actors' returns and the summary")
    return p.parse_args()


def commands(a):
    py = sys.executable
    procs = [("learner", [py, os.path.join(HERE, "learner.py"), "--buffer", a.name, "--reanalysed", str(a.reanalysed),
                          "--publish-every", str(a.publish_every), "--min-replay", str(a.min_replay),
                          "--updates-per-step", str(a.updates_per_step)])]
    orders = a.orders.split(",")
    for i in range(a.reanalysers):
        procs.append((f"reanalyser {i}", [py, os.path.join(HERE, "reanalyser.py"), "--buffer", a.name, "--index",
                                          str(i), "--order", orders[i % len(orders)]]))
    for i in range(a.actors):
        procs.append((f"actor {i}", [py, os.path.join(HERE, "actor.py"), "--buffer", a.name, "--first-env",
                                     str(i * a.envs_per_actor), "--num-envs", str(a.envs_per_actor), "--batch-size",
                                     str(a.batch_size), "--seed", str(i), "--explore-steps", str(a.explore_steps),
                                     "--max-steps-per-s", str(a.max_steps_per_s)]))
    return procs


class Forwarder:
    """Reads each process's lines: @ready, @report and @progress are collected, the rest printed with the role."""

    def __init__(self, out, quiet):
        self.out, self.quiet, self.lock = out, quiet, threading.Lock()
        self.ready, self.reports, self.progress = set(), {}, {}

    def forward(self, role, proc):
        for line in proc.stdout:
            with self.lock:
                if line.startswith("@ready"):
                    self.ready.add(role)
                elif line.startswith("@report "):
                    self.reports[role] = json.loads(line[len("@report "):])
                elif line.startswith("@progress "):
                    p = json.loads(line[len("@progress "):])
                    self.progress.setdefault(round(p["t"]), []).append(p)
                    mean = p["return_sum"] / p["episodes"] if p["episodes"] else float("nan")
                    print(f"[{role}] t {p['t']:6.1f}s  {p['episodes']:4d} episodes  mean return {mean:6.1f}  "
                          f"steps {p['pushed']}", file=self.out, flush=True)
                elif not self.quiet and not line.startswith("@state"):
                    print(line, end="", file=self.out, flush=True)


def run(a, out):
    procs = [(role, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=HERE))
             for role, cmd in commands(a)]
    fwd = Forwarder(out, a.quiet)
    threads = [threading.Thread(target=fwd.forward, args=rp, daemon=True) for rp in procs]
    for t in threads:
        t.start()
    started = time.monotonic()
    interrupted = False
    try:
        while len(fwd.ready) < len(procs) and time.monotonic() - started < a.ready_timeout and \
                all(p.poll() is None for _, p in procs):
            time.sleep(0.1)
        started = time.monotonic()
        while time.monotonic() - started < a.seconds and all(p.poll() is None for _, p in procs):
            time.sleep(0.2)
    except KeyboardInterrupt:
        interrupted = True
    wall = time.monotonic() - started
    for _, p in procs[::-1]:  # the actors first, then the workers, the learner last
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    status = {}
    for role, p in procs:
        try:
            status[role] = p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            print(f"[launcher] {role} (pid {p.pid}) still runs 15 s after SIGTERM: killing it", file=out, flush=True)
            p.kill()
            status[role] = p.wait()
    for t in threads:
        t.join(timeout=5)
    return procs, fwd, status, wall, interrupted


def buffer_counters(name):
    """The write-back and walk counters of `shmreplay info --json`, summed over the learner slots and the envs."""
    info = json.loads(subprocess.run([sys.executable, "-m", "shmreplay", "info", name, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    slots = info.get("learners") or [info.get("learner", {})]
    counters = {k: sum(int(s.get(k, 0)) for s in slots) for k in ("write_backs_applied", "write_backs_refused")}
    walk = info.get("reanalyse_walk", {})
    counters["walk"] = {k: v for k, v in walk.items() if not isinstance(v, (list, dict))}
    envs = info.get("envs", [])
    for k in ("walk_handed", "walk_completed", "walk_rehanded", "walk_stale"):
        counters[k] = sum(int(e.get(k, 0)) for e in envs if isinstance(e, dict))
    return counters


def learning_curve(progress):
    """Per @progress time: the mean return of the episodes that ended in that interval, over every actor."""
    curve = []
    for t in sorted(progress):
        n = sum(p["episodes"] for p in progress[t])
        curve.append({"t": t, "episodes": n,
                      "mean_return": sum(p["return_sum"] for p in progress[t]) / n if n else None})
    return curve


def make_summary(a, procs, fwd, status, wall, interrupted, counters):
    reports = fwd.reports
    learner = reports.get("learner", {})
    actors = [reports.get(f"actor {i}", {}) for i in range(a.actors)]
    workers = [reports.get(f"reanalyser {i}", {}) for i in range(a.reanalysers)]
    last = [r["return_last"] for r in actors if r.get("return_last") is not None]
    summary = {
        "seconds": wall, "interrupted": interrupted, "pushes": sum(r.get("pushes", 0) for r in actors),
        "updates": learner.get("updates"), "version": learner.get("version"),
        "rows_sampled": learner.get("rows_sampled"), "rows_trained": learner.get("rows_trained"),
        "violations": learner.get("violations"),
        "return_last": sum(last) / len(last) if last else None,
        "learning_curve": learning_curve(fwd.progress),
        "chunks_completed": sum(r.get("completed", 0) for r in workers),
        "chunks_stale": sum(r.get("stale", 0) for r in workers),
        "write_backs_applied": sum(r.get("applied", 0) for r in workers),
        "write_backs_refused": sum(r.get("refused", 0) for r in workers),
        "buffer_counters": counters,
        "processes": [{"role": role, "exit": status[role], "clean": status[role] == 0 and role in reports,
                       "report": reports.get(role)} for role, _ in procs],
    }
    summary["ok"] = all(p["clean"] for p in summary["processes"]) and summary["violations"] == 0
    return summary


def print_summary(a, s, out):
    if a.json:
        print(json.dumps(s, indent=1))
        return
    c = s["buffer_counters"]
    print(f"summary: {s['seconds']:.1f} s, {a.actors} envpool actor(s) x {a.envs_per_actor} CartPoles, 1 JAX "
          f"learner, {a.reanalysers} reanalyse workers", file=out)
    print(f"  env steps pushed   {s['pushes']:>10}", file=out)
    print(f"  learner            {s['updates']!s:>10} updates, {s['version']} versions published, "
          f"{s['rows_trained']} of {s['rows_sampled']} rows trained (the rest never reanalysed)", file=out)
    print(f"  episode return     {s['return_last'] or 0:10.1f}  (the actors' last 100 episodes)", file=out)
    print(f"  chunks completed   {s['chunks_completed']:>10}  ({s['chunks_stale']} refused: overwritten)", file=out)
    print(f"  write-backs        {s['write_backs_applied']:>10} applied, {s['write_backs_refused']} refused "
          f"(buffer counters: {c.get('write_backs_applied')} applied, {c.get('write_backs_refused')} refused)",
          file=out)
    print(f"  walk               handed {c.get('walk_handed')}, completed {c.get('walk_completed')}, rehanded "
          f"{c.get('walk_rehanded')}, stale {c.get('walk_stale')}; {c.get('walk')}", file=out)
    print(f"  violations         {s['violations']!s:>10}  (every sampled row checked)", file=out)
    for p in s["processes"]:
        print(f"  {p['role']:<13} exit {p['exit']}{'' if p['clean'] else '  NOT CLEAN'}", file=out)


def main():
    a = parse_args()
    out = sys.stderr if a.json else sys.stdout
    shmreplay.Buffer.create(a.name, a.actors * a.envs_per_actor, a.capacity, SCHEMA, replace=True,
                            max_learners=1 + a.reanalysers, reanalyse_chunk=a.chunk)
    print(f"buffer '{a.name}': {a.actors * a.envs_per_actor} envs x {a.capacity} steps, walk chunks of {a.chunk}; "
          f"{a.seconds:g} s", file=out, flush=True)
    try:
        procs, fwd, status, wall, interrupted = run(a, out)
        counters = buffer_counters(a.name)
    finally:
        shmreplay.Buffer.remove(a.name)
        try:
            os.remove(params_path(a.name))
        except FileNotFoundError:
            pass
    summary = make_summary(a, procs, fwd, status, wall, interrupted, counters)
    print_summary(a, summary, out)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
