"""Kill -9 one run again and again, then let it finish: the driver of the exactly-once property test.

    python -m tests.rollout.crash_chain RUN_DIR KILLS SEED OVERRIDE [OVERRIDE ...]

The parent imports rlx once and forks a child per attempt, which runs `rlx.train.run` on RUN_DIR (TINY
+ the overrides) and resumes from its newest checkpoint. The parent watches the run directory and
sends the child SIGKILL at a crash point drawn from SEED: after the metrics line of step c + 1 + r
appears (c: the newest checkpoint when the child started, r in {0, 1}), plus a delay of u times that
step's own duration (u uniform in [0, 1)), so the kills land anywhere in the next step (generating,
updating, logging, mid-checkpoint) whatever the machine's speed. r = 1 makes progress certain (step
c + 1's checkpoint is written before step c + 2 starts), and a kill advances the run by at most ~3
steps. After KILLS kills a last child runs to the end. Forking after the imports spares each crash
point the ~15 CPU-s a fresh interpreter spends importing torch and transformers here.

Prints one JSON line: the kills (what the run directory held at each) and the children's exit codes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path


def _rows(run_dir: Path) -> list[dict]:
    """metrics.jsonl's rows so far (the line a running child is writing is left out)."""
    from rlx.run.records import METRICS, read_metrics

    return read_metrics(run_dir) if (run_dir / METRICS).exists() else []


def _newest_ckpt(run_dir: Path) -> int:
    from rlx.run.checkpoint import Checkpointer

    return max(Checkpointer(run_dir / "ckpt").steps(), default=0)


def _child(run_dir: Path, overrides: list[str]) -> None:
    """In the forked child: run to the end (or until killed); never returns."""
    code = 1
    try:
        sys.stdout = sys.stderr = open(run_dir / f"child-{os.getpid()}.log", "w", buffering=1)
        from tests.conftest import run_tiny

        run_tiny(run_dir, overrides)
        code = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def chain(run_dir: Path, kills: int, seed: int, overrides: list[str], steps: int, timeout_s: float = 600.0) -> dict:
    rng = random.Random(seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    events, codes = [], []
    deadline = time.monotonic() + timeout_s
    while True:
        last = len(events) >= kills
        start_ckpt = _newest_ckpt(run_dir)
        target = start_ckpt + 1 + rng.randint(0, 1)
        u = rng.random()
        pid = os.fork()
        if pid == 0:
            _child(run_dir, overrides)
        killed = False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes.append(os.waitstatus_to_exitcode(status))
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise TimeoutError(f"the chain did not finish in {timeout_s:.0f} s")
            seen = [r for r in _rows(run_dir) if r["step"] >= target]
            if not last and target <= steps and seen:
                delay = u * float(seen[0].get("timing_s/step", 0.5))
                time.sleep(delay)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                from rlx.run.checkpoint import TMP_PREFIX

                ckpt_dir = run_dir / "ckpt"
                events.append({"start_ckpt": start_ckpt, "target": target, "delay_s": round(delay, 3),
                               "logged": max((r["step"] for r in _rows(run_dir)), default=-1),
                               "ckpt": _newest_ckpt(run_dir),  # and whether a save was cut in the middle:
                               "tmp": any(p.name.startswith(TMP_PREFIX) for p in ckpt_dir.glob(".*"))})
                killed = True
                break
            time.sleep(0.01)
        if not killed:  # the run finished (or a child failed: the test shows its log)
            return {"kills": events, "codes": codes}


def main() -> None:
    run_dir, kills, seed, *overrides = sys.argv[1:]
    steps = next(int(o.split("=")[1]) for o in reversed(overrides) if o.startswith("train.steps="))
    import rlx.train  # noqa: F401  (imported once here; every child is forked from this process)

    print(json.dumps(chain(Path(run_dir), int(kills), int(seed), overrides, steps)))


if __name__ == "__main__":
    main()
