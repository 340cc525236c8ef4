"""The main job on real envpool: one shmreplay buffer, --workers envpool actor processes (async mode, each leasing
its own env ids) and one PyTorch learner process (or --learners K of them), for --seconds; then a summary with every
process's figures.

    .venv/bin/python examples/envpool/run.py --seconds 180              # CartPole-v1, learning (PyTorch)
    .venv/bin/python examples/envpool/run.py --learner jax              # the same learner in JAX
    .venv/bin/python examples/envpool/run.py --learners 2               # 2 PyTorch learner ranks, one buffer
    .venv/bin/python examples/envpool/run.py --json --seconds 20         # the summary as JSON
    .venv/bin/python examples/envpool/run.py --logdir runs --plot run.png  # TensorBoard event files and a PNG

The launcher creates the buffer, starts the learner and the actors, forwards the learner's lines, stops
everything with SIGTERM at the end (or on Ctrl-C), collects each process's @report line, removes the buffer
and prints the summary. Exit status 0 only if every process exited cleanly and the learner saw no violation.

--learners K (PyTorch only; 1 by default, the job above): the buffer is made with K learner slots
(max_learners=K) and K learner processes run as the ranks of one torch.distributed group (gloo on the CPU; the
launcher picks a free port on 127.0.0.1 and gives each process MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE).
Rank r samples from its own slot (Sampler(buf, seed=1, rank=r)) its share of the one-learner batch of 32 replay +
32 online rows: 32 // K of each, and one more for the first 32 % K ranks, so K need not divide it (K is at most
32). DistributedDataParallel all-reduces the gradients, every rank takes the same Adam step, rank 0 alone publishes
the parameters and prints the per-second lines, and the rate limiter counts every rank's rows. The summary has
each rank's rows and their total; the job is ok only if every rank exited cleanly, and the violations are every
rank's.

A watchdog: when neither side makes progress (the buffer's inserts and samples stay the same) for --watchdog
seconds, the launcher prints the rate limiter's state and asks every process (SIGUSR1) for what it is doing, and
prints those @state lines (a process that does not answer gets its state from /proc), again every --watchdog
seconds while the stall lasts.

--logdir DIR: the launcher writes TensorBoard event files under DIR/<buffer name>-<unix time> (the learning curve,
env steps/s, rows sampled/s, the rate limiter's ratio, error and held-back counts; tags in charts.py); --plot FILE.png
draws the same series when the run ends (charts.py)."""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import shmreplay
import charts
from common import SCHEMA, params_path

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    """The options, checked (argparse's error and exit on a bad one); the PNG's size."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=120)
    p.add_argument("--workers", type=int, default=2, help="actor processes")
    p.add_argument("--envs-per-worker", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=8, help="envpool's batch_size: envs per recv")
    p.add_argument("--capacity", type=int, default=4096, help="steps kept per env")
    p.add_argument("--min-replay", type=int, default=2048, help="the learner's first update waits for this many")
    p.add_argument("--learner", choices=("torch", "jax"), default="torch", help="the learner's framework")
    p.add_argument("--learners", type=int, default=1,
                   help="learner processes: ranks of one torch.distributed group (gloo, CPU), each sampling its share "
                        "of the 32 + 32 rows of an update from its own learner slot (PyTorch only; at most 32)")
    p.add_argument("--samples-per-insert", type=float, default=1 / 16,
                   help="rate limit: sampled rows per pushed step, kept by the buffer whatever the machine's speed "
                        "(the learner waits when ahead, the actors when behind); the default, one row of 16 steps "
                        "per 16 steps, replays each step about once; 0: no limiter")
    p.add_argument("--error-buffer", type=float, default=256, help="rate limit: how far (in rows) either may run ahead")
    p.add_argument("--ready-timeout", type=float, default=120, help="longest wait for the processes to start")
    p.add_argument("--watchdog", type=float, default=5,
                   help="print every process's state when neither side progresses for this many seconds (0: off)")
    p.add_argument("--name", default=f"envpool-cartpole-{os.getpid()}")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="do not forward the learner's lines")
    p.add_argument("--keep", action="store_true", help="leave the buffer for `shmreplay info`")
    p.add_argument("--logdir", help="write TensorBoard event files under LOGDIR/<buffer name>-<unix time>")
    p.add_argument("--plot", metavar="FILE.png", help="draw the learning curve and the throughputs when the run ends")
    p.add_argument("--plot-size", default="1000x700", metavar="WxH", help="the PNG's size in pixels")
    a = p.parse_args()
    try:
        plot_size = charts.parse_size(a.plot_size)
    except ValueError as e:
        p.error(f"--plot-size {e}")
    missing = charts.check_available(a.logdir, a.plot)
    if missing:
        p.error(missing)
    if not 1 <= a.learners <= 32:
        p.error(f"--learners {a.learners}: 1 to 32 (each rank samples at least one of the 32 replay and one of the "
                "32 online rows of an update)")
    if a.learners > 1 and a.learner != "torch":
        p.error(f"--learners {a.learners} needs --learner torch: the ranks are a torch.distributed group with "
                "DistributedDataParallel; the JAX learner runs as one process")
    return a, plot_size


def start_processes(a, limit):
    """The learner process(es) (K ranks of one torch.distributed group with --learners K) and the actors:
    [(role, Popen)], learners first."""
    k = a.learners
    py = sys.executable
    roles = ["learner"] if k == 1 else [f"learner {r}" for r in range(k)]
    port = free_port() if k > 1 else None
    procs = []
    for r, role in enumerate(roles):
        env = None if k == 1 else dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                                       WORLD_SIZE=str(k))
        procs.append((role, subprocess.Popen([py, os.path.join(HERE, "learner.py"), "--buffer", a.name,
                                              "--min-replay", str(a.min_replay), "--framework", a.learner]
                                             + (["--quiet"] if a.quiet else []),
                                             stdout=subprocess.PIPE, text=True, env=env)))
    for w in range(a.workers):
        procs.append((f"actor {w}", subprocess.Popen(
            [py, os.path.join(HERE, "actor.py"), "--buffer", a.name, "--first-env", str(w * a.envs_per_worker),
             "--num-envs", str(a.envs_per_worker), "--batch-size", str(a.batch_size), "--seed", str(w)]
            + (["--wait-for-rate-limit"] if limit else []),
            stdout=subprocess.PIPE, text=True)))
    return procs


class Forwarder:
    """Reads each process's lines on a thread of its own: @ready, @progress (the actors' learning curve, once every
    actor reported a 10 s bucket), @report and @state lines are kept; the rest is forwarded unless --quiet."""

    def __init__(self, a, out, curve, lock):
        self.a, self.out, self.curve, self.lock = a, out, curve, lock
        self.reports, self.ready = {}, set()
        self.answered = {}      # role -> time of its last @state line
        self.progress = {}      # 10 s bucket -> [actors reported, episodes, sum of returns]

    def on_progress(self, line):
        a, out = self.a, self.out
        p = json.loads(line[len("@progress "):])
        bucket = round(p["t"] / 10) * 10
        with self.lock:
            entry = self.progress.setdefault(bucket, [0, 0, 0.0])
            entry[0] += 1
            entry[1] += p["episodes"]
            entry[2] += p["return_sum"]
            if entry[0] == a.workers and entry[1] > 0:
                self.curve.append((bucket, entry[2] / entry[1], entry[1]))
                if not a.quiet:
                    print(f"[actors]  t {bucket:6.1f}s  mean return {entry[2] / entry[1]:7.1f}  over {entry[1]} "
                          "episodes that ended in the last 10 s", file=out, flush=True)

    def forward(self, role, proc):
        for line in proc.stdout:
            if line.startswith("@ready"):
                self.ready.add(role)
            elif line.startswith("@progress "):
                self.on_progress(line)
            elif line.startswith("@report "):
                self.reports[role] = json.loads(line[len("@report "):])
            elif line.startswith("@state "):
                self.answered[role] = time.monotonic()
                print(f"[watchdog] {state_text(role, json.loads(line[len('@state '):]))}", file=self.out, flush=True)
            elif not self.a.quiet:
                print(line, end="", file=self.out, flush=True)


def run_for(a, buf, procs, fwd, chart, out):
    """--seconds of work: the clock starts once every process has made its env pool or sampler (importing envpool
    and torch takes seconds, many more on a busy machine), or after --ready-timeout; the watchdog asks every process
    for its state (SIGUSR1) while neither side progresses. (seconds run, whether Ctrl-C ended it)."""
    ready = fwd.ready
    interrupted = False
    started = time.monotonic()
    try:
        while len(ready) < len(procs) and time.monotonic() - started < a.ready_timeout and \
                all(pr.poll() is None for _, pr in procs):
            time.sleep(0.1)
        started = time.monotonic()
        chart.start()
        watchdog = Watchdog(buf, a.watchdog, out, a.learners)
        while time.monotonic() - started < a.seconds and all(pr.poll() is None for _, pr in procs):
            time.sleep(0.2)
            chart.tick(time.monotonic() - started)
            if watchdog.stalled():
                asked = time.monotonic()
                for role, pr in procs:
                    if role in ready and pr.poll() is None:
                        pr.send_signal(signal.SIGUSR1)  # Status in common.py: one @state line within ~0.5 s
                timer = threading.Timer(2.0, report_silent, (procs, ready, fwd.answered, asked, out))
                timer.daemon = True
                timer.start()
    except KeyboardInterrupt:
        interrupted = True
    return time.monotonic() - started, interrupted


def stop_processes(procs, k, out):
    """SIGTERM to every process still running, actors first, then the learners (the ranks agree to stop after the
    same update, learner.py, so none waits for a collective); one killed if it still runs 15 s later. The exit
    codes by role."""
    for _, pr in procs[k:] + procs[:k]:
        if pr.poll() is None:
            pr.send_signal(signal.SIGTERM)
    status = {}
    for role, pr in procs:
        try:
            code = pr.wait(timeout=15)
        except subprocess.TimeoutExpired:
            print(f"[launcher] {role} (pid {pr.pid}) is still running 15 s after SIGTERM ({proc_state(pr.pid)}): "
                  "killing it", file=out, flush=True)
            pr.kill()
            code = pr.wait()
        status[role] = code
    return status


def make_summary(a, procs, fwd, status, curve, state, wall, interrupted, chart):
    """The run's summary: the actors' and the learners' totals, the learning curve, the rate limiter's counts and
    every process's exit and report; ok only if every process exited cleanly and no violation was seen."""
    k, envs, reports = a.learners, a.workers * a.envs_per_worker, fwd.reports
    roles = [role for role, _ in procs[:k]]
    actors = [reports.get(f"actor {w}", {}) for w in range(a.workers)]
    ranks = [reports.get(role, {}) for role in roles]
    learner = ranks[0]
    every = all(ranks)   # totals only when every rank reported
    first = [r["return_first"] for r in actors if r.get("return_first") is not None]
    last = [r["return_last"] for r in actors if r.get("return_last") is not None]
    summary = {
        "seconds": wall, "interrupted": interrupted, "workers": a.workers, "envs": envs,
        "pushes": sum(r.get("pushes", 0) for r in actors),
        "env_steps_per_s": sum(r.get("env_steps_per_s", 0) for r in actors),
        "learners": k,
        "rows_sampled": sum(r["rows_sampled"] for r in ranks) if every else None,
        "rows_per_s": sum(r["rows_per_s"] for r in ranks) if every else None,
        "rows_sampled_per_rank": [r.get("rows_sampled") for r in ranks],
        "rows_per_s_per_rank": [r.get("rows_per_s") for r in ranks],
        "updates": learner.get("updates"), "updates_per_s": learner.get("updates_per_s"),
        "retries": sum(r["retries"] for r in ranks) if every else None,
        "violations": sum(r["violations"] for r in ranks) if every else None,
        "return_first": sum(first) / len(first) if first else None,
        "return_last": sum(last) / len(last) if last else None,
        "learning_curve": [{"t": t, "mean_return": r, "episodes": n} for t, r, n in sorted(curve)],
        "rate_limit": None if state.limit is None else {
            "samples_per_insert": state.limit.samples_per_insert, "error_buffer": state.limit.error_buffer,
            "inserts": state.inserts, "samples": state.samples,
            "samples_per_insert_measured": state.samples / state.inserts if state.inserts else None,
            "learner_limited": state.learner_limited, "writers_limited": state.writers_limited},
        "processes": [{"role": role, "exit": status[role], "clean": status[role] == 0 and role in reports,
                       "report": reports.get(role)} for role, _ in procs],
        "buffer": {"name": a.name, "kept": a.keep},
        "logdir": chart.run_dir, "plot": a.plot,
    }
    summary["ok"] = all(pr["clean"] for pr in summary["processes"]) and summary["violations"] == 0
    return summary


