"""Per-seed 'steps to reach' for a next_table sweep: `python -m rlx.bench.next_steps SWEEP_DIR [METRIC]`.

For each seed, the target is the final METRIC (default val/acc) of GRPO-LoRA at 1.6N steps; the
line gives the first evaluation step at which each arm reaches it (None: never) and each arm's
final value. NExt's claim is that `next` reaches it in about 0.625x the steps.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def _override(overrides: list[str], key: str) -> str | None:
    return next((o.split("=", 1)[1] for o in overrides if o.startswith(key + "=")), None)


def load(root: Path, metric: str) -> dict[tuple[str, int], list[tuple[int, float]]]:
    runs = {}
    for d in sorted(p.parent for p in root.rglob("metrics.jsonl")):
        ov = yaml.safe_load((d / ".hydra/overrides.yaml").read_text()) or []
        arm, seed = _override(ov, "next_arm"), _override(ov, "seed")
        if arm is None or seed is None:
            continue
        rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
        runs[(arm, int(seed))] = [(r["step"], r[metric]) for r in rows if r.get(metric) is not None]
    return runs


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    root, metric = Path(argv[0]), (argv[1] if len(argv) > 1 else "val/acc")
    runs = load(root, metric)
    for seed in sorted({s for _, s in runs}):
        target = runs[("none_long", seed)][-1][1]
        reach = {arm: next((s for s, v in runs[(arm, seed)] if v >= target), None)
                 for arm in ("none_long", "none_n", "linear", "next") if (arm, seed) in runs}
        finals = {arm: round(runs[(arm, seed)][-1][1], 3) for arm in reach}
        print(f"seed {seed}: target {metric} {target:.3f} (none at 1.6N); first step reaching it {reach}; finals {finals}")


if __name__ == "__main__":
    main()
