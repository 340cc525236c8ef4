#!/usr/bin/env python3
"""A loop of one Python call, for counting its instructions under callgrind (docs/benchmarks/python.md, "From Python:
the cost of a call"): run it twice with different counts and take the difference of pybind11's dispatcher's inclusive
cost, divided by the difference of the counts, to get the binding's instructions per call (the callees show where they
go: the C++ push or sample, the field and env id conversions, the GIL release).

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=cg.push.1100 \\
        .venv/bin/python tools/bench/python_call_cg.py push 1100
    callgrind_annotate --inclusive=yes cg.push.1100 | grep -E 'dispatcher|field_arrays|env_id_vector|Writer::push'

OP is push (16 envs, int32 ids), push_one, sample_transitions (256 rows, out=), sample (256 x 1, out=) or size.
"""
import os
import sys

import numpy as np

import shmreplay


def main():
    op, n = sys.argv[1], int(sys.argv[2])
    name = f"shmreplay-callcg-{os.getpid()}"
    schema = shmreplay.Schema.parse("obs:f32[17] action:f32[6] reward:f32 done:bool")
    buf = shmreplay.Buffer.create(name, 16, 1024, schema, replace=True)
    try:
        w = shmreplay.Writer(buf, list(range(16)))
        rng = np.random.default_rng(0)
        data = {f.name: rng.random((16, *f.shape)).astype(f.numpy_dtype) for f in schema.fields}
        one = {k: v[0] for k, v in data.items()}
        ids = np.arange(16, dtype=np.int32)
        for _ in range(64):
            w.push(ids, data)
        s = shmreplay.Sampler(buf, seed=1)
        flat = s.new_batch(256, 1)
        fns = {"push": lambda: w.push(ids, data), "push_one": lambda: w.push_one(3, one),
               "sample_transitions": lambda: s.sample_transitions("replay", 256, out=flat),
               "sample": lambda: s.sample("replay", 256, 1, out=flat), "size": lambda: s.size("replay")}
        f = fns[op]
        for _ in range(n):
            f()
        s.close()
        w.close()
    finally:
        shmreplay.Buffer.remove(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