def print_summary(a, summary, wall, out):
    """The summary as text (on `out`), or as JSON on stdout with --json."""
    k = a.learners
    if a.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"summary: {wall:.1f} s, {a.workers} envpool actors x {a.envs_per_worker} CartPoles", file=out)
        print(f"  env steps pushed  {summary['pushes']:>10}  ({summary['env_steps_per_s']:.0f}/s)", file=out)
        print(f"  rows sampled      {summary['rows_sampled']!s:>10}  in {summary['updates']} updates "
              f"({summary['updates_per_s'] or 0:.1f}/s), {summary['retries']} retries", file=out)
        if k > 1:
            print(f"  rows per rank     {' + '.join(str(n) for n in summary['rows_sampled_per_rank'])}  ("
                  + " + ".join(f"{x or 0:.0f}" for x in summary["rows_per_s_per_rank"])
                  + f" = {summary['rows_per_s'] or 0:.0f} rows/s)", file=out)
        print(f"  episode return    {summary['return_first'] or 0:10.1f}  -> {summary['return_last'] or 0:.1f} "
              "(actors' first and last 100 episodes)", file=out)
        print(f"  violations        {summary['violations']!s:>10}  (every sampled step's stamp checked)", file=out)
        if summary["rate_limit"]:
            r = summary["rate_limit"]
            print(f"  rate limit        {r['samples_per_insert_measured'] or 0:10.3f}  rows per step (target "
                  f"{r['samples_per_insert']:g} +/- {r['error_buffer']:g} rows); held back: {r['learner_limited']} "
                  f"sample calls, {r['writers_limited']} pushes", file=out)
        for pr in summary["processes"]:
            r = pr["report"] or {}
            figures = (f"{r.get('env_steps_per_s', 0):.0f} env steps/s, {r.get('episodes', 0)} episodes"
                       if pr["role"].startswith("actor") else
                       f"{r.get('framework', '?')}, {r.get('updates_per_s', 0):.1f} updates/s, "
                       f"{r.get('rows_per_s', 0):.0f} rows/s"
                       + (f" ({r.get('rows_per_update', '?')} per update)" if k > 1 else ""))
            print(f"  {pr['role']:<9} exit {pr['exit']}  {figures}", file=out)
        print(f"  buffer            {'kept' if a.keep else 'removed'}", file=out)


