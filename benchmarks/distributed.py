"""Does data parallelism pay on this machine? `python -m benchmarks.distributed`

Runs the same `python -m rlx.train` experiment as 1 process (1 thread, and `--cores` threads) and as
`--cores` torchrun ranks of 1 thread each with `trainer.strategy=ddp` and `fsdp`, on the same global
batch, and prints the median seconds per RL step of each (steps after the first `--skip`, from
metrics.jsonl's timing_s/step, evaluation excluded), its generation and update parts, and the ratios
to the 1-process runs. Every run trains the same thing (tests/run/test_distributed.py), so the
numbers compare cost only.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.common import work_dir
from rlx.run.records import read_metrics


def run_once(run_dir: Path, procs: int, threads: int, strategy: str, a) -> dict:
    over = [f"train.steps={a.steps}", f"train.eval_every={a.steps}", f"train.ckpt_every={a.steps}",
            f"trainer.threads={threads}", f"trainer.strategy={strategy}", "logger.mode=disabled",
            "train.progress=false", "rollout.eval_k=0", f"hydra.run.dir={run_dir}", *a.override]
    launch = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}"]
              if procs > 1 else [sys.executable])
    subprocess.run([*launch, "-m", "rlx.train", *over], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=3600)
    steps = [r for r in read_metrics(run_dir) if a.skip < r["step"] < a.steps]  # the last step evaluates
    return {"step_s": statistics.median(r["timing_s/step"] - r.get("timing_s/eval", 0.0) for r in steps),
            "gen_s": statistics.median(r["timing_s/gen"] for r in steps),
            "train_s": statistics.median(r["timing_s/train"] for r in steps)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=2, help="ranks of the data-parallel runs (1 thread each)")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--skip", type=int, default=3, help="leading steps left out (start-up)")
    ap.add_argument("--work", default=None)
    ap.add_argument("override", nargs="*", help="extra Hydra overrides for every run")
    a = ap.parse_args(argv)
    work, tmp = work_dir(a.work, "rlx-bench-distributed-")
    arms = {"1 process, 1 thread": (1, 1, "ddp"), f"1 process, {a.cores} threads": (1, a.cores, "ddp"),
            f"{a.cores} ranks DDP": (a.cores, 1, "ddp"), f"{a.cores} ranks FSDP": (a.cores, 1, "fsdp")}
    out = {}
    try:
        for i, (name, (procs, threads, strategy)) in enumerate(arms.items()):
            out[name] = run_once(Path(work) / f"arm{i}", procs, threads, strategy, a)
    finally:
        if tmp is not None:
            tmp.cleanup()
    base = out["1 process, 1 thread"]["step_s"]
    print(f"median s/step over steps {a.skip + 1}..{a.steps - 1} ({' '.join(a.override) or 'default experiment'})")
    print(f"{'run':<24} {'s/step':>8} {'gen s':>8} {'update s':>9} {'vs 1x1':>7}")
    for name, r in out.items():
        print(f"{name:<24} {r['step_s']:>8.3f} {r['gen_s']:>8.3f} {r['train_s']:>9.3f} {r['step_s'] / base:>7.2f}")
    return out


if __name__ == "__main__":
    main()
