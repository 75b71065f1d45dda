"""NExt's table: accuracy at N and 1.6N RL steps, steps to reach the long baseline, per seed and pooled."""

from __future__ import annotations

import math
import statistics

from rlx.report.sweeps import papers
from rlx.report.tables import (acc_points, base_cell, logged_value, md_table, one_per_seed, paired_by_seed,
                               paired_cell, seed_verdict, stat, summary_value)
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


def next_tables(arms: dict[str, list[Run]], jobs: list[Run], labels: dict[str, str] | None = None,
                baseline: str = "GRPO-LoRA") -> list[str]:
    """labels: the arms' names (default: the paper's, papers.yaml); baseline: plain RL's name in the text."""
    paper = papers()["next"]["table"]
    labels = labels if labels is not None else papers()["next"]["labels"]
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
        reach_cell = ("–" if not reach else  # a mean over the seeds that reach it (censored): the count says how many
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
           f"evaluation step at which a run's val/acc >= the mean final val/acc of {baseline} at 1.6N steps "
           f"({'no finished 1.6N run yet' if not math.isfinite(target) else f'{100 * target:.1f}%'}); the paper's claim is that NExt at N matches 1.6N (250 vs 400 steps). "
           f"'claimed steps saved' = extrap/steps_saved (the jump's nominal claim). Paper columns: average over "
           f"5 math benchmarks (%).", ""]
    out += md_table(["method", "RL steps", "extend at", "val/acc (%)", "val/mean@k (%)",
                     "steps to reach 1.6N's final acc", "claimed steps saved", "paper Qwen2.5-7B",
                     "paper 14B"], rows)
    return (out + per_seed_reach_table(arms, labels, "val/acc", baseline)
            + per_seed_reach_table(arms, labels, "val/mean_at_k", baseline))


def per_seed_reach_table(arms: dict[str, list[Run]], labels: dict[str, str], key: str = "val/acc",
                         baseline: str = "GRPO-LoRA") -> list[str]:
    """Per seed: the target is that seed's own final `key` of plain RL at 1.6N; each arm's first step reaching it."""
    long_runs = one_per_seed(arms.get("none_long", []), "none_long")
    long = {s: j for s, j in long_runs.items() if j.series(key)[1].size}
    if not long:
        return []
    others = [a for a in arms if a != "none_long"]
    by_seed = {"none_long": long_runs, **{a: one_per_seed(arms[a], a) for a in others}}
    rows = []
    for seed in sorted(long, key=str):
        target = float(long[seed].series(key)[1][-1])
        cells = []
        for arm in ["none_long", *others]:
            run = by_seed[arm].get(seed)
            if run is None or not run.series(key)[1].size:
                cells.append("–")
                continue
            hit = steps_to_reach(run, target, key)
            final = float(run.series(key)[1][-1])
            cells.append(f"{'never' if hit is None else f'{hit:.0f}'} (final {100 * final:.1f})")
        rows.append([str(seed), f"{100 * target:.1f}", *cells])
    return ["", f"### Steps to reach, per seed ({key})", "",
            f"Target: the seed's own final {key} (%) of {baseline} at 1.6N steps; each cell: the first evaluation "
            f"step after step 0 that reaches it (never: not within the run), and the run's final {key} (%). "
            "NExt's claim: `next` reaches it in about 0.625x the steps.", ""] + md_table(
        ["seed", f"target {key} (%)", *[labels.get(a, a) for a in ["none_long", *others]]], rows)


def step_savings(arms: dict[str, list[Run]], arm: str, key: str = "val/acc") -> tuple[list[float], int]:
    """(per-seed saving %, seeds compared): 100 x (1 - s_arm / s_long), censored (docs/sweeps.md, `smollm2_next`)."""
    long, mine = ({s: j for s, j in one_per_seed(arms.get(a, []), a).items() if j.series(key)[1].size}
                  for a in ("none_long", arm))
    savings, compared = [], 0
    for seed in sorted(set(long) & set(mine), key=str):
        target = float(long[seed].series(key)[1][-1])
        s_long, s_arm = steps_to_reach(long[seed], target, key), steps_to_reach(mine[seed], target, key)
        compared += 1
        if s_long is not None and s_arm is not None:
            savings.append(100 * (1 - s_arm / s_long))
    return savings, compared