def main():
    a, plot_size = parse_args()
    out = sys.stderr if a.json else sys.stdout
    envs = a.workers * a.envs_per_worker
    limit = (shmreplay.RateLimit.ratio(a.samples_per_insert, a.min_replay, a.error_buffer)
             if a.samples_per_insert > 0 else None)
    k = a.learners
    buf = shmreplay.Buffer.create(a.name, envs, a.capacity, SCHEMA, replace=True, rate_limit=limit, max_learners=k)
    learners = "1 learner" if k == 1 else f"{k} learner ranks (torch.distributed, gloo)"
    print(f"buffer '{a.name}': {envs} envs x {a.capacity} steps; {learners} and {a.workers} envpool actors for "
          f"{a.seconds:g} s (Ctrl-C stops); rate limit: {limit if limit else 'none'}", file=out, flush=True)
    curve = []              # (t, mean return of the episodes that ended in the bucket, episodes), once every actor
                            # reported
    lock = threading.Lock()
    try:
        chart = charts.Charts(buf, curve, lock, a.logdir, f"{a.name}-{int(time.time())}")
    except OSError as e:  # before any process starts: only the buffer to remove
        shmreplay.Buffer.remove(a.name)
        sys.exit(f"--logdir {a.logdir}: cannot write the event files there: {e}")
    if chart.run_dir:
        print(f"TensorBoard event files: {chart.run_dir} (tensorboard --logdir {a.logdir})", file=out, flush=True)
    procs = start_processes(a, limit)
    print("processes: " + ", ".join(f"{role} pid {pr.pid}" for role, pr in procs), file=out, flush=True)
    fwd = Forwarder(a, out, curve, lock)
    threads = [threading.Thread(target=fwd.forward, args=pr, daemon=True) for pr in procs]
    for t in threads:
        t.start()
    wall, interrupted = run_for(a, buf, procs, fwd, chart, out)
    status = stop_processes(procs, k, out)
    for t in threads:
        t.join(timeout=5)
    state = buf.rate_limit_state()
    chart.finish(wall)
    if a.plot:
        chart.plot(a.plot, plot_size, f"{a.workers} envpool actors x {a.envs_per_worker} CartPoles, "
                   f"{'1 learner' if k == 1 else f'{k} learner ranks'} ({a.learner}), "
                   f"rate limit {a.samples_per_insert:g} rows per step")
    if not a.keep:
        shmreplay.Buffer.remove(a.name)
    try:
        os.remove(params_path(a.name))
    except FileNotFoundError:
        pass
    summary = make_summary(a, procs, fwd, status, curve, state, wall, interrupted, chart)
    print_summary(a, summary, wall, out)
    return 0 if summary["ok"] else 1


