"""NExt's table: accuracy at N and 1.6N RL steps, steps to reach the long baseline, per seed and pooled."""

from __future__ import annotations

import math
import statistics

from rlx.report.sweeps import papers
from rlx.report.tables import base_cell, logged_value, md_table, stat, summary_value
from rlx.run.records import Run


def infer_next(j: Run) -> str:
    kind = j.get("extrapolation.type", "none")
    return "none" if kind == "none" else str(kind)  # N vs 1.6N needs the arm key (or the steps table)


def steps_to_reach(j: Run, target: float, key: str = "val/acc") -> float | None:
    """The first evaluation step after step 0 at which the run's `key` >= target (None: never)."""
    steps, acc = j.series(key)
    hit = steps[(acc >= target - 1e-12) & (steps > 0)]
    return float(hit[0]) if hit.size else None


def _paper_cell(entry: dict | None) -> str:
    if not entry:
        return "–"
    return f"{entry['acc']}" + (f" ({entry['steps']} steps)" if "steps" in entry else "")


def next_tables(arms: dict[str, list[Run]], jobs: list[Run]) -> list[str]:
    paper, labels = papers()["next"]["table"], papers()["next"]["labels"]
    long_final = stat(arms.get("none_long", []), summary_value("val/acc"))
    target = long_final.mean if long_final.values else math.nan
    rows = []
    every = [j for js in arms.values() for j in js]
    rows.append(["backbone (no RL, step 0)", "0", "–", base_cell(every, summary_value("val/acc_base"), 100),
                 base_cell(every, logged_value("val/mean_at_k", 0), 100),
                 "–", "–", _paper_cell(paper["base"].get("7B")), _paper_cell(paper["base"].get("14B"))])
    for arm, js in arms.items():
        steps = sorted({j.get("train.steps") for j in js})
        ext = sorted({tuple(j.get("extrapolation.extend_at") or []) for j in js
                      if j.get("extrapolation.type") != "none"})
        reach = [steps_to_reach(j, target) for j in js if j.ok and math.isfinite(target)]
        reached = [r for r in reach if r is not None]
        reach_cell = ("–" if not reach else
                      f"{statistics.fmean(reached):.0f} ({len(reached)}/{len(reach)} seeds reach it)" if reached
                      else f"not reached (0/{len(reach)})")
        saved = stat(js, logged_value("extrap/steps_saved", -1))
        published = paper.get(arm, {})
        rows.append([labels.get(arm, arm), "/".join(str(s) for s in steps),
                     ", ".join(str(list(e)) for e in ext) or "–", stat(js, summary_value("val/acc")).cell(100),
                     stat(js, summary_value("val/mean_at_k")).cell(100), reach_cell,
                     saved.cell(1, 0) if saved.values else "–", _paper_cell(published.get("7B")),
                     _paper_cell(published.get("14B"))])
    out = ["## NExt: accuracy at equal and at 1.6x the RL steps", "",
           f"Held-out greedy accuracy (%) and mean@k (%), mean ± std over seeds. 'steps to reach' = the first "
           f"evaluation step at which a run's val/acc >= the mean final val/acc of GRPO-LoRA at 1.6N steps "
           f"({100 * target:.1f}%); the paper's claim is that NExt at N matches 1.6N (250 vs 400 steps). "
           f"'claimed steps saved' = extrap/steps_saved (the jump's nominal claim). Paper columns: average over "
           f"5 math benchmarks (%).", ""]
    out += md_table(["method", "RL steps", "extend at", "val/acc (%)", "val/mean@k (%)",
                     "steps to reach 1.6N's final acc", "claimed steps saved", "paper Qwen2.5-7B",
                     "paper 14B"], rows)
    return out + per_seed_reach_table(arms, labels, "val/acc") + per_seed_reach_table(arms, labels, "val/mean_at_k")


def per_seed_reach_table(arms: dict[str, list[Run]], labels: dict[str, str], key: str = "val/acc") -> list[str]:
    """Per seed: the target is that seed's own final `key` of GRPO-LoRA at 1.6N; each arm's first step reaching it."""
    long = {j.seed: j for j in arms.get("none_long", []) if j.ok and j.series(key)[1].size}
    if not long:
        return []
    others = [a for a in arms if a != "none_long"]
    rows = []
    for seed in sorted(long, key=str):
        target = float(long[seed].series(key)[1][-1])
        cells = []
        for arm in ["none_long", *others]:
            run = next((j for j in arms[arm] if j.seed == seed and j.ok), None)
            if run is None or not run.series(key)[1].size:
                cells.append("–")
                continue
            hit = steps_to_reach(run, target, key)
            final = float(run.series(key)[1][-1])
            cells.append(f"{'never' if hit is None else f'{hit:.0f}'} (final {100 * final:.1f})")
        rows.append([str(seed), f"{100 * target:.1f}", *cells])
    return ["", f"### Steps to reach, per seed ({key})", "",
            f"Target: the seed's own final {key} (%) of GRPO-LoRA at 1.6N steps; each cell: the first evaluation "
            f"step after step 0 that reaches it (never: not within the run), and the run's final {key} (%). "
            "NExt's claim: `next` reaches it in about 0.625x the steps.", ""] + md_table(
        ["seed", f"target {key} (%)", *[labels.get(a, a) for a in ["none_long", *others]]], rows)
