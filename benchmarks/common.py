"""Small pieces the benchmarks share."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """os.environ (plus `extra`) with the checkout on PYTHONPATH: `benchmarks` is a folder beside rlx/, not an
    installed package, so a child `python -m benchmarks.NAME` finds it whatever its working directory."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def work_dir(path: str | None, prefix: str) -> tuple[Path, tempfile.TemporaryDirectory | None]:
    """(`path`, created) when given, else a temporary directory (and its handle, to clean up)."""
    if path:
        work = Path(path)
        work.mkdir(parents=True, exist_ok=True)
        return work, None
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    return Path(tmp.name), tmp


def train_run(run_dir: Path, overrides: list[str], steps: int, skip: int) -> tuple[list[dict], float, float]:
    """Run `python -m rlx.train` for `steps` steps into `run_dir` (no logger, no progress bar, one evaluation
    and one checkpoint, at the end; `overrides` come after those, so they may change them). Returns (the
    metrics rows of the steps after `skip`, wall seconds, CPU seconds of the run's own processes)."""
    import resource
    import subprocess
    import sys
    import time

    from rlx.run.records import read_metrics

    cmd = [sys.executable, "-m", "rlx.train", f"train.steps={steps}", f"train.eval_every={steps}",
           f"train.ckpt_every={steps}", "logger.mode=disabled", "train.progress=false", "rollout.eval_k=0",
           f"hydra.run.dir={run_dir}", *overrides]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=3600)
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return [r for r in read_metrics(run_dir) if r["step"] > skip], wall, cpu


def step_seconds(rows: list[dict]) -> float:
    """Median wall seconds of an RL step, its evaluation left out."""
    import statistics

    return statistics.median(r["timing_s/step"] - r.get("timing_s/eval", 0.0) for r in rows)
