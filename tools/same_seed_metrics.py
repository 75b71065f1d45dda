"""Same-seed behaviour check across two commits: run each recipe of RECIPES on the tiny model at each commit
(in a git worktree) and compare their metrics.jsonl line by line, timings left out.

A refactor that claims to change no behaviour passes when every recipe's metrics are equal, value
for value, at both commits (issue 26). Runs use one torch thread, because bitwise reruns need a
fixed thread count (docs/threads.md).

    python tools/same_seed_metrics.py BASE_COMMIT [HEAD_COMMIT] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

RECIPES = {  # name -> overrides of the default experiment (tiny model, arith, hf engine), or per side
    "grpo": ["algo=grpo"],
    "dapo": ["algo=dapo"],
    "aqn_nvfp4": ["quant=nvfp4", "noise=aqn"],
    # the same overrides on both sides: a per-side recipe is only right across the commit that split
    # them (a7cc565: algo=scalerl set the generation keys until experiment=scalerl took them); compare
    # across it with --recipes and a dict recipe of its own
    "scalerl_stale": ["experiment=scalerl", "rollout.mode=stale"],
    "next": ["extrapolation=next", "train.steps=40"],  # NExt extends at step 30
    "cispo_aqn_nvfp4": ["algo=cispo", "quant=nvfp4", "noise=aqn"],
    # multi-turn episodes: an SFT base half of whose demonstrations open with a calculator call, so the
    # policy calls the tool and the environment answers (env/tool_calls/mean > 0)
    "calculator": ["env=calculator", "env.instructions=''", "model.sft.demo_prefix='<calc>1</calc>'",
                   "model.sft.demo_prefix_frac=0.5", "rollout.max_new_tokens=64"],
}
COMMON = ["seed=0", "train.steps=30", "train.eval_every=10", "train.ckpt_every=1000", "trainer.threads=1",
          "logger=disabled"]
TIMING = re.compile(r"timing|perf/|_time|time_s|wall|tok_per_s|/rss|/threads")  # machine-dependent keys


def behaviour(path: Path) -> list[dict]:
    """metrics.jsonl without the keys that measure the machine rather than the run."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not TIMING.search(k)} for r in rows]


def finished(run_dir: Path) -> bool:
    summary = run_dir / "summary.json"
    return summary.exists() and json.loads(summary.read_text()).get("status") == "finished"


def run_recipe(tree: Path, out: Path, overrides: list[str]) -> Path:
    cmd = [sys.executable, "-m", "rlx.train", *COMMON, *overrides, f"hydra.run.dir={out}"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with open(out.parent / f"{out.name}.log", "w") as log:
        subprocess.run(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    return out / "metrics.jsonl"


def worktree(root: Path, commit: str, where: Path) -> Path:
    if not where.exists():
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(where), commit], check=True)
    return where


def first_difference(a: list[dict], b: list[dict]) -> str | None:
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} metric lines"
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            keys = sorted(k for k in x.keys() | y.keys() if x.get(k) != y.get(k))
            return f"line {i} (step {x.get('step')}): " + ", ".join(f"{k}: {x.get(k)!r} vs {y.get(k)!r}" for k in keys[:5])
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("head", nargs="?", default="HEAD")
    ap.add_argument("--out", type=Path, default=Path("outputs/same_seed"))
    ap.add_argument("--recipes", nargs="*", default=list(RECIPES))
    args = ap.parse_args(argv)
    root = Path(subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip())
    shas = [subprocess.check_output(["git", "-C", str(root), "rev-parse", c], text=True).strip() for c in (args.base, args.head)]
    out = args.out.resolve()
    trees = [worktree(root, sha, out / f"tree_{sha[:8]}") for sha in shas]
    failed = 0
    for name in args.recipes:
        metrics = []
        for side, sha, tree in zip(("before", "after"), shas, trees):
            run_dir = out / f"{name}_{sha[:8]}"
            overrides = RECIPES[name][side] if isinstance(RECIPES[name], dict) else RECIPES[name]
            done = run_dir / "metrics.jsonl"
            metrics.append(behaviour(done if finished(run_dir) else run_recipe(tree, run_dir, overrides)))
        diff = first_difference(*metrics)
        failed += diff is not None
        print(f"{name:14s} {len(metrics[0]):3d} lines  {'equal' if diff is None else 'DIFFER: ' + diff}")
    print(f"{shas[0][:8]} vs {shas[1][:8]}: {len(args.recipes) - failed} of {len(args.recipes)} recipes equal")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
