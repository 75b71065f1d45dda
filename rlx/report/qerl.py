"""QeRL's tables: Table 1 (accuracy by base format, LoRA, AQN), the entropy claim with AQN's noise windows, speed."""

from __future__ import annotations

import math

import numpy as np

from rlx.report.sweeps import papers
from rlx.report.tables import (
    acc_points, base_cell, first_tenth_mean, mean_metric, md_table, one_per_seed, paired_by_seed, paired_cell, pct, stat,
    summary_value,
)
from rlx.run.records import Run

FORMATS = ("none", "nf4", "mxfp4", "nvfp4")


_acc = summary_value("val/acc")


def base_format(arm: str) -> str:
    """lora_nvfp4_aqn -> nvfp4; base_none -> none."""
    return arm.split("_")[1] if arm.startswith(("base_", "lora_")) else "none"


def infer_qerl(j: Run) -> str:
    kind = "base" if j.get("train.steps") == 0 else "lora"
    noise = j.get("noise.type", "none")
    return f"{kind}_{j.get('quant.format', 'none')}" + (f"_{noise}" if noise != "none" else "")


def qerl_tables(arms: dict[str, list[Run]], jobs: list[Run], order: list[str], row: str = "rlx tiny (this sweep)",
                sixteen_bit: str = "the unquantized base (fp32 for the tiny model)", full_ft: bool = False,
                pairs: tuple = None) -> list[str]:
    """Table 1 beside the paper's rows (full_ft: its full fine-tuning column), the entropy, pairs and AQN tables."""
    paper = papers()["qerl"]
    labels = paper["labels"]
    # a "no RL" row is the step-0 evaluation (identical to val/acc when train.steps=0); when the sweep
    # has no base arm for a format, the step-0 evaluations of that format's LoRA runs give the same number
    base_of = {fmt: (arms.get(f"base_{fmt}") or arms.get(f"lora_{fmt}") or arms.get(f"lora_{fmt}_aqn") or [],
                     f"base_{fmt}" in arms) for fmt in FORMATS}
    lora = [a for a in order if not a.startswith("base_")]
    bases = [a for a in order if a.startswith("base_")] or list(dict.fromkeys(f"base_{base_format(a)}" for a in lora))
    cols = bases + (["full_ft"] if full_ft else []) + lora
    header = ["model"] + [labels.get(c, c) for c in cols]
    ours = []
    for c in cols:
        if c == "full_ft":
            ours.append("– (not in rlx)")
        elif c.startswith("base_"):
            src, direct = base_of[c[5:]]
            ours.append(base_cell(src, summary_value("val/acc_base"), 100) + ("" if direct or not src else " †"))
        else:
            ours.append(stat(arms.get(c, []), _acc).cell(100))
    rows = [[row] + ours]
    for model, nums in paper["table1"].items():
        rows.append([model] + [pct(nums.get(c)) for c in cols])
    out = ["## QeRL Table 1: held-out accuracy (%)", "",
           "Greedy accuracy on the held-out split after RL (LoRA columns) and before any RL (base columns: "
           "the step-0 evaluation). Mean ± std over seeds (n finished seeds; failed jobs counted apart). "
           f"rlx's 16-bit columns are {sixteen_bit}. "
           "Paper rows: GSM8K, QeRL Table 1.", ""]
    out += md_table(header, rows)
    if any(not direct and src for src, direct in base_of.values()):
        out += ["", "† no base arm in this sweep: the step-0 evaluation of that format's LoRA runs (the same model, "
                "LoRA B = 0)."]
    return (out + exploration_table(arms, labels) + paired_arms_table(arms, labels, PAIRS if pairs is None else pairs)
            + aqn_windows_table(arms))


