"""Runs every figure of one implementation in this process (the learner) and its writer processes, and prints
them as one JSON object on stdout: run.py starts one worker per implementation, so that each has the machine's
memory to itself and none inherits another's threads (JAX, gRPC) into its forked writers.

    python worker.py ADAPTER [--quick] [--atari-scale F] [--seconds S] [--trials N]

ADAPTER is `module:Class` of an adapter in this folder (e.g. `peer_cpprb:Adapter`). A peer that does not
import prints {"error": ...} with the import error and exits 0.
"""
import argparse
import importlib
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure  # noqa: E402
import workloads  # noqa: E402

KIND_UNITS = {"flat": workloads.FLAT_BATCH, "seq": workloads.SEQ_BATCH, "prioritized": workloads.FLAT_BATCH}


def na(reason):
    return {"na": reason}


def guarded(fn, *args):
    """A figure, or {"error": ...} when the peer failed at it (the other figures are still measured)."""
    try:
        return fn(*args)
    except Exception as e:
        traceback.print_exc()
        return {"error": f"{type(e).__name__}: {e}"}


def run(adapter, cfg):
    figures = {}
    for step in cfg.steps:
        created, footprint = measure.create_and_fill(adapter, step, cfg.capacity[step])
        figures[f"{step} create"] = {"median": created, "unit": "s"}
        figures[f"{step} footprint"] = {"median": footprint, "unit": "B",
                                        "payload": cfg.capacity[step] * workloads.step_bytes(step)}
        for kind in ("flat", "seq", "prioritized"):
            fn = adapter.sampler_fn(kind)
            for writers in (0, 2):
                key = f"{step} sample {kind} {writers}w"
                if fn is None:
                    figures[key] = na(getattr(adapter, "no_kind", {}).get(kind, "not offered"))
                elif writers and not adapter.multi_process:
                    figures[key] = na("one process")
                else:
                    figures[key] = guarded(measure.sample_rate, adapter, fn, KIND_UNITS[kind], step, writers, cfg)
                    figures[key]["unit"] = "rows/s" if kind != "seq" else "seqs/s"
        for writers in workloads.WRITERS:
            for rows in workloads.ADD_ROWS:
                key = f"{step} add {rows}/call {writers}w"
                if writers > 1 and not adapter.multi_process:
                    figures[key] = na("one process")
                else:
                    figures[key] = guarded(measure.add_rate, adapter, step, rows, writers, cfg)
                    figures[key]["unit"] = "steps/s"
        adapter.close()
    if adapter.multi_process:
        figures["probe"] = guarded(measure.probe_run, adapter, cfg.probe_seconds)
    else:
        figures["probe"] = na("one process")
    return figures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("adapter")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--atari-scale", type=float, default=1.0)
    p.add_argument("--capacity-scale", type=float, default=1.0)
    p.add_argument("--seconds", type=float)
    p.add_argument("--trials", type=int)
    p.add_argument("--steps", default="small,atari")
    o = p.parse_args()
    kw = {k: v for k, v in (("seconds", o.seconds), ("trials", o.trials)) if v is not None}
    kw["steps"] = tuple(o.steps.split(","))
    cfg = workloads.Config.quick(**kw) if o.quick else workloads.Config.full(o.atari_scale, o.capacity_scale, **kw)
    module, cls = o.adapter.split(":")
    try:
        adapter = getattr(importlib.import_module(module), cls)()
    except Exception as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}", "interpreter": sys.executable}))
        return 0
    result = {"peer": adapter.name, "form": adapter.form, "version": adapter.version(),
              "interpreter": sys.executable}
    try:
        result["figures"] = run(adapter, cfg)
    except Exception as e:
        traceback.print_exc()
        result["error"] = f"failed while measuring: {type(e).__name__}: {e}"
    finally:
        try:
            adapter.close()
        except Exception:
            pass
        measure.close_pools()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