def paired_tables(arms: dict[str, list[Run]], labels: dict[str, str]) -> list[str]:
    """NExt's claim seed by seed: final accuracy differences with their t-intervals, and the steps saved."""
    nexts = [a for a in arms if a.startswith("next")]
    claims = [(a, ref, claim) for a in nexts for ref, claim in (
        ("none_long", "NExt at N >= plain RL at 1.6N (the paper's claim)"),
        ("none_n", "NExt at N > plain RL at N (the jump helps at equal steps)"))]
    rows = []
    claims.append(("none_long", "none_n", "the extra 0.6N steps help plain RL (else the claim is empty)"))
    for a, ref, claim in claims:
        diffs = paired_by_seed(arms, a, ref, acc_points)
        rows.append([claim, f"{labels.get(a, a)} - {labels.get(ref, ref)}", paired_cell(diffs, "{:+.1f}"),
                     seed_verdict(diffs)])
    saved = []
    # plain RL at N first: the control. If it too reaches 1.6N's final accuracy by step N, a saving is not NExt's
    for a in (["none_n"] if "none_n" in arms else []) + nexts:
        savings, compared = step_savings(arms, a)
        if compared and len(savings) == compared:
            cell = paired_cell(savings, "{:.1f}")
        elif compared:
            cell = (f"{len(savings)} of {compared} seeds reach it"
                    + (f" ({', '.join(f'{v:.1f}' for v in savings)})" if savings else "")
                    + ": no interval (a seed that never reaches it has no saving to average)")
        else:
            cell = "–"
        saved.append([labels.get(a, a) + (" (control: no extrapolation)" if a == "none_n" else ""), cell])
    return (["", "### NExt's claim, seed by seed", "",
             "Final held-out greedy accuracy, paired over the seeds both arms finished: mean difference in points "
             "[95% t-interval] (n seeds), and the verdict from that interval (holds: above 0; does not hold: "
             "below 0).", ""]
            + md_table(["claim", "difference", "paired difference (points)", "verdict"], rows)
            + ["", "Steps saved: per seed, 100 x (1 - s_NExt / s_1.6N), where s_1.6N is the first evaluation step "
               "at which plain RL at 1.6N reaches its own final val/acc and s_NExt the first at which the NExt "
               "run reaches that value; mean [95% t-interval] (n seeds). The paper's figure: 37.5% (250 of 400 "
               "steps). Plain RL at N is the control: the same reading of a run without extrapolation, so NExt's "
               "saving is its excess over the control's.", ""]
            + md_table(["method", "steps saved (%)"], saved))


def jump_effects(arms: dict[str, list[Run]], arm: str, key: str = "val/acc") -> list[tuple[object, bool, float]]:
    """Per seed: (seed, same before the jump, `arm` - plain RL at N in points at the jump step: the jump's effect)."""
    plain = {**one_per_seed(arms.get("none_long", []), "none_long"), **one_per_seed(arms.get("none_n", []), "none_n")}
    out = []
    for seed, run in sorted(one_per_seed(arms.get(arm, []), arm).items(), key=lambda kv: str(kv[0])):
        extend_at = run.get("extrapolation.extend_at") or []
        if seed not in plain or not extend_at:
            continue
        s = int(extend_at[0])
        mine, ref = (dict(zip(*j.series(key))) for j in (run, plain[seed]))
        if s not in mine or s not in ref:
            continue
        before = [t for t in mine if t < s and t in ref]
        out.append((seed, all(mine[t] == ref[t] for t in before), 100 * (mine[s] - ref[s])))
    return out


def jump_effect_table(arms: dict[str, list[Run]], labels: dict[str, str]) -> list[str]:
    """The jump's own effect on held-out accuracy, per NExt arm: the paired difference at the jump step."""
    rows = []
    for a in (a for a in arms if a.startswith("next")):
        effects = jump_effects(arms, a)
        if not effects:
            continue
        steps = sorted({int((j.get("extrapolation.extend_at") or [0])[0]) for j in arms[a]})
        same = sum(e[1] for e in effects)
        rows.append([labels.get(a, a), "/".join(map(str, steps)), f"{same} of {len(effects)}",
                     ", ".join(f"{seed}: {d:+.1f}" for seed, _, d in effects),
                     paired_cell([d for _, _, d in effects], "{:+.1f}")])
    if not rows:
        return []
    return (["", "### The jump's own effect", "",
             "Held-out val/acc at the jump step (evaluated after the jump) minus plain RL's at that step, same seed, "
             "in points. Up to the jump a NExt run takes plain RL's steps, so where their evaluations before the jump "
             "agree (the 'same before' column) the difference is the jump's alone; mean [95% t-interval] over seeds.",
             ""]
            + md_table(["method", "jump at", "same before the jump", "difference per seed (points)",
                        "paired difference (points)"], rows))


def next_per_seed_tables(arms: dict[str, list[Run]], jobs: list[Run]) -> list[str]:
    """The NExt tables plus the claim seed by seed; plain RL named by the runs' algorithm, NExt by its alpha."""
    algos = sorted({str(j.get("algo.name", "?")).upper() for j in jobs}) or ["?"]
    baseline = f"{'/'.join(algos)}-LoRA"
    labels = {**papers()["next"]["labels"], "none_n": f"{baseline}, N steps", "none_long": f"{baseline}, 1.6N steps"}
    for arm in arms:
        if arm.startswith("next"):
            alpha = {float(j.get("extrapolation.alpha")) for j in arms[arm] if j.get("extrapolation.alpha") is not None}
            labels[arm] = "NExt predict-extend" + (f", alpha {'/'.join(f'{a:g}' for a in sorted(alpha))}" if alpha else "")
    return next_tables(arms, jobs, labels, baseline) + paired_tables(arms, labels) + jump_effect_table(arms, labels)
