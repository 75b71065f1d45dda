"""s/step of the default experiment on an idle and on a shared machine, per thread setting:
`python -m benchmarks.threads [--steps 30] [--repeats 2]`.

Settings (each run a fresh `python -m rlx.train` subprocess, the default experiment, no evaluation
but the step-0 one, no checkpoints):

  default   trainer.threads=0: torch's own count (one OpenMP thread per core)
  one       trainer.threads=1
  passive   trainer.threads=0 with OMP_WAIT_POLICY=PASSIVE (set before torch starts its threads)
  auto      trainer.threads=-1: one thread per core that other processes leave free (rlx.run.threads)

Conditions: `idle` (nothing else started by the bench) and `busy` (one competing process spinning
on one core for the whole run). Schedule: for each repeat, for each condition, the settings in
turn, so every cell is measured alternately with the others. A cell is the median over the timed
steps (step 1 dropped) of `timing_s/step`; the table gives each setting's idle and busy s/step, the
slowdown busy / idle, and the idle speed against `default`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import work_dir

SETTINGS = {"default": ("0", {}), "one": ("1", {}), "passive": ("0", {"OMP_WAIT_POLICY": "PASSIVE"}),
            "auto": ("-1", {})}
SPIN = "import time\nwhile True:\n    pass\n"


def run_once(setting: str, steps: int, work: Path, extra: list[str]) -> list[float]:
    """timing_s/step of steps 2..N of one fresh run."""
    threads, env_extra = SETTINGS[setting]
    run_dir = work / f"run_{setting}_{time.time_ns()}"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env.update(env_extra, WANDB_MODE="disabled")
    cmd = [sys.executable, "-m", "rlx.train", f"trainer.threads={threads}", f"train.steps={steps}",
           f"train.eval_every={10 * steps}", f"train.ckpt_every={10 * steps}", "task.n_eval=8", "rollout.eval_k=0",
           "logger.mode=disabled", "train.progress=false", f"hydra.run.dir={run_dir}", *extra]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{setting} run failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # the last step also evaluates: take the step time without its evaluation
    return [r["timing_s/step"] - r.get("timing_s/eval", 0.0) for r in rows if r["step"] >= 2]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--settings", default=",".join(SETTINGS))
    p.add_argument("--conditions", default="idle,busy")
    p.add_argument("--override", action="append", default=[], help="extra Hydra override for every run")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--out", default="outputs/bench/threads.json")
    a = p.parse_args(argv)
    settings, conditions = a.settings.split(","), a.conditions.split(",")
    work, tmp = work_dir(a.work_dir, "rlx_threads_")
    cells: dict[tuple[str, str], list[float]] = {(s, c): [] for s in settings for c in conditions}
    load = []
    try:
        for r in range(a.repeats):
            for c in conditions:
                spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if c == "busy" else None
                try:
                    for s in settings:
                        cells[(s, c)] += run_once(s, a.steps, work, a.override)
                        load.append(os.getloadavg()[0])
                        print(f"[bench] repeat {r + 1} {c} {s}: {statistics.median(cells[(s, c)]):.3f} s/step", flush=True)
                finally:
                    if spinner is not None:
                        spinner.kill()
                        spinner.wait()
    finally:
        if tmp is not None:
            tmp.cleanup()
    med = {k: statistics.median(v) for k, v in cells.items()}
    print(f"\n{os.cpu_count()} cores, load average during the runs {min(load):.1f}-{max(load):.1f}; "
          f"median s/step over steps 2-{a.steps}, {a.repeats} alternating repeats")
    print("| setting | idle s/step | busy s/step | busy / idle | idle / default idle |")
    print("|---|---|---|---|---|")
    rows = {}
    for s in settings:
        idle, busy = med.get((s, "idle")), med.get((s, "busy"))
        rows[s] = {"idle": idle, "busy": busy}
        fmt = lambda x: f"{x:.3f}" if x is not None else "-"  # noqa: E731
        ratio = f"{busy / idle:.1f}x" if idle and busy else "-"
        base = med.get(("default", "idle"))
        rel = f"{idle / base:.2f}" if idle and base else "-"
        print(f"| {s} | {fmt(idle)} | {fmt(busy)} | {ratio} | {rel} |")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"args": vars(a), "rows": rows, "load": load,
                                       "cells": {f"{s}/{c}": v for (s, c), v in cells.items()}}, indent=2))
    return rows


if __name__ == "__main__":
    main()