class Watchdog:
    """Progress is the buffer's inserts (the sum of the heads) or samples (rows the learner took) moving. stalled()
    is polled by the launcher's loop: after `seconds` without progress it prints the buffer's side of the state (the
    rate limiter's error and bounds, who waits for it) and returns True, then again every `seconds` while the stall
    lasts; when progress resumes it says after how long."""

    def __init__(self, buf, seconds, out, learners=1):
        self.buf, self.seconds, self.out, self.learners = buf, seconds, out, learners
        self.counts, self.since, self.next_report = self._counts(), time.monotonic(), None

    def _counts(self):
        state = self.buf.rate_limit_state()
        return state.inserts, state.samples

    def stalled(self):
        if self.seconds <= 0:
            return False
        now, counts = time.monotonic(), self._counts()
        if counts != self.counts:
            if self.next_report is not None:
                print(f"[watchdog] progress again after {now - self.since:.1f} s", file=self.out, flush=True)
            self.counts, self.since, self.next_report = counts, now, None
            return False
        if now - self.since < self.seconds or (self.next_report is not None and now < self.next_report):
            return False
        self.next_report = now + self.seconds
        print(f"[watchdog] no progress for {now - self.since:.1f} s: "
              f"{limiter_text(self.buf.rate_limit_state(), self.learners)}; asking each process what it is doing",
              file=self.out, flush=True)
        return True


