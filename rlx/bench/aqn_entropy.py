"""Per-seed AQN effect in a qerl_table1 sweep: `python -m rlx.bench.aqn_entropy SWEEP_DIR`.

Compares the NVFP4 LoRA arm with and without AQN at the same seed: mean rollout entropy while the
noise is largest (steps 11-30 of 100: sigma 1e-2 -> 4.8e-3), over the rest of the run and over
all steps, and the final held-out greedy accuracy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def _runs(root: Path) -> dict[tuple[str, int], list[dict]]:
    out = {}
    for d in sorted(p.parent for p in root.rglob("metrics.jsonl")):
        ov = yaml.safe_load((d / ".hydra/overrides.yaml").read_text()) or []
        kv = dict(o.split("=", 1) for o in ov if "=" in o)
        if "qerl_arm" in kv and "seed" in kv:
            out[(kv["qerl_arm"], int(kv["seed"]))] = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return out


def _mean_entropy(rows: list[dict], lo: int, hi: int) -> float:
    v = [r["actor/entropy"] for r in rows if lo <= r["step"] <= hi and "actor/entropy" in r]
    return sum(v) / len(v) if v else float("nan")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    runs = _runs(Path(argv[0]))
    print("| seed | entropy 11-30 none / aqn | entropy 31-end none / aqn | entropy all none / aqn | final val/acc none / aqn |")
    print("|---|---|---|---|---|")
    for seed in sorted({s for a, s in runs if a == "lora_nvfp4_aqn"}):
        a, b = runs[("lora_nvfp4", seed)], runs[("lora_nvfp4_aqn", seed)]
        end = a[-1]["step"]
        cells = [f"{_mean_entropy(a, lo, hi):.4f} / {_mean_entropy(b, lo, hi):.4f}" for lo, hi in ((11, 30), (31, end), (1, end))]
        print(f"| {seed} | " + " | ".join(cells) + f" | {a[-1]['val/acc']:.3f} / {b[-1]['val/acc']:.3f} |")


if __name__ == "__main__":
    main()