def exploration_table(arms: dict[str, list[Run]], labels: dict[str, str]) -> list[str]:
    """QeRL's mechanism claim: quantization noise raises policy entropy, which helps exploration."""
    rows = []
    for arm, js in arms.items():
        if not arm.startswith("lora"):
            continue
        gain = stat(js, lambda j: (j.summary.get("val/acc") or 0) - (j.summary.get("val/acc_base") or 0))
        rows.append([labels.get(arm, arm), stat(js, mean_metric("actor/entropy")).cell(1, 3),
                     stat(js, mean_metric("actor/entropy", reducer=first_tenth_mean)).cell(1, 3),
                     stat(js, mean_metric("train/reward/mean")).cell(1, 3), gain.cell(100),
                     stat(js, summary_value("val/mean_at_k")).cell(100), base_format(arm)])
    if not rows:
        return []
    return ["", "### Exploration and gains (QeRL's entropy claim)", ""] + md_table(
        ["arm", "policy entropy (mean over steps)", "entropy, first 10% of steps", "train reward (mean over steps)",
         "val/acc gain over its base (pts)", "val/mean@k (%)", "base format"], rows)


def noise_windows(steps: int) -> list[tuple[str, int, int]]:
    """(name, first step, last step) of AQN's windows in N steps: 0.1N+1 .. 0.3N (its largest noise), the rest, all."""
    lo, hi = steps // 10 + 1, (3 * steps) // 10
    return [(f"entropy {lo}-{hi}", lo, hi), (f"entropy {hi + 1}-{steps}", hi + 1, steps), (f"entropy 1-{steps}", 1, steps)]


def aqn_windows_table(arms: dict[str, list[Run]]) -> list[str]:
    """Per seed: NVFP4 LoRA without vs with AQN, mean rollout entropy per noise window and final val/acc."""
    plain, noisy = (one_per_seed(arms.get(a, []), a) for a in ("lora_nvfp4", "lora_nvfp4_aqn"))
    seeds = sorted(set(plain) & set(noisy), key=str)
    if not seeds:
        return []
    steps = int(plain[seeds[0]].get("train.steps") or plain[seeds[0]].last_step)
    windows = noise_windows(steps)
    rows, diffs = [], [[] for _ in range(len(windows) + 1)]
    for seed in seeds:
        a, b = plain[seed], noisy[seed]
        cells = []
        for w, (_, lo, hi) in enumerate(windows):
            ea, eb = (mean_metric("actor/entropy", steps=(lo, hi))(j) for j in (a, b))
            cells.append(" / ".join("–" if e is None else f"{e:.4f}" for e in (ea, eb)))
            if ea is not None and eb is not None:
                diffs[w].append(eb - ea)
        if _acc(a) is not None and _acc(b) is not None:
            diffs[-1].append(100 * (_acc(b) - _acc(a)))
        rows.append([str(seed), *cells, " / ".join("–" if _acc(j) is None else f"{100 * _acc(j):.1f}" for j in (a, b))])
    rows.append(["aqn - none"] + [paired_cell(d, "{:+.4f}") for d in diffs[:-1]] + [paired_cell(diffs[-1], "{:+.1f}")])
    (_, lo, hi) = windows[0]
    return ["", "### AQN's effect per seed: NVFP4 LoRA without / with AQN", "",
            f"Mean rollout entropy (actor/entropy) over each window of RL steps, at the same seed; the first "
            f"window (steps {lo}-{hi}: stages 1-2 of the default 10) is where AQN's noise is largest. Last column: "
            f"final val/acc (%). Last row: the paired difference, mean [95% t-interval] over seeds.",
            ""] + md_table(["seed"] + [name + " (none / aqn)" for name, _, _ in windows]
                           + ["val/acc % (none / aqn)"], rows)


def _gain_points(j: Run) -> float | None:
    """Final val/acc minus the run's own step-0 val/acc, in points."""
    acc, base = j.summary.get("val/acc"), j.summary.get("val/acc_base")
    return None if acc is None or base is None else 100 * (acc - base)


PAIRS = (("lora_nvfp4", "lora_none"), ("lora_nvfp4_aqn", "lora_nvfp4"), ("lora_nvfp4_aqn", "lora_none"))