def limiter_text(state, learners=1):
    """The buffer's side of a stall: counts, the limiter's error against its bounds, who waits for it (the rows
    waiting are every learner rank's)."""
    text = f"{state.inserts} steps inserted, {state.samples} rows sampled, {state.stored} steps stored"
    limit = state.limit
    if limit is None:
        return text + "; no rate limiter"
    if limit.has_ratio:
        text += (f"; limiter error {state.error:.2f} (inserts x {limit.samples_per_insert:g} - samples), bounds "
                 f"{limit.min_diff:g} .. {limit.max_diff:g}")
    else:
        text += f"; limiter min size {limit.min_size_to_sample}"
    now = time.time()
    who, waits, is_ = ("the learner", "waits", "is") if learners == 1 else ("the learner ranks", "wait", "are")
    if state.learner_waiting_rows:
        since = state.learner_waiting_since
        text += f"; {who} {waits} for it to admit {state.learner_waiting_rows} rows" + (
            f" (for {now - since:.1f} s)" if since else "")
    else:
        text += f"; {who} {is_} not waiting for it"
    if state.writer_waiters:
        since = state.writer_waiting_since
        text += f"; {state.writer_waiters} writer(s) wait for it" + (f" (for {now - since:.1f} s)" if since else "")
    else:
        text += "; no writer waits for it"
    return text


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago, for the learner ranks' rendezvous (rank 0 listens on it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def state_text(role, state):
    """One @state line (common.Status) in words."""
    detail = {k: v for k, v in state.items() if k not in ("role", "pid", "doing", "for_s", "why")}
    text = f"{role} (pid {state.get('pid')}): {state.get('doing')} for {state.get('for_s')} s"
    if detail:
        text += " (" + ", ".join(f"{k} {v}" for k, v in detail.items()) + ")"
    if state.get("why"):
        text += f": {state['why']}"
    return text


def proc_state(pid):
    """The kernel's view of a process that does not answer: its state letter in words and where it sleeps."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            letter = re.match(r".*\) (\S)", f.read()).group(1)
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read().strip() or "-"
    except (OSError, AttributeError):
        return "gone"
    words = {"R": "running", "S": "sleeping", "D": "in uninterruptible sleep (I/O)", "T": "stopped",
             "t": "stopped by a tracer", "Z": "a zombie"}
    return f"state {letter} ({words.get(letter, '?')}), wchan {wchan}"


def report_silent(procs, ready, answered, asked, out):
    """Two seconds after the watchdog asked: a line for each process that has not answered (stopped, in a long
    system call, or not ready yet)."""
    for role, pr in procs:
        if answered.get(role, 0) < asked and pr.poll() is None:
            why = "" if role in ready else "; not ready yet, so not asked"
            print(f"[watchdog] {role} (pid {pr.pid}): no answer in 2 s; {proc_state(pr.pid)}{why}", file=out,
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
