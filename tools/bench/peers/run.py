#!/usr/bin/env python3
"""shmreplay beside the replay buffers a user would pick instead, on the same workloads in one run: prints a
markdown table (each figure's median over the trials, its min-max, and ours/peer) and writes everything as JSON.

    .venv-peers/bin/python tools/bench/peers/run.py                  # the full run (~15 min on 2 cores)
    .venv-peers/bin/python tools/bench/peers/run.py --quick          # a smoke run of everything
    ... --json peers.json --atari-scale 0.5 --only shmreplay,cpprb
    .venv-peers/bin/python tools/bench/peers/run.py --only cpprb --steps atari-stacked   # stacked frames (issue 32)

Each implementation runs in its own worker process (worker.py), one after the other; Reverb runs with the
interpreter of .venv-reverb when this one cannot import it (Reverb needs TensorFlow 2.15 and NumPy 1.x, which
cannot share an environment with current JAX). `tools/setup.sh --bench` makes both environments. Method:
docs/benchmarks/peers.md ("The peers").
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

# key -> adapter (module:Class); shmreplay first: every ratio is against its figures from this run.
ADAPTERS = {
    "shmreplay": "peer_shmreplay:Adapter",
    "shmreplay-per": "peer_shmreplay:PrioritizedAdapter",  # ours for the prioritized figures
    "cpprb": "peer_cpprb:Adapter",
    "cpprb-per": "peer_cpprb:PrioritizedAdapter",
    "torchrl": "peer_torchrl:Adapter",
    "flashbax-flat": "peer_flashbax:FlatAdapter",
    "flashbax-trajectory": "peer_flashbax:TrajectoryAdapter",
    "dejax": "peer_dejax:Adapter",
    "reverb": "peer_reverb:Adapter",
}
FIGURES = [  # (key suffix, label); "{step} " is prefixed
    ("create", "creation, until the first 256 steps are in (s)"),
    ("footprint", "resident memory when full (MB)"),
    ("add 1/call 1w", "add, 1 writer, 1 step per call (steps/s)"),
    ("add 256/call 1w", "add, 1 writer, 256 steps per call (steps/s)"),
    ("add 1/call 2w", "add, 2 writer processes, 1 step per call (steps/s, both)"),
    ("add 256/call 2w", "add, 2 writer processes, 256 steps per call (steps/s, both)"),
    ("sample flat 0w", "sample 256 transitions, no writer (rows/s)"),
    ("sample flat 2w", "sample 256 transitions, 2 writers pushing (rows/s)"),
    ("sample seq 0w", "sample 32 x 16 sequences, no writer (sequences/s)"),
    ("sample seq 2w", "sample 32 x 16 sequences, 2 writers pushing (sequences/s)"),
    ("sample prioritized 0w", "prioritized sample 256 + priority update, no writer (rows/s)"),
    ("sample prioritized 2w", "prioritized sample 256 + priority update, 2 writers pushing (rows/s)"),
]


def si(x):
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suffix}"
    return f"{x:.3g}"


def value(fig, key):
    """A figure as text: median (min-max), or its n/a reason or error."""
    if fig is None:
        return "-"
    if "na" in fig:
        return fig["na"] if fig["na"].startswith("n/a") else f"n/a ({fig['na']})"
    if "error" in fig:
        return f"failed: {fig['error'][:120]}"
    scale = 1e-6 if key.endswith("footprint") else 1.0
    text = si(fig["median"] * scale)
    if "min" in fig:
        text += f" ({si(fig['min'] * scale)}-{si(fig['max'] * scale)})"
    return text


def ratio(ours, theirs):
    if ours and theirs and "median" in ours and "median" in theirs and theirs["median"] > 0:
        return ours["median"] / theirs["median"]
    return None


def run_worker(key, python, o):
    cmd = [python, os.path.join(HERE, "worker.py"), ADAPTERS[key], "--atari-scale", str(o.atari_scale),
           "--capacity-scale", str(o.capacity_scale), "--steps", o.steps]
    for flag, v in (("--quick", o.quick), ("--seconds", o.seconds), ("--trials", o.trials)):
        if v:
            cmd += [flag] if v is True else [flag, str(v)]
    start = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=o.timeout, cwd=HERE)
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        out = {"error": f"worker timed out after {o.timeout} s"}
    except (IndexError, json.JSONDecodeError):
        out = {"error": f"worker exited {p.returncode}: {p.stderr.strip()[-400:]}"}
    out.update(key=key, seconds=time.perf_counter() - start, interpreter=python)
    out.setdefault("peer", key)
    print(f"[peers] {key}: {'ok' if 'figures' in out else out.get('error')} ({out['seconds']:.0f} s)",
          file=sys.stderr)
    return out


def machine():
    model = next((line.split(":", 1)[1].strip() for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name")), "?")
    mem = next((int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": round(mem / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(), "load": os.getloadavg()}


def table(results, steps):
    ours = dict(next((r for r in results if r["key"] == "shmreplay"), {}).get("figures", {}))
    # The prioritized figures are measured on a buffer with priorities (the other figures on one without, as the
    # uniform peers run): ours for them come from shmreplay-per.
    per = next((r for r in results if r["key"] == "shmreplay-per"), {}).get("figures", {})
    ours.update({k: v for k, v in per.items() if "prioritized" in k})
    lines = ["| step | figure | shmreplay | peer | peer's figure | ours/peer |", "|---|---|---:|---|---:|---:|"]
    rows = []
    for step in steps:
        for suffix, label in FIGURES:
            key = f"{step} {suffix}"
            for r in results:
                if r["key"] in ("shmreplay", "shmreplay-per") or "figures" not in r:
                    continue
                theirs = r["figures"].get(key)
                if theirs is None or "na" in theirs:
                    continue
                q = ratio(ours.get(key), theirs)
                rows.append({"step": step, "figure": key, "label": label, "peer": r["peer"], "ours": ours.get(key),
                             "theirs": theirs, "ours_over_peer": q})
                lines.append(f"| {step} | {label} | {value(ours.get(key), key)} | {r['peer']} | "
                             f"{value(theirs, key)} | {f'{q:.2f}x' if q else '-'} |")
    lines += ["", "| implementation | version | multi-process form | torn rows / rows checked (2 writers, "
              "capacity 256) |", "|---|---|---|---:|"]
    for r in results:
        if "figures" in r:
            p = r["figures"].get("probe", {})
            probe = (f"{p['torn']:,} / {p['checked']:,}" if "torn" in p else value(p, "probe"))
            lines.append(f"| {r['peer']} | {r.get('version', '')} | {r.get('form', '')} | {probe} |")
        else:
            lines.append(f"| {r['peer']} | not measured | {r.get('error', '')[:300]} | - |")
    return "\n".join(lines), rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, short trials: a smoke run of everything")
    p.add_argument("--json", metavar="FILE", help="write every figure, trial and ratio here")
    p.add_argument("--atari-scale", type=float, default=1.0,
                   help="Atari capacity = 10^5 x this (lower it if memory is short)")
    p.add_argument("--capacity-scale", type=float, default=1.0,
                   help="both capacities x this (e.g. 0.1 for a peer too slow to fill 10^6 steps)")
    p.add_argument("--seconds", type=float, help="one trial (default 0.3; --quick 0.02)")
    p.add_argument("--trials", type=int, help="trials per figure (default 5; --quick 3)")
    p.add_argument("--only", help="comma-separated keys of " + ", ".join(ADAPTERS))
    p.add_argument("--steps", default="small,atari",
                   help="comma-separated step kinds of small, atari, atari-stacked (default small,atari)")
    p.add_argument("--reverb-python", default=os.path.join(ROOT, ".venv-reverb", "bin", "python"),
                   help="interpreter for Reverb when this one cannot import it")
    p.add_argument("--timeout", type=float, default=None, help="seconds per implementation")
    o = p.parse_args()
    o.timeout = o.timeout or (600 if o.quick else 2400)
    keys = o.only.split(",") if o.only else list(ADAPTERS)
    if "shmreplay" not in keys:
        keys.insert(0, "shmreplay")
    results = []
    for key in keys:
        python = sys.executable
        if key == "reverb" and os.path.exists(o.reverb_python):
            try:
                import reverb  # noqa: F401
            except Exception:
                python = o.reverb_python
        results.append(run_worker(key, python, o))
    steps = tuple(o.steps.split(","))
    text, rows = table(results, steps)
    info = machine()
    header = (f"Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB; load at the end "
              f"{' '.join(f'{x:.2f}' for x in info['load'])}. Command: `{' '.join(['run.py'] + sys.argv[1:])}`. "
              "Figures: median over trials (min-max); ours/peer is shmreplay's median over the peer's "
              "(rates: above 1 means shmreplay is faster; creation time and memory: below 1 means shmreplay "
              "needs less).")
    print(header + "\n\n" + text)
    if o.json:
        with open(o.json, "w") as f:
            json.dump({"machine": info, "argv": sys.argv[1:], "results": results, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
