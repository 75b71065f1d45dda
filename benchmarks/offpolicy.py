"""Does asynchronous generation pay here? `python -m benchmarks.offpolicy`

Runs the same `python -m rlx.train` experiment with `rollout.mode=sync` and `rollout.mode=async`
(PipelineRL, `rollout.max_staleness`), alternating sync / async `--repeats` times per engine and
thread count, and prints the median wall seconds per RL step of each mode (steps after the first
`--skip`, from metrics.jsonl's timing_s/step, evaluation excluded), the async/sync ratio, and the
async run's trainer-wait and generator-idle seconds per step (where the overlap went), and the
cores each run really used (CPU seconds / wall seconds of the whole run: above 1 only if the
generator thread and the trainer ran at the same time).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from benchmarks.common import step_seconds, train_run, work_dir


def run_once(run_dir: Path, engine: str, mode: str, threads: int, a) -> dict:
    over = [f"rollout={engine}", f"rollout.mode={mode}", f"rollout.max_staleness={a.k if mode == 'async' else 0}",
            f"trainer.threads={threads}", *a.override]
    steps, wall, cpu = train_run(run_dir, over, a.steps, a.skip)
    return {"step_s": step_seconds(steps),
            "wait_s": statistics.mean(r.get("timing_s/trainer_wait", 0.0) for r in steps),
            "idle_s": statistics.mean(r.get("timing_s/gen_idle", 0.0) for r in steps),
            "gen_s": statistics.median(r["timing_s/gen"] for r in steps),
            "train_s": statistics.median(r["timing_s/train"] for r in steps),
            "cores": cpu / wall}  # CPU seconds per wall second of the whole run: the parallelism it got


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="hf,vllm")
    ap.add_argument("--threads", default="1,2", help="trainer.threads values to measure (each mode the same)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--skip", type=int, default=5, help="leading steps left out (start-up, queue filling)")
    ap.add_argument("--k", type=int, default=2, help="rollout.max_staleness of the async runs")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", default=None)
    ap.add_argument("override", nargs="*", help="extra Hydra overrides for every run")
    a = ap.parse_args(argv)
    work, tmp = work_dir(a.work, "rlx-bench-offpolicy-")
    results: dict = {}
    try:
        for engine in a.engines.split(","):
            for threads in [int(t) for t in a.threads.split(",")]:
                runs = {"sync": [], "async": []}
                for rep in range(a.repeats):
                    for mode in ("sync", "async"):  # alternating: drifts in machine load hit both modes
                        runs[mode].append(run_once(work / f"{engine}_t{threads}_{mode}_{rep}", engine, mode, threads, a))
                med = {m: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for m, rs in runs.items()}
                med["ratio_async_over_sync"] = med["async"]["step_s"] / med["sync"]["step_s"]
                results[f"{engine} threads={threads}"] = med
                print(f"{engine:5s} threads={threads}: sync {med['sync']['step_s']:.3f} s/step "
                      f"(gen {med['sync']['gen_s']:.3f}, train {med['sync']['train_s']:.3f}) | async "
                      f"{med['async']['step_s']:.3f} s/step (trainer wait {med['async']['wait_s']:.3f}, "
                      f"generator idle {med['async']['idle_s']:.3f}) | async/sync {med['ratio_async_over_sync']:.2f} | "
                      f"cores used: sync {med['sync']['cores']:.2f}, async {med['async']['cores']:.2f}",
                      flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return results


if __name__ == "__main__":
    main()