def paired_arms_table(arms: dict[str, list[Run]], labels: dict[str, str], pairs: tuple = PAIRS) -> list[str]:
    """Arm against arm at the same seed: paired differences in accuracy, gain, reward and entropy over seeds."""
    rows = []
    for a, b in pairs:
        seeds = sorted(set(one_per_seed(arms.get(a, []), a)) & set(one_per_seed(arms.get(b, []), b)), key=str)
        if not seeds:
            continue
        diffs = {"acc": paired_by_seed(arms, a, b, acc_points), "gain": paired_by_seed(arms, a, b, _gain_points),
                 "entropy": paired_by_seed(arms, a, b, mean_metric("actor/entropy")),
                 "reward": paired_by_seed(arms, a, b, mean_metric("train/reward/mean"))}
        rows.append([f"{labels.get(a, a)} - {labels.get(b, b)}", ", ".join(map(str, seeds)),
                     paired_cell(diffs["acc"], "{:+.1f}"), paired_cell(diffs["gain"], "{:+.1f}"),
                     paired_cell(diffs["reward"], "{:+.3f}"), paired_cell(diffs["entropy"], "{:+.4f}")])
    if not rows:
        return []
    return ["", "### Arm against arm, seed by seed", "",
            "Paired over the seeds both arms finished: mean difference [95% t-interval] (n seeds). Gain: final "
            "val/acc minus the arm's own step-0 val/acc (the quantized base starts lower). Reward and entropy: "
            "means over RL steps.", ""] + md_table(
        ["pair", "seeds", "final val/acc (points)", "gain over own base (points)", "train reward", "policy entropy"],
        rows)


def infer_speed(j: Run) -> str:
    return str(j.get("quant.format", "none"))


def _batch(j: Run) -> int:
    return int(j.get("rollout.prompts_per_step", 0)) * int(j.get("rollout.group_size", 0))


def speed_tables(arms: dict[str, list[Run]], jobs: list[Run]) -> list[str]:
    batches = sorted({_batch(j) for j in jobs})
    tok = lambda js: stat(js, mean_metric("perf/tokens_per_s", skip_first=1, reducer=np.median))  # noqa: E731
    train_s = lambda js: stat(js, mean_metric("timing_s/train", skip_first=1, reducer=np.median))  # noqa: E731
    header = (["base format"] + [f"rollout tokens/s, batch {b}" for b in batches]
              + [f"x vs 16-bit, batch {b}" for b in batches] + [f"train step s, batch {b}" for b in batches])
    ref = {b: tok([j for j in arms.get("none", []) if _batch(j) == b]).mean for b in batches}
    rows = []
    for fmt, js in arms.items():
        per_b = {b: [j for j in js if _batch(j) == b] for b in batches}
        t = {b: tok(per_b[b]) for b in batches}
        ratio = [f"{t[b].mean / ref[b]:.2f}" if t[b].values and ref[b] and math.isfinite(ref[b]) else "–"
                 for b in batches]
        rows.append([fmt] + [t[b].cell(1, 0) for b in batches] + ratio
                    + [train_s(per_b[b]).cell(1, 3) for b in batches])
    out = ["## QeRL speed: rollout throughput and train step time", "",
           "Median over RL steps 2.. of each job (step 1 is warm-up), then mean ± std over seeds. Batch = "
           "prompts_per_step x group_size sequences generated together. On a CPU the packed formats "
           "dequantize in every forward, so they are not expected to be faster here; the paper's gain is "
           "memory-bandwidth-bound decoding on a GPU with NVFP4 kernels.", ""]
    out += md_table(header, rows)
    out += ["", "Paper (QeRL, rollout tokens/s, 16-bit LoRA -> NVFP4 LoRA; vLLM on one GPU):", ""]
    speedup = lambda old, new: f"{old} -> {new} (x{new / old:.2f})"  # noqa: E731
    prow = [[m, speedup(*v[2]), speedup(*v[8])] for m, v in papers()["qerl"]["speed"].items()]
    return out + md_table(["model", "batch 2", "batch 8"], prow)
