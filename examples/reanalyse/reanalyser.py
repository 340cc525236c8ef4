"""A reanalyse worker of the example: walks the buffer's chunks (shmreplay.Reanalyser), recomputes each chunk's
one-step value targets with the newest parameters the learner published, writes them back by handle
(Sampler.write_back: value_target and target_version) and completes the chunk with that version.

    python examples/reanalyse/reanalyser.py --buffer NAME --index 0 [--order oldest_version]

A chunk is [first_step, end_step) of one env. The target of step t needs the observation of step t + 1: the
worker reads one step past the chunk when the env has published it, and otherwise leaves the chunk's last step for
the chunk after it (that step keeps its older target; the learner weighs a never-reanalysed step 0). A step the
writer overwrote between the read and the write-back is refused by the write-back and counted (`refused`): its
handle names a step that is gone, never the step now in its slot. A worker that meets a new pass of the walk
while the parameters are still those it began the last pass with gives the chunk back and waits for newer ones: the
same parameters would compute the same targets again. Every 5 s a @progress line; at the end one @report
line with the counts."""
import argparse
import json
import sys
import time

import numpy as np

import shmreplay
from qnet import ParamsFile, Status, StopFlag, one_step_targets, params_path


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buffer", required=True)
    p.add_argument("--index", type=int, default=0)
    p.add_argument("--order", default="oldest_version", choices=("oldest_version", "sweep", "largest_return"))
    return p.parse_args()


def reanalyse(buf, sampler, chunk, params, version):
    """Targets for the chunk's steps that have a stored successor, written back. (steps written, steps refused)."""
    head = int(buf.heads()[chunk.env])
    count = min(chunk.end_step + 1, head) - chunk.first_step
    first, steps = buf.read_steps(chunk.env, chunk.first_step, count)
    n = len(steps["reward"]) - 1  # the last one read is only a successor
    if n <= 0:
        return 0, 0
    targets = one_step_targets(params, {k: v[:n] for k, v in steps.items()}, steps["obs"][1:])
    handles = np.arange(first, first + n, dtype=np.int64)
    # load_generation: refused whole if a checkpoint was loaded into the buffer since the chunk was handed out.
    applied, refused = sampler.write_back(np.full(n, chunk.env, np.int64), handles,
                                          load_generation=chunk.load_generation, value_target=targets,
                                          target_version=np.full(n, version, np.uint32))
    return applied, int(np.count_nonzero(refused))


def main():
    a = parse_args()
    role = f"reanalyser {a.index}"
    stop, status = StopFlag(), Status(role)
    buf = shmreplay.Buffer.open(a.buffer, ready_timeout=30)
    params_file = ParamsFile(params_path(a.buffer))
    counts = dict(chunks=0, completed=0, stale=0, given_back=0, applied=0, refused=0)
    walk_pass = pass_version = 0  # the pass this worker works in, and the version it began it with
    started = time.monotonic()
    next_progress = started + 5.0
    with shmreplay.Sampler(buf, seed=100 + a.index) as sampler, shmreplay.Reanalyser(buf) as walker:
        print("@ready", flush=True)
        while not stop:
            status.answer()
            params, version = params_file.load()
            if params is None:
                status.set("waiting for the learner's first parameters")
                time.sleep(0.05)
                continue
            status.set("walking", **counts)
            chunk = walker.next(a.order, timeout=0.2)
            if chunk is None:
                continue
            if chunk.walk_pass != walk_pass:  # a new pass: worth it only with parameters newer than the last one's
                if version == pass_version:
                    walker.give_back(chunk)
                    status.set("waiting for newer parameters", version=version)
                    time.sleep(0.02)
                    continue
                walk_pass, pass_version = chunk.walk_pass, version
            counts["chunks"] += 1
            try:
                applied, refused = reanalyse(buf, sampler, chunk, params, version)
            except shmreplay.Contended:  # read_steps: the env's steps kept being rewritten during the copy
                walker.give_back(chunk)  # due again in this pass: the next scan hands it out again
                counts["given_back"] += 1
                continue
            counts["applied"] += applied
            counts["refused"] += refused
            if walker.complete(chunk, version):
                counts["completed"] += 1
            else:
                counts["stale"] += 1
            if time.monotonic() >= next_progress:
                next_progress += 5.0
                print(f"[{role}] pass {walker.walk_pass}  version {version}  " +
                      "  ".join(f"{k} {v}" for k, v in counts.items()), flush=True)
    seconds = time.monotonic() - started
    print("@report " + json.dumps({"role": role, "order": a.order, "seconds": seconds, **counts,
                                   "write_backs_per_s": counts["applied"] / seconds,
                                   "params_version": params_file.version}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
