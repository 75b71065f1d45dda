"""A pretrained model's sweep (sweeps/smollm2_wordproblems.yaml): held-out accuracy of the base and after RL,
seed by seed, the paired gain with its interval, and how fast each rollout engine ran the RL steps."""

from __future__ import annotations

import math

import numpy as np

from rlx.report.tables import base_cell, md_table, paired_cell, stat, summary_value
from rlx.run.records import Run


def infer_engine(j: Run) -> str:
    """The arm of a seeds-only sweep: its rollout engine (hf or vllm)."""
    return str(j.get("rollout.engine", "hf"))


def infer_setting(j: Run) -> str:
    """The arm of a tuning sweep (sweeps/smollm2_tune.yaml): the recipe and the settings it varies."""
    return (f"{j.get('algo.name', 'grpo')}, lr {float(j.get('algo.lr')):g}, "
            f"temperature {float(j.get('rollout.temperature')):g}, "
            f"{j.get('rollout.prompts_per_step')} prompts x {j.get('rollout.group_size')}, "
            f"LoRA r {j.get('model.lora.r', '-')}, {j.get('train.steps')} steps")


def rl_step_seconds(j: Run) -> float | None:
    """Mean wall seconds of an RL step, less the evaluations (timing_s/step includes timing_s/eval)."""
    at, total = j.series("timing_s/step")
    if not total.size:
        return None
    ev_at, ev = j.series("timing_s/eval")
    evals = dict(zip(ev_at.tolist(), ev.tolist()))
    return float(np.mean([t - evals.get(s, 0.0) for s, t in zip(at.tolist(), total.tolist())]))


def _count(acc: float | None, n: int | None) -> str:
    if acc is None:
        return "–"
    return f"{100 * acc:.1f}" + (f" ({round(acc * n)}/{n})" if n else "")


def pretrained_tables(arms: dict[str, list[Run]], jobs: list[Run], heading: str = "engine: ") -> list[str]:
    """Per arm (headed `heading` + the arm), the per-seed accuracies and the paired gain over seeds."""
    out = ["## Held-out accuracy of the pretrained base and after RL", "",
           "Greedy accuracy on the task's held-out split (task.n_eval problems) at each evaluation; step 0 is "
           "the base before any RL. Per seed, then over seeds: after RL - base is the paired difference with its "
           "95% t-interval. s / RL step is the mean wall time of an RL step (generation + update + weight sync; "
           "evaluations excluded).", ""]
    for arm, runs in arms.items():
        steps = sorted({int(s) for j in runs for s in j.series("val/acc")[0].tolist()})
        n = runs[0].get("task.n_eval") if runs else None
        header = ["seed"] + [f"val/acc step {s} (%)" for s in steps] + [
            "train reward, first / last 5 steps", "s / RL step", "RL steps / min", "wall s"]
        rows, gains = [], []
        for j in sorted(runs, key=lambda r: (r.seed is None, r.seed)):
            at, acc = j.series("val/acc")
            by = dict(zip(at.astype(int).tolist(), acc.tolist()))
            _, reward = j.series("train/reward/mean")
            sec = rl_step_seconds(j)
            rows.append([str(j.seed)] + [_count(by.get(s), n) for s in steps] + [
                f"{reward[:5].mean():.3f} / {reward[-5:].mean():.3f}" if reward.size else "–",
                "–" if sec is None else f"{sec:.1f}", "–" if not sec else f"{60 / sec:.2f}",
                f"{j.summary['wall_s']:.0f}" if j.summary.get("wall_s") is not None else "–"])
            base, final = j.summary.get("val/acc_base"), j.summary.get("val/acc")
            if j.ok and base is not None and final is not None and math.isfinite(base) and math.isfinite(final):
                gains.append(100 * (final - base))
        out += [f"### {heading}{arm}", ""] + md_table(header, rows) + [""]
        out += md_table(["over seeds", "base (%)", "after RL (%)", "after RL - base (points)"], [[
            f"{len(runs)} runs", base_cell(runs, summary_value("val/acc_base"), 100),
            stat(runs, summary_value("val/acc")).cell(100), paired_cell(gains, "{:+.1f}")]]) + [""]
    return out
